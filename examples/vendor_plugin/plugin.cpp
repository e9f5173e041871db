// acme-small-gemm: an example vendor plugin for kabi, built outside kabi's tree with kabi_add_plugin.
//
// It registers one matmul kernel, "acme.avx2.small_gemm": float32, row-major inputs, no batch, every dimension at
// most 64, on CPUs with AVX2 and FMA. On such tiny problems a BLAS call spends most of its time in argument
// checking, dispatch and packing; this kernel keeps a tile of the output in registers and streams the operands
// straight from the caller's memory. Anything else it declines, so kabi routes it to another kernel.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "kabi/kabi.h"

namespace {

constexpr int64_t kMaxExtent = 64;

void (*report_error)(const char* message) = nullptr;

struct Matrix {
  const float* data;
  int64_t rows, cols, row_stride;
};

// A row-major view of a rank-2 float32 CPU tensor (unit stride between columns), or false.
bool row_major(const DLTensor& tensor, Matrix* matrix) {
  if (tensor.ndim != 2 || tensor.device.device_type != kDLCPU || tensor.dtype.code != kDLFloat ||
      tensor.dtype.bits != 32 || tensor.dtype.lanes != 1) {
    return false;
  }
  const int64_t rows = tensor.shape[0], cols = tensor.shape[1];
  const int64_t row_stride = tensor.strides != nullptr ? tensor.strides[0] : cols;
  const int64_t col_stride = tensor.strides != nullptr ? tensor.strides[1] : 1;
  if (cols != 1 && col_stride != 1) return false;
  if (rows != 1 && row_stride < cols) return false;
  const char* data = static_cast<const char*>(tensor.data) + tensor.byte_offset;
  *matrix = Matrix{reinterpret_cast<const float*>(data), rows, cols, row_stride};
  return true;
}

// Why the kernel cannot take these arguments, or nullptr when it can.
const char* unsupported(const kabi_args& args, Matrix* a, Matrix* b) {
  if (args.num_inputs != 2) return "matmul takes two inputs";
  if (!row_major(args.inputs[0], a) || !row_major(args.inputs[1], b)) {
    return "needs rank-2 float32 row-major inputs (no batch)";
  }
  if (a->rows == 0 || a->cols == 0 || b->cols == 0) return "empty problem";
  if (a->rows > kMaxExtent || a->cols > kMaxExtent || b->cols > kMaxExtent) return "a dimension exceeds 64";
  return nullptr;
}

// Lanes [0, count) set, for the masked loads and stores of a partial column tile.
__attribute__((target("avx2"))) __m256i lane_mask(int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lanes);
}

// out[Rows x 8*Vectors] = a[Rows x K] @ b[K x 8*Vectors] for one tile. Full: every column of the tile exists;
// otherwise `masks` select the columns that do (masked lanes are neither read nor written).
template <int Rows, int Vectors, bool Full>
__attribute__((target("avx2,fma"), always_inline)) inline void tile(const float* a, int64_t lda, const float* b,
                                                                   int64_t ldb, float* out, int64_t ldo, int64_t k,
                                                                   const __m256i* masks) {
  __m256 accumulators[Rows][Vectors];
  for (int r = 0; r < Rows; ++r) {
    for (int v = 0; v < Vectors; ++v) accumulators[r][v] = _mm256_setzero_ps();
  }
  for (int64_t p = 0; p < k; ++p) {
    const float* b_row = b + p * ldb;
    __m256 b_values[Vectors];
    for (int v = 0; v < Vectors; ++v) {
      b_values[v] = Full ? _mm256_loadu_ps(b_row + 8 * v) : _mm256_maskload_ps(b_row + 8 * v, masks[v]);
    }
    for (int r = 0; r < Rows; ++r) {
      const __m256 a_value = _mm256_broadcast_ss(a + r * lda + p);
      for (int v = 0; v < Vectors; ++v) accumulators[r][v] = _mm256_fmadd_ps(a_value, b_values[v], accumulators[r][v]);
    }
  }
  for (int r = 0; r < Rows; ++r) {
    for (int v = 0; v < Vectors; ++v) {
      float* target = out + r * ldo + 8 * v;
      if (Full) {
        _mm256_storeu_ps(target, accumulators[r][v]);
      } else {
        _mm256_maskstore_ps(target, masks[v], accumulators[r][v]);
      }
    }
  }
}

// One column block of the output, all rows: tiles of 4 rows, then single rows.
template <int Vectors, bool Full>
__attribute__((target("avx2,fma"))) void column_block(const Matrix& a, const Matrix& b, float* out, int64_t ldo,
                                                     int64_t column, const __m256i* masks) {
  const float* b_block = b.data + column;
  int64_t row = 0;
  for (; row + 4 <= a.rows; row += 4) {
    tile<4, Vectors, Full>(a.data + row * a.row_stride, a.row_stride, b_block, b.row_stride,
                           out + row * ldo + column, ldo, a.cols, masks);
  }
  for (; row < a.rows; ++row) {
    tile<1, Vectors, Full>(a.data + row * a.row_stride, a.row_stride, b_block, b.row_stride,
                           out + row * ldo + column, ldo, a.cols, masks);
  }
}

__attribute__((target("avx2,fma"))) void small_gemm(const Matrix& a, const Matrix& b, float* out) {
  const int64_t n = b.cols;
  int64_t column = 0;
  for (; column + 16 <= n; column += 16) column_block<2, true>(a, b, out, n, column, nullptr);
  if (column + 8 <= n) {
    column_block<1, true>(a, b, out, n, column, nullptr);
    column += 8;
  }
  if (column < n) {
    const __m256i masks[1] = {lane_mask(n - column)};
    column_block<1, false>(a, b, out, n, column, masks);
  }
}

// The bytes a row-major matrix spans.
bool overlaps(const float* out, int64_t out_count, const Matrix& input) {
  const float* end = input.data + (input.rows - 1) * input.row_stride + input.cols;
  return out < end && input.data < out + out_count;
}

// The output as a dense row-major float32 [M, N] matrix that shares no memory with the inputs, or false.
bool output_matches(const kabi_args& args, const Matrix& a, const Matrix& b, float** out) {
  if (args.num_outputs != 1 || args.outputs == nullptr) return false;
  const DLTensor& tensor = args.outputs[0];
  if (tensor.ndim != 2 || tensor.shape[0] != a.rows || tensor.shape[1] != b.cols ||
      tensor.dtype.code != kDLFloat || tensor.dtype.bits != 32) {
    return false;
  }
  const bool dense = tensor.strides == nullptr || ((tensor.shape[1] == 1 || tensor.strides[1] == 1) &&
                                                   (tensor.shape[0] == 1 || tensor.strides[0] == tensor.shape[1]));
  *out = reinterpret_cast<float*>(static_cast<char*>(tensor.data) + tensor.byte_offset);
  const int64_t count = a.rows * b.cols;
  return dense && !overlaps(*out, count, a) && !overlaps(*out, count, b);
}

kabi_status small_gemm_kernel(void* /*user_data*/, const kabi_problem* /*problem*/, const kabi_args* args) {
  Matrix a{}, b{};
  float* out = nullptr;
  if (const char* reason = unsupported(*args, &a, &b)) {
    char message[160];
    std::snprintf(message, sizeof(message), "acme.avx2.small_gemm: %s", reason);
    report_error(message);
    return KABI_STATUS_CONSTRAINT_VIOLATED;
  }
  if (!output_matches(*args, a, b, &out)) {
    report_error("acme.avx2.small_gemm: out must be a dense row-major float32 [M, N] matrix apart from the inputs");
    return KABI_STATUS_CONSTRAINT_VIOLATED;
  }
  small_gemm(a, b, out);
  return KABI_STATUS_OK;
}

int32_t small_gemm_supports(void* /*user_data*/, const kabi_problem* /*problem*/, const kabi_args* args,
                            char* reason, size_t reason_size) {
  Matrix a{}, b{};
  if (const char* why_not = unsupported(*args, &a, &b)) {
    std::snprintf(reason, reason_size, "%s", why_not);
    return 0;
  }
  return 1;
}

}  // namespace

extern "C" {

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  if (out_info != nullptr && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = "acme-small-gemm";
    out_info->version = "1.0.0";
  }
  if (host == nullptr || host->struct_size < offsetof(kabi_host_api, set_error) + sizeof(host->set_error)) {
    return KABI_STATUS_ABI_MISMATCH;
  }
  report_error = host->set_error;

  kabi_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.op = "matmul";
  desc.name = "acme.avx2.small_gemm";
  desc.backend = "acme";
  desc.device_type = kDLCPU;
  // Below the built-in OpenBLAS kernel (10): it wins only on the smallest problems (see README.md), so it should
  // be picked where kabi's tuner measured it faster, not by default.
  desc.priority = 5;
  // The core checks these against the CPU before the kernel can be selected, so the AVX2 code never runs where
  // it would fault.
  desc.required_features = KABI_FEATURE_AVX2 | KABI_FEATURE_FMA;
  desc.dtypes = KABI_DTYPE_FLOAT32;
  desc.layouts = KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED;
  desc.batch_mode = KABI_BATCH_NONE;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = small_gemm_kernel;
  desc.supports = small_gemm_supports;
  desc.fingerprint = "acme.avx2.small_gemm/1 4x16 tiles";
  kabi_kernel kernel = nullptr;
  return host->kernel_register(&desc, &kernel);
}

}  // extern "C"
