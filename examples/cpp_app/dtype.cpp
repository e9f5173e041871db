#include "dtype.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace {

const Dtype kDtypes[] = {
    {"float32", {kDLFloat, 32, 1}, 4, 2e-5, 1e-4},
    {"float16", {kDLFloat, 16, 1}, 2, 2e-3, 1e-2},
    {"bfloat16", {kDLBfloat, 16, 1}, 2, 1.2e-2, 4e-2},
};

uint32_t bits_of(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float float_of(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

uint16_t to_bfloat16(float value) {
  const uint32_t bits = bits_of(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // stays a (quiet) NaN
  const uint32_t round_to_even = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + round_to_even) >> 16);
}

uint16_t to_float16(float value) {
  const uint32_t bits = bits_of(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return sign | 0x7E00;   // NaN
  if (magnitude >= 0x477FF000) return sign | 0x7C00;  // 65520 and above round to infinity
  if (magnitude < 0x38800000) {
    // Below float16's smallest normal (2^-14): a multiple of 2^-24. Scaling by 2^24 is exact, and nearbyint rounds
    // ties to even; 1024 is the smallest normal's encoding, so rounding up into the normals needs no special case.
    return sign | static_cast<uint16_t>(std::nearbyint(std::fabs(value) * 16777216.0f));
  }
  // Rebias the exponent (127 -> 15) and drop 13 mantissa bits, rounding to even; a carry lands in the exponent.
  uint32_t half = (magnitude - 0x38000000) >> 13;
  const uint32_t dropped = magnitude & 0x1FFF;
  if (dropped > 0x1000 || (dropped == 0x1000 && (half & 1))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float from_float16(uint16_t half) {
  const float sign = (half & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
}

}  // namespace

const Dtype* find_dtype(const std::string& name) {
  for (const Dtype& dtype : kDtypes) {
    if (name == dtype.name) return &dtype;
  }
  return nullptr;
}

std::string dtype_names() {
  std::string names;
  for (const Dtype& dtype : kDtypes) names += (names.empty() ? "" : "|") + std::string(dtype.name);
  return names;
}

std::vector<unsigned char> encode(const std::vector<float>& values, const Dtype& dtype) {
  std::vector<unsigned char> bytes(values.size() * dtype.element_bytes);
  for (size_t i = 0; i < values.size(); ++i) {
    unsigned char* element = &bytes[i * dtype.element_bytes];
    if (dtype.dlpack.bits == 32) {
      std::memcpy(element, &values[i], 4);
    } else {
      const uint16_t half = dtype.dlpack.code == kDLBfloat ? to_bfloat16(values[i]) : to_float16(values[i]);
      std::memcpy(element, &half, 2);
    }
  }
  return bytes;
}

std::vector<float> decode(const std::vector<unsigned char>& bytes, const Dtype& dtype) {
  std::vector<float> values(bytes.size() / dtype.element_bytes);
  for (size_t i = 0; i < values.size(); ++i) {
    const unsigned char* element = &bytes[i * dtype.element_bytes];
    if (dtype.dlpack.bits == 32) {
      std::memcpy(&values[i], element, 4);
    } else {
      uint16_t half;
      std::memcpy(&half, element, 2);
      values[i] = dtype.dlpack.code == kDLBfloat ? float_of(static_cast<uint32_t>(half) << 16) : from_float16(half);
    }
  }
  return values;
}
