// The split-K GEMV (split_k_gemv.hpp) as the kabi kernel cuda.gemv.split_k for matmul: few rows of a (M up to 16,
// a batch folded into them where b is shared), b row-major at any address and pitch, bfloat16 or float16.
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "gemm_plan.hpp"
#include "gemm_registration.hpp"
#include "hand_written_launch.hpp"
#include "plugin_context.hpp"
#include "split_k_gemv.hpp"

namespace kabi::cuda {
namespace {

// Like cuBLASLt's later slots: only a measurement picks it.
constexpr int32_t kPriority = 1;
// Built for sm_80 and sm_90 (and PTX for later archs); bfloat16 conversions need sm_80.
constexpr int32_t kArchMin = 80;

struct GemvKernel {
  std::string name, fingerprint;
};

std::string plan(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call,
                 SplitKGemv* gemv) {
  std::string reason = plan_matmul(problem, args, require_output, call);
  if (!reason.empty()) return reason;
  if (call->batch != 1) return "a batch of products (it computes one, or a batch folded into its rows)";
  if (call->m > kSplitKGemvMaxRows) {
    return "M is " + std::to_string(call->m) + "; it computes at most " + std::to_string(kSplitKGemvMaxRows) +
           " rows";
  }
  if (call->b_order != MatrixOrder::kRowMajor) {
    return "b is column-major; it reads a row-major b (unit stride along N)";
  }
  gemv->bfloat16 = call->dtype == KABI_DTYPE_BFLOAT16;
  gemv->m = call->m;
  gemv->n = call->n;
  gemv->k = call->k;
  gemv->a = call->a;
  gemv->lda = call->lda;
  gemv->b = call->b;
  gemv->ldb = call->ldb;
  gemv->out = call->out;
  return {};
}

kabi_status launch(const GemvKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GemmCall call;
  SplitKGemv gemv;
  const std::string reason = plan(problem, args, /*require_output=*/true, &call, &gemv);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
  const size_t needed = split_k_gemv_workspace_bytes(gemv.m, gemv.n, gemv.k, multiprocessors);
  return queue_on_device(kernel.name, call, args, needed, [&] {
    return launch_split_k_gemv(gemv, args.workspace, multiprocessors, static_cast<cudaStream_t>(call.stream));
  });
}

std::string why_not(const GemvKernel&, const kabi_problem& problem, const kabi_args& args) {
  GemmCall call;
  SplitKGemv gemv;
  return plan(problem, args, /*require_output=*/false, &call, &gemv);
}

// From the shapes: M folds a shared b's batch into the rows, as plan_matmul does.
kabi_status workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  static_cast<void>(user_data);
  const GemmCall call = workspace_call(*problem, GemmOp::kMatmul, /*folded=*/true);
  *out_bytes = split_k_gemv_workspace_bytes(call.m, call.n, call.k,
                                            plugin_context().multiprocessors_of(problem->device_index));
  return KABI_STATUS_OK;
}

}  // namespace

kabi_status register_split_k_gemv_kernels(const kabi_host_api* host, PluginContext& context) {
  if (std::none_of(context.archs.begin(), context.archs.end(), [](int32_t arch) { return arch >= kArchMin; })) {
    return KABI_STATUS_OK;
  }
  auto kernel = std::make_unique<GemvKernel>();
  kernel->name = "cuda.gemv.split_k";
  kernel->fingerprint = kernel->name + "/1 kabi-cuda " KABI_CUDA_PLUGIN_VERSION;
  kabi_kernel_desc desc = gemm_kernel_desc(GemmOp::kMatmul, kernel->name, kernel->fingerprint,
                                           run_guarded<GemvKernel, launch>,
                                           supports_unless<GemvKernel, why_not>, workspace);
  desc.alignment = 2;
  desc.arch_min = kArchMin;
  desc.priority = kPriority;
  desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
  return register_gemm_kernel(host, desc, std::move(kernel));
}

}  // namespace kabi::cuda
