// The element types the app runs and their conversion on the host. Inputs are generated as float, rounded to the
// element type once (encode), and the reference is computed from the rounded values (decode): the comparison then
// measures only the kernel's own error, its accumulation and the rounding of its output.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kabi/kabi.h"

struct Dtype {
  const char* name;
  DLDataType dlpack;
  size_t element_bytes;
  // matmul's tolerances for this dtype (registry/ops/matmul.toml): the error's Frobenius norm over the reference's,
  // and the largest absolute error over the reference's largest magnitude.
  double norm_tolerance;
  double extreme_tolerance;
};

// The dtype called `name` ("float32", "float16", "bfloat16"), or nullptr.
const Dtype* find_dtype(const std::string& name);

// The names find_dtype accepts, for messages: "float32|float16|bfloat16".
std::string dtype_names();

// `values` rounded to the nearest `dtype` value (ties to even), as that dtype's bytes.
std::vector<unsigned char> encode(const std::vector<float>& values, const Dtype& dtype);

// The values held by `bytes`, elements of `dtype`.
std::vector<float> decode(const std::vector<unsigned char>& bytes, const Dtype& dtype);
