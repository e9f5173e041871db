// kabi-cpu: the built-in CPU plugin. matmul, linear and grouped_mm in float32 and float64 through OpenBLAS gemm,
// registered only through the host table that kabi_plugin_init receives (this library does not link libkabi).
#include <dlfcn.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <string>

#include "gemm_plan.hpp"
#include "kabi/kabi.h"
#include "grouped_mm.hpp"
#include "linear.hpp"
#include "openblas_library.hpp"
#include "registration.hpp"

namespace kabi::cpu {
namespace {

constexpr const char* kPluginName = "kabi-cpu";
constexpr const char* kKernelName = "cpu.openblas.gemm";
// Above the torch-native kernel (priority 0): where no tuning decision exists, native code serves C++ callers
// and Python alike.
constexpr int32_t kPriority = 10;

struct PluginState {
  OpenBlas blas;
  void (*set_error)(const char* message) = nullptr;
  std::string fingerprint;
};

PluginState& plugin_state() {
  static PluginState state;
  return state;
}

kabi_status fail(const PluginState& state, kabi_status status, const std::string& message) {
  state.set_error(message.c_str());
  return status;
}

template <typename Scalar>
void run_gemm(GemmFunction<Scalar> gemm, const GemmPlan& plan) {
  Scalar* out = reinterpret_cast<Scalar*>(plan.out);
  const int64_t out_matrix = plan.m * plan.n;
  if (plan.batch == 0 || out_matrix == 0) return;
  if (plan.k == 0) {
    std::fill_n(out, plan.batch * out_matrix, Scalar(0));
    return;
  }
  const auto* a = reinterpret_cast<const Scalar*>(plan.a.data);
  const auto* b = reinterpret_cast<const Scalar*>(plan.b.data);
  const int transpose_a = plan.a.transposed ? kCblasTrans : kCblasNoTrans;
  const int transpose_b = plan.b.transposed ? kCblasTrans : kCblasNoTrans;
  const int ldc = static_cast<int>(std::max<int64_t>(1, plan.n));
  for (int64_t i = 0; i < plan.batch; ++i) {
    gemm(kCblasRowMajor, transpose_a, transpose_b, static_cast<int>(plan.m), static_cast<int>(plan.n),
         static_cast<int>(plan.k), Scalar(1), a + i * plan.a.batch_stride,
         static_cast<int>(plan.a.leading_dimension), b + i * plan.b.batch_stride,
         static_cast<int>(plan.b.leading_dimension), Scalar(0), out + i * out_matrix, ldc);
  }
}

kabi_status gemm_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& state = *static_cast<const PluginState*>(user_data);
  try {
    if (problem == nullptr || args == nullptr) {
      return fail(state, KABI_STATUS_INVALID_ARGUMENT, "cpu.openblas.gemm: problem or args is NULL");
    }
    GemmPlan plan;
    const std::string reason = plan_gemm(*problem, *args, /*require_output=*/true, &plan);
    if (!reason.empty()) return fail(state, KABI_STATUS_CONSTRAINT_VIOLATED, "cpu.openblas.gemm: " + reason);
    if (plan.dtype == KABI_DTYPE_FLOAT32) {
      run_gemm(state.blas.sgemm, plan);
    } else {
      run_gemm(state.blas.dgemm, plan);
    }
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return fail(state, KABI_STATUS_INTERNAL, std::string("cpu.openblas.gemm: ") + error.what());
  }
}

int32_t gemm_supports(void* /*user_data*/, const kabi_problem* problem, const kabi_args* args, char* reason,
                      size_t reason_size) {
  GemmPlan plan;
  return supports_verdict([&] { return plan_gemm(*problem, *args, /*require_output=*/false, &plan); }, reason,
                          reason_size);
}

// The directory this plugin was loaded from, to find an OpenBLAS installed beside kabi.
std::string plugin_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&gemm_kernel), &info) == 0 || info.dli_fname == nullptr) return {};
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

kabi_status initialize(const kabi_host_api* host, kabi_plugin_info* out_info) {
  if (out_info != nullptr && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = kPluginName;
    out_info->version = KABI_CPU_PLUGIN_VERSION;
  }
  // set_error is the last field this plugin uses; without it no failure could be explained.
  if (host == nullptr || host->struct_size < offsetof(kabi_host_api, set_error) + sizeof(host->set_error) ||
      host->set_error == nullptr || host->kernel_register == nullptr) {
    return KABI_STATUS_ABI_MISMATCH;
  }
  PluginState& state = plugin_state();
  state.set_error = host->set_error;
  if (KABI_ABI_VERSION_MAJOR_OF(host->abi_version) != KABI_ABI_VERSION_MAJOR) {
    return fail(state, KABI_STATUS_ABI_MISMATCH,
                "kabi-cpu: built for ABI major " + std::to_string(KABI_ABI_VERSION_MAJOR) + ", host has " +
                    std::to_string(KABI_ABI_VERSION_MAJOR_OF(host->abi_version)));
  }
  if (state.blas.sgemm == nullptr) {
    std::string error;
    if (!open_openblas(plugin_directory(), &state.blas, &error)) {
      return fail(state, KABI_STATUS_UNAVAILABLE, error);
    }
    state.fingerprint = kernel_fingerprint(kKernelName, state.blas.config);
  }
  // The problem gives the broadcast batch shape each tensor's batch stride comes from.
  const CpuKernel gemm{"matmul",
                       kKernelName,
                       kPriority,
                       KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED,
                       KABI_BATCH_UNIFORM,
                       gemm_kernel,
                       gemm_supports,
                       &state};
  const kabi_status status = register_cpu_kernel(*host, gemm, state.fingerprint);
  if (status != KABI_STATUS_OK) return status;
  const kabi_status linear_status = register_linear_kernels(*host, state.blas);
  if (linear_status != KABI_STATUS_OK) return linear_status;
  return register_grouped_mm_kernels(*host, state.blas);
}

}  // namespace
}  // namespace kabi::cpu

extern "C" {

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  try {
    return kabi::cpu::initialize(host, out_info);
  } catch (const std::exception& error) {
    if (host != nullptr && host->set_error != nullptr) host->set_error(error.what());
    return KABI_STATUS_INTERNAL;
  }
}

}  // extern "C"
