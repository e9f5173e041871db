// The split-K GEMV of split_k_gemv.hpp: the tiling per row count of a, and the launch (the kernels are in
// split_k_gemv.cuh).
#include <cstdint>

#include "split_k_gemv.cuh"
#include "split_k_gemv.hpp"

namespace kabi::cuda {
namespace {

// Rows of a per block: the fewest of 1, 2, 4 and 8 that hold M (more rows than M would be multiplied by zeros), 8
// above that (a second group of rows reads the same slices of b at the same time, through L2). Two rows of b per
// stage, eight stages, K split to four blocks per multiprocessor: the fastest tiling, or within 6% of it, on each
// problem of benchmarks/results/debug-split-k-gemv-probe-nvidia-h200.txt (run 3).
template <int Rows>
using TilingFor = gemv::Tiling<Rows, /*RowsPerStage=*/2, /*Stages=*/8, /*Threads=*/128, /*BlocksPerMultiprocessor=*/4>;

// Calls visit with the tiling for m: the one rule the launch and the workspace share.
template <class Visit>
auto with_tiling(int64_t m, Visit&& visit) {
  if (m <= 1) return visit(TilingFor<1>{});
  if (m <= 2) return visit(TilingFor<2>{});
  if (m <= 4) return visit(TilingFor<4>{});
  return visit(TilingFor<8>{});
}

}  // namespace

size_t split_k_gemv_workspace_bytes(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  return with_tiling(m, [&](auto tile) {
    return static_cast<size_t>(gemv::k_splits<decltype(tile)>(m, n, k, multiprocessors).splits * m * n) *
           sizeof(float);
  });
}

cudaError_t launch_split_k_gemv(const SplitKGemv& gemv, void* workspace, int32_t multiprocessors,
                                cudaStream_t stream) {
  const auto* a = static_cast<const uint16_t*>(gemv.a);
  const auto* b = static_cast<const uint16_t*>(gemv.b);
  auto* out = static_cast<uint16_t*>(gemv.out);
  auto* partials = static_cast<float*>(workspace);
  return with_tiling(gemv.m, [&](auto tile) {
    using Tile = decltype(tile);
    return gemv.bfloat16 ? gemv::launch_tiled<true, Tile>(a, gemv.lda, b, gemv.ldb, out, gemv.m, gemv.n, gemv.k,
                                                          partials, multiprocessors, stream)
                         : gemv::launch_tiled<false, Tile>(a, gemv.lda, b, gemv.ldb, out, gemv.m, gemv.n, gemv.k,
                                                           partials, multiprocessors, stream);
  });
}

}  // namespace kabi::cuda
