// One GEMM as the CUDA plugin's kernels (CUTLASS and cuBLASLt) compute it, whichever op it came from:
//   out[l] = activation(scale_a * scale_b * (a[l] @ b[l]) + bias)    for l < batch
// with a row-major [M, K], b either row-major [K, N] or column-major (the transposed view of an nn.Linear weight
// [N, K]), bias [N] or none, and out dense row-major [M, N]. matmul, linear and scaled_mm all plan into it
// (gemm_plan.cpp); only scaled_mm has scales, and only its a and b differ in dtype from out.
#pragma once

#include <cstdint>

#include "../activation.hpp"

namespace kabi::cuda {

using plugins::Activation;

// How b is stored: row-major [K, N] (unit stride along N), or column-major, i.e. [N, K] row-major read transposed
// (unit stride along K).
enum class MatrixOrder : int32_t { kRowMajor = 0, kColumnMajor = 1 };

// Strides are in elements. A batch stride of 0 reads the same matrix for every batch entry.
struct GemmCall {
  uint32_t dtype = 0;  // out's KABI_DTYPE_*: bfloat16 or float16 (scaled_mm: also float32)
  uint32_t a_dtype = 0, b_dtype = 0;  // dtype, or scaled_mm's FP8 formats
  int64_t m = 0, n = 0, k = 0, batch = 1;
  const void* a = nullptr;
  int64_t lda = 0, batch_stride_a = 0;
  const void* b = nullptr;
  MatrixOrder b_order = MatrixOrder::kRowMajor;
  int64_t ldb = 0, batch_stride_b = 0;
  const void* bias = nullptr;  // contiguous [N], the same for every batch entry; NULL: none, or not known yet
  // Whether a bias is given, known from the problem while the address may still be NULL (selecting without data,
  // as explain does): what a kernel takes or declines must follow this, never the address.
  bool has_bias = false;
  Activation activation = Activation::kNone;
  void* out = nullptr;  // ld N, batch stride M * N; NULL while selecting before the output exists
  // scaled_mm's float32 scales on the device, each per tensor (one value) or row-wise: scale_a one per row of a
  // (M), scale_b one per column of b (N), contiguous. NULL: no scaling (matmul, linear).
  const float* scale_a = nullptr;
  const float* scale_b = nullptr;
  bool scaled = false;  // scaled_mm, whose scales' addresses may still be NULL
  bool scale_a_row_wise = false, scale_b_row_wise = false;
  // scaled_mm's use_fast_accum: the call permits an FP8 kernel to keep the tensor cores' partial sums in their
  // narrower accumulator over the whole K loop. False requires float32-promoted accumulation; accurate kernels serve
  // either.
  bool fast_accumulation = false;
  int32_t device_index = 0;
  void* stream = nullptr;  // a cudaStream_t
};

}  // namespace kabi::cuda
