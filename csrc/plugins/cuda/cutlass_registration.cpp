// The CUTLASS kernels as kabi kernels: one per configuration and op (matmul, linear), each dispatching on the
// call's dtype and b order to its instantiation, registered only where a device of its arch is present.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

#include "cutlass_kernels.hpp"
#include "gemm_plan.hpp"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

// Below cuBLASLt's first heuristic slot (cublaslt_kernels.cpp), above its others. Selection's heuristic ranks an
// exact arch match first (kabi.h), so an untuned pick on sm_90 is still an sm_90a CUTLASS kernel; tuning decides.
constexpr int32_t kPriority = 5;

struct CutlassKernel {
  const CutlassConfig* config = nullptr;
  bool is_linear = false;
  std::string name, fingerprint;
};

// Fill *call and pick the instantiation, or say why this kernel cannot compute the call exactly.
std::string plan(const CutlassKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                 GemmCall* call, const CutlassGemm** gemm) {
  std::string reason = kernel.is_linear ? plan_linear(problem, args, require_output, call)
                                        : plan_matmul(problem, args, require_output, call);
  if (!reason.empty()) return reason;
  reason = check_16_byte_alignment(*call);
  if (!reason.empty()) return reason;
  if (!kernel.config->needs_wgmma && (call->bias != nullptr || call->activation != Activation::kNone)) {
    return "the sm_80 CUTLASS kernels have no bias or activation epilogue";
  }
  // A TMA descriptor steps through the batch with a nonzero stride.
  if (kernel.config->needs_wgmma && call->batch > 1 && call->batch_stride_b == 0) {
    return "b is shared by the batch entries but a's entries do not stack its rows (the sm_90a kernels need a "
           "batch stride)";
  }
  *gemm = &kernel.config->gemms[call->dtype == KABI_DTYPE_BFLOAT16 ? 0 : 1][static_cast<int>(call->b_order)];
  return (*gemm)->check(*call);
}

kabi_status run(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& kernel = *static_cast<const CutlassKernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    if (problem == nullptr || args == nullptr) {
      return context.fail(KABI_STATUS_INVALID_ARGUMENT, kernel.name + ": problem or args is NULL");
    }
    GemmCall call;
    const CutlassGemm* gemm = nullptr;
    const std::string reason = plan(kernel, *problem, *args, /*require_output=*/true, &call, &gemm);
    if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
    const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
    const size_t needed = gemm->workspace_bytes(call, multiprocessors);
    if (needed > args->workspace_size) {
      return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": workspace of " + std::to_string(args->workspace_size) +
                                                    " bytes, needs " + std::to_string(needed));
    }
    DeviceGuard device(call.device_index);
    if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
    const std::string failure = gemm->run(call, needed > 0 ? args->workspace : nullptr, multiprocessors);
    if (!failure.empty()) return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + failure);
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

int32_t supports(void* user_data, const kabi_problem* problem, const kabi_args* args, char* reason,
                 size_t reason_size) {
  const auto& kernel = *static_cast<const CutlassKernel*>(user_data);
  try {
    GemmCall call;
    const CutlassGemm* gemm = nullptr;
    const std::string why_not = plan(kernel, *problem, *args, /*require_output=*/false, &call, &gemm);
    if (why_not.empty()) return 1;
    std::snprintf(reason, reason_size, "%s", why_not.c_str());
  } catch (const std::exception& error) {
    std::snprintf(reason, reason_size, "%s", error.what());
  }
  return 0;
}

// The most any instantiation of the configuration needs for the problem's shapes (the workspace function sees no
// strides, so neither the b order nor whether matmul folds its batch is known yet).
kabi_status workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  const auto& kernel = *static_cast<const CutlassKernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    size_t bytes = 0;
    const int dtype = problem->dtype == KABI_DTYPE_BFLOAT16 ? 0 : 1;
    for (bool folded : {false, true}) {
      const GemmCall call = workspace_call(*problem, kernel.is_linear, folded);
      for (const CutlassGemm& gemm : kernel.config->gemms[dtype]) {
        bytes = std::max(bytes, gemm.workspace_bytes(call, context.multiprocessors_of(call.device_index)));
      }
    }
    *out_bytes = bytes;
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

void free_kernel(void* user_data) { delete static_cast<CutlassKernel*>(user_data); }

bool device_present(const PluginContext& context, const CutlassConfig& config) {
  return std::any_of(context.archs.begin(), context.archs.end(),
                     [&](int32_t arch) { return arch >= config.arch_min && arch <= config.arch_max; });
}

}  // namespace

kabi_status register_cutlass_kernels(const kabi_host_api* host, PluginContext& context) {
  size_t count = 0;
  const CutlassConfig* const* configs = cutlass_configs(&count);
  for (size_t i = 0; i < count; ++i) {
    const CutlassConfig& config = *configs[i];
    if (!device_present(context, config)) continue;
    for (const char* op : {"matmul", "linear"}) {
      auto kernel = std::make_unique<CutlassKernel>();
      kernel->config = &config;
      kernel->is_linear = std::string(op) == "linear";
      kernel->name = std::string("cuda.cutlass.") + config.name;
      // Another CUTLASS or another plugin build is other code: its tuning records do not apply.
      kernel->fingerprint = kernel->name + "/1 cutlass " + cutlass_version();

      kabi_kernel_desc desc{};
      desc.struct_size = sizeof(desc);
      desc.op = op;
      desc.name = kernel->name.c_str();
      desc.backend = "cuda";
      desc.device_type = kDLCUDA;
      const int32_t exact_arch = config.arch_min;
      if (config.needs_wgmma) {
        // sm_90a code runs on sm_90 only.
        desc.archs = &exact_arch;
        desc.num_archs = 1;
        desc.required_features = KABI_FEATURE_TMA | KABI_FEATURE_WGMMA;
      } else {
        desc.arch_min = config.arch_min;
        desc.arch_max = config.arch_max;
        desc.required_features = KABI_FEATURE_TENSOR_CORES | KABI_FEATURE_BF16_MMA;
      }
      desc.priority = kPriority;
      desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
      // a (x) must be row-major and b (w) either; bias is rank 1 (contiguous, or "general" when strided, which
      // supports() then declines by name).
      desc.layouts = KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED |
                     (kernel->is_linear ? KABI_LAYOUT_GENERAL : 0u);
      desc.alignment = 16;
      desc.batch_mode = KABI_BATCH_UNIFORM;
      desc.kind = KABI_KERNEL_FUNCTION;
      desc.function = run;
      desc.supports = supports;
      desc.workspace = workspace;
      desc.user_data = kernel.get();
      desc.user_data_free = free_kernel;
      desc.fingerprint = kernel->fingerprint.c_str();
      kabi_kernel registered = nullptr;
      const kabi_status status = host->kernel_register(&desc, &registered);
      if (status != KABI_STATUS_OK) return status;
      kernel.release();
    }
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
