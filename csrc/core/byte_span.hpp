// The memory a strided tensor's elements occupy, and the one rule built on it: an output must not alias an input.
// Header-only, so that the core's calls and the Python binding's hit path (csrc/python/front.cpp) apply one rule.
#pragma once

#include <cstdint>
#include <string>

#include "kabi/kabi.h"

namespace kabi::core {

// The bytes between a tensor's lowest and highest element, [begin, end); empty without data or elements. Two tensors
// whose spans intersect are taken to alias, as torch's overlap checks take them: strided views that interleave
// without sharing an element are rare enough to be refused with the rest.
struct ByteSpan {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  bool overlaps(const ByteSpan& other) const {
    return begin < end && other.begin < other.end && begin < other.end && other.begin < end;
  }
};

inline ByteSpan byte_span(const DLTensor& tensor) {
  if (tensor.data == nullptr) return {};
  int64_t low = 0;
  int64_t high = 0;
  int64_t contiguous_stride = 1;
  for (int32_t d = tensor.ndim - 1; d >= 0; --d) {
    if (tensor.shape[d] == 0) return {};
    const int64_t stride = tensor.strides != nullptr ? tensor.strides[d] : contiguous_stride;
    const int64_t reach = (tensor.shape[d] - 1) * stride;
    (reach < 0 ? low : high) += reach;
    contiguous_stride *= tensor.shape[d];
  }
  const int64_t item = (static_cast<int64_t>(tensor.dtype.bits) * tensor.dtype.lanes + 7) / 8;
  const uintptr_t base = reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
  return {base + static_cast<uintptr_t>(low * item), base + static_cast<uintptr_t>((high + 1) * item)};
}

// The index of the first of `inputs` whose bytes overlap `output`'s on the same device, or -1.
inline int32_t aliased_input(const DLTensor& output, const DLTensor* inputs, int32_t num_inputs) {
  const ByteSpan output_span = byte_span(output);
  if (output_span.begin == output_span.end) return -1;
  for (int32_t i = 0; i < num_inputs; ++i) {
    const DLTensor& input = inputs[i];
    if (input.device.device_type != output.device.device_type || input.device.device_id != output.device.device_id) {
      continue;
    }
    if (output_span.overlaps(byte_span(input))) return i;
  }
  return -1;
}

inline std::string aliasing_message(const std::string& op, const std::string& output, const std::string& input) {
  return op + ": " + output + " overlaps the memory of input " + input + "; an output must not alias an input";
}

}  // namespace kabi::core
