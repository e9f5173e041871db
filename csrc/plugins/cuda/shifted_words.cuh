// Reading 2-byte elements that start at any address in aligned 16-byte words: the two aligned words around 8
// consecutive elements, shifted into place. The padded copy and the split-K GEMV read rows that start off 16 bytes
// this way.
#pragma once

#include <cstdint>

namespace kabi::cuda {

// The element misalignment of an address: how many 2-byte elements it lies past a 16-byte boundary.
__device__ inline int64_t elements_past_boundary(const void* address) {
  return static_cast<int64_t>((reinterpret_cast<uintptr_t>(address) % 16) / 2);
}

// Eight consecutive elements starting `shift` elements into the 16 held by the words low and high.
__device__ inline uint4 shifted(uint4 low, uint4 high, int32_t shift) {
  const uint32_t words[8] = {low.x, low.y, low.z, low.w, high.x, high.y, high.z, high.w};
  // The word that starts the window, picked with constant indices only (a dynamically indexed array would go to
  // local memory); shift is the same for every thread of a row, so the branches do not diverge.
  const int32_t first_word = shift / 2;
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

}  // namespace kabi::cuda
