// The sum of the splits of a split-K product (split_sums.cuh): one owner, whichever kernel wrote the partial sums.
#include <climits>
#include <cstdint>

#include "split_sums.cuh"

namespace kabi::cuda {
namespace {

// Each block adds the splits for 32 consecutive elements of out, its 8 warps a share of the splits each (warp w:
// splits w, w + 8, ...), then the first warp the 8 shares in warp order. The order is fixed, so the result does not
// depend on timing; the shares keep 8 reads per element in flight where there are few elements (a single row of
// out) and many splits.
constexpr int kSumElements = 32;
constexpr int kSumShares = 8;

template <bool kBfloat16>
__global__ void __launch_bounds__(kSumElements * kSumShares)
    sum_splits_kernel(const float* __restrict__ partials, int64_t splits, int64_t elements, int64_t columns,
                      Epilogue epilogue, uint16_t* __restrict__ out) {
  __shared__ float shares[kSumShares][kSumElements];
  const int lane = threadIdx.x % kSumElements;
  const int share = threadIdx.x / kSumElements;
  const int64_t element = static_cast<int64_t>(blockIdx.x) * kSumElements + lane;
  float sum = 0.0f;
  if (element < elements) {
    for (int64_t split = share; split < splits; split += kSumShares) sum += partials[split * elements + element];
  }
  shares[share][lane] = sum;
  __syncthreads();
  if (share != 0 || element >= elements) return;
  float total = 0.0f;
#pragma unroll
  for (int s = 0; s < kSumShares; ++s) total += shares[s][lane];
  out[element] = finish<kBfloat16>(total, element % columns, epilogue);
}

}  // namespace

cudaError_t launch_sum_splits(bool bfloat16, const float* partials, int64_t splits, int64_t rows, int64_t columns,
                              const Epilogue& epilogue, uint16_t* out, cudaStream_t stream) {
  const int64_t elements = rows * columns;
  const int64_t blocks = ceil_div(elements, kSumElements);
  if (blocks > INT32_MAX) return cudaErrorInvalidConfiguration;
  const auto grid = static_cast<unsigned>(blocks);
  if (bfloat16) {
    sum_splits_kernel<true><<<grid, kSumElements * kSumShares, 0, stream>>>(partials, splits, elements, columns,
                                                                             epilogue, out);
  } else {
    sum_splits_kernel<false><<<grid, kSumElements * kSumShares, 0, stream>>>(partials, splits, elements, columns,
                                                                              epilogue, out);
  }
  return cudaGetLastError();
}

}  // namespace kabi::cuda
