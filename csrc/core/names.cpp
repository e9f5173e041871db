#include "names.hpp"

#include <charconv>

namespace kabi::core {
namespace {

struct DtypeEntry {
  uint32_t bit;
  const char* name;
  uint8_t code;
  uint8_t bits;
};

// DLPack encodes the two fp8 formats kabi knows as their own type codes.
constexpr DtypeEntry kDtypes[] = {
    {KABI_DTYPE_FLOAT16, "float16", kDLFloat, 16},
    {KABI_DTYPE_BFLOAT16, "bfloat16", kDLBfloat, 16},
    {KABI_DTYPE_FLOAT32, "float32", kDLFloat, 32},
    {KABI_DTYPE_FLOAT64, "float64", kDLFloat, 64},
    {KABI_DTYPE_INT8, "int8", kDLInt, 8},
    {KABI_DTYPE_INT32, "int32", kDLInt, 32},
    {KABI_DTYPE_INT64, "int64", kDLInt, 64},
    {KABI_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", kDLFloat8_e4m3fn, 8},
    {KABI_DTYPE_FLOAT8_E5M2, "float8_e5m2", kDLFloat8_e5m2, 8},
    {KABI_DTYPE_UINT8, "uint8", kDLUInt, 8},
    {KABI_DTYPE_INT16, "int16", kDLInt, 16},
    {KABI_DTYPE_COMPLEX64, "complex64", kDLComplex, 64},
    {KABI_DTYPE_COMPLEX128, "complex128", kDLComplex, 128},
};

struct FeatureEntry {
  uint64_t bit;
  const char* name;
};

constexpr FeatureEntry kFeatures[] = {
    {KABI_FEATURE_SSE4_2, "sse4.2"},
    {KABI_FEATURE_AVX, "avx"},
    {KABI_FEATURE_AVX2, "avx2"},
    {KABI_FEATURE_FMA, "fma"},
    {KABI_FEATURE_AVX512F, "avx512f"},
    {KABI_FEATURE_AVX512BW, "avx512bw"},
    {KABI_FEATURE_AVX512_VNNI, "avx512_vnni"},
    {KABI_FEATURE_AVX512_BF16, "avx512_bf16"},
    {KABI_FEATURE_AVX512_FP16, "avx512_fp16"},
    {KABI_FEATURE_AMX_TILE, "amx_tile"},
    {KABI_FEATURE_AMX_BF16, "amx_bf16"},
    {KABI_FEATURE_AMX_INT8, "amx_int8"},
    {KABI_FEATURE_NEON, "neon"},
    {KABI_FEATURE_SVE, "sve"},
    {KABI_FEATURE_TENSOR_CORES, "tensor_cores"},
    {KABI_FEATURE_BF16_MMA, "bf16_mma"},
    {KABI_FEATURE_FP8_MMA, "fp8_mma"},
    {KABI_FEATURE_TMA, "tma"},
    {KABI_FEATURE_WGMMA, "wgmma"},
};

struct LayoutEntry {
  uint32_t bit;
  const char* name;
};

constexpr LayoutEntry kLayouts[] = {
    {KABI_LAYOUT_CONTIGUOUS, "contiguous"},
    {KABI_LAYOUT_ROW_STRIDED, "row_strided"},
    {KABI_LAYOUT_COL_STRIDED, "col_strided"},
    {KABI_LAYOUT_GENERAL, "general"},
};

}  // namespace

uint32_t dtype_bit(DLDataType dtype) noexcept {
  if (dtype.lanes != 1) return 0;
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.code == dtype.code && entry.bits == dtype.bits) return entry.bit;
  }
  return 0;
}

const char* dtype_name(uint32_t bit) noexcept {
  for (const DtypeEntry& entry : kDtypes) {
    if (entry.bit == bit) return entry.name;
  }
  return nullptr;
}

uint32_t dtype_bit_from_name(const std::string& name) noexcept {
  for (const DtypeEntry& entry : kDtypes) {
    if (name == entry.name) return entry.bit;
  }
  return 0;
}

namespace {

// DLPack's name for a dtype kabi has no bit for (a caller's bool or float8_e8m0fnu tensor), so that the error refusing
// it names what the caller passed; empty for a code this header does not know.
std::string dlpack_dtype_name(DLDataType dtype) {
  const std::string bits = std::to_string(dtype.bits);
  switch (dtype.code) {
    case kDLInt:
      return "int" + bits;
    case kDLUInt:
      return "uint" + bits;
    case kDLFloat:
      return "float" + bits;
    case kDLBfloat:
      return "bfloat" + bits;
    case kDLComplex:
      return "complex" + bits;
    case kDLBool:
      return "bool";
    case kDLOpaqueHandle:
      return "opaque handle";
    case kDLFloat8_e3m4:
      return "float8_e3m4";
    case kDLFloat8_e4m3:
      return "float8_e4m3";
    case kDLFloat8_e4m3b11fnuz:
      return "float8_e4m3b11fnuz";
    case kDLFloat8_e4m3fn:
      return "float8_e4m3fn";
    case kDLFloat8_e4m3fnuz:
      return "float8_e4m3fnuz";
    case kDLFloat8_e5m2:
      return "float8_e5m2";
    case kDLFloat8_e5m2fnuz:
      return "float8_e5m2fnuz";
    case kDLFloat8_e8m0fnu:
      return "float8_e8m0fnu";
    case kDLFloat6_e2m3fn:
      return "float6_e2m3fn";
    case kDLFloat6_e3m2fn:
      return "float6_e3m2fn";
    case kDLFloat4_e2m1fn:
      return "float4_e2m1fn";
    default:
      return "";
  }
}

}  // namespace

std::string describe_dtype(DLDataType dtype) {
  if (const char* name = dtype_name(dtype_bit(dtype))) return name;
  const std::string name = dlpack_dtype_name(dtype);
  const std::string lanes = dtype.lanes != 1 ? " x " + std::to_string(dtype.lanes) + " lanes" : "";
  if (!name.empty()) return name + lanes;
  return "dtype(code=" + std::to_string(dtype.code) + ", bits=" + std::to_string(dtype.bits) +
         ", lanes=" + std::to_string(dtype.lanes) + ")";
}

std::string describe_dtype_set(uint32_t bits) {
  std::vector<std::string> names;
  for (const DtypeEntry& entry : kDtypes) {
    if (bits & entry.bit) names.push_back(entry.name);
  }
  return "{" + join(names, ", ") + "}";
}

const char* feature_name(uint64_t bit) noexcept {
  for (const FeatureEntry& entry : kFeatures) {
    if (entry.bit == bit) return entry.name;
  }
  return nullptr;
}

uint64_t feature_bit_from_name(const std::string& name) noexcept {
  for (const FeatureEntry& entry : kFeatures) {
    if (name == entry.name) return entry.bit;
  }
  return 0;
}

std::vector<std::string> feature_names(uint64_t features) {
  std::vector<std::string> names;
  for (const FeatureEntry& entry : kFeatures) {
    if (features & entry.bit) names.push_back(entry.name);
  }
  return names;
}

const char* layout_name(uint32_t bit) noexcept {
  for (const LayoutEntry& entry : kLayouts) {
    if (entry.bit == bit) return entry.name;
  }
  return nullptr;
}

uint32_t layout_bit_from_name(const std::string& name) noexcept {
  for (const LayoutEntry& entry : kLayouts) {
    if (name == entry.name) return entry.bit;
  }
  return 0;
}

std::string describe_layout_set(uint32_t bits) {
  std::vector<std::string> names;
  for (const LayoutEntry& entry : kLayouts) {
    if (bits & entry.bit) names.push_back(entry.name);
  }
  return "{" + join(names, ", ") + "}";
}

const char* batch_mode_name(int32_t batch_mode) noexcept {
  switch (batch_mode) {
    case KABI_BATCH_NONE: return "none";
    case KABI_BATCH_UNIFORM: return "uniform";
    case KABI_BATCH_ANY: return "any";
    default: return "unknown";
  }
}

std::string device_type_name(int32_t device_type) {
  switch (device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda";
    case kDLCUDAHost: return "cuda_host";
    case kDLROCM: return "rocm";
    case kDLMetal: return "metal";
    case kDLVulkan: return "vulkan";
    case kDLOneAPI: return "oneapi";
    default: return "device_type=" + std::to_string(device_type);
  }
}

std::string describe_device(DLDevice device) {
  return device_type_name(device.device_type) + ":" + std::to_string(device.device_id);
}

// libkabi formats and parses without iostreams: a process can hold another libstdc++'s locale facets (a crash in
// std::ostream's double output inside a torch + Triton process on the H200 was traced to them), and a caller's
// global locale must not change kabi's messages.
std::string format_shape(const int64_t* shape, int32_t rank) {
  std::string text = "[";
  for (int32_t i = 0; i < rank; ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

std::string format_shape(const std::vector<int64_t>& shape) {
  return format_shape(shape.data(), static_cast<int32_t>(shape.size()));
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string joined;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) joined += separator;
    joined += items[i];
  }
  return joined;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  size_t begin = 0;
  while (true) {
    const size_t end = text.find(separator, begin);
    pieces.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return pieces;
    begin = end + 1;
  }
}

std::string format_fixed(double value, int digits_after_point) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, digits_after_point);
  if (result.ec != std::errc()) return std::to_string(value);
  return std::string(buffer, result.ptr);
}

}  // namespace kabi::core
