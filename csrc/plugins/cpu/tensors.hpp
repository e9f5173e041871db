// What the CPU plugin's kernels (gemm_plan.cpp, linear.cpp, grouped_mm.cpp) read from DLPack tensors alike: the
// dtypes it computes in, data addresses and a strided matrix as gemm reads it, beside what every built-in plugin reads
// (dlpack_tensors.hpp: element strides, C-contiguity, shapes as text).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include "../dlpack_tensors.hpp"
#include "kabi/kabi.h"

namespace kabi::cpu {

// OpenBLAS takes 32-bit sizes and leading dimensions (scipy-openblas32).
constexpr int64_t kBlasIntMax = INT32_MAX;

// The KABI_DTYPE_* bit of a dtype the plugin computes in (float32, float64), else 0.
inline uint32_t dtype_bit(DLDataType dtype) {
  if (dtype.code != kDLFloat || dtype.lanes != 1) return 0;
  if (dtype.bits == 32) return KABI_DTYPE_FLOAT32;
  if (dtype.bits == 64) return KABI_DTYPE_FLOAT64;
  return 0;
}

using plugins::is_c_contiguous;
using plugins::list_text;
using plugins::strides_of;

// A rows x cols matrix with the given strides as gemm reads it: row-major (unit column stride; *transposed false) or
// column-major (unit row stride; *transposed true), with a leading dimension of at least max(1, cols) or
// max(1, rows) as BLAS requires. The stride of an extent-1 dimension is never used, so it does not matter.
inline bool blas_matrix(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, bool* transposed,
                 int64_t* leading_dimension) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols))) {
    *transposed = false;
    *leading_dimension = rows == 1 ? std::max<int64_t>(1, cols) : row_stride;
    return true;
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows))) {
    *transposed = true;
    *leading_dimension = cols == 1 ? std::max<int64_t>(1, rows) : col_stride;
    return true;
  }
  return false;
}

inline const char* data_of(const DLTensor& tensor) {
  return static_cast<const char*>(tensor.data) + tensor.byte_offset;
}

}  // namespace kabi::cpu
