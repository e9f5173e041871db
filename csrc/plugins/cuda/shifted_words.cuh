// Reading rows of 2-byte elements that start at any address: 8 consecutive elements come from the two aligned 16-byte
// words around them, shifted into place. The padded copy reads them so where both words lie inside the row, and one
// by one elsewhere; the split-K GEMV reads every word that holds an element of the row (split_k_gemv.cuh says why).
#pragma once

#include <cstdint>

namespace kabi::cuda {

// 2-byte elements per aligned 16-byte word.
constexpr int kWordElements = 8;

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

// Whether the two aligned words around the 8 elements from column `first` of a row, `shift` elements past the first
// word's start (elements_past_boundary), both lie within the row's `columns` elements: then two vector reads fetch
// them, and nothing outside the row is read.
__device__ inline bool window_inside(int64_t first, int64_t shift, int64_t columns) {
  return first - shift >= 0 && first - shift + 2 * kWordElements <= columns;
}

// The 8 elements of a row from column `first` (negative for a window that starts before the row), read one by one:
// zeros outside columns [0, columns), and everywhere for a NULL row.
__device__ inline uint4 read_elements(const uint16_t* row, int64_t first, int64_t columns) {
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    uint32_t pair = 0;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t column = first + 2 * w + half;
      if (row != nullptr && column >= 0 && column < columns) {
        pair |= static_cast<uint32_t>(__ldg(row + column)) << (16 * half);
      }
    }
    words[w] = pair;
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// Element i (0 to 7) of 8 elements held in a word.
__device__ inline uint16_t element_of(uint4 word, int i) {
  const uint32_t halves[4] = {word.x, word.y, word.z, word.w};
  return static_cast<uint16_t>(halves[i / 2] >> (16 * (i % 2)));
}

}  // namespace kabi::cuda
