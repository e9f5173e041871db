// The padded copy of padded_copy.hpp, in 16-byte stores. Each thread writes one 16-byte aligned chunk of a target
// row (8 elements), so every store is a full vector whatever the target's alignment; only a row's partial first and
// last chunks are stored element by element. The 8 source elements of a chunk start anywhere: the thread reads the
// two aligned 16-byte words that hold them and shifts them into place, which keeps the pass near the copy bandwidth
// where rows start at odd 2-byte addresses (one of the two sides always does: that is why the copy is made). Where
// those words would reach outside the source row, the elements are read one by one instead, so nothing outside the
// source is ever read.
#include <cstdint>

#include "padded_copy.hpp"

namespace kabi::cuda {
namespace {

constexpr int kChunk = 8;  // 2-byte elements per 16 bytes
constexpr int kThreads = 256;
constexpr int64_t kMaxGridRows = 65535;

// The element misalignment of an address: how many 2-byte elements it lies past a 16-byte boundary.
__device__ int64_t elements_past_boundary(const void* address) {
  return static_cast<int64_t>((reinterpret_cast<uintptr_t>(address) % 16) / 2);
}

// Eight consecutive elements starting `shift` elements into the 16 held by the words low and high.
__device__ uint4 shifted(uint4 low, uint4 high, int64_t shift) {
  const uint32_t words[8] = {low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w};
  // The word that starts the window, picked with constant indices only (a dynamically indexed array would go to
  // local memory); shift is the same for every thread of a row, so the branches do not diverge.
  const int64_t first_word = shift / 2;
  uint32_t picked[5];
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    picked[k] = first_word == 0 ? words[k] : first_word == 1 ? words[k + 1] : first_word == 2 ? words[k + 2]
                                                                                                : words[k + 3];
  }
  uint32_t out[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) out[k] = shift % 2 == 0 ? picked[k] : __funnelshift_r(picked[k], picked[k + 1], 16);
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__global__ void __launch_bounds__(kThreads) padded_copy_kernel(const uint16_t* __restrict__ source,
                                                              int64_t source_rows, int64_t source_columns,
                                                              int64_t source_pitch, uint16_t* __restrict__ target,
                                                              int64_t target_rows, int64_t target_columns,
                                                              int64_t target_pitch) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t row = blockIdx.y; row < target_rows; row += gridDim.y) {
    uint16_t* target_row = target + row * target_pitch;
    // The chunk's first column: chunks are aligned in the target, so the row's first one may start before column 0.
    const int64_t first = chunk * kChunk - elements_past_boundary(target_row);
    if (first >= target_columns) continue;
    const bool row_in_source = row < source_rows;
    const uint16_t* source_row = source + (row_in_source ? row : 0) * source_pitch;
    const bool whole_chunk = first >= 0 && first + kChunk <= target_columns;
    const int64_t shift = elements_past_boundary(source_row + (first >= 0 ? first : 0));
    // The two aligned source words around the chunk's elements, both inside the source row.
    const bool whole_window = whole_chunk && row_in_source && first - shift >= 0 &&
                              first - shift + 2 * kChunk <= source_columns;
    if (whole_window) {
      const uint4* words = reinterpret_cast<const uint4*>(source_row + first - shift);
      const uint4 low = __ldg(words);
      const uint4 high = shift == 0 ? low : __ldg(words + 1);
      *reinterpret_cast<uint4*>(target_row + first) = shift == 0 ? low : shifted(low, high, shift);
      continue;
    }
    uint16_t values[kChunk];
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t column = first + i;
      values[i] = row_in_source && column >= 0 && column < source_columns ? __ldg(source_row + column)
                                                                           : uint16_t{0};
    }
    if (whole_chunk) {
      uint32_t words[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) words[k] = values[2 * k] | (static_cast<uint32_t>(values[2 * k + 1]) << 16);
      *reinterpret_cast<uint4*>(target_row + first) = make_uint4(words[0], words[1], words[2], words[3]);
      continue;
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      const int64_t column = first + i;
      if (column >= 0 && column < target_columns) target_row[column] = values[i];
    }
  }
}

}  // namespace

cudaError_t launch_padded_copy(const SourceMatrix& source, const TargetMatrix& target, cudaStream_t stream) {
  if (target.rows <= 0 || target.columns <= 0) return cudaSuccess;
  // One thread per target chunk, the row's first one possibly partial; rows beyond the grid's height loop.
  const int64_t chunks_per_row = (target.columns + 2 * kChunk - 2) / kChunk;
  const int64_t blocks = (chunks_per_row + kThreads - 1) / kThreads;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(target.rows < kMaxGridRows ? target.rows
                                                                                                  : kMaxGridRows));
  padded_copy_kernel<<<grid, kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(source.data), source.rows, source.columns, source.pitch,
      static_cast<uint16_t*>(target.data), target.rows, target.columns, target.pitch);
  return cudaGetLastError();
}

}  // namespace kabi::cuda
