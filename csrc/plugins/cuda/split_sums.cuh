// What the plugin's split-K kernels (the split-K GEMV, the decode MMA kernel) share: how K is split, the 16-bit
// conversions, linear's epilogue, and the second kernel that adds the splits' float32 partial sums in a fixed order
// (split_sums.cu), so that a result never depends on which split finished first.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>

#include "gemm_call.hpp"

namespace kabi::cuda {

__host__ __device__ inline int64_t ceil_div(int64_t value, int64_t divisor) { return (value + divisor - 1) / divisor; }

// How K is split: the rows of K each split reads, and how many splits there are. Shapes only, so a workspace
// function asks for what the launch uses.
struct KSplits {
  int64_t rows_per_split = 0;
  int64_t splits = 0;
};

// Splits K until a grid of blocks_without_splits blocks per split holds wanted_blocks, each split a multiple of
// `granule` rows and at most max_rows_per_split (more splits, more float32 sums to add).
inline KSplits split_k_rows(int64_t k, int64_t blocks_without_splits, int64_t wanted_blocks, int64_t granule,
                            int64_t max_rows_per_split) {
  const int64_t splits = std::clamp<int64_t>(ceil_div(wanted_blocks, blocks_without_splits), 1, ceil_div(k, granule));
  const int64_t rows = std::min(ceil_div(ceil_div(k, splits), granule) * granule, max_rows_per_split);
  return KSplits{rows, ceil_div(k, rows)};
}

// Splits K so that the grid's waves are as full as they can be. `capacity` blocks run at once (resident blocks per
// multiprocessor x multiprocessors); a grid of blocks_without_splits x s blocks then takes ceil(blocks / capacity)
// waves, each as long as a split's rows plus start_rows (a block's start, its first loads' latency, in rows it could
// have read meanwhile), so its modelled cost is waves x capacity x (rows + start_rows) x bytes_per_block_row (the
// bytes full waves would have read) plus, where K is split, s x sum_bytes_per_split (the float32 sums written and
// read back). Each split is a multiple of `granule` rows and at least min_rows_per_split (rounded up to the granule).
// A split count replaces a smaller one only where it costs kSplitPreference less, so near-equal choices keep fewer
// splits.
inline KSplits wave_k_splits(int64_t k, int64_t blocks_without_splits, int64_t capacity, int64_t granule,
                             int64_t min_rows_per_split, int64_t start_rows, int64_t bytes_per_block_row,
                             int64_t sum_bytes_per_split) {
  constexpr double kSplitPreference = 0.03;
  const int64_t min_rows = std::max<int64_t>(ceil_div(min_rows_per_split, granule), 1) * granule;
  const int64_t most_splits = std::clamp<int64_t>(k / min_rows, 1, 65535);
  KSplits best{ceil_div(k, granule) * granule, 1};
  double best_cost = 0;
  for (int64_t wanted = 1; wanted <= most_splits; ++wanted) {
    const int64_t rows = ceil_div(ceil_div(k, wanted), granule) * granule;
    const int64_t splits = ceil_div(k, rows);
    const int64_t waves = ceil_div(blocks_without_splits * splits, capacity);
    const double wave_bytes = static_cast<double>(capacity) * static_cast<double>(rows + start_rows) *
                              static_cast<double>(bytes_per_block_row);
    const double cost = static_cast<double>(waves) * wave_bytes +
                        (splits > 1 ? static_cast<double>(splits) * static_cast<double>(sum_bytes_per_split) : 0.0);
    if (wanted == 1 || cost < best_cost * (1.0 - kSplitPreference)) {
      best = KSplits{rows, splits};
      best_cost = cost;
    }
  }
  return best;
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

// What happens to a column's float32 sum before it is rounded into out: linear's bias (NULL: none) and activation.
// matmul's is the default.
struct Epilogue {
  const uint16_t* bias = nullptr;  // [N], out's dtype
  Activation activation = Activation::kNone;
};

// The value out holds for a column's sum: the bias added, then the activation (the formulas of linear's reference:
// gelu with erf, gelu_tanh with tanh), in float32, rounded once.
template <bool kBfloat16>
__device__ uint16_t finish(float sum, int64_t column, const Epilogue& epilogue) {
  float value = epilogue.bias != nullptr ? sum + widen<kBfloat16>(epilogue.bias[column]) : sum;
  switch (epilogue.activation) {
    case Activation::kNone: break;
    case Activation::kRelu: value = fmaxf(value, 0.0f); break;
    case Activation::kGelu: value = 0.5f * value * (1.0f + erff(value * 0.70710678118654752f)); break;
    case Activation::kGeluTanh:
      value = 0.5f * value * (1.0f + tanhf(0.79788456080286536f * (value + 0.044715f * value * value * value)));
      break;
    case Activation::kSilu: value = value / (1.0f + expf(-value)); break;
  }
  return narrow<kBfloat16>(value);
}

// Queues the sum of `splits` float32 partial products [splits][rows][columns] (dense) into out [rows][columns], in
// split order, each element finished by the epilogue. Returns the launch's error.
cudaError_t launch_sum_splits(bool bfloat16, const float* partials, int64_t splits, int64_t rows, int64_t columns,
                              const Epilogue& epilogue, uint16_t* out, cudaStream_t stream);

}  // namespace kabi::cuda
