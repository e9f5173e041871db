// The decode MMA kernel (decode_mma.hpp) as the kabi kernel cuda.decode.mma for matmul and linear: few rows of a
// (M up to 16; for matmul a batch folded into them where b is shared), b row- or column-major (linear's w [N, K] is
// the column-major b), bfloat16 or float16, everything 16-byte aligned; linear's bias and activation in its epilogue.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "decode_mma.hpp"
#include "gemm_plan.hpp"
#include "gemm_registration.hpp"
#include "hand_written_launch.hpp"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

// Like cuBLASLt's later slots and the split-K GEMV: only a measurement picks it (it has not been measured yet).
constexpr int32_t kPriority = 1;
// mma.sync with bfloat16 operands needs sm_80; built for sm_80 and sm_90, PTX for later archs.
constexpr int32_t kArchMin = 80;

struct DecodeKernel {
  GemmOp op;
  std::string name, fingerprint;
};

std::string plan(const DecodeKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                 GemmCall* call, DecodeMma* product) {
  std::string reason = plan_call(kernel.op, problem, args, require_output, call);
  if (!reason.empty()) return reason;
  if (call->batch != 1) return "a batch of products (it computes one, or a batch folded into its rows)";
  if (call->m > kDecodeMmaMaxRows) {
    return "M is " + std::to_string(call->m) + "; it computes at most " + std::to_string(kDecodeMmaMaxRows) +
           " rows";
  }
  // Every read of a and b is one 16-byte load, so everything must align to 16 bytes.
  reason = check_16_byte_alignment(*call);
  if (!reason.empty()) return reason;
  product->bfloat16 = call->dtype == KABI_DTYPE_BFLOAT16;
  product->m = call->m;
  product->n = call->n;
  product->k = call->k;
  product->a = call->a;
  product->lda = call->lda;
  product->b = call->b;
  product->b_order = call->b_order;
  product->ldb = call->ldb;
  product->bias = call->bias;
  product->activation = call->activation;
  product->out = call->out;
  return {};
}

kabi_status launch(const DecodeKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GemmCall call;
  DecodeMma product;
  const std::string reason = plan(kernel, problem, args, /*require_output=*/true, &call, &product);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
  const size_t needed = decode_mma_workspace_bytes(product.m, product.n, product.k, multiprocessors);
  return queue_on_device(kernel.name, call, args, needed, [&] {
    return launch_decode_mma(product, args.workspace, multiprocessors, static_cast<cudaStream_t>(call.stream));
  });
}

std::string why_not(const DecodeKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  GemmCall call;
  DecodeMma product;
  return plan(kernel, problem, args, /*require_output=*/false, &call, &product);
}

// From the shapes: for matmul M folds a shared b's batch into the rows, as plan_matmul does; for linear M is x's rows.
template <GemmOp kOp>
kabi_status workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  static_cast<void>(user_data);
  const GemmCall call = workspace_call(*problem, kOp, /*folded=*/true);
  *out_bytes = decode_mma_workspace_bytes(call.m, call.n, call.k,
                                          plugin_context().multiprocessors_of(problem->device_index));
  return KABI_STATUS_OK;
}

}  // namespace

kabi_status register_decode_mma_kernels(const kabi_host_api* host, PluginContext& context) {
  if (std::none_of(context.archs.begin(), context.archs.end(), [](int32_t arch) { return arch >= kArchMin; })) {
    return KABI_STATUS_OK;
  }
  for (const GemmOp op : {GemmOp::kMatmul, GemmOp::kLinear}) {
    auto kernel = std::make_unique<DecodeKernel>();
    kernel->op = op;
    kernel->name = "cuda.decode.mma";
    kernel->fingerprint = kernel->name + "/1 kabi-cuda " KABI_CUDA_PLUGIN_VERSION;
    kabi_kernel_desc desc = gemm_kernel_desc(
        op, kernel->name, kernel->fingerprint, run_guarded<DecodeKernel, launch>,
        supports_unless<DecodeKernel, why_not>, op == GemmOp::kMatmul ? workspace<GemmOp::kMatmul>
                                                                      : workspace<GemmOp::kLinear>);
    desc.arch_min = kArchMin;
    desc.required_features = KABI_FEATURE_TENSOR_CORES | KABI_FEATURE_BF16_MMA;
    desc.priority = kPriority;
    desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
    const kabi_status status = register_gemm_kernel(host, desc, std::move(kernel));
    if (status != KABI_STATUS_OK) return status;
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
