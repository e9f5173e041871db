// The CUTLASS grouped GEMMs (cutlass_grouped_kernels.hpp) as kabi kernels for grouped_mm: one per configuration,
// dispatching on the call's dtype and w's order to its instantiation, registered only where an sm_90 device is
// present. Each reads x's rows and w in place through TMA, so everything must be 16-byte aligned; the supports
// predicate declines, naming why, whatever the declaration cannot express.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <utility>

#include "../dlpack_tensors.hpp"
#include "../operands.hpp"
#include "cutlass_grouped_kernels.hpp"
#include "cutlass_kernels.hpp"
#include "gemm_plan.hpp"
#include "gemm_registration.hpp"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

using plugins::find_grouped_operands;
using plugins::GroupedOperands;
using plugins::is_c_contiguous;
using plugins::list_text;
using plugins::strides_of;

// As the other CUTLASS kernels: below cuBLASLt's first slot where both exist; on sm_90 the exact arch ranks it above
// the Triton grouped kernels for an untuned pick, which every Python call gates before first use.
constexpr int32_t kPriority = 5;
// sm_90a code runs on sm_90 only.
constexpr int32_t kArch = 90;
// 16 bytes of the 16-bit dtypes: TMA's unit for addresses and row pitches.
constexpr int64_t kElementsPer16Bytes = 8;

struct GroupedKernel {
  const CutlassGroupedConfig* config = nullptr;
  std::string name, fingerprint;
};

// The row of CutlassGroupedConfig::gemms for a dtype, or -1.
int dtype_row(uint32_t dtype) {
  switch (dtype) {
    case KABI_DTYPE_BFLOAT16: return 0;
    case KABI_DTYPE_FLOAT16: return 1;
    default: return -1;
  }
}

const void* data_of(const DLTensor& tensor) { return static_cast<const char*>(tensor.data) + tensor.byte_offset; }

int64_t dim_of(const kabi_problem& problem, const char* name) {
  for (int i = 0; i < problem.num_dims; ++i) {
    if (problem.dim_names[i] != nullptr && std::string(problem.dim_names[i]) == name) return problem.dims[i];
  }
  return 0;
}

// The call as the grouped GEMMs read it: x [T, K] with offs, or [E, M, K] without; w [E, K, N] row- or column-major;
// out dense. With require_output, a call without an output fails; otherwise the output is checked when present.
std::string plan_grouped(const kabi_problem& problem, const kabi_args& args, bool require_output,
                         GroupedGemmCall* call) {
  GroupedOperands operands;
  if (std::string refusal = find_grouped_operands(args, require_output, &operands); !refusal.empty()) return refusal;
  if (dtype_row(problem.dtype) < 0) return "the dtype is not bfloat16 or float16 (the CUTLASS grouped GEMMs' dtypes)";
  const DLTensor& x = *operands.x;
  const DLTensor& w = *operands.w;
  const DLTensor* offs = operands.offs;
  const bool has_output = operands.out != nullptr;
  const int form = x.ndim;
  for (const DLTensor* tensor : {&x, &w, offs}) {
    if (tensor != nullptr && tensor->device.device_type != kDLCUDA) return "an input is not on a CUDA device";
  }
  call->dtype = problem.dtype;
  call->device_index = problem.device_index;
  call->stream = args.stream;
  call->groups = w.shape[0];
  call->k = w.shape[1];
  call->n = w.shape[2];
  call->rows = x.shape[x.ndim - 2];
  for (int64_t extent : {call->groups, call->rows, call->n, call->k}) {
    if (extent > INT32_MAX) return "a dimension exceeds 2^31 - 1";
  }
  if (call->groups == 0 || call->rows == 0 || call->n == 0 || call->k == 0) {
    return "the product is empty (E, the rows, N or K is 0)";
  }

  int64_t x_strides[3], w_strides[3];
  strides_of(x, x_strides);
  strides_of(w, w_strides);
  const int row = x.ndim - 2;
  if (x_strides[row + 1] != 1) {
    return "x has strides " + list_text(x_strides, x.ndim) + "; the CUTLASS grouped GEMMs read x's rows with unit "
           "stride along K";
  }
  if (call->rows > 1 && x_strides[row] < call->k) {
    return "x has row stride " + std::to_string(x_strides[row]) + ", below K = " + std::to_string(call->k);
  }
  call->x = data_of(x);
  call->x_row_stride = call->rows == 1 ? call->k : x_strides[row];
  call->x_group_stride = form == 3 && call->groups > 1 ? x_strides[0] : 0;
  if (!matrix_order(call->k, call->n, w_strides[1], w_strides[2], &call->w_order, &call->w_leading_dimension)) {
    return "w has strides " + list_text(w_strides, 3) + "; each [K, N] matrix needs a unit stride in one dimension";
  }
  call->w = data_of(w);
  call->w_group_stride = call->groups > 1 ? w_strides[0] : 0;
  call->offsets = nullptr;
  if (offs != nullptr) {
    if (offs->ndim != 1 || offs->dtype.code != kDLInt || offs->dtype.bits != 32) {
      return "offs is not a 1-D int32 tensor";
    }
    int64_t offs_strides[1];
    strides_of(*offs, offs_strides);
    if (call->groups > 1 && offs_strides[0] != 1) {
      return "offs has stride " + std::to_string(offs_strides[0]) + "; the CUTLASS grouped GEMMs read contiguous "
             "offsets";
    }
    call->offsets = static_cast<const int32_t*>(data_of(*offs));
  }
  call->out_group_stride = form == 3 ? call->rows * call->n : 0;
  call->out = nullptr;
  if (has_output) {
    const DLTensor& out = args.outputs[0];
    int64_t expected[3];
    std::copy(x.shape, x.shape + x.ndim - 1, expected);
    expected[x.ndim - 1] = call->n;
    if (out.device.device_type != kDLCUDA) return "out is not on a CUDA device";
    if (out.ndim != x.ndim || !std::equal(expected, expected + x.ndim, out.shape)) {
      return "out has shape " + list_text(out.shape, out.ndim) + "; expected " + list_text(expected, x.ndim);
    }
    int64_t out_strides[3];
    strides_of(out, out_strides);
    if (!is_c_contiguous(out, out_strides)) {
      return "out has strides " + list_text(out_strides, out.ndim) + "; the CUTLASS grouped GEMMs write only "
             "C-contiguous outputs";
    }
    call->out = const_cast<void*>(data_of(out));
  }
  return {};
}

// TMA reads x's rows and w, and writes out's rows, from 16-byte aligned addresses with row pitches in whole 16 bytes.
// K and N first: a contiguous x's row stride is K, and the reason should name the size the caller chose.
std::string check_tma_alignment(const GroupedGemmCall& call) {
  const char* w_leading_name = call.w_order == MatrixOrder::kRowMajor ? "w's stride along K" : "w's stride along N";
  struct Extent {
    int64_t value;
    const char* name;
  };
  for (const Extent& extent : {Extent{call.k, "K"}, Extent{call.n, "N"},
                               Extent{call.x_row_stride, "x's row stride"},
                               Extent{call.x_group_stride, "x's group stride"},
                               Extent{call.w_leading_dimension, w_leading_name},
                               Extent{call.w_group_stride, "w's group stride"}}) {
    if (extent.value % kElementsPer16Bytes != 0) {
      return std::string(extent.name) + " is " + std::to_string(extent.value) + ", not a multiple of " +
             std::to_string(kElementsPer16Bytes) + " elements (16 bytes), as TMA needs";
    }
  }
  struct Pointer {
    const void* address;
    const char* name;
  };
  for (const Pointer& pointer : {Pointer{call.x, "x"}, Pointer{call.w, "w"}, Pointer{call.out, "out"}}) {
    if (!aligned_to_16_bytes(pointer.address)) {
      return std::string("the data of ") + pointer.name + " is not 16-byte aligned";
    }
  }
  return {};
}

// Fill *call and pick the instantiation, or say why this kernel cannot compute the call exactly.
std::string plan(const GroupedKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                 GroupedGemmCall* call, const CutlassGroupedGemm** gemm) {
  std::string reason = plan_grouped(problem, args, require_output, call);
  if (!reason.empty()) return reason;
  reason = check_tma_alignment(*call);
  if (!reason.empty()) return reason;
  *gemm = &kernel.config->gemms[dtype_row(call->dtype)][static_cast<int>(call->w_order)];
  return (*gemm)->check(*call, plugin_context().multiprocessors_of(call->device_index));
}

kabi_status launch(const GroupedKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GroupedGemmCall call;
  const CutlassGroupedGemm* gemm = nullptr;
  const std::string reason = plan(kernel, problem, args, /*require_output=*/true, &call, &gemm);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
  const size_t needed = gemm->workspace_bytes(call, multiprocessors);
  if (args.workspace == nullptr || args.workspace_size < needed) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": a workspace of " + std::to_string(args.workspace_size) +
                                                  " bytes; it needs " + std::to_string(needed));
  }
  DeviceGuard device(call.device_index);
  if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
  const std::string failure = gemm->run(call, args.workspace, multiprocessors);
  if (!failure.empty()) return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + failure);
  return KABI_STATUS_OK;
}

std::string why_not(const GroupedKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  GroupedGemmCall call;
  const CutlassGroupedGemm* gemm = nullptr;
  return plan(kernel, problem, args, /*require_output=*/false, &call, &gemm);
}

// The most either w order's instantiation needs for the problem's shapes: the per-group arrays grow with E, CUTLASS's
// TMA descriptors with the multiprocessors. The workspace function sees no strides, so w's order is not known yet.
kabi_status workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  const auto& kernel = *static_cast<const GroupedKernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    *out_bytes = 0;
    const int row = dtype_row(problem->dtype);
    if (row < 0) return KABI_STATUS_OK;
    // The size follows from the groups alone (and the device's multiprocessors).
    GroupedGemmCall call;
    call.dtype = problem->dtype;
    call.device_index = problem->device_index;
    call.groups = dim_of(*problem, "E");
    const int32_t multiprocessors = context.multiprocessors_of(problem->device_index);
    for (const CutlassGroupedGemm& gemm : kernel.config->gemms[row]) {
      *out_bytes = std::max(*out_bytes, gemm.workspace_bytes(call, multiprocessors));
    }
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

}  // namespace

kabi_status register_cutlass_grouped_kernels(const kabi_host_api* host, PluginContext& context) {
  if (std::none_of(context.archs.begin(), context.archs.end(), [](int32_t arch) { return arch == kArch; })) {
    return KABI_STATUS_OK;
  }
  size_t count = 0;
  const CutlassGroupedConfig* const* configs = cutlass_grouped_configs(&count);
  for (size_t i = 0; i < count; ++i) {
    auto kernel = std::make_unique<GroupedKernel>();
    kernel->config = configs[i];
    kernel->name = std::string("cuda.cutlass.") + configs[i]->name;
    // Another CUTLASS or another plugin build is other code: its tuning records do not apply.
    kernel->fingerprint = kernel->name + "/1 cutlass " + cutlass_version();
    kabi_kernel_desc desc{};
    desc.struct_size = sizeof(desc);
    desc.op = "grouped_mm";
    desc.name = kernel->name.c_str();
    desc.backend = "cuda";
    desc.device_type = kDLCUDA;
    desc.archs = &kArch;
    desc.num_archs = 1;
    desc.priority = kPriority;
    desc.required_features = KABI_FEATURE_TMA | KABI_FEATURE_WGMMA;
    desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
    // x row-major, w either way, offs a dense vector (the layout of a contiguous rank-1 tensor); supports() declines
    // a column-major x by name.
    desc.layouts = KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED;
    desc.alignment = 16;
    desc.batch_mode = KABI_BATCH_NONE;
    desc.kind = KABI_KERNEL_FUNCTION;
    desc.function = run_guarded<GroupedKernel, launch>;
    desc.supports = supports_unless<GroupedKernel, why_not>;
    desc.workspace = workspace;
    desc.fingerprint = kernel->fingerprint.c_str();
    const kabi_status status = register_gemm_kernel(host, desc, std::move(kernel));
    if (status != KABI_STATUS_OK) return status;
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
