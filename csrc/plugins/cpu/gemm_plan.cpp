#include "gemm_plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>

#include "../operands.hpp"
#include "tensors.hpp"

namespace kabi::cpu {
namespace {

// Ranks beyond this are declined rather than handled with heap allocations on the launch path.
constexpr int kMaxRank = 16;

std::string dtype_text(DLDataType dtype) {
  static constexpr const char* kCodeNames[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string code = dtype.code < sizeof(kCodeNames) / sizeof(kCodeNames[0]) ? kCodeNames[dtype.code]
                                                                             : "code" + std::to_string(dtype.code);
  std::string text = code + std::to_string(dtype.bits);
  if (dtype.lanes != 1) text += "x" + std::to_string(dtype.lanes);
  return text;
}

// A tensor's one batch stride under KABI_BATCH_UNIFORM (kabi.h, kabi_kernel_problem_fn): the stride of its
// innermost leading dimension whose broadcast extent is not 1, or 0 where the tensor is broadcast there. The core has
// checked that the other leading dimensions nest under it.
int64_t batch_stride(const DLTensor& tensor, const int64_t* strides, const kabi_problem& problem) {
  const int missing = problem.batch_rank - (tensor.ndim - 2);
  for (int j = problem.batch_rank - 1; j >= 0; --j) {
    if (problem.batch_shape[j] == 1) continue;
    const int d = j - missing;
    return d >= 0 && tensor.shape[d] != 1 ? strides[d] : 0;
  }
  return 0;
}

// A matrix of rows x cols with the given strides as gemm reads it: row-major (unit column stride) or column-major
// (unit row stride), with a leading dimension of at least max(1, cols) or max(1, rows) as BLAS requires. The
// stride of an extent-1 dimension is never used, so it does not matter.
bool matrix_operand(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, BlasOperand* operand) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols))) {
    operand->transposed = false;
    operand->leading_dimension = rows == 1 ? std::max<int64_t>(1, cols) : row_stride;
    return true;
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows))) {
    operand->transposed = true;
    operand->leading_dimension = cols == 1 ? std::max<int64_t>(1, rows) : col_stride;
    return true;
  }
  return false;
}

std::string check_output(const DLTensor& out, const GemmPlan& plan, const int64_t* batch_shape, int batch_rank) {
  if (out.device.device_type != kDLCPU) return "out is not on the CPU";
  if (dtype_bit(out.dtype) != plan.dtype) return "out has dtype " + dtype_text(out.dtype) + "; expected the inputs' dtype";
  int64_t expected_shape[kMaxRank + 2];
  std::copy(batch_shape, batch_shape + batch_rank, expected_shape);
  expected_shape[batch_rank] = plan.m;
  expected_shape[batch_rank + 1] = plan.n;
  if (out.ndim != batch_rank + 2 || !std::equal(expected_shape, expected_shape + batch_rank + 2, out.shape)) {
    return "out has shape " + list_text(out.shape, out.ndim) + "; expected " +
           list_text(expected_shape, batch_rank + 2);
  }
  int64_t out_strides[kMaxRank];
  strides_of(out, out_strides);
  if (!is_c_contiguous(out, out_strides)) {
    return "out has strides " + list_text(out_strides, out.ndim) + "; kabi-cpu writes only C-contiguous outputs";
  }
  return {};
}

}  // namespace

std::string plan_gemm(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmPlan* plan) {
  if (std::string reason = plugins::check_operand_count(args, 2, 2, "matmul takes exactly two inputs, a and b",
                                                        require_output);
      !reason.empty()) {
    return reason;
  }
  const DLTensor& a = args.inputs[0];
  const DLTensor& b = args.inputs[1];
  const bool has_output = plugins::output_of(args) != nullptr;

  for (const DLTensor* tensor : {&a, &b}) {
    const char* name = tensor == &a ? "a" : "b";
    if (tensor->device.device_type != kDLCPU) return std::string(name) + " is not on the CPU";
    if (tensor->ndim < 2 || tensor->ndim > kMaxRank) {
      return std::string(name) + " has rank " + std::to_string(tensor->ndim) + "; kabi-cpu takes ranks 2 to " +
             std::to_string(kMaxRank);
    }
  }
  plan->dtype = dtype_bit(a.dtype);
  if (plan->dtype == 0) return "dtype " + dtype_text(a.dtype) + " is not float32 or float64";
  if (dtype_bit(b.dtype) != plan->dtype) {
    return "a has dtype " + dtype_text(a.dtype) + " but b has " + dtype_text(b.dtype);
  }

  plan->m = a.shape[a.ndim - 2];
  plan->k = a.shape[a.ndim - 1];
  plan->n = b.shape[b.ndim - 1];
  if (b.shape[b.ndim - 2] != plan->k) {
    return "b has shape " + list_text(b.shape, b.ndim) + "; expected [..., K=" + std::to_string(plan->k) +
           ", N] to match a " + list_text(a.shape, a.ndim);
  }

  // The core has broadcast the leading dimensions (a problem of batch mode KABI_BATCH_UNIFORM at most).
  const int batch_rank = problem.batch_rank;
  const int64_t* batch_shape = problem.batch_shape;
  plan->batch = problem.batch_size;

  int64_t strides[2][kMaxRank];
  strides_of(a, strides[0]);
  strides_of(b, strides[1]);
  if (has_output) {
    std::string reason = check_output(args.outputs[0], *plan, batch_shape, batch_rank);
    if (!reason.empty()) return reason;
    plan->out = static_cast<char*>(args.outputs[0].data) + args.outputs[0].byte_offset;
  } else {
    plan->out = nullptr;
  }
  for (int64_t extent : {plan->m, plan->n, plan->k}) {
    if (extent > kBlasIntMax) {
      return "dimension " + std::to_string(extent) + " exceeds the 32-bit OpenBLAS interface (at most " +
             std::to_string(kBlasIntMax) + ")";
    }
  }
  // Nothing is read from the inputs when the product is empty (K == 0 only zero-fills the output).
  if (plan->batch == 0 || plan->m == 0 || plan->n == 0 || plan->k == 0) return {};

  struct Input {
    const DLTensor& tensor;
    const int64_t* strides;
    int64_t rows, cols;
    BlasOperand* operand;
    const char* name;
  };
  for (const Input& input : {Input{a, strides[0], plan->m, plan->k, &plan->a, "a"},
                             Input{b, strides[1], plan->k, plan->n, &plan->b, "b"}}) {
    const int nd = input.tensor.ndim;
    if (!matrix_operand(input.rows, input.cols, input.strides[nd - 2], input.strides[nd - 1], input.operand)) {
      return std::string(input.name) + " has strides " + list_text(input.strides, nd) +
             ": its matrices need a unit stride in one of the last two dimensions and a leading dimension at "
             "least as large as the other extent";
    }
    if (input.operand->leading_dimension > kBlasIntMax) {
      return std::string(input.name) + " has leading dimension " + std::to_string(input.operand->leading_dimension) +
             ", beyond the 32-bit OpenBLAS interface";
    }
    input.operand->batch_stride = batch_stride(input.tensor, input.strides, problem);
    input.operand->data = data_of(input.tensor);
  }
  return {};
}

}  // namespace kabi::cpu
