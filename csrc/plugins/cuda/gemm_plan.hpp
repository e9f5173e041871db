// How a matmul, linear or scaled_mm call becomes one GemmCall (gemm_call.hpp), and the constraints every CUDA GEMM
// of this plugin shares. Each function returns why the call cannot be planned (a supports predicate's reason), or "" on
// success. With require_output, a call without an output fails; otherwise the output is checked when present.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "gemm_call.hpp"
#include "kabi/kabi.h"

namespace kabi::cuda {

// The ops whose calls plan into a GemmCall.
enum class GemmOp : int32_t { kMatmul, kLinear, kScaledMm };

// The op's registered name ("matmul").
const char* op_name(GemmOp op);

// The call planned by the op's own function below.
std::string plan_call(GemmOp op, const kabi_problem& problem, const kabi_args& args, bool require_output,
                      GemmCall* call);

// matmul: a[..., M, K] @ b[..., K, N], leading dimensions flattened to one batch stride per tensor
// (KABI_BATCH_UNIFORM). a must be row-major; b row- or column-major. A b shared by every batch entry with a whose
// batches stack its rows is folded into one GEMM of batch * M rows.
std::string plan_matmul(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call);

// linear: x[..., K] @ w[N, K]^T + bias, then the activation; x's leading dimensions are the rows.
std::string plan_linear(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call);

// scaled_mm: a[M, K] @ b[K, N] in FP8 (a row-major, b row- or column-major; the kernels say which they read),
// scale_a [] or [M, 1] and scale_b [] or [1, N] in float32, an optional bias [N] of out's dtype, out [M, N].
std::string plan_scaled_mm(const kabi_problem& problem, const kabi_args& args, bool require_output, GemmCall* call);

// The GemmCall whose workspace a problem needs, from its shapes only (a workspace function sees no tensors). For
// matmul, folded picks the batch folded into the rows (plan_matmul may fold it), so the larger need can be asked for.
GemmCall workspace_call(const kabi_problem& problem, GemmOp op, bool folded);

// How a [rows, columns] matrix with these element strides is read in place: row-major (unit stride along the
// columns, leading dimension the row stride) or column-major (unit stride along the rows, leading dimension the column
// stride); false when neither. The stride of an extent-1 dimension is never used.
bool matrix_order(int64_t rows, int64_t columns, int64_t row_stride, int64_t column_stride, MatrixOrder* order,
                  int64_t* leading_dimension);

// Whether an address is a multiple of 16 bytes, as TMA and 16-byte vector loads need (NULL is).
inline bool aligned_to_16_bytes(const void* address) { return reinterpret_cast<uintptr_t>(address) % 16 == 0; }

// Every base address 16-byte aligned (where the call has one), and every leading dimension and batch stride a
// multiple of 16 bytes in its tensor's element size, as TMA and 16-byte vector loads need.
std::string check_16_byte_alignment(const GemmCall& call);

}  // namespace kabi::cuda
