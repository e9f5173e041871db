#include "gemm_plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>

namespace kabi::cuda {
namespace {

// Ranks beyond this are declined rather than handled with heap allocations on the launch path.
constexpr int kMaxRank = KABI_MAX_BATCH_RANK + 2;
constexpr int64_t kElementBytes = 2;  // bfloat16 and float16

std::string list_text(const int64_t* values, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) text += (i > 0 ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

// Element strides; DLPack's NULL strides mean compact row-major.
void strides_of(const DLTensor& tensor, int64_t* out) {
  if (tensor.strides != nullptr) {
    std::copy(tensor.strides, tensor.strides + tensor.ndim, out);
    return;
  }
  int64_t step = 1;
  for (int d = tensor.ndim - 1; d >= 0; --d) {
    out[d] = step;
    step *= tensor.shape[d];
  }
}

const void* data_of(const DLTensor& tensor) { return static_cast<const char*>(tensor.data) + tensor.byte_offset; }

bool is_c_contiguous(const DLTensor& tensor, const int64_t* strides) {
  int64_t expected = 1;
  for (int d = tensor.ndim - 1; d >= 0; --d) {
    if (tensor.shape[d] != 1 && strides[d] != expected) return false;
    expected *= tensor.shape[d];
  }
  return true;
}

int64_t dim_of(const kabi_problem& problem, const char* name) {
  for (int i = 0; i < problem.num_dims; ++i) {
    if (problem.dim_names[i] != nullptr && std::strcmp(problem.dim_names[i], name) == 0) return problem.dims[i];
  }
  return 0;
}

// A tensor's one batch stride under KABI_BATCH_UNIFORM (kabi.h, kabi_kernel_fn): the stride of its innermost leading
// dimension whose broadcast extent is not 1, or 0 where the tensor is broadcast there.
int64_t batch_stride(const DLTensor& tensor, const int64_t* strides, const kabi_problem& problem) {
  const int missing = problem.batch_rank - (tensor.ndim - 2);
  for (int j = problem.batch_rank - 1; j >= 0; --j) {
    if (problem.batch_shape[j] == 1) continue;
    const int d = j - missing;
    return d >= 0 && tensor.shape[d] != 1 ? strides[d] : 0;
  }
  return 0;
}

// The checks every input shares: on a CUDA device, bfloat16 or float16 (the problem's dtype).
std::string check_input(const DLTensor& tensor, const char* name, uint32_t dtype_bit) {
  if (tensor.device.device_type != kDLCUDA) return std::string(name) + " is not on a CUDA device";
  const bool half = tensor.dtype.code == kDLFloat && tensor.dtype.bits == 16 && tensor.dtype.lanes == 1;
  const bool bfloat = tensor.dtype.code == kDLBfloat && tensor.dtype.bits == 16 && tensor.dtype.lanes == 1;
  if (!((half && dtype_bit == KABI_DTYPE_FLOAT16) || (bfloat && dtype_bit == KABI_DTYPE_BFLOAT16))) {
    return std::string(name) + " is not bfloat16 or float16 (the CUDA GEMMs' dtypes)";
  }
  return {};
}

std::string check_output(const kabi_args& args, const int64_t* expected_shape, int rank, GemmCall* call) {
  const DLTensor& out = args.outputs[0];
  if (out.device.device_type != kDLCUDA) return "out is not on a CUDA device";
  if (out.ndim != rank || !std::equal(expected_shape, expected_shape + rank, out.shape)) {
    return "out has shape " + list_text(out.shape, out.ndim) + "; expected " + list_text(expected_shape, rank);
  }
  int64_t strides[kMaxRank];
  strides_of(out, strides);
  if (!is_c_contiguous(out, strides)) {
    return "out has strides " + list_text(strides, out.ndim) + "; the CUDA GEMMs write only C-contiguous outputs";
  }
  call->out = const_cast<void*>(data_of(out));
  return {};
}

// The sizes CUTLASS and cuBLASLt take as 32-bit integers.
std::string check_extents(const GemmCall& call) {
  for (int64_t extent : {call.m, call.n, call.k, call.batch, call.lda, call.ldb}) {
    if (extent > INT32_MAX) return "a dimension or leading dimension exceeds 2^31 - 1";
  }
  if (call.m == 0 || call.n == 0 || call.k == 0 || call.batch == 0) {
    return "the product is empty (M, N, K or the batch is 0)";
  }
  return {};
}

// b as the GEMMs read it: row-major [K, N] (unit stride along N) or column-major (unit stride along K). The stride of
// an extent-1 dimension is never used.
bool b_operand(int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, GemmCall* call) {
  if ((n == 1 || col_stride == 1) && (k == 1 || row_stride >= n)) {
    call->b_order = MatrixOrder::kRowMajor;
    call->ldb = k == 1 ? n : row_stride;
    return true;
  }
  if ((k == 1 || row_stride == 1) && (n == 1 || col_stride >= k)) {
    call->b_order = MatrixOrder::kColumnMajor;
    call->ldb = n == 1 ? k : col_stride;
    return true;
  }
  return false;
}

}  // namespace

std::string plan_matmul(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call) {
  if (args.inputs == nullptr || args.num_inputs != 2) return "matmul takes exactly two inputs, a and b";
  const DLTensor& a = args.inputs[0];
  const DLTensor& b = args.inputs[1];
  const bool has_output = args.num_outputs > 0 && args.outputs != nullptr;
  if (require_output && !has_output) return "the call has no output tensor";
  for (const DLTensor* tensor : {&a, &b}) {
    const char* name = tensor == &a ? "a" : "b";
    if (tensor->ndim < 2 || tensor->ndim > kMaxRank) {
      return std::string(name) + " has rank " + std::to_string(tensor->ndim) + "; expected 2 to " +
             std::to_string(kMaxRank);
    }
    std::string reason = check_input(*tensor, name, problem.dtype);
    if (!reason.empty()) return reason;
  }
  call->dtype = problem.dtype;
  call->device_index = problem.device_index;
  call->stream = args.stream;
  call->m = a.shape[a.ndim - 2];
  call->k = a.shape[a.ndim - 1];
  call->n = b.shape[b.ndim - 1];
  call->batch = problem.batch_size;
  call->bias = nullptr;
  call->activation = Activation::kNone;

  int64_t a_strides[kMaxRank], b_strides[kMaxRank];
  strides_of(a, a_strides);
  strides_of(b, b_strides);
  const int64_t a_row_stride = a_strides[a.ndim - 2], a_col_stride = a_strides[a.ndim - 1];
  if (!((call->k == 1 || a_col_stride == 1) && (call->m == 1 || a_row_stride >= call->k))) {
    return "a has strides " + list_text(a_strides, a.ndim) + "; the CUDA GEMMs read a row-major a (unit stride "
           "along K)";
  }
  call->lda = call->m == 1 ? call->k : a_row_stride;
  if (!b_operand(call->k, call->n, b_strides[b.ndim - 2], b_strides[b.ndim - 1], call)) {
    return "b has strides " + list_text(b_strides, b.ndim) + "; its matrices need a unit stride in one of the "
           "last two dimensions";
  }
  call->a = data_of(a);
  call->b = data_of(b);
  call->batch_stride_a = batch_stride(a, a_strides, problem);
  call->batch_stride_b = batch_stride(b, b_strides, problem);
  // One b for every batch entry and a's entries stacked row after row: one GEMM of batch * M rows.
  if (call->batch > 1 && call->batch_stride_b == 0 && call->batch_stride_a == call->m * call->lda) {
    call->m *= call->batch;
    call->batch = 1;
    call->batch_stride_a = 0;
  } else if (call->batch > 1 && call->batch_stride_a == 0) {
    return "a is broadcast over the batch while b is not; the CUDA GEMMs need a distinct a per batch entry";
  }

  if (has_output) {
    int64_t expected[kMaxRank];
    std::copy(problem.batch_shape, problem.batch_shape + problem.batch_rank, expected);
    expected[problem.batch_rank] = a.shape[a.ndim - 2];
    expected[problem.batch_rank + 1] = call->n;
    std::string reason = check_output(args, expected, problem.batch_rank + 2, call);
    if (!reason.empty()) return reason;
  } else {
    call->out = nullptr;
  }
  return check_extents(*call);
}

std::string plan_linear(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call) {
  if (args.inputs == nullptr || args.num_inputs < 2) return "linear takes the inputs x, w and an optional bias";
  const DLTensor& x = args.inputs[0];
  const DLTensor& w = args.inputs[1];
  // An absent optional input is a zero-filled DLTensor, or left out of num_inputs.
  const DLTensor* bias = args.num_inputs > 2 && args.inputs[2].dtype.bits != 0 ? &args.inputs[2] : nullptr;
  const bool has_output = args.num_outputs > 0 && args.outputs != nullptr;
  if (require_output && !has_output) return "the call has no output tensor";
  if (problem.num_attributes < 1) return "the problem carries no activation attribute";
  const int64_t activation = problem.attributes[0].integer;
  if (activation < 0 || activation >= kActivationCount) {
    return "activation " + std::to_string(activation) + " is not an index of (none, relu, gelu, gelu_tanh, silu)";
  }
  if (x.ndim < 1 || x.ndim > kMaxRank - 1) {
    return "x has rank " + std::to_string(x.ndim) + "; expected 1 to " + std::to_string(kMaxRank - 1);
  }
  if (w.ndim != 2) return "w has rank " + std::to_string(w.ndim) + "; expected [N, K]";
  if (bias != nullptr && bias->ndim != 1) return "bias has rank " + std::to_string(bias->ndim) + "; expected [N]";
  for (const DLTensor* tensor : {&x, &w, bias}) {
    if (tensor == nullptr) continue;
    std::string reason = check_input(*tensor, tensor == &x ? "x" : tensor == &w ? "w" : "bias", problem.dtype);
    if (!reason.empty()) return reason;
  }
  call->dtype = problem.dtype;
  call->device_index = problem.device_index;
  call->stream = args.stream;
  call->activation = static_cast<Activation>(activation);
  call->k = x.shape[x.ndim - 1];
  call->n = w.shape[0];
  call->batch = 1;
  call->batch_stride_a = call->batch_stride_b = 0;

  int64_t x_strides[kMaxRank], w_strides[2];
  strides_of(x, x_strides);
  strides_of(w, w_strides);
  if (call->k != 1 && x_strides[x.ndim - 1] != 1) {
    return "x has strides " + list_text(x_strides, x.ndim) + "; the CUDA GEMMs read x's rows with unit stride";
  }
  // x's leading dimensions as rows one stride apart: each outer one of extent above 1 steps over the rows inside it.
  call->m = 1;
  int64_t row_stride = 0;
  for (int d = x.ndim - 2; d >= 0; --d) {
    if (x.shape[d] == 1) continue;
    if (call->m == 1) {
      row_stride = x_strides[d];
    } else if (x_strides[d] != row_stride * call->m) {
      return "x has strides " + list_text(x_strides, x.ndim) + ": its leading dimensions do not stack its rows "
             "one stride apart";
    }
    call->m *= x.shape[d];
  }
  if (call->m > 1 && row_stride < call->k) {
    return "x has row stride " + std::to_string(row_stride) + ", below K = " + std::to_string(call->k);
  }
  call->lda = call->m == 1 ? call->k : row_stride;
  // w [N, K] is b = w^T [K, N]: w's row stride is b's column stride.
  if (!b_operand(call->k, call->n, w_strides[1], w_strides[0], call)) {
    return "w has strides " + list_text(w_strides, 2) + "; it needs a unit stride in one dimension";
  }
  call->a = data_of(x);
  call->b = data_of(w);
  call->bias = nullptr;
  if (bias != nullptr) {
    if (call->n != 1 && bias->strides != nullptr && bias->strides[0] != 1) {
      return "bias has stride " + std::to_string(bias->strides[0]) + "; the CUDA GEMMs read a contiguous bias";
    }
    call->bias = data_of(*bias);
  }
  if (has_output) {
    int64_t expected[kMaxRank];
    std::copy(x.shape, x.shape + x.ndim - 1, expected);
    expected[x.ndim - 1] = call->n;
    std::string reason = check_output(args, expected, x.ndim, call);
    if (!reason.empty()) return reason;
  } else {
    call->out = nullptr;
  }
  return check_extents(*call);
}

GemmCall workspace_call(const kabi_problem& problem, bool is_linear, bool folded) {
  GemmCall call;
  call.dtype = problem.dtype;
  call.device_index = problem.device_index;
  call.n = dim_of(problem, "N");
  call.k = dim_of(problem, "K");
  if (is_linear) {
    call.m = problem.batch_size;
  } else {
    call.m = dim_of(problem, "M") * (folded ? problem.batch_size : 1);
    call.batch = folded ? 1 : problem.batch_size;
  }
  call.lda = call.k;
  call.ldb = call.n;
  return call;
}

std::string check_16_byte_alignment(const GemmCall& call) {
  constexpr int64_t kElements = 16 / kElementBytes;
  struct Pointer {
    const void* address;
    const char* name;
  };
  for (const Pointer& pointer : {Pointer{call.a, "a"}, Pointer{call.b, "b"}, Pointer{call.bias, "bias"},
                                 Pointer{call.out, "out"}}) {
    if (pointer.address != nullptr && reinterpret_cast<uintptr_t>(pointer.address) % 16 != 0) {
      return std::string("the data of ") + pointer.name + " is not 16-byte aligned";
    }
  }
  struct Stride {
    int64_t value;
    const char* name;
  };
  // K and N are strides too when a, b or out have a single row or column, so they must align as well.
  for (const Stride& stride : {Stride{call.lda, "a's leading dimension"}, Stride{call.ldb, "b's leading dimension"},
                               Stride{call.n, "N (out's row stride)"}, Stride{call.batch_stride_a, "a's batch stride"},
                               Stride{call.batch_stride_b, "b's batch stride"}}) {
    if (stride.value % kElements != 0) {
      return stride.name + std::string(" is ") + std::to_string(stride.value) + ", not a multiple of " +
             std::to_string(kElements) + " elements (16 bytes)";
    }
  }
  // The contiguous extent of each operand must also fill whole 16-byte vectors.
  if (call.k % kElements != 0) return "K is " + std::to_string(call.k) + ", not a multiple of 8";
  if (call.b_order == MatrixOrder::kRowMajor && call.n % kElements != 0) {
    return "N is " + std::to_string(call.n) + ", not a multiple of 8";
  }
  return {};
}

}  // namespace kabi::cuda
