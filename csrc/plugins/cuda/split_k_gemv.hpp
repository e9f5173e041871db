// A split-K product for few rows of a and a row-major b at any alignment: out[M, N] = a[M, K] @ b[K, N] for M up to
// kSplitKGemvMaxRows, bfloat16 or float16 with float32 accumulation. Where b's rows start at odd 2-byte addresses
// (N odd, or a view), cuBLAS and Triton read them element by element, and the product of a few rows, bound by reading
// b, runs at a third of the memory roof. This one reads b in aligned 16-byte words and shifts them into place (as the
// padded copy does). Its float32 products on the FP32 units still hold it below cuBLAS on the H200 (docs/cuda_plugin.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kabi::cuda {

constexpr int64_t kSplitKGemvMaxRows = 16;

struct SplitKGemv {
  bool bfloat16 = true;  // else float16
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;  // [M, K], row stride lda, unit column stride
  int64_t lda = 0;
  const void* b = nullptr;  // [K, N], row stride ldb, unit column stride
  int64_t ldb = 0;
  void* out = nullptr;  // [M, N], dense
};

// The float32 partial sums of every split of K on a device of `multiprocessors`: the workspace the product needs
// (shapes only, as a workspace function sees).
size_t split_k_gemv_workspace_bytes(int64_t m, int64_t n, int64_t k, int32_t multiprocessors);

// Queues the product on `stream`: one kernel writes each split's partial sums into `workspace` (at least
// split_k_gemv_workspace_bytes), a second sums them in split order (the result does not depend on timing) and writes
// out. Returns the launches' error.
cudaError_t launch_split_k_gemv(const SplitKGemv& gemv, void* workspace, int32_t multiprocessors,
                                cudaStream_t stream);

}  // namespace kabi::cuda
