// Names of the ABI's enumerations and bit sets (dtypes, features, layouts, batch modes, devices), both ways, and
// the formatting of shapes used in error messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::core {

// Every KABI_DTYPE_* bit.
constexpr uint32_t kAllDtypes = KABI_DTYPE_FLOAT16 | KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64 |
                                KABI_DTYPE_INT8 | KABI_DTYPE_INT32 | KABI_DTYPE_INT64 | KABI_DTYPE_FLOAT8_E4M3FN |
                                KABI_DTYPE_FLOAT8_E5M2 | KABI_DTYPE_UINT8 | KABI_DTYPE_INT16 | KABI_DTYPE_COMPLEX64 |
                                KABI_DTYPE_COMPLEX128;

// The KABI_DTYPE_* bit of a DLPack dtype, or 0.
uint32_t dtype_bit(DLDataType dtype) noexcept;
// "float32" for one bit, nullptr for anything else.
const char* dtype_name(uint32_t dtype_bit) noexcept;
// The bit of a name ("bfloat16"), or 0.
uint32_t dtype_bit_from_name(const std::string& name) noexcept;
// "float32", or "dtype(code=5, bits=16, lanes=1)" for a DLPack dtype kabi has no bit for.
std::string describe_dtype(DLDataType dtype);
// "{float16, float32}" for a mask.
std::string describe_dtype_set(uint32_t dtype_bits);

const char* feature_name(uint64_t feature_bit) noexcept;
uint64_t feature_bit_from_name(const std::string& name) noexcept;
// Names of the set bits in bit order: ["avx2", "fma"].
std::vector<std::string> feature_names(uint64_t features);

// "contiguous", "row_strided", "col_strided", "general" for one KABI_LAYOUT_* bit.
const char* layout_name(uint32_t layout_bit) noexcept;
uint32_t layout_bit_from_name(const std::string& name) noexcept;
std::string describe_layout_set(uint32_t layout_bits);

// "none", "uniform", "any".
const char* batch_mode_name(int32_t batch_mode) noexcept;

// "cpu", "cuda", or "device_type=N".
std::string device_type_name(int32_t device_type);
// "cpu:0".
std::string describe_device(DLDevice device);

// "[2, 3, 4]".
std::string format_shape(const int64_t* shape, int32_t rank);
std::string format_shape(const std::vector<int64_t>& shape);

std::string join(const std::vector<std::string>& items, const char* separator);

// The pieces of text between separators, empty pieces included ("a,,b" -> "a", "", "b"; "" -> nothing).
std::vector<std::string> split(const std::string& text, char separator);

// "12.346" for (12.3456, 3): fixed notation, independent of any locale.
std::string format_fixed(double value, int digits_after_point);

}  // namespace kabi::core
