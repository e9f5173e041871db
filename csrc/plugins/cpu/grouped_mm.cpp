#include "grouped_mm.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "../operands.hpp"
#include "registration.hpp"
#include "tensors.hpp"

namespace kabi::cpu {
namespace {

// Above the torch-native kernels (priority 0), as the plugin's matmul and linear.
constexpr int32_t kPriority = 10;

struct GroupedState {
  OpenBlas blas;
  void (*set_error)(const char* message) = nullptr;
  std::string fingerprint;
};

GroupedState& grouped_state() {
  static GroupedState state;
  return state;
}

// One call as the gemms see it. Group g multiplies rows of x (all R of x[g] in the 3-D form, its offsets' rows of
// x in the 2-D form) by w[g], a K x N matrix read in place (CblasTrans for the nn.Linear layout). Strides are in
// elements; out is dense row-major (the core checks that before every launch).
struct GroupedPlan {
  uint32_t dtype = 0;
  int64_t groups = 0, rows = 0, n = 0, k = 0;
  const char* x = nullptr;
  int64_t x_group_stride = 0, x_row_stride = 0;
  bool x_transposed = false;
  int64_t x_leading_dimension = 1;
  const char* w = nullptr;
  int64_t w_group_stride = 0;
  bool w_transposed = false;
  int64_t w_leading_dimension = 1;
  const char* offsets = nullptr;  // NULL in the 3-D form
  int64_t offsets_stride = 0;
  char* out = nullptr;  // NULL when the call has no output yet (selection)
};

std::string plan_grouped(const kabi_args& args, bool require_output, GroupedPlan* plan) {
  kabi::plugins::GroupedOperands operands;
  if (std::string refusal = kabi::plugins::find_grouped_operands(args, require_output, &operands); !refusal.empty()) {
    return refusal;
  }
  const DLTensor& x = *operands.x;
  const DLTensor& w = *operands.w;
  const DLTensor* offs = operands.offs;
  const bool has_output = operands.out != nullptr;
  plan->dtype = dtype_bit(x.dtype);
  if (plan->dtype == 0) return "x's dtype is not float32 or float64";
  if (dtype_bit(w.dtype) != plan->dtype) return "w's dtype differs from x's";
  if (x.device.device_type != kDLCPU || w.device.device_type != kDLCPU) return "an input is not on the CPU";
  if (offs != nullptr && (offs->device.device_type != kDLCPU || offs->dtype.code != kDLInt || offs->dtype.bits != 32 ||
                          offs->ndim != 1)) {
    return "offs is not a 1-D int32 tensor on the CPU";
  }
  plan->groups = w.shape[0];
  plan->k = w.shape[1];
  plan->n = w.shape[2];
  plan->rows = x.shape[x.ndim - 2];
  if (x.shape[x.ndim - 1] != plan->k) return "x's K differs from w's";
  for (int64_t extent : {plan->rows, plan->n, plan->k}) {
    if (extent > kBlasIntMax) return "dimension " + std::to_string(extent) + " exceeds the 32-bit OpenBLAS interface";
  }
  if (has_output) plan->out = static_cast<char*>(args.outputs[0].data) + args.outputs[0].byte_offset;
  int64_t x_strides[3];
  int64_t w_strides[3];
  strides_of(x, x_strides);
  strides_of(w, w_strides);
  const int row = x.ndim - 2;
  if (!blas_matrix(plan->rows, plan->k, x_strides[row], x_strides[row + 1], &plan->x_transposed,
                   &plan->x_leading_dimension)) {
    return "x has strides " + list_text(x_strides, x.ndim) + ": its rows need a unit stride along K or across rows";
  }
  if (!blas_matrix(plan->k, plan->n, w_strides[1], w_strides[2], &plan->w_transposed, &plan->w_leading_dimension)) {
    return "w has strides " + list_text(w_strides, 3) + ": each [K, N] matrix needs a unit stride in one dimension";
  }
  if (plan->x_leading_dimension > kBlasIntMax || plan->w_leading_dimension > kBlasIntMax) {
    return "a leading dimension exceeds the 32-bit OpenBLAS interface";
  }
  plan->x = data_of(x);
  plan->x_group_stride = x.ndim == 3 ? x_strides[0] : 0;
  plan->x_row_stride = x_strides[row];
  plan->w = data_of(w);
  plan->w_group_stride = w_strides[0];
  if (offs != nullptr) {
    int64_t offsets_strides[1];
    strides_of(*offs, offsets_strides);
    plan->offsets = data_of(*offs);
    plan->offsets_stride = offsets_strides[0];
  }
  return {};
}

// Group g's end row: its offset clamped into [start, rows], as every grouped_mm kernel reads offsets, so no values
// make a gemm read or write outside x and out.
int64_t group_end(const GroupedPlan& plan, int64_t group, int64_t start) {
  int32_t offset = 0;
  std::memcpy(&offset, plan.offsets + group * plan.offsets_stride * static_cast<int64_t>(sizeof offset), sizeof offset);
  return std::min<int64_t>(std::max<int64_t>(offset, start), plan.rows);
}

template <typename Scalar>
void multiply_group(GemmFunction<Scalar> gemm, const GroupedPlan& plan, int64_t group, int64_t first_row,
                    int64_t rows, Scalar* out) {
  if (rows == 0 || plan.n == 0) return;
  if (plan.k == 0) {
    std::fill_n(out, rows * plan.n, Scalar(0));
    return;
  }
  const auto* x = reinterpret_cast<const Scalar*>(plan.x) + group * plan.x_group_stride + first_row * plan.x_row_stride;
  const auto* w = reinterpret_cast<const Scalar*>(plan.w) + group * plan.w_group_stride;
  gemm(kCblasRowMajor, plan.x_transposed ? kCblasTrans : kCblasNoTrans,
       plan.w_transposed ? kCblasTrans : kCblasNoTrans, static_cast<int>(rows), static_cast<int>(plan.n),
       static_cast<int>(plan.k), Scalar(1), x, static_cast<int>(plan.x_leading_dimension), w,
       static_cast<int>(plan.w_leading_dimension), Scalar(0), out, static_cast<int>(plan.n));
}

template <typename Scalar>
void run_grouped(GemmFunction<Scalar> gemm, const GroupedPlan& plan) {
  auto* out = reinterpret_cast<Scalar*>(plan.out);
  if (plan.offsets == nullptr) {
    for (int64_t group = 0; group < plan.groups; ++group) {
      multiply_group(gemm, plan, group, 0, plan.rows, out + group * plan.rows * plan.n);
    }
    return;
  }
  int64_t start = 0;
  for (int64_t group = 0; group < plan.groups; ++group) {
    const int64_t end = group_end(plan, group, start);
    multiply_group(gemm, plan, group, start, end - start, out + start * plan.n);
    start = end;
  }
  std::fill(out + start * plan.n, out + plan.rows * plan.n, Scalar(0));
}

kabi_status fail(const GroupedState& state, kabi_status status, const std::string& message) {
  state.set_error(message.c_str());
  return status;
}

kabi_status grouped_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& state = *static_cast<const GroupedState*>(user_data);
  try {
    if (problem == nullptr || args == nullptr) {
      return fail(state, KABI_STATUS_INVALID_ARGUMENT, std::string(kGroupedMmKernelName) + ": problem or args is NULL");
    }
    GroupedPlan plan;
    const std::string reason = plan_grouped(*args, /*require_output=*/true, &plan);
    if (!reason.empty()) {
      return fail(state, KABI_STATUS_CONSTRAINT_VIOLATED, std::string(kGroupedMmKernelName) + ": " + reason);
    }
    if (plan.dtype == KABI_DTYPE_FLOAT32) {
      run_grouped(state.blas.sgemm, plan);
    } else {
      run_grouped(state.blas.dgemm, plan);
    }
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return fail(state, KABI_STATUS_INTERNAL, std::string(kGroupedMmKernelName) + ": " + error.what());
  }
}

int32_t grouped_supports(void* /*user_data*/, const kabi_problem* /*problem*/, const kabi_args* args, char* reason,
                         size_t reason_size) {
  GroupedPlan plan;
  return supports_verdict([&] { return plan_grouped(*args, /*require_output=*/false, &plan); }, reason, reason_size);
}

}  // namespace

kabi_status register_grouped_mm_kernels(const kabi_host_api& host, const OpenBlas& blas) {
  GroupedState& state = grouped_state();
  state.blas = blas;
  state.set_error = host.set_error;
  state.fingerprint = kernel_fingerprint(kGroupedMmKernelName, blas.config);
  // offs is a rank-1 tensor (class GENERAL when strided); plan_grouped declines an x or w gemm cannot read in place.
  const CpuKernel kernel{"grouped_mm", kGroupedMmKernelName, kPriority,
                         KABI_LAYOUT_ANY, KABI_BATCH_NONE, grouped_kernel, grouped_supports, &state};
  return register_cpu_kernel(host, kernel, state.fingerprint);
}

}  // namespace kabi::cpu
