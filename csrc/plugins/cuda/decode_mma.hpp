// A product for decode: out[M, N] = a[M, K] @ b[K, N] (+ linear's bias and activation) for M up to
// kDecodeMmaMaxRows, bfloat16 or float16 with float32 accumulation, with b (the weight) row-major [K, N] or
// column-major (an nn.Linear weight [N, K] read in place). It streams b once in 16-byte loads and multiplies on the
// tensor cores (mma.sync), so 16 rows cost what one does (decode_mma.cuh). Every address 16-byte aligned and every
// leading dimension, K and N multiples of 8 elements: the caller checks (check_16_byte_alignment).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "gemm_call.hpp"

namespace kabi::cuda {

constexpr int64_t kDecodeMmaMaxRows = 16;

struct DecodeMma {
  bool bfloat16 = true;  // else float16
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // [M, K], row stride lda, unit column stride
  int64_t lda = 0;
  const void* b = nullptr;  // row-major [K, N] or column-major (stride ldb between columns n), per b_order
  MatrixOrder b_order = MatrixOrder::kColumnMajor;
  int64_t ldb = 0;
  const void* bias = nullptr;  // [N] of out's dtype, or NULL
  Activation activation = Activation::kNone;
  void* out = nullptr;  // [M, N], dense
};

// The float32 partial sums of the splits of K on a device of `multiprocessors` (0 where K is not split): the
// workspace the product needs (shapes only, as a workspace function sees).
size_t decode_mma_workspace_bytes(int64_t m, int64_t n, int64_t k, int32_t multiprocessors);

// Queues the product on `stream`: one kernel, or, where K is split, one that writes each split's partial sums into
// `workspace` (at least decode_mma_workspace_bytes) and a second that adds them in split order (the result does not
// depend on timing). Returns the launches' error.
cudaError_t launch_decode_mma(const DecodeMma& product, void* workspace, int32_t multiprocessors,
                              cudaStream_t stream);

}  // namespace kabi::cuda
