#include "test_kernels.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* The element offset of out's batch index `linear` within a tensor whose leading dims broadcast against the
 * output's batch shape. */
static int64_t batch_offset(const DLTensor* tensor, const DLTensor* out, int64_t linear) {
  const int32_t out_batch_rank = out->ndim - 2;
  const int32_t batch_rank = tensor->ndim - 2;
  int64_t offset = 0;
  int32_t d;
  for (d = out_batch_rank - 1; d >= 0; --d) {
    const int64_t size = out->shape[d];
    const int64_t index = linear % size;
    const int32_t own = d - (out_batch_rank - batch_rank);
    linear /= size;
    if (own >= 0 && tensor->shape[own] != 1) {
      int64_t stride = 1;
      int32_t inner;
      if (tensor->strides != NULL) {
        stride = tensor->strides[own];
      } else {
        for (inner = own + 1; inner < tensor->ndim; ++inner) stride *= tensor->shape[inner];
      }
      offset += index * stride;
    }
  }
  return offset;
}

static int64_t stride_at(const DLTensor* tensor, int32_t dim) {
  int64_t stride = 1;
  int32_t inner;
  if (tensor->strides != NULL) return tensor->strides[dim];
  for (inner = dim + 1; inner < tensor->ndim; ++inner) stride *= tensor->shape[inner];
  return stride;
}

kabi_status test_naive_matmul(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const DLTensor* a = &args->inputs[0];
  const DLTensor* b = &args->inputs[1];
  const DLTensor* out = &args->outputs[0];
  const int64_t m = a->shape[a->ndim - 2];
  const int64_t k = a->shape[a->ndim - 1];
  const int64_t n = b->shape[b->ndim - 1];
  const int64_t a_row = stride_at(a, a->ndim - 2), a_col = stride_at(a, a->ndim - 1);
  const int64_t b_row = stride_at(b, b->ndim - 2), b_col = stride_at(b, b->ndim - 1);
  const int is_double = a->dtype.bits == 64;
  int64_t batch = 1, index, i, j, p;
  int32_t d;
  (void)problem;
  if (a->dtype.code != kDLFloat || (a->dtype.bits != 32 && a->dtype.bits != 64)) return KABI_STATUS_UNSUPPORTED_DTYPE;
  if (user_data != NULL) ++((test_counters*)user_data)->calls;
  for (d = 0; d < out->ndim - 2; ++d) batch *= out->shape[d];
  for (index = 0; index < batch; ++index) {
    const int64_t a_base = batch_offset(a, out, index);
    const int64_t b_base = batch_offset(b, out, index);
    const int64_t out_base = index * m * n;
    for (i = 0; i < m; ++i) {
      for (j = 0; j < n; ++j) {
        double sum = 0.0;
        for (p = 0; p < k; ++p) {
          const int64_t ai = a_base + i * a_row + p * a_col;
          const int64_t bi = b_base + p * b_row + j * b_col;
          if (is_double) {
            sum += ((const double*)a->data)[ai] * ((const double*)b->data)[bi];
          } else {
            sum += (double)((const float*)a->data)[ai] * (double)((const float*)b->data)[bi];
          }
        }
        if (is_double) {
          ((double*)out->data)[out_base + i * n + j] = sum;
        } else {
          ((float*)out->data)[out_base + i * n + j] = (float)sum;
        }
      }
    }
  }
  return KABI_STATUS_OK;
}

kabi_kernel_desc test_naive_desc(const char* name, const char* backend) {
  kabi_kernel_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = "matmul";
  desc.name = name;
  desc.backend = backend;
  desc.device_type = kDLCPU;
  desc.dtypes = KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64;
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_ANY;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = test_naive_matmul;
  return desc;
}

kabi_status test_failing_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  (void)user_data;
  (void)problem;
  (void)args;
  kabi_set_last_error("the accumulator overflowed");
  return KABI_STATUS_INTERNAL;
}

void test_count_free(void* user_data) {
  ++((test_counters*)user_data)->frees;
}

void test_reference_matmul(const double* a, const double* b, double* out, int64_t m, int64_t n, int64_t k) {
  int64_t i, j, p;
  for (i = 0; i < m; ++i) {
    for (j = 0; j < n; ++j) {
      double sum = 0.0;
      for (p = 0; p < k; ++p) sum += a[i * k + p] * b[p * n + j];
      out[i * n + j] = sum;
    }
  }
}

double test_random_uniform(void) {
  static uint64_t state = 0;
  if (state == 0) {
    state = ((uint64_t)time(NULL) << 20) ^ (uint64_t)clock() ^ UINT64_C(0x9E3779B97F4A7C15);
    printf("random seed %llu\n", (unsigned long long)state);
  }
  /* xorshift64* */
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return (double)((state * UINT64_C(2685821657736338717)) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

DLTensor test_tensor(void* data, DLDataType dtype, int32_t ndim, int64_t* shape, int64_t* strides) {
  DLTensor tensor;
  tensor.data = data;
  tensor.device.device_type = kDLCPU;
  tensor.device.device_id = 0;
  tensor.ndim = ndim;
  tensor.dtype = dtype;
  tensor.shape = shape;
  tensor.strides = strides;
  tensor.byte_offset = 0;
  return tensor;
}

DLDataType test_float32(void) {
  DLDataType dtype;
  dtype.code = kDLFloat;
  dtype.bits = 32;
  dtype.lanes = 1;
  return dtype;
}

DLDataType test_float64(void) {
  DLDataType dtype = test_float32();
  dtype.bits = 64;
  return dtype;
}

DLDataType test_float16(void) {
  DLDataType dtype = test_float32();
  dtype.bits = 16;
  return dtype;
}

double test_max_relative_error(const float* actual, const double* expected, int64_t n) {
  double worst = 0.0;
  int64_t i;
  for (i = 0; i < n; ++i) {
    const double scale = fabs(expected[i]) > 1.0 ? fabs(expected[i]) : 1.0;
    const double error = fabs((double)actual[i] - expected[i]) / scale;
    if (error > worst || error != error) worst = error;
  }
  return worst;
}
