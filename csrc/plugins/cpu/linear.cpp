#include "linear.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "../operands.hpp"
#include "registration.hpp"
#include "tensors.hpp"

namespace kabi::cpu {
namespace {

using plugins::Activation;

constexpr int kMaxRank = KABI_MAX_BATCH_RANK + 1;
// Above the torch-native kernel (priority 0), as the plugin's matmul: where no tuning decision exists, native code
// serves C++ callers and Python alike.
constexpr int32_t kPriority = 10;

struct LinearState {
  OpenBlas blas;
  void (*set_error)(const char* message) = nullptr;
  std::string fingerprint;
};

LinearState& linear_state() {
  static LinearState state;
  return state;
}

// One call as gemm and the epilogue see it: C[M, N] = A[M, K] @ B[K, N] with A = x's rows and B = w^T, both read in
// place (a transposed operand is passed as CblasTrans), then out = activation(C + bias). Strides are in elements.
struct LinearPlan {
  uint32_t dtype = 0;
  int64_t m = 0, n = 0, k = 0;
  const char* x = nullptr;
  bool x_transposed = false;
  int64_t x_leading_dimension = 1;
  const char* w = nullptr;
  bool w_transposed = false;
  int64_t w_leading_dimension = 1;
  const char* bias = nullptr;  // NULL: no bias
  int64_t bias_stride = 0;
  Activation activation = Activation::kNone;
  char* out = nullptr;  // dense row-major [M, N]; NULL when the call has no output yet (selection)
};

// x's leading dimensions as one row stride: the stride of the innermost one of extent above 1, when every outer one
// of extent above 1 steps over exactly the rows inside it. False when they do not nest (a permuted batch).
bool row_stride_of(const DLTensor& x, const int64_t* strides, int64_t* row_stride) {
  *row_stride = 0;
  int64_t rows_inside = 1;
  for (int d = x.ndim - 2; d >= 0; --d) {
    if (x.shape[d] == 1) continue;
    if (rows_inside == 1) {
      *row_stride = strides[d];
    } else if (strides[d] != *row_stride * rows_inside) {
      return false;
    }
    rows_inside *= x.shape[d];
  }
  return true;
}

std::string check_output(const DLTensor& out, const DLTensor& x, const LinearPlan& plan) {
  if (out.device.device_type != kDLCPU) return "out is not on the CPU";
  if (dtype_bit(out.dtype) != plan.dtype) return "out's dtype differs from x's";
  int64_t expected_shape[kMaxRank];
  std::copy(x.shape, x.shape + x.ndim - 1, expected_shape);
  expected_shape[x.ndim - 1] = plan.n;
  if (out.ndim != x.ndim || !std::equal(expected_shape, expected_shape + x.ndim, out.shape)) {
    return "out has shape " + list_text(out.shape, out.ndim) + "; expected " + list_text(expected_shape, x.ndim);
  }
  int64_t strides[kMaxRank];
  strides_of(out, strides);
  if (!is_c_contiguous(out, strides)) {
    return "out has strides " + list_text(strides, out.ndim) + "; kabi-cpu writes only C-contiguous outputs";
  }
  return {};
}

// Fill *plan for a call, or return why this kernel cannot compute it (the supports predicate's reason); the empty
// string means success. With require_output, a call without an output fails; otherwise the output is checked when
// present. That the output overlaps no input the core checks before every launch.
std::string plan_linear(const kabi_problem& problem, const kabi_args& args, bool require_output, LinearPlan* plan) {
  if (std::string reason = plugins::check_operand_count(
          args, 2, 3, "linear takes the inputs x, w and an optional bias", require_output);
      !reason.empty()) {
    return reason;
  }
  const DLTensor& x = args.inputs[0];
  const DLTensor& w = args.inputs[1];
  const DLTensor* bias = plugins::optional_input(args, 2);
  const bool has_output = plugins::output_of(args) != nullptr;
  if (std::string reason = plugins::read_activation(problem, &plan->activation); !reason.empty()) return reason;

  if (x.ndim < 1 || x.ndim > kMaxRank) {
    return "x has rank " + std::to_string(x.ndim) + "; kabi-cpu takes ranks 1 to " + std::to_string(kMaxRank);
  }
  if (w.ndim != 2) return "w has rank " + std::to_string(w.ndim) + "; expected [N, K]";
  if (bias != nullptr && bias->ndim != 1) return "bias has rank " + std::to_string(bias->ndim) + "; expected [N]";
  plan->dtype = dtype_bit(x.dtype);
  if (plan->dtype == 0) return "x's dtype is not float32 or float64";
  for (const DLTensor* tensor : {&x, &w, bias}) {
    if (tensor == nullptr) continue;
    const char* name = tensor == &x ? "x" : tensor == &w ? "w" : "bias";
    if (tensor->device.device_type != kDLCPU) return std::string(name) + " is not on the CPU";
    if (dtype_bit(tensor->dtype) != plan->dtype) return std::string(name) + "'s dtype differs from x's";
  }

  plan->k = x.shape[x.ndim - 1];
  plan->n = w.shape[0];
  plan->m = 1;
  for (int d = 0; d < x.ndim - 1; ++d) plan->m *= x.shape[d];
  if (w.shape[1] != plan->k) {
    return "w has shape " + list_text(w.shape, 2) + "; expected [N, K=" + std::to_string(plan->k) + "]";
  }
  if (bias != nullptr && bias->shape[0] != plan->n) {
    return "bias has shape " + list_text(bias->shape, 1) + "; expected [N=" + std::to_string(plan->n) + "]";
  }
  for (int64_t extent : {plan->m, plan->n, plan->k}) {
    if (extent > kBlasIntMax) {
      return "dimension " + std::to_string(extent) + " exceeds the 32-bit OpenBLAS interface";
    }
  }
  if (has_output) {
    std::string reason = check_output(args.outputs[0], x, *plan);
    if (!reason.empty()) return reason;
    plan->out = static_cast<char*>(args.outputs[0].data) + args.outputs[0].byte_offset;
  }
  if (bias != nullptr) {
    int64_t bias_strides[1];
    strides_of(*bias, bias_strides);
    plan->bias = data_of(*bias);
    plan->bias_stride = bias_strides[0];
  }
  // Nothing is read from x or w when the product is empty (K == 0 leaves the bias alone in out).
  if (plan->m == 0 || plan->n == 0 || plan->k == 0) return {};

  int64_t x_strides[kMaxRank];
  int64_t w_strides[2];
  strides_of(x, x_strides);
  strides_of(w, w_strides);
  int64_t x_row_stride = 0;
  if (!row_stride_of(x, x_strides, &x_row_stride)) {
    return "x has shape " + list_text(x.shape, x.ndim) + " and strides " + list_text(x_strides, x.ndim) +
           ": its leading dimensions do not flatten into one row stride";
  }
  if (!blas_matrix(plan->m, plan->k, x_row_stride, x_strides[x.ndim - 1], &plan->x_transposed,
                   &plan->x_leading_dimension)) {
    return "x has strides " + list_text(x_strides, x.ndim) +
           ": its rows need a unit stride along K or across rows, and distinct rows";
  }
  if (!blas_matrix(plan->n, plan->k, w_strides[0], w_strides[1], &plan->w_transposed, &plan->w_leading_dimension)) {
    return "w has strides " + list_text(w_strides, 2) +
           ": it needs a unit stride in one dimension and a leading dimension at least as large as the other extent";
  }
  if (plan->x_leading_dimension > kBlasIntMax || plan->w_leading_dimension > kBlasIntMax) {
    return "a leading dimension exceeds the 32-bit OpenBLAS interface";
  }
  plan->x = data_of(x);
  plan->w = data_of(w);
  return {};
}

template <typename Scalar, Activation kActivation>
Scalar activate(Scalar value) {
  if constexpr (kActivation == Activation::kRelu) {
    // A comparison rather than max keeps NaN as NaN, as torch.relu does.
    return value < Scalar(0) ? Scalar(0) : value;
  } else if constexpr (kActivation == Activation::kGelu) {
    return Scalar(0.5) * value * (Scalar(1) + std::erf(value * Scalar(0.70710678118654752440)));
  } else if constexpr (kActivation == Activation::kGeluTanh) {
    const Scalar inner = Scalar(0.79788456080286535588) * (value + Scalar(0.044715) * value * value * value);
    return Scalar(0.5) * value * (Scalar(1) + std::tanh(inner));
  } else if constexpr (kActivation == Activation::kSilu) {
    return value / (Scalar(1) + std::exp(-value));
  } else {
    return value;
  }
}

// The one pass after gemm: out[i, j] = activation(out[i, j] + bias[j]), the activation chosen at compile time so the
// loop carries no branch on it.
template <typename Scalar, Activation kActivation>
void finish_rows(const LinearPlan& plan, Scalar* out) {
  const auto* bias = reinterpret_cast<const Scalar*>(plan.bias);
  for (int64_t row = 0; row < plan.m; ++row) {
    Scalar* values = out + row * plan.n;
    for (int64_t column = 0; column < plan.n; ++column) {
      const Scalar biased = bias != nullptr ? values[column] + bias[column * plan.bias_stride] : values[column];
      values[column] = activate<Scalar, kActivation>(biased);
    }
  }
}

template <typename Scalar>
void finish(const LinearPlan& plan, Scalar* out) {
  switch (plan.activation) {
    case Activation::kNone:
      if (plan.bias != nullptr) finish_rows<Scalar, Activation::kNone>(plan, out);
      return;
    case Activation::kRelu:
      return finish_rows<Scalar, Activation::kRelu>(plan, out);
    case Activation::kGelu:
      return finish_rows<Scalar, Activation::kGelu>(plan, out);
    case Activation::kGeluTanh:
      return finish_rows<Scalar, Activation::kGeluTanh>(plan, out);
    case Activation::kSilu:
      return finish_rows<Scalar, Activation::kSilu>(plan, out);
  }
}

template <typename Scalar>
void run_linear(GemmFunction<Scalar> gemm, const LinearPlan& plan) {
  auto* out = reinterpret_cast<Scalar*>(plan.out);
  if (plan.m == 0 || plan.n == 0) return;
  if (plan.k == 0) {
    std::fill_n(out, plan.m * plan.n, Scalar(0));
  } else {
    // out = x @ (w^T): w stored row-major [N, K] is w^T transposed, so it goes in as CblasTrans.
    gemm(kCblasRowMajor, plan.x_transposed ? kCblasTrans : kCblasNoTrans,
         plan.w_transposed ? kCblasNoTrans : kCblasTrans, static_cast<int>(plan.m), static_cast<int>(plan.n),
         static_cast<int>(plan.k), Scalar(1), reinterpret_cast<const Scalar*>(plan.x),
         static_cast<int>(plan.x_leading_dimension), reinterpret_cast<const Scalar*>(plan.w),
         static_cast<int>(plan.w_leading_dimension), Scalar(0), out, static_cast<int>(plan.n));
  }
  finish(plan, out);
}

kabi_status fail(const LinearState& state, kabi_status status, const std::string& message) {
  state.set_error(message.c_str());
  return status;
}

kabi_status linear_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& state = *static_cast<const LinearState*>(user_data);
  try {
    if (problem == nullptr || args == nullptr) {
      return fail(state, KABI_STATUS_INVALID_ARGUMENT, std::string(kLinearKernelName) + ": problem or args is NULL");
    }
    LinearPlan plan;
    const std::string reason = plan_linear(*problem, *args, /*require_output=*/true, &plan);
    if (!reason.empty()) {
      return fail(state, KABI_STATUS_CONSTRAINT_VIOLATED, std::string(kLinearKernelName) + ": " + reason);
    }
    if (plan.dtype == KABI_DTYPE_FLOAT32) {
      run_linear(state.blas.sgemm, plan);
    } else {
      run_linear(state.blas.dgemm, plan);
    }
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return fail(state, KABI_STATUS_INTERNAL, std::string(kLinearKernelName) + ": " + error.what());
  }
}

int32_t linear_supports(void* /*user_data*/, const kabi_problem* problem, const kabi_args* args, char* reason,
                        size_t reason_size) {
  LinearPlan plan;
  return supports_verdict([&] { return plan_linear(*problem, *args, /*require_output=*/false, &plan); },
                          reason, reason_size);
}

}  // namespace

kabi_status register_linear_kernels(const kabi_host_api& host, const OpenBlas& blas) {
  LinearState& state = linear_state();
  state.blas = blas;
  state.set_error = host.set_error;
  state.fingerprint = kernel_fingerprint(kLinearKernelName, blas.config);
  // A strided bias is a rank-1 tensor of class GENERAL, which the epilogue reads; plan_linear declines an x or w
  // that gemm cannot read in place, naming it.
  const CpuKernel kernel{"linear", kLinearKernelName, kPriority,
                         KABI_LAYOUT_ANY, KABI_BATCH_UNIFORM, linear_kernel, linear_supports, &state};
  return register_cpu_kernel(host, kernel, state.fingerprint);
}

}  // namespace kabi::cpu
