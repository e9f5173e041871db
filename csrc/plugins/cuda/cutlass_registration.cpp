// The CUTLASS kernels as kabi kernels: one per configuration and op (matmul and linear, or scaled_mm), each
// dispatching on the call's output dtype and b order to its instantiation, registered only where a device of its
// arch is present.
#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cutlass_kernels.hpp"
#include "gemm_plan.hpp"
#include "gemm_registration.hpp"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

// Below cuBLASLt's first heuristic slot (cublaslt_kernels.cpp), above its others. Selection's heuristic ranks an
// exact arch match first (kabi.h), so an untuned pick on sm_90 is still an sm_90a CUTLASS kernel; tuning decides.
constexpr int32_t kPriority = 5;

struct CutlassKernel {
  const CutlassConfig* config = nullptr;
  GemmOp op = GemmOp::kMatmul;
  std::string name, fingerprint;
};

// The row of CutlassConfig::gemms for an output dtype, or -1.
int output_row(uint32_t dtype) {
  switch (dtype) {
    case KABI_DTYPE_BFLOAT16: return 0;
    case KABI_DTYPE_FLOAT16: return 1;
    case KABI_DTYPE_FLOAT32: return 2;
    default: return -1;
  }
}

// The output dtypes (KABI_DTYPE_* bits) a configuration has an instantiation for.
uint32_t output_dtypes(const CutlassConfig& config) {
  constexpr uint32_t kBits[kOutputDtypes] = {KABI_DTYPE_BFLOAT16, KABI_DTYPE_FLOAT16, KABI_DTYPE_FLOAT32};
  uint32_t dtypes = 0;
  for (int row = 0; row < kOutputDtypes; ++row) {
    for (const CutlassGemm& gemm : config.gemms[row]) {
      if (gemm.run != nullptr) dtypes |= kBits[row];
    }
  }
  return dtypes;
}

// Fill *call and pick the instantiation, or say why this kernel cannot compute the call exactly.
std::string plan(const CutlassKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                 GemmCall* call, const CutlassGemm** gemm) {
  std::string reason = plan_call(kernel.op, problem, args, require_output, call);
  if (!reason.empty()) return reason;
  if (kernel.config->fast_accumulation && !call->fast_accumulation) {
    return "this kernel keeps partial sums in the tensor cores' accumulator; the call did not allow it "
           "(use_fast_accum)";
  }
  reason = check_16_byte_alignment(*call);
  if (!reason.empty()) return reason;
  if (!kernel.config->needs_wgmma && (call->has_bias || call->activation != Activation::kNone)) {
    return "the sm_80 CUTLASS kernels have no bias or activation epilogue";
  }
  // A TMA descriptor steps through the batch with a nonzero stride.
  if (kernel.config->needs_wgmma && call->batch > 1 && call->batch_stride_b == 0) {
    return "b is shared by the batch entries but a's entries do not stack its rows (the sm_90a kernels need a "
           "batch stride)";
  }
  if (kernel.config->ops == CutlassOps::kScaledMm &&
      (call->a_dtype != KABI_DTYPE_FLOAT8_E4M3FN || call->b_dtype != KABI_DTYPE_FLOAT8_E4M3FN)) {
    return "the CUTLASS FP8 kernels read float8_e4m3fn a and b only";
  }
  const int row = output_row(call->dtype);
  *gemm = row < 0 ? nullptr : &kernel.config->gemms[row][static_cast<int>(call->b_order)];
  if (*gemm == nullptr || (*gemm)->run == nullptr) {
    return std::string("this configuration has no instantiation for this output dtype with a ") +
           (call->b_order == MatrixOrder::kRowMajor ? "row" : "column") + "-major b";
  }
  return (*gemm)->check(*call);
}

kabi_status launch(const CutlassKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GemmCall call;
  const CutlassGemm* gemm = nullptr;
  const std::string reason = plan(kernel, problem, args, /*require_output=*/true, &call, &gemm);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
  const size_t needed = gemm->workspace_bytes(call, multiprocessors);
  if (needed > args.workspace_size) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": workspace of " + std::to_string(args.workspace_size) +
                                                  " bytes, needs " + std::to_string(needed));
  }
  DeviceGuard device(call.device_index);
  if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
  const std::string failure = gemm->run(call, needed > 0 ? args.workspace : nullptr, multiprocessors);
  if (!failure.empty()) return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + failure);
  return KABI_STATUS_OK;
}

std::string why_not(const CutlassKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  GemmCall call;
  const CutlassGemm* gemm = nullptr;
  return plan(kernel, problem, args, /*require_output=*/false, &call, &gemm);
}

// The most any instantiation of the configuration needs for the problem's shapes (the workspace function sees no
// strides, so neither the b order nor whether matmul folds its batch is known yet).
kabi_status workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  const auto& kernel = *static_cast<const CutlassKernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    size_t bytes = 0;
    const int row = output_row(problem->dtype);
    for (bool folded : {false, true}) {
      if (row < 0) break;
      const GemmCall call = workspace_call(*problem, kernel.op, folded);
      for (const CutlassGemm& gemm : kernel.config->gemms[row]) {
        if (gemm.workspace_bytes == nullptr) continue;
        bytes = std::max(bytes, gemm.workspace_bytes(call, context.multiprocessors_of(call.device_index)));
      }
    }
    *out_bytes = bytes;
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

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
    const bool fp8 = config.ops == CutlassOps::kScaledMm;
    const std::vector<GemmOp> ops = fp8 ? std::vector<GemmOp>{GemmOp::kScaledMm}
                                        : std::vector<GemmOp>{GemmOp::kMatmul, GemmOp::kLinear};
    for (GemmOp op : ops) {
      auto kernel = std::make_unique<CutlassKernel>();
      kernel->config = &config;
      kernel->op = op;
      kernel->name = std::string("cuda.cutlass.") + config.name;
      // Another CUTLASS or another plugin build is other code: its tuning records do not apply.
      kernel->fingerprint = kernel->name + "/1 cutlass " + cutlass_version();

      kabi_kernel_desc desc = gemm_kernel_desc(op, kernel->name, kernel->fingerprint,
                                               run_guarded<CutlassKernel, launch>,
                                               supports_unless<CutlassKernel, why_not>, workspace);
      const int32_t exact_arch = config.arch_min;
      if (config.needs_wgmma) {
        // sm_90a code runs on sm_90 only.
        desc.archs = &exact_arch;
        desc.num_archs = 1;
        desc.required_features = KABI_FEATURE_TMA | KABI_FEATURE_WGMMA | (fp8 ? KABI_FEATURE_FP8_MMA : 0u);
      } else {
        desc.arch_min = config.arch_min;
        desc.arch_max = config.arch_max;
        desc.required_features = KABI_FEATURE_TENSOR_CORES | KABI_FEATURE_BF16_MMA;
      }
      desc.priority = kPriority;
      // scaled_mm: out's dtype (O) here, a's and b's format in the constraints.
      desc.dtypes = output_dtypes(config);
      // The FP8 instantiations take b column-major only, which supports() checks.
      desc.type_constraints = fp8 ? "F8A: float8_e4m3fn; F8B: float8_e4m3fn" : nullptr;
      const kabi_status status = register_gemm_kernel(host, desc, std::move(kernel));
      if (status != KABI_STATUS_OK) return status;
    }
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
