// The padded copy of padded_copy.hpp. Each warp moves one segment of 32 * kPerLane elements of one target row, lane
// by lane: every load and every store instruction of a warp touches 64 contiguous bytes, whatever the rows'
// alignment, which keeps the pass near the copy bandwidth where rows start at odd 2-byte addresses and no vector
// access could be used. A lane issues all its loads before its stores, so each warp keeps kPerLane loads in flight.
#include <cstdint>

#include "padded_copy.hpp"

namespace kabi::cuda {
namespace {

constexpr int kPerLane = 8;
constexpr int kWarpSize = 32;
constexpr int kSegment = kWarpSize * kPerLane;
constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) padded_copy_kernel(const uint16_t* __restrict__ source,
                                                              int64_t source_rows, int64_t source_columns,
                                                              int64_t source_pitch, uint16_t* __restrict__ target,
                                                              int64_t target_rows, int64_t target_columns,
                                                              int64_t target_pitch, int64_t segments_per_row) {
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) / kWarpSize;
  const int64_t row = warp / segments_per_row;
  if (row >= target_rows) return;
  const int64_t first = (warp % segments_per_row) * kSegment + threadIdx.x % kWarpSize;
  const bool row_in_source = row < source_rows;
  const uint16_t* source_row = source + (row_in_source ? row : 0) * source_pitch;
  uint16_t values[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t column = first + i * kWarpSize;
    values[i] = row_in_source && column < source_columns ? __ldg(source_row + column) : uint16_t{0};
  }
  uint16_t* target_row = target + row * target_pitch;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int64_t column = first + i * kWarpSize;
    if (column < target_columns) target_row[column] = values[i];
  }
}

}  // namespace

cudaError_t launch_padded_copy(const SourceMatrix& source, const TargetMatrix& target, cudaStream_t stream) {
  if (target.rows <= 0 || target.columns <= 0) return cudaSuccess;
  const int64_t segments_per_row = (target.columns + kSegment - 1) / kSegment;
  const int64_t warps = target.rows * segments_per_row;
  constexpr int64_t kWarpsPerBlock = kThreads / kWarpSize;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  padded_copy_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      static_cast<const uint16_t*>(source.data), source.rows, source.columns, source.pitch,
      static_cast<uint16_t*>(target.data), target.rows, target.columns, target.pitch, segments_per_row);
  return cudaGetLastError();
}

}  // namespace kabi::cuda
