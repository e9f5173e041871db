// What the built-in plugins (cpu/, cuda/) read from DLPack tensors alike: element strides, C-contiguity, and shapes
// as text for their messages. Header-only: a plugin links no libkabi.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "kabi/kabi.h"

namespace kabi::plugins {

// "[2, 3, 4]".
inline std::string list_text(const int64_t* values, int count) {
  std::string text = "[";
  for (int i = 0; i < count; ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

// Element strides of a tensor; DLPack's NULL strides mean compact row-major.
inline void strides_of(const DLTensor& tensor, int64_t* out) {
  if (tensor.strides != nullptr) {
    std::copy(tensor.strides, tensor.strides + tensor.ndim, out);
    return;
  }
  int64_t step = 1;
  for (int d = tensor.ndim - 1; d >= 0; --d) {
    out[d] = step;
    step *= tensor.shape[d];
  }
}

// Whether a tensor with these element strides is C-contiguous. An extent-1 dimension's stride is never used, and an
// empty tensor (nothing to read or write) counts as contiguous.
inline bool is_c_contiguous(const DLTensor& tensor, const int64_t* strides) {
  if (std::any_of(tensor.shape, tensor.shape + tensor.ndim, [](int64_t extent) { return extent == 0; })) return true;
  int64_t expected = 1;
  for (int d = tensor.ndim - 1; d >= 0; --d) {
    if (tensor.shape[d] != 1 && strides[d] != expected) return false;
    expected *= tensor.shape[d];
  }
  return true;
}

}  // namespace kabi::plugins
