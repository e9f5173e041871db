// The split-K GEMV of split_k_gemv.hpp. A block covers kThreads * 8 columns of out for one split of K and up to
// kRowsPerGroup rows of a (blockIdx.x, .y, .z). Its slice of a waits in shared memory as float32; each thread owns 8
// consecutive columns and walks the split's rows of b, reading the 8 elements of each row through the two aligned
// 16-byte words around them (shifted_words.cuh), kRowsPerStep rows' reads issued before their products are summed.
// Its float32 sums go to the split's slice of the workspace; a second kernel adds the splits in order and rounds.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "shifted_words.cuh"
#include "split_k_gemv.hpp"

namespace kabi::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kColumns = kWordElements;  // per thread: one aligned word's worth of a row of b
constexpr int kRowsPerStep = 4;    // rows of b whose reads are in flight together
constexpr int kRowsPerGroup = 8;   // rows of a per block
constexpr int64_t kMaxRowsPerSplit = 1024;  // the slice of a in shared memory: 32 KiB
constexpr int64_t kBlocksPerMultiprocessor = 2;
constexpr int kSumThreads = 256;

int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

// How K is split: the rows of b each split reads, and how many splits there are. Shapes only, so the workspace
// function asks for what the launch uses.
struct KSplits {
  int64_t rows_per_split = 0;
  int64_t splits = 0;
};

KSplits k_splits(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  const int64_t blocks_without_splits = ceil_div(n, int64_t{kThreads} * kColumns) * ceil_div(m, kRowsPerGroup);
  const int64_t wanted = kBlocksPerMultiprocessor * std::max<int32_t>(multiprocessors, 1);
  const int64_t splits = std::clamp<int64_t>(ceil_div(wanted, blocks_without_splits), 1, ceil_div(k, kRowsPerStep));
  const int64_t rows = std::min(ceil_div(ceil_div(k, splits), kRowsPerStep) * kRowsPerStep, kMaxRowsPerSplit);
  return KSplits{rows, ceil_div(k, rows)};
}

template <bool kBfloat16>
__device__ float widen(uint32_t bits) {
  if constexpr (kBfloat16) {
    return __uint_as_float(bits << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  }
}

template <bool kBfloat16>
__device__ uint16_t narrow(float value) {
  if constexpr (kBfloat16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(value));
  } else {
    return __half_as_ushort(__float2half_rn(value));
  }
}

template <bool kBfloat16>
__global__ void __launch_bounds__(kThreads) partial_sums_kernel(const uint16_t* __restrict__ a, int64_t lda,
                                                               const uint16_t* __restrict__ b, int64_t ldb,
                                                               float* __restrict__ partials, int64_t m, int64_t n,
                                                               int64_t k, int64_t rows_per_split) {
  __shared__ float a_slice[kRowsPerGroup][kMaxRowsPerSplit];
  const int64_t first_row_of_a = static_cast<int64_t>(blockIdx.z) * kRowsPerGroup;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * rows_per_split;
  const int64_t rows = rows_per_split < k - k0 ? rows_per_split : k - k0;
  for (int r = 0; r < kRowsPerGroup; ++r) {
    const int64_t row = first_row_of_a + r;
    for (int64_t kk = threadIdx.x; kk < rows_per_split; kk += kThreads) {
      a_slice[r][kk] = row < m && kk < rows ? widen<kBfloat16>(a[row * lda + k0 + kk]) : 0.0f;
    }
  }
  __syncthreads();
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kColumns;
  if (first >= n) return;
  const bool whole_chunk = first + kColumns <= n;
  float sums[kRowsPerGroup][kColumns] = {};
  for (int64_t step = 0; step < rows; step += kRowsPerStep) {
    uint4 low[kRowsPerStep], high[kRowsPerStep];
    int32_t shift[kRowsPerStep];
    bool vector[kRowsPerStep];
#pragma unroll
    for (int i = 0; i < kRowsPerStep; ++i) {
      const uint16_t* b_row = b + (k0 + step + i) * ldb;
      shift[i] = static_cast<int32_t>(elements_past_boundary(b_row + first));
      // Both aligned words inside the row (and the chunk whole): one or two vector reads.
      vector[i] = step + i < rows && whole_chunk && window_inside(first, shift[i], n);
      low[i] = high[i] = make_uint4(0, 0, 0, 0);
      if (vector[i]) {
        const uint4* words = reinterpret_cast<const uint4*>(b_row + first - shift[i]);
        low[i] = __ldg(words);
        if (shift[i] != 0) high[i] = __ldg(words + 1);
      }
    }
#pragma unroll
    for (int i = 0; i < kRowsPerStep; ++i) {
      const int64_t kk = step + i;
      if (kk >= rows) break;
      const uint4 chunk = vector[i] ? (shift[i] == 0 ? low[i] : shifted(low[i], high[i], shift[i]))
                                    : read_elements(b + (k0 + kk) * ldb, first, n);
      float values[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) values[j] = widen<kBfloat16>(element_of(chunk, j));
#pragma unroll
      for (int r = 0; r < kRowsPerGroup; ++r) {
        const float weight = a_slice[r][kk];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) sums[r][j] = fmaf(weight, values[j], sums[r][j]);
      }
    }
  }
  float* split_sums = partials + static_cast<int64_t>(blockIdx.y) * m * n;
#pragma unroll
  for (int r = 0; r < kRowsPerGroup; ++r) {
    const int64_t row = first_row_of_a + r;
    if (row >= m) break;
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      if (first + j < n) split_sums[row * n + first + j] = sums[r][j];
    }
  }
}

template <bool kBfloat16>
__global__ void sum_splits_kernel(const float* __restrict__ partials, int64_t splits, int64_t elements,
                                  uint16_t* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kSumThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kSumThreads + threadIdx.x; i < elements; i += stride) {
    float sum = 0.0f;
    for (int64_t split = 0; split < splits; ++split) sum += partials[split * elements + i];
    out[i] = narrow<kBfloat16>(sum);
  }
}


template <bool kBfloat16>
cudaError_t launch_typed(const SplitKGemv& gemv, float* partials, const KSplits& split, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(gemv.n, int64_t{kThreads} * kColumns)),
                  static_cast<unsigned>(split.splits), static_cast<unsigned>(ceil_div(gemv.m, kRowsPerGroup)));
  partial_sums_kernel<kBfloat16><<<grid, kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(gemv.a), gemv.lda, static_cast<const uint16_t*>(gemv.b), gemv.ldb, partials,
      gemv.m, gemv.n, gemv.k, split.rows_per_split);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  const int64_t elements = gemv.m * gemv.n;
  const int64_t blocks = std::min<int64_t>(ceil_div(elements, kSumThreads), int64_t{1} << 16);
  sum_splits_kernel<kBfloat16><<<static_cast<unsigned>(blocks), kSumThreads, 0, stream>>>(
      partials, split.splits, elements, static_cast<uint16_t*>(gemv.out));
  return cudaGetLastError();
}

}  // namespace

size_t split_k_gemv_workspace_bytes(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  return static_cast<size_t>(k_splits(m, n, k, multiprocessors).splits * m * n) * sizeof(float);
}

cudaError_t launch_split_k_gemv(const SplitKGemv& gemv, void* workspace, int32_t multiprocessors,
                                cudaStream_t stream) {
  const KSplits split = k_splits(gemv.m, gemv.n, gemv.k, multiprocessors);
  if (split.splits > 65535 || ceil_div(gemv.n, int64_t{kThreads} * kColumns) > INT32_MAX) {
    return cudaErrorInvalidConfiguration;
  }
  auto* partials = static_cast<float*>(workspace);
  return gemv.bfloat16 ? launch_typed<true>(gemv, partials, split, stream)
                       : launch_typed<false>(gemv, partials, split, stream);
}

}  // namespace kabi::cuda
