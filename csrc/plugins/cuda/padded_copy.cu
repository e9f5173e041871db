// The padded copy of padded_copy.hpp, in 16-byte stores. The target rows are cut into 16-byte aligned chunks of 8
// elements, so every store is a full vector whatever the target's alignment; only a row's partial first and last
// chunks are stored element by element. The 8 source elements of a chunk start anywhere: the thread reads the two
// aligned 16-byte words that hold them and shifts them into place, which keeps the pass near the copy bandwidth where
// rows start at odd 2-byte addresses (one of the two sides always does: that is why the copy is made). Where those
// words would reach outside the source row, the elements are read one by one instead, so nothing outside the source
// is ever read.
#include <cstdint>

#include "padded_copy.hpp"
#include "shifted_words.cuh"

namespace kabi::cuda {
namespace {

constexpr int kChunk = kWordElements;
constexpr int kThreads = 256;

// One 16-byte aligned chunk of a target row: where it lies, and where its 8 elements come from.
struct Chunk {
  uint16_t* target_row = nullptr;  // nullptr: past the row's end, nothing to store
  int64_t first = 0;               // its first column; negative for a row's partial first chunk
  const uint16_t* source_row = nullptr;  // nullptr: a row beyond the source, all zeros
  // Whether the two aligned source words around its elements lie inside the source row, and the chunk wholly inside
  // the target row: then it is read as those words (its elements start `shift` elements in) and stored as one vector.
  bool vector = false;
  int32_t shift = 0;
  uint4 low = make_uint4(0, 0, 0, 0), high = make_uint4(0, 0, 0, 0);
};

__device__ Chunk plan_chunk(const uint16_t* source, int64_t source_rows, int64_t source_columns, int64_t source_pitch,
                            uint16_t* target, int64_t target_columns, int64_t target_pitch, int64_t row,
                            int64_t index) {
  Chunk chunk;
  uint16_t* target_row = target + row * target_pitch;
  // Chunks are aligned in the target, so the row's first one may start before column 0.
  const int64_t first = index * kChunk - elements_past_boundary(target_row);
  if (first >= target_columns) return chunk;
  chunk.target_row = target_row;
  chunk.first = first;
  if (row >= source_rows) return chunk;
  chunk.source_row = source + row * source_pitch;
  chunk.shift = static_cast<int32_t>(elements_past_boundary(chunk.source_row + (first >= 0 ? first : 0)));
  chunk.vector = first >= 0 && first + kChunk <= target_columns && window_inside(first, chunk.shift, source_columns);
  return chunk;
}

// A chunk that is not one vector: element by element, zeros where the source has none.
__device__ void copy_elements(const Chunk& chunk, int64_t source_columns, int64_t target_columns) {
  const uint4 values = read_elements(chunk.source_row, chunk.first, source_columns);
#pragma unroll
  for (int i = 0; i < kChunk; ++i) {
    const int64_t column = chunk.first + i;
    if (column >= 0 && column < target_columns) chunk.target_row[column] = element_of(values, i);
  }
}

// Each thread handles kChunksPerThread chunks a block's width apart (so a warp's reads of one step are contiguous),
// and issues the vector reads of all of them before it shifts and writes any: that many reads in flight per thread.
// The chunks of all rows are numbered in one range, so no thread idles because a row is narrower than a block.
// No __launch_bounds__: with it ptxas held the four-chunk kernel to 64 registers and spilled its state.
template <int kChunksPerThread>
__global__ void padded_copy_kernel(const uint16_t* __restrict__ source, int64_t source_rows, int64_t source_columns,
                                   int64_t source_pitch, uint16_t* __restrict__ target, int64_t target_columns,
                                   int64_t target_pitch, int64_t chunks_per_row, int64_t chunks) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kThreads * kChunksPerThread + threadIdx.x;
  // 32-bit division where the numbers fit (every realistic copy): a 64-bit one costs several times more.
  const bool narrow = chunks <= UINT32_MAX;
  Chunk planned[kChunksPerThread];
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const int64_t item = base + static_cast<int64_t>(i) * kThreads;
    if (item >= chunks) continue;
    const int64_t row = narrow ? static_cast<uint32_t>(item) / static_cast<uint32_t>(chunks_per_row)
                               : item / chunks_per_row;
    planned[i] = plan_chunk(source, source_rows, source_columns, source_pitch, target, target_columns, target_pitch,
                            row, item - row * chunks_per_row);
  }
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    if (!planned[i].vector) continue;
    const uint4* words = reinterpret_cast<const uint4*>(planned[i].source_row + planned[i].first - planned[i].shift);
    planned[i].low = __ldg(words);
    if (planned[i].shift != 0) planned[i].high = __ldg(words + 1);
  }
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const Chunk& chunk = planned[i];
    if (chunk.vector) {
      *reinterpret_cast<uint4*>(chunk.target_row + chunk.first) =
          chunk.shift == 0 ? chunk.low : shifted(chunk.low, chunk.high, chunk.shift);
    } else if (chunk.target_row != nullptr) {
      copy_elements(chunk, source_columns, target_columns);
    }
  }
}

template <int kChunksPerThread>
cudaError_t launch_with(const SourceMatrix& source, const TargetMatrix& target, int64_t chunks_per_row,
                        int64_t chunks, cudaStream_t stream) {
  constexpr int64_t kChunksPerBlock = int64_t{kThreads} * kChunksPerThread;
  const int64_t blocks = (chunks + kChunksPerBlock - 1) / kChunksPerBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  padded_copy_kernel<kChunksPerThread><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(source.data), source.rows, source.columns, source.pitch,
      static_cast<uint16_t*>(target.data), target.columns, target.pitch, chunks_per_row, chunks);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_padded_copy(const SourceMatrix& source, const TargetMatrix& target, int32_t multiprocessors,
                               cudaStream_t stream) {
  if (target.rows <= 0 || target.columns <= 0) return cudaSuccess;
  // Enough chunks per row for the row's first one to be partial.
  const int64_t chunks_per_row = (target.columns + 2 * kChunk - 2) / kChunk;
  const int64_t chunks = target.rows * chunks_per_row;
  // Four chunks per thread keep more reads in flight, but make a quarter of the blocks, and only three of them fit
  // on a multiprocessor at once: below about four waves of them, the last, partial wave costs more than the reads
  // gain. On the H200 the three copies of 4093x4099x4091 took 72 us with four chunks per thread and 81 us with one
  // (in this kernel's earlier form, a block per row segment); those of 2047x2049x2051 took 34.5 and 28.0 us.
  constexpr int64_t kFourChunkBlocksPerWave = 3;
  const int64_t four_chunk_blocks = (chunks + int64_t{kThreads} * 4 - 1) / (int64_t{kThreads} * 4);
  if (multiprocessors <= 0 || four_chunk_blocks >= 4 * kFourChunkBlocksPerWave * multiprocessors) {
    return launch_with<4>(source, target, chunks_per_row, chunks, stream);
  }
  return launch_with<1>(source, target, chunks_per_row, chunks, stream);
}

}  // namespace kabi::cuda
