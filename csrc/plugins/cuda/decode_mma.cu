// The decode MMA kernel of decode_mma.hpp: its tiling and the launch (the kernel is in decode_mma.cuh).
#include <array>
#include <cstddef>
#include <cstdint>

#include "decode_mma.cuh"
#include "decode_mma.hpp"

namespace kabi::cuda {
namespace {

// One chunk of 32 k per warp step (with the next step's loads issued first, 8 KiB of b in flight per warp), four
// warps per block, three blocks held per multiprocessor (at most 170 registers per thread; 12 warps, 96 KiB in
// flight), K split for full waves of them. Chosen without a GPU at hand (docs/cuda_plugin.md);
// scripts/debug/decode_mma_probe.py measures it beside other tilings.
using Tiling = decode::Tiling</*Chunks=*/1, /*Warps=*/4, /*ResidentBlocks=*/3>;

template <bool kBfloat16, MatrixOrder kOrder>
cudaError_t launch_typed(const DecodeMma& product, float* partials, int32_t multiprocessors, cudaStream_t stream) {
  const auto* a = static_cast<const uint16_t*>(product.a);
  const auto* b = static_cast<const uint16_t*>(product.b);
  auto* out = static_cast<uint16_t*>(product.out);
  const Epilogue epilogue{static_cast<const uint16_t*>(product.bias), product.activation};
  // One group of 8 rows of a per MMA column block where it holds M: a second would multiply zeros.
  return product.m <= 8 ? decode::launch_tiled<kBfloat16, kOrder, 1, Tiling>(a, product.lda, b, product.ldb, product.m,
                                                                             product.n, product.k, epilogue, out,
                                                                             partials, multiprocessors, stream)
                        : decode::launch_tiled<kBfloat16, kOrder, 2, Tiling>(a, product.lda, b, product.ldb, product.m,
                                                                             product.n, product.k, epilogue, out,
                                                                             partials, multiprocessors, stream);
}

template <bool kBfloat16>
cudaError_t launch_for_order(const DecodeMma& product, float* partials, int32_t multiprocessors,
                             cudaStream_t stream) {
  return product.b_order == MatrixOrder::kColumnMajor
             ? launch_typed<kBfloat16, MatrixOrder::kColumnMajor>(product, partials, multiprocessors, stream)
             : launch_typed<kBfloat16, MatrixOrder::kRowMajor>(product, partials, multiprocessors, stream);
}

}  // namespace

size_t decode_mma_workspace_bytes(int64_t m, int64_t n, int64_t k, int32_t multiprocessors) {
  // The core asks for the workspace at every launch, and the bound plans the splits for every resident count a
  // multiprocessor could hold, each over every split count: 1-5 us of a CPU core, several times a cheap call's own
  // dispatch. So each thread keeps the answers for the shapes it last met (a decode step meets a handful, one per
  // layer), in slots picked by the shape.
  struct Answer {
    int64_t m = -1, n = 0, k = 0;
    int32_t multiprocessors = 0;
    size_t bytes = 0;
  };
  constexpr size_t kSlots = 64;
  thread_local std::array<Answer, kSlots> answers;
  const uint64_t shape_hash = (static_cast<uint64_t>(m) * 0x9e3779b97f4a7c15ull) ^
                              (static_cast<uint64_t>(n) * 0xc2b2ae3d27d4eb4full) ^
                              (static_cast<uint64_t>(k) * 0x165667b19e3779f9ull) ^
                              static_cast<uint64_t>(multiprocessors);
  Answer& answer = answers[(shape_hash ^ (shape_hash >> 32)) % kSlots];
  if (answer.m != m || answer.n != n || answer.k != k || answer.multiprocessors != multiprocessors) {
    answer = Answer{m, n, k, multiprocessors,
                    static_cast<size_t>(decode::workspace_floats<Tiling>(m, n, k, multiprocessors)) * sizeof(float)};
  }
  return answer.bytes;
}

cudaError_t launch_decode_mma(const DecodeMma& product, void* workspace, int32_t multiprocessors,
                              cudaStream_t stream) {
  auto* partials = static_cast<float*>(workspace);
  return product.bfloat16 ? launch_for_order<true>(product, partials, multiprocessors, stream)
                          : launch_for_order<false>(product, partials, multiprocessors, stream);
}

}  // namespace kabi::cuda
