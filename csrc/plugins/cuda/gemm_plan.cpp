#include "gemm_plan.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "../dlpack_tensors.hpp"
#include "../operands.hpp"

namespace kabi::cuda {
namespace {

// Ranks beyond this are declined rather than handled with heap allocations on the launch path.
constexpr int kMaxRank = KABI_MAX_BATCH_RANK + 2;

// The KABI_DTYPE_* bit of the dtypes these GEMMs read or write, or 0.
uint32_t dtype_bit(const DLDataType& dtype) {
  if (dtype.lanes != 1) return 0;
  if (dtype.code == kDLFloat && dtype.bits == 16) return KABI_DTYPE_FLOAT16;
  if (dtype.code == kDLBfloat && dtype.bits == 16) return KABI_DTYPE_BFLOAT16;
  if (dtype.code == kDLFloat && dtype.bits == 32) return KABI_DTYPE_FLOAT32;
  if (dtype.code == kDLFloat8_e4m3fn && dtype.bits == 8) return KABI_DTYPE_FLOAT8_E4M3FN;
  if (dtype.code == kDLFloat8_e5m2 && dtype.bits == 8) return KABI_DTYPE_FLOAT8_E5M2;
  return 0;
}

int64_t element_bytes(uint32_t dtype) {
  if (dtype == KABI_DTYPE_FLOAT32) return 4;
  if (dtype == KABI_DTYPE_FLOAT8_E4M3FN || dtype == KABI_DTYPE_FLOAT8_E5M2) return 1;
  return 2;
}

using plugins::is_c_contiguous;
using plugins::list_text;
using plugins::strides_of;

const void* data_of(const DLTensor& tensor) { return static_cast<const char*>(tensor.data) + tensor.byte_offset; }

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

// The checks every input shares: on a CUDA device, of one of the dtypes `accepted` (KABI_DTYPE_* bits) says.
std::string check_input(const DLTensor& tensor, const char* name, uint32_t accepted, const char* accepted_names) {
  if (tensor.device.device_type != kDLCUDA) return std::string(name) + " is not on a CUDA device";
  if ((dtype_bit(tensor.dtype) & accepted) == 0) return std::string(name) + " is not " + accepted_names;
  return {};
}

// matmul's and linear's inputs: the problem's dtype, bfloat16 or float16.
std::string check_half_input(const DLTensor& tensor, const char* name, uint32_t dtype) {
  return check_input(tensor, name, dtype & (KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16),
                     "bfloat16 or float16 (the CUDA GEMMs' dtypes)");
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

// a as the GEMMs read it: row-major [M, K] (unit stride along K). The stride of an extent-1 dimension is never used.
bool a_operand(int64_t m, int64_t k, int64_t row_stride, int64_t col_stride, GemmCall* call) {
  if (!((k == 1 || col_stride == 1) && (m == 1 || row_stride >= k))) return false;
  call->lda = m == 1 ? k : row_stride;
  return true;
}

// b as the GEMMs read it: row-major [K, N] (unit stride along N) or column-major (unit stride along K).
bool b_operand(int64_t k, int64_t n, int64_t row_stride, int64_t col_stride, GemmCall* call) {
  return matrix_order(k, n, row_stride, col_stride, &call->b_order, &call->ldb);
}

// The bias of linear and scaled_mm (given or not, and its address): the CUDA GEMMs read a contiguous [N] vector.
std::string plan_bias(const DLTensor* bias, GemmCall* call) {
  call->bias = nullptr;
  call->has_bias = bias != nullptr;
  if (bias == nullptr) return {};
  if (call->n != 1 && bias->strides != nullptr && bias->strides[0] != 1) {
    return "bias has stride " + std::to_string(bias->strides[0]) + "; the CUDA GEMMs read a contiguous bias";
  }
  call->bias = data_of(*bias);
  return {};
}

}  // namespace

std::string plan_matmul(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call) {
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
    if (tensor->ndim < 2 || tensor->ndim > kMaxRank) {
      return std::string(name) + " has rank " + std::to_string(tensor->ndim) + "; expected 2 to " +
             std::to_string(kMaxRank);
    }
    std::string reason = check_half_input(*tensor, name, problem.dtype);
    if (!reason.empty()) return reason;
  }
  call->dtype = call->a_dtype = call->b_dtype = problem.dtype;
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
  if (!a_operand(call->m, call->k, a_strides[a.ndim - 2], a_strides[a.ndim - 1], call)) {
    return "a has strides " + list_text(a_strides, a.ndim) + "; the CUDA GEMMs read a row-major a (unit stride "
           "along K)";
  }
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
  if (std::string reason = plugins::check_operand_count(
          args, 2, 3, "linear takes the inputs x, w and an optional bias", require_output);
      !reason.empty()) {
    return reason;
  }
  const DLTensor& x = args.inputs[0];
  const DLTensor& w = args.inputs[1];
  const DLTensor* bias = plugins::optional_input(args, 2);
  const bool has_output = plugins::output_of(args) != nullptr;
  if (std::string reason = plugins::read_activation(problem, &call->activation); !reason.empty()) return reason;
  if (x.ndim < 1 || x.ndim > kMaxRank - 1) {
    return "x has rank " + std::to_string(x.ndim) + "; expected 1 to " + std::to_string(kMaxRank - 1);
  }
  if (w.ndim != 2) return "w has rank " + std::to_string(w.ndim) + "; expected [N, K]";
  if (bias != nullptr && bias->ndim != 1) return "bias has rank " + std::to_string(bias->ndim) + "; expected [N]";
  for (const DLTensor* tensor : {&x, &w, bias}) {
    if (tensor == nullptr) continue;
    std::string reason = check_half_input(*tensor, tensor == &x ? "x" : tensor == &w ? "w" : "bias", problem.dtype);
    if (!reason.empty()) return reason;
  }
  call->dtype = call->a_dtype = call->b_dtype = problem.dtype;
  call->device_index = problem.device_index;
  call->stream = args.stream;
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
  if (std::string reason = plan_bias(bias, call); !reason.empty()) return reason;
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

std::string plan_scaled_mm(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call) {
  if (std::string reason = plugins::check_operand_count(
          args, 4, 5, "scaled_mm takes the inputs a, b, scale_a, scale_b and an optional bias", require_output);
      !reason.empty()) {
    return reason;
  }
  const DLTensor& a = args.inputs[0];
  const DLTensor& b = args.inputs[1];
  const DLTensor* bias = plugins::optional_input(args, 4);
  const bool has_output = plugins::output_of(args) != nullptr;
  if (problem.dtype != KABI_DTYPE_BFLOAT16 && problem.dtype != KABI_DTYPE_FLOAT16 &&
      problem.dtype != KABI_DTYPE_FLOAT32) {
    return "out_dtype is not bfloat16, float16 or float32";
  }
  for (const DLTensor* tensor : {&a, &b}) {
    const char* name = tensor == &a ? "a" : "b";
    if (tensor->ndim != 2) return std::string(name) + " has rank " + std::to_string(tensor->ndim) + "; expected 2";
    std::string reason = check_input(*tensor, name, KABI_DTYPE_FLOAT8_E4M3FN | KABI_DTYPE_FLOAT8_E5M2,
                                     "float8_e4m3fn or float8_e5m2");
    if (!reason.empty()) return reason;
  }
  if (bias != nullptr) {
    if (bias->ndim != 1) return "bias has rank " + std::to_string(bias->ndim) + "; expected [N]";
    std::string reason = check_input(*bias, "bias", problem.dtype, "of out_dtype");
    if (!reason.empty()) return reason;
  }
  call->dtype = problem.dtype;
  call->a_dtype = dtype_bit(a.dtype);
  call->b_dtype = dtype_bit(b.dtype);
  call->device_index = problem.device_index;
  call->stream = args.stream;
  call->activation = Activation::kNone;
  // The attributes are out_dtype (already the problem's dtype) and use_fast_accum.
  call->fast_accumulation = problem.num_attributes > 1 && problem.attributes[1].integer != 0;
  call->m = a.shape[0];
  call->k = a.shape[1];
  call->n = b.shape[1];
  call->batch = 1;
  call->batch_stride_a = call->batch_stride_b = 0;

  int64_t a_strides[2], b_strides[2];
  strides_of(a, a_strides);
  strides_of(b, b_strides);
  if (!a_operand(call->m, call->k, a_strides[0], a_strides[1], call)) {
    return "a has strides " + list_text(a_strides, 2) + "; the CUDA GEMMs read a row-major a (unit stride along K)";
  }
  if (!b_operand(call->k, call->n, b_strides[0], b_strides[1], call)) {
    return "b has strides " + list_text(b_strides, 2) + "; it needs a unit stride in one dimension";
  }
  call->a = data_of(a);
  call->b = data_of(b);
  call->scaled = true;
  // scale_a [M, 1] and scale_b [1, N] are vectors along the dimension at `along`.
  struct Scale {
    const DLTensor& tensor;
    const char* name;
    int along;
    const float** data;
    bool* row_wise;
  };
  for (const Scale& scale : {Scale{args.inputs[2], "scale_a", 0, &call->scale_a, &call->scale_a_row_wise},
                             Scale{args.inputs[3], "scale_b", 1, &call->scale_b, &call->scale_b_row_wise}}) {
    std::string reason = check_input(scale.tensor, scale.name, KABI_DTYPE_FLOAT32, "float32");
    if (!reason.empty()) return reason;
    const int64_t extent = scale.along == 0 ? call->m : call->n;
    const int64_t expected[2] = {scale.along == 0 ? call->m : 1, scale.along == 0 ? 1 : call->n};
    if (scale.tensor.ndim == 2) {
      if (!std::equal(expected, expected + 2, scale.tensor.shape)) {
        return std::string(scale.name) + " has shape " + list_text(scale.tensor.shape, 2) + "; expected [] or " +
               list_text(expected, 2);
      }
      int64_t strides[2];
      strides_of(scale.tensor, strides);
      if (extent != 1 && strides[scale.along] != 1) {
        return std::string(scale.name) + " has strides " + list_text(strides, 2) +
               "; the CUDA GEMMs read a contiguous vector of scales";
      }
    } else if (scale.tensor.ndim != 0) {
      return std::string(scale.name) + " has rank " + std::to_string(scale.tensor.ndim) + "; expected [] or " +
             list_text(expected, 2);
    }
    *scale.data = static_cast<const float*>(data_of(scale.tensor));
    *scale.row_wise = scale.tensor.ndim == 2;
  }
  if (std::string reason = plan_bias(bias, call); !reason.empty()) return reason;
  if (has_output) {
    const int64_t expected[2] = {call->m, call->n};
    std::string reason = check_output(args, expected, 2, call);
    if (!reason.empty()) return reason;
  } else {
    call->out = nullptr;
  }
  return check_extents(*call);
}

bool matrix_order(int64_t rows, int64_t columns, int64_t row_stride, int64_t column_stride, MatrixOrder* order,
                  int64_t* leading_dimension) {
  if ((columns == 1 || column_stride == 1) && (rows == 1 || row_stride >= columns)) {
    *order = MatrixOrder::kRowMajor;
    *leading_dimension = rows == 1 ? columns : row_stride;
    return true;
  }
  if ((rows == 1 || row_stride == 1) && (columns == 1 || column_stride >= rows)) {
    *order = MatrixOrder::kColumnMajor;
    *leading_dimension = columns == 1 ? rows : column_stride;
    return true;
  }
  return false;
}

const char* op_name(GemmOp op) {
  switch (op) {
    case GemmOp::kMatmul: return "matmul";
    case GemmOp::kLinear: return "linear";
    case GemmOp::kScaledMm: return "scaled_mm";
  }
  return "";
}

std::string plan_call(GemmOp op, const kabi_problem& problem, const kabi_args& args, bool require_output,
                      GemmCall* call) {
  switch (op) {
    case GemmOp::kMatmul: return plan_matmul(problem, args, require_output, call);
    case GemmOp::kLinear: return plan_linear(problem, args, require_output, call);
    case GemmOp::kScaledMm: return plan_scaled_mm(problem, args, require_output, call);
  }
  return "unknown op";
}

GemmCall workspace_call(const kabi_problem& problem, GemmOp op, bool folded) {
  GemmCall call;
  call.dtype = call.a_dtype = call.b_dtype = problem.dtype;
  call.device_index = problem.device_index;
  call.n = dim_of(problem, "N");
  call.k = dim_of(problem, "K");
  if (op == GemmOp::kLinear) {
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
  struct Pointer {
    const void* address;
    const char* name;
  };
  for (const Pointer& pointer : {Pointer{call.a, "a"}, Pointer{call.b, "b"}, Pointer{call.bias, "bias"},
                                 Pointer{call.out, "out"}, Pointer{call.scale_a, "scale_a"},
                                 Pointer{call.scale_b, "scale_b"}}) {
    if (!aligned_to_16_bytes(pointer.address)) {
      return std::string("the data of ") + pointer.name + " is not 16-byte aligned";
    }
  }
  struct Stride {
    int64_t value;
    uint32_t dtype;  // of the tensor it steps through
    const char* name;
  };
  const bool b_row_major = call.b_order == MatrixOrder::kRowMajor;
  // K and N are strides too when a, b or out have a single row or column, and the contiguous extent of each
  // operand (K of a; K or N of b) must fill whole 16-byte vectors, so they must align as well.
  for (const Stride& stride : {Stride{call.lda, call.a_dtype, "a's leading dimension"},
                               Stride{call.ldb, call.b_dtype, "b's leading dimension"},
                               Stride{call.n, call.dtype, "N (out's row stride)"},
                               Stride{call.batch_stride_a, call.a_dtype, "a's batch stride"},
                               Stride{call.batch_stride_b, call.b_dtype, "b's batch stride"},
                               Stride{call.k, call.a_dtype, "K"},
                               Stride{b_row_major ? call.n : call.k, call.b_dtype, b_row_major ? "N" : "K"}}) {
    const int64_t elements = 16 / element_bytes(stride.dtype);
    if (stride.value % elements != 0) {
      return stride.name + std::string(" is ") + std::to_string(stride.value) + ", not a multiple of " +
             std::to_string(elements) + " elements (16 bytes)";
    }
  }
  return {};
}

}  // namespace kabi::cuda
