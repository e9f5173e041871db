// One GEMM as the CUDA plugin's kernels (CUTLASS and cuBLASLt) compute it, whichever op it came from:
//   out[l] = activation(a[l] @ b[l] + bias)    for l < batch
// with a row-major [M, K], b either row-major [K, N] or column-major (the transposed view of an nn.Linear weight
// [N, K]), bias [N] or none, and out dense row-major [M, N]. matmul and linear both plan into it (gemm_plan.cpp).
#pragma once

#include <cstdint>

namespace kabi::cuda {

// The activations of linear's enum(none, relu, gelu, gelu_tanh, silu), in that order: the attribute's value is the
// index. matmul is kNone.
enum class Activation : int32_t { kNone = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };
constexpr int64_t kActivationCount = 5;

// How b is stored: row-major [K, N] (unit stride along N), or column-major, i.e. [N, K] row-major read transposed
// (unit stride along K).
enum class MatrixOrder : int32_t { kRowMajor = 0, kColumnMajor = 1 };

// Strides are in elements. A batch stride of 0 reads the same matrix for every batch entry.
struct GemmCall {
  uint32_t dtype = 0;  // KABI_DTYPE_BFLOAT16 or KABI_DTYPE_FLOAT16
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  const void* b = nullptr;
  MatrixOrder b_order = MatrixOrder::kRowMajor;
  int64_t ldb = 0, batch_stride_b = 0;
  const void* bias = nullptr;  // contiguous [N], the same for every batch entry; NULL: none
  Activation activation = Activation::kNone;
  void* out = nullptr;  // ld N, batch stride M * N; NULL while selecting before the output exists
  int32_t device_index = 0;
  void* stream = nullptr;  // a cudaStream_t
};

}  // namespace kabi::cuda
