// The kernels of the split-K GEMV (split_k_gemv.hpp), as templates over their tiling, so that the plugin
// (split_k_gemv.cu) and the probe that chose its tiling (scripts/debug/split_k_gemv_probe.cu) compile the same code.
//
// A block of the partial-sums kernel covers kThreads * 8 columns of out, one split of K and kRows rows of a
// (blockIdx.y, .z, .x: the row groups vary fastest, so groups that read the same slice of b run side by side and
// share it through L2). Its slice of a waits in shared memory as float32. The split's rows of b stream through
// kStages stages of shared memory, kRowsPerStage rows each, by cp.async: a row's part is copied as the aligned
// 16-byte words around its columns (one word per thread and one more), so the copies stay aligned whatever b's
// address and pitch, and kStages - 1 stages are in flight while one is summed. Each thread owns 8 consecutive
// columns: it shifts its two words into place (shifted_words.cuh) and adds their products for every row of a.
// Why stages: a thread that waited for its own reads between steps (the first version) kept too few bytes in flight
// and ran at a quarter of the copy bandwidth (benchmarks/results/debug-split-k-gemv-probe-nvidia-h200.txt).
// Its float32 sums go to the split's slice of the workspace; a second kernel (split_sums.cuh) adds the splits in a
// fixed order, so the result does not depend on timing.
#pragma once

#include <algorithm>
#include <cstdint>

#include "shifted_words.cuh"
#include "split_sums.cuh"

namespace kabi::cuda::gemv {

constexpr int kColumns = kWordElements;  // per thread: one aligned word's worth of a row of b
// The slice of a in shared memory: 8 KiB of float32, so 2048 rows of K for one row of a, 256 for 8.
constexpr int64_t kSliceElements = 2048;

template <int Rows, int RowsPerStage, int Stages, int Threads, int BlocksPerMultiprocessor>
struct Tiling {
  static constexpr int kRows = Rows;  // rows of a per block
  static constexpr int kRowsPerStage = RowsPerStage;
  static constexpr int kStages = Stages;
  static constexpr int kThreads = Threads;
  // K is split until the grid holds this many blocks per multiprocessor (more splits, more float32 sums to add).
  static constexpr int kBlocksPerMultiprocessor = BlocksPerMultiprocessor;
  static constexpr int64_t kColumnsPerBlock = int64_t{Threads} * kColumns;
  static constexpr int64_t kMaxRowsPerSplit = kSliceElements / Rows;
  static constexpr int kWordsPerRow = Threads + 1;  // the last thread's second word
  static_assert(Threads % 32 == 0 && kMaxRowsPerSplit % RowsPerStage == 0 && Stages >= 2, "whole steps");
  static_assert(int64_t{Stages} * RowsPerStage * kWordsPerRow * 16 + kSliceElements * 4 <= 48 * 1024,
                "static shared memory is at most 48 KiB");
};

template <class Tile>
KSplits k_splits(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  const int64_t blocks_without_splits = ceil_div(n, Tile::kColumnsPerBlock) * ceil_div(m, Tile::kRows);
  const int64_t wanted = int64_t{Tile::kBlocksPerMultiprocessor} * std::max<int32_t>(multiprocessors, 1);
  return split_k_rows(k, blocks_without_splits, wanted, Tile::kRowsPerStage, Tile::kMaxRowsPerSplit);
}

// The grid of the partial-sums kernel (row groups, column blocks, splits), and whether CUDA can launch it.
template <class Tile>
dim3 partial_sums_grid(int64_t m, int64_t n, const KSplits& split, bool* launchable) {
  const int64_t groups = ceil_div(m, Tile::kRows);
  const int64_t column_blocks = ceil_div(n, Tile::kColumnsPerBlock);
  *launchable = groups <= 65535 && column_blocks <= 65535 && split.splits <= 65535;
  return dim3(static_cast<unsigned>(groups), static_cast<unsigned>(column_blocks),
              static_cast<unsigned>(split.splits));
}

// A 16-byte copy from global to shared memory that completes asynchronously; nothing is read (and zeros land) where
// `read` is false.
__device__ inline void copy_word_async(uint4* shared, const void* global, bool read) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(shared));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(global), "r"(read ? 16 : 0));
}

__device__ inline void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

template <int kPending>
__device__ inline void wait_for_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

template <bool kBfloat16, class Tile>
__global__ void __launch_bounds__(Tile::kThreads) partial_sums_kernel(const uint16_t* __restrict__ a, int64_t lda,
                                                                      const uint16_t* __restrict__ b, int64_t ldb,
                                                                      float* __restrict__ partials, int64_t m,
                                                                      int64_t n, int64_t k, int64_t rows_per_split) {
  constexpr int kRows = Tile::kRows;
  constexpr int kRowsPerStage = Tile::kRowsPerStage;
  constexpr int kStages = Tile::kStages;
  constexpr int kWordsPerRow = Tile::kWordsPerRow;
  __shared__ uint4 stages[kStages][kRowsPerStage][kWordsPerRow];
  __shared__ float a_slice[kRows][Tile::kMaxRowsPerSplit];
  const int64_t first_row_of_a = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t k0 = static_cast<int64_t>(blockIdx.z) * rows_per_split;
  const int64_t rows = rows_per_split < k - k0 ? rows_per_split : k - k0;
  const int64_t block_first = static_cast<int64_t>(blockIdx.y) * Tile::kColumnsPerBlock;
  const int64_t steps = ceil_div(rows, kRowsPerStage);

  // Row kk of the split, from its aligned word at or before column block_first: word w holds the 8 elements from
  // column block_first - shift + 8 w. Every word that holds an element of the row is read whole, also where part of
  // it lies before the row's first column or past its last: an aligned 16-byte word never crosses a page, so the
  // read cannot fault, and the elements outside the row only reach sums of columns that are not stored. A word with
  // no element of the row is not read (zeros land). Why not read the edge elements one by one, as the padded copy
  // does: the thread at a row's edge then waited for those reads on every row, and the whole block with it (most of
  // the time measured in debug-split-k-gemv-probe-nvidia-h200.txt).
  const auto copy_stage = [&](int64_t step) {
    if (step < steps) {
      for (int i = 0; i < kRowsPerStage; ++i) {
        const int64_t kk = step * kRowsPerStage + i;
        if (kk >= rows) break;
        const uint16_t* b_row = b + (k0 + kk) * ldb;
        const int64_t start = block_first - elements_past_boundary(b_row + block_first);
        for (int w = threadIdx.x; w < kWordsPerRow; w += Tile::kThreads) {
          const int64_t column = start + int64_t{w} * kColumns;
          copy_word_async(&stages[step % kStages][i][w], b_row + column, column + kColumns > 0 && column < n);
        }
      }
    }
    commit_copies();  // an empty group past the last step keeps the count wait_for_copies relies on
  };
  for (int s = 0; s < kStages - 1; ++s) copy_stage(s);

  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first_row_of_a + r;
    for (int64_t kk = threadIdx.x; kk < rows_per_split; kk += Tile::kThreads) {
      a_slice[r][kk] = row < m && kk < rows ? widen<kBfloat16>(a[row * lda + k0 + kk]) : 0.0f;
    }
  }
  const int64_t first = block_first + int64_t{threadIdx.x} * kColumns;
  const bool active = first < n;
  float sums[kRows][kColumns] = {};
  for (int64_t step = 0; step < steps; ++step) {
    wait_for_copies<kStages - 2>();
    // Every thread's copies of this step have landed, and every thread is done with the stage the next copy reuses.
    __syncthreads();
    copy_stage(step + kStages - 1);
    if (!active) continue;
#pragma unroll
    for (int i = 0; i < kRowsPerStage; ++i) {
      const int64_t kk = step * kRowsPerStage + i;
      if (kk >= rows) break;
      const uint16_t* b_row = b + (k0 + kk) * ldb;
      const int32_t shift = static_cast<int32_t>(elements_past_boundary(b_row + block_first));
      const uint4 low = stages[step % kStages][i][threadIdx.x];
      const uint4 chunk = shift == 0 ? low : shifted(low, stages[step % kStages][i][threadIdx.x + 1], shift);
      float values[kColumns];
#pragma unroll
      for (int j = 0; j < kColumns; ++j) values[j] = widen<kBfloat16>(element_of(chunk, j));
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float weight = a_slice[r][kk];
#pragma unroll
        for (int j = 0; j < kColumns; ++j) sums[r][j] = fmaf(weight, values[j], sums[r][j]);
      }
    }
  }
  wait_for_copies<0>();
  if (!active) return;
  float* split_sums = partials + static_cast<int64_t>(blockIdx.z) * m * n;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t row = first_row_of_a + r;
    if (row >= m) break;
#pragma unroll
    for (int j = 0; j < kColumns; ++j) {
      if (first + j < n) split_sums[row * n + first + j] = sums[r][j];
    }
  }
}

// Queues both kernels of one tiling on `stream`.
template <bool kBfloat16, class Tile>
cudaError_t launch_tiled(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, uint16_t* out, int64_t m,
                         int64_t n, int64_t k, float* partials, int32_t multiprocessors, cudaStream_t stream) {
  const KSplits split = k_splits<Tile>(m, n, k, multiprocessors);
  bool launchable = false;
  const dim3 grid = partial_sums_grid<Tile>(m, n, split, &launchable);
  if (!launchable) return cudaErrorInvalidConfiguration;
  partial_sums_kernel<kBfloat16, Tile>
      <<<grid, Tile::kThreads, 0, stream>>>(a, lda, b, ldb, partials, m, n, k, split.rows_per_split);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  return launch_sum_splits(kBfloat16, partials, split.splits, m, n, Epilogue{}, out, stream);
}

}  // namespace kabi::cuda::gemv
