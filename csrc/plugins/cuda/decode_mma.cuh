// The decode MMA kernel (decode_mma.hpp) as a template over its tiling: out[M, N] = a[M, K] @ b[K, N] for M <= 16,
// computed as its transpose out^T[N, M] = W[N, K] @ a^T with W[n, k] = b[k, n], on the tensor cores
// (mma.sync.m16n8k16, sm_80 and later): the 16 rows of the MMA's A operand are 16 columns n of out, the 8 columns of
// its B operand are 8 rows of a (one MMA for M <= 8, two for M <= 16), so 16 rows cost what one costs. The product
// is bound by reading b once; the tensor cores keep the arithmetic off the critical path, where the split-K GEMV's
// float32 FMAs bound it at M >= 7.
//
// The order in which a sum runs over k does not change what it means, so each thread reads 16 contiguous bytes and
// the MMA's k positions are permuted to match: in each chunk of 32 k, the 4 threads of an MMA row group (lane % 4 =
// t) own k 8t..8t+7; the first MMA of the chunk takes their k 8t..8t+3, the second 8t+4..8t+7 (fragment register
// pairs (2t, 2t+1) -> 8t+{0,1}+4h and (2t+8, 2t+9) -> 8t+{2,3}+4h for MMA h). a is read with the same permutation: one
// 16-byte load of a row's 8 k per thread and chunk serves both MMAs, and b is read the same way in both layouts:
// - column-major b (an nn.Linear weight [N, K], read in place): W's rows are contiguous; a thread's two 16-byte loads
//   (rows g and g + 8 of a 16-row tile, g = lane / 4) are its A fragments' words directly;
// - row-major b [K, N]: a 16-byte load holds 8 consecutive n at one k, while a fragment register pairs two k of one
//   n. A thread loads its 8 k (8 rows of b) at the same 8 n (n0 + 8g .. n0 + 8g + 7) and pairs them with byte
//   permutes (prmt); the rows of its 4 tiles are permuted instead of its k: tile j's fragment rows g and g + 8 are n
//   n0 + 8g + 2j and n0 + 8g + 2j + 1. A warp's load then reads 4 rows of b, 128 contiguous bytes each.
// Either way a warp of the plugin's tiling covers 64 columns n (four 16-row tiles) and loads 8 x 16 bytes per thread
// per chunk: 4 KiB of b (Tiling lists the variants).
//
// K is split over the warps of a block (warp w: steps w, w + kWarps, ...: together they stream adjacent bytes) and,
// where a single block per 64 columns would leave multiprocessors idle, over blocks. The warps' sums meet in shared
// memory and are added in warp order; with several splits each block writes its float32 sums to its split's slice of
// the workspace and split_sums.cu adds them in split order. Nothing depends on timing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "gemm_call.hpp"
#include "split_sums.cuh"

namespace kabi::cuda::decode {

// k per chunk: 4 threads x 8 elements (one 16-byte load of a row of a each).
constexpr int kChunkK = 32;

// K per split, at least (rounded up to the split granule): below it each warp takes too few steps to cover the
// start of its loads, and each split adds M x N float32 sums to write and read back.
constexpr int64_t kMinSplitK = 256;
// A block's start in k it could have read meanwhile: about 1 us of first-load latency at a block's share of HBM
// (4.2 TB/s over some 400 blocks, 128 bytes of b per k).
constexpr int64_t kBlockStartK = 128;

// Tiles: 16-row MMA tiles per warp. The plugin's tiling takes 4 (64 columns); scripts/debug/decode_mma_probe.cu times
// 2 against it (32 columns): a chunk then holds half the words of b, so two chunks cost the registers one does with 4,
// a column-major row is read 128 contiguous bytes per step instead of 64, and there are twice the column blocks to
// fill the grid with before K must be split. (Three steps in flight, and the splits added by the kernel's last block
// instead of a second launch, were timed there too, on 2026-12-04, and gained nothing: debug-decode-mma-probe.)
template <int Chunks, int Warps, int ResidentBlocks, int Tiles = 4>
struct Tiling {
  // Chunks of 32 k per warp step (the k-unroll: 256 x Tiles bytes of b per chunk).
  static constexpr int kChunks = Chunks;
  static constexpr int kWarps = Warps;
  static constexpr int kThreads = Warps * 32;
  static constexpr int kTiles = Tiles;
  // Columns n of out per warp, and per block: its warps split K.
  static constexpr int kColumns = 16 * Tiles;
  static constexpr int64_t kStepK = int64_t{Chunks} * kChunkK;
  // A split's K is a multiple of this, so that its warps take equal steps.
  static constexpr int64_t kSplitGranule = int64_t{Warps} * kStepK;
  // The blocks a multiprocessor must hold at once (__launch_bounds__): this bounds the registers per thread, and
  // ptxas keeps two steps' words apart only when it knows it may use that many. Without the bound it put the next
  // step's loads into the registers this step's products free, so they issued after the products and a warp had a
  // single step in flight. It may hold more where ptxas uses fewer registers; the splits of K ask CUDA how many.
  static constexpr int kResidentBlocks = ResidentBlocks;
  // The most blocks a multiprocessor can hold by threads (2048 on sm_80 and sm_90, fewer elsewhere): what bounds
  // the splits where only shapes are known (workspace_floats).
  static constexpr int kMostResidentBlocks = 2048 / kThreads;
  static_assert(Tiles == 2 || Tiles == 4, "a row-major load holds 2 columns per tile: 8 or 16 bytes");
  static_assert(int64_t{ResidentBlocks} * Warps * 16 * (kColumns + 4) * 4 <= 227 * 1024,
                "the resident blocks' shared memory fits a multiprocessor");
};

// How a thread reads its words of b in a chunk: column-major, rows g and g + 8 of each tile, 8 k each (the fragment's
// words directly); row-major, 8 rows of k at 2 columns per tile (16 bytes with 4 tiles, 8 with 2). Either way
// 8 x kTiles words.
template <MatrixOrder kOrder, int kTiles>
struct WeightLoads {
  static constexpr int kPerChunk = kOrder == MatrixOrder::kColumnMajor ? 2 * kTiles : 8;
  using Load = std::conditional_t<kOrder == MatrixOrder::kRowMajor && kTiles == 2, uint2, uint4>;
};

__device__ inline uint32_t word(const uint4& value, int index) {
  return index == 0 ? value.x : index == 1 ? value.y : index == 2 ? value.z : value.w;
}

__device__ inline uint32_t word(const uint2& value, int index) { return index == 0 ? value.x : value.y; }

// Bytes of b, read once: no L1 allocation (nothing reuses them), so a's rows, which every block reads, keep L1.
template <class Load>
__device__ inline Load load_streaming(const uint16_t* address) {
  Load value;
  if constexpr (std::is_same_v<Load, uint4>) {
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(value.x), "=r"(value.y), "=r"(value.z), "=r"(value.w)
        : "l"(address));
  } else {
    asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(value.x), "=r"(value.y) : "l"(address));
  }
  return value;
}

// d += A (16 x 16) B (16 x 8) in float32, A and B bfloat16 or float16 fragments.
template <bool kBfloat16>
__device__ inline void mma_16x8x16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBfloat16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// The column (within the warp's 16 x kTiles) that tile `tile`'s fragment row `row` (0..15) stands for.
template <MatrixOrder kOrder, int kTiles>
__device__ constexpr int column_of(int tile, int row) {
  return kOrder == MatrixOrder::kColumnMajor ? 16 * tile + row : 2 * kTiles * (row % 8) + 2 * tile + row / 8;
}

// The words of b and a one warp step of a thread multiplies.
template <MatrixOrder kOrder, int kTiles, int kChunks, int kRowGroups>
struct StepWords {
  using Loads = WeightLoads<kOrder, kTiles>;
  typename Loads::Load weights[kChunks][Loads::kPerChunk];
  uint4 rows_of_a[kChunks][kRowGroups];
};

// Loads the thread's words of the step from k `step` (zeros past k_end, and for columns past N and rows past M: those
// reach only sums that are not stored). K is a multiple of 8, so a thread's 8 k lie wholly before k_end or past it;
// N is too, so its 4 or 8 columns of a row-major load lie wholly before N or past it.
template <MatrixOrder kOrder, int kTiles, int kChunks, int kRowGroups>
__device__ inline void load_step(StepWords<kOrder, kTiles, kChunks, kRowGroups>& words,
                                 const uint16_t* __restrict__ a, int64_t lda, const uint16_t* __restrict__ b,
                                 int64_t ldb, int64_t m, int64_t n, int64_t step, int64_t k_end, int64_t first_column,
                                 int group, int quad) {
  using Loads = WeightLoads<kOrder, kTiles>;
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
    const int64_t first_k = step + chunk * kChunkK + 8 * quad;
    const bool inside = first_k < k_end;
#pragma unroll
    for (int load = 0; load < Loads::kPerChunk; ++load) {
      // Column-major: loads 2j and 2j + 1 are rows g and g + 8 of tile j. Row-major: load r is row k + r of b at the
      // thread's 2 x kTiles columns.
      const int64_t column = kOrder == MatrixOrder::kColumnMajor
                                 ? first_column + 16 * (load / 2) + 8 * (load % 2) + group
                                 : first_column + 2 * kTiles * group;
      const uint16_t* address = kOrder == MatrixOrder::kColumnMajor ? b + column * ldb + first_k
                                                                     : b + (first_k + load) * ldb + column;
      words.weights[chunk][load] =
          inside && column < n ? load_streaming<typename Loads::Load>(address) : typename Loads::Load{};
    }
#pragma unroll
    for (int row_group = 0; row_group < kRowGroups; ++row_group) {
      const int64_t row = 8 * row_group + group;
      words.rows_of_a[chunk][row_group] = inside && row < m
                                              ? __ldg(reinterpret_cast<const uint4*>(a + row * lda + first_k))
                                              : make_uint4(0, 0, 0, 0);
    }
  }
}

// Adds the step's products to the thread's accumulators (sums[tile][row group]).
template <bool kBfloat16, MatrixOrder kOrder, int kTiles, int kChunks, int kRowGroups>
__device__ inline void multiply_step(float (&sums)[kTiles][kRowGroups][4],
                                     const StepWords<kOrder, kTiles, kChunks, kRowGroups>& words) {
#pragma unroll
  for (int chunk = 0; chunk < kChunks; ++chunk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {  // MMA h of the chunk: k 8t + 4h .. 8t + 4h + 3
#pragma unroll
      for (int tile = 0; tile < kTiles; ++tile) {
        uint32_t fragment[4];
        if constexpr (kOrder == MatrixOrder::kColumnMajor) {
          const uint4& row_g = words.weights[chunk][2 * tile];
          const uint4& row_g8 = words.weights[chunk][2 * tile + 1];
          fragment[0] = word(row_g, 2 * half);
          fragment[1] = word(row_g8, 2 * half);
          fragment[2] = word(row_g, 2 * half + 1);
          fragment[3] = word(row_g8, 2 * half + 1);
        } else {
          // Rows k + 4h .. k + 4h + 3 of b; word `tile` of each holds columns 2j (low half) and 2j + 1 (high).
          const auto* rows = &words.weights[chunk][4 * half];
          fragment[0] = __byte_perm(word(rows[0], tile), word(rows[1], tile), 0x5410);
          fragment[1] = __byte_perm(word(rows[0], tile), word(rows[1], tile), 0x7632);
          fragment[2] = __byte_perm(word(rows[2], tile), word(rows[3], tile), 0x5410);
          fragment[3] = __byte_perm(word(rows[2], tile), word(rows[3], tile), 0x7632);
        }
#pragma unroll
        for (int row_group = 0; row_group < kRowGroups; ++row_group) {
          const uint4& row_of_a = words.rows_of_a[chunk][row_group];
          mma_16x8x16<kBfloat16>(sums[tile][row_group], fragment, word(row_of_a, 2 * half),
                                 word(row_of_a, 2 * half + 1));
        }
      }
    }
  }
}

// Grid: (blocks of Tile::kColumns columns, splits of K). kRowGroups: groups of 8 rows of a (1 for M <= 8, 2 for
// M <= 16). With `partials` NULL (one split), the block writes out through the epilogue; otherwise its split's float32
// sums.
template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class Tile>
__global__ void __launch_bounds__(Tile::kThreads, Tile::kResidentBlocks)
    decode_mma_kernel(const uint16_t* __restrict__ a, int64_t lda, const uint16_t* __restrict__ b, int64_t ldb,
                      int64_t m, int64_t n, int64_t k, int64_t k_per_split, float* __restrict__ partials,
                      uint16_t* __restrict__ out, Epilogue epilogue) {
  constexpr int kChunks = Tile::kChunks;
  constexpr int kTiles = Tile::kTiles;
  constexpr int kRowsOfA = 8 * kRowGroups;
  using Step = StepWords<kOrder, kTiles, kChunks, kRowGroups>;
  // Padded rows: a warp's fragment stores then fall in distinct banks (column-major order).
  __shared__ float warp_sums[Tile::kWarps][kRowsOfA][Tile::kColumns + 4];
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int group = static_cast<int>(threadIdx.x) % 32 / 4;  // g: the fragment row (of A) and column (of B)
  const int quad = static_cast<int>(threadIdx.x) % 4;        // t: which 8 k of each chunk
  const int64_t first_column = static_cast<int64_t>(blockIdx.x) * Tile::kColumns;
  const int64_t k_begin = static_cast<int64_t>(blockIdx.y) * k_per_split;
  const int64_t k_end = k_begin + k_per_split < k ? k_begin + k_per_split : k;

  // The next step's loads are issued before this step's products wait for its words: two steps of b in flight.
  const int64_t stride = Tile::kWarps * Tile::kStepK;
  Step next;
  load_step(next, a, lda, b, ldb, m, n, k_begin + warp * Tile::kStepK, k_end, first_column, group, quad);
  float sums[kTiles][kRowGroups][4] = {};
  for (int64_t step = k_begin + warp * Tile::kStepK; step < k_end; step += stride) {
    const Step current = next;
    load_step(next, a, lda, b, ldb, m, n, step + stride, k_end, first_column, group, quad);
    multiply_step<kBfloat16>(sums, current);
  }

  // Accumulator c0, c1: fragment row g, columns (rows of a) 2t, 2t + 1; c2, c3: row g + 8.
#pragma unroll
  for (int tile = 0; tile < kTiles; ++tile) {
#pragma unroll
    for (int row_group = 0; row_group < kRowGroups; ++row_group) {
      const int row = 8 * row_group + 2 * quad;
      warp_sums[warp][row][column_of<kOrder, kTiles>(tile, group)] = sums[tile][row_group][0];
      warp_sums[warp][row + 1][column_of<kOrder, kTiles>(tile, group)] = sums[tile][row_group][1];
      warp_sums[warp][row][column_of<kOrder, kTiles>(tile, group + 8)] = sums[tile][row_group][2];
      warp_sums[warp][row + 1][column_of<kOrder, kTiles>(tile, group + 8)] = sums[tile][row_group][3];
    }
  }
  __syncthreads();
  const int64_t stored_rows = m < kRowsOfA ? m : kRowsOfA;
  for (int element = static_cast<int>(threadIdx.x); element < stored_rows * Tile::kColumns;
       element += Tile::kThreads) {
    const int row = element / Tile::kColumns;
    const int local_column = element % Tile::kColumns;
    const int64_t column = first_column + local_column;
    if (column >= n) continue;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < Tile::kWarps; ++w) total += warp_sums[w][row][local_column];
    if (partials != nullptr) {
      partials[(static_cast<int64_t>(blockIdx.y) * m + row) * n + column] = total;
    } else {
      out[row * n + column] = finish<kBfloat16>(total, column, epilogue);
    }
  }
}

// The splits of K for a product of m x n x k where `capacity` blocks run at once (resident blocks per multiprocessor x
// multiprocessors), planned for full waves of them (wave_k_splits).
template <class Tile>
KSplits k_splits(int64_t m, int64_t n, int64_t k, int64_t capacity) {
  return wave_k_splits(k, ceil_div(n, Tile::kColumns), capacity > 0 ? capacity : 1, Tile::kSplitGranule, kMinSplitK,
                       kBlockStartK, Tile::kColumns * sizeof(uint16_t), 2 * m * n * int64_t{sizeof(float)});
}

// The float32 sums the launch may write on `multiprocessors` (0 where K is never split): shapes only, as a workspace
// function sees, so the most over every number of resident blocks a multiprocessor can hold; the launch asks CUDA
// which it is (resident_blocks).
template <class Tile>
int64_t workspace_floats(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  int64_t most_splits = 1;
  for (int resident = 1; resident <= Tile::kMostResidentBlocks; ++resident) {
    const int64_t capacity = int64_t{resident} * (multiprocessors > 0 ? multiprocessors : 1);
    most_splits = std::max(most_splits, k_splits<Tile>(m, n, k, capacity).splits);
  }
  return most_splits > 1 ? most_splits * m * n : 0;
}

// The blocks of the kernel (kThreads threads, static shared memory only) a multiprocessor of the current device holds
// at once, asked of CUDA once per kernel and device: each instantiation has its own registers. 0 where CUDA cannot say
// (`error` tells why).
template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class Tile>
int resident_blocks(cudaError_t* error) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};
  int device = 0;
  *error = cudaGetDevice(&device);
  if (*error != cudaSuccess) return 0;
  if (device < kDevices && known[device].load(std::memory_order_relaxed) > 0) return known[device];
  int blocks = 0;
  const auto kernel = decode_mma_kernel<kBfloat16, kOrder, kRowGroups, Tile>;
  *error = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Tile::kThreads, 0);
  if (*error != cudaSuccess) return 0;
  if (blocks < 1) {
    *error = cudaErrorInvalidConfiguration;
    return 0;
  }
  if (device < kDevices) known[device].store(blocks, std::memory_order_relaxed);
  return blocks;
}

// The splits a launch on `multiprocessors` uses (at least one; 0 splits where CUDA cannot say how many blocks a
// multiprocessor holds, `error` telling why).
template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class Tile>
KSplits launch_splits(int64_t m, int64_t n, int64_t k, int32_t multiprocessors, cudaError_t* error) {
  const int resident = resident_blocks<kBfloat16, kOrder, kRowGroups, Tile>(error);
  if (*error != cudaSuccess) return KSplits{};
  return k_splits<Tile>(m, n, k, int64_t{std::min(resident, Tile::kMostResidentBlocks)} *
                                     (multiprocessors > 0 ? multiprocessors : 1));
}

// Queues the product (and, with several splits, their sum) on `stream`. partials: the workspace, at least
// workspace_floats floats.
template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class Tile>
cudaError_t launch_tiled(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, int64_t m, int64_t n,
                         int64_t k, const Epilogue& epilogue, uint16_t* out, float* partials,
                         int32_t multiprocessors, cudaStream_t stream) {
  cudaError_t query_error = cudaSuccess;
  const KSplits split = launch_splits<kBfloat16, kOrder, kRowGroups, Tile>(m, n, k, multiprocessors, &query_error);
  if (query_error != cudaSuccess) return query_error;
  const int64_t column_blocks = ceil_div(n, Tile::kColumns);
  if (column_blocks > INT32_MAX || split.splits > 65535) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(split.splits));
  float* split_sums = split.splits > 1 ? partials : nullptr;
  decode_mma_kernel<kBfloat16, kOrder, kRowGroups, Tile><<<grid, Tile::kThreads, 0, stream>>>(
      a, lda, b, ldb, m, n, k, split.rows_per_split, split_sums, out, epilogue);
  const cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess || split_sums == nullptr) return error;
  return launch_sum_splits(kBfloat16, split_sums, split.splits, m, n, epilogue, out, stream);
}

}  // namespace kabi::cuda::decode
