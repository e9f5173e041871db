/* Shared by the C and C++ test programs: a naive strided, broadcasting matmul kernel with the kabi_kernel_fn
 * signature, a reference to check it against, random inputs, and small assertion helpers. C99. */
#ifndef KABI_TESTS_CPP_TEST_KERNELS_H_
#define KABI_TESTS_CPP_TEST_KERNELS_H_

#include <stdint.h>

#include "kabi/kabi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a test kernel's user_data points to (or NULL). */
typedef struct test_counters {
  int calls;
  int frees;
} test_counters;

/* out[..., M, N] = a[..., M, K] @ b[..., K, N] for float32 or float64, any strides, batch dims broadcast.
 * Counts its calls in user_data (a test_counters, or NULL). Returns KABI_STATUS_UNSUPPORTED_DTYPE for other
 * dtypes. */
kabi_status test_naive_matmul(void* user_data, const kabi_problem* problem, const kabi_args* args);

/* A CPU matmul declaration of test_naive_matmul (float32/float64, any layout, any batch) under name and backend;
 * tests adjust fields before registering it. */
kabi_kernel_desc test_naive_desc(const char* name, const char* backend);

/* A kernel that always fails with KABI_STATUS_INTERNAL. */
kabi_status test_failing_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args);

/* user_data_free for a test_counters: counts the call. */
void test_count_free(void* user_data);

/* Reference for a contiguous a[M, K] @ b[K, N] in double. */
void test_reference_matmul(const double* a, const double* b, double* out, int64_t m, int64_t n, int64_t k);

/* Fresh uniform values in [-1, 1): seeded once per process from the clock (printed for reproduction). */
double test_random_uniform(void);

/* A DLTensor over caller memory; strides NULL (contiguous) unless given. */
DLTensor test_tensor(void* data, DLDataType dtype, int32_t ndim, int64_t* shape, int64_t* strides);

DLDataType test_float32(void);
DLDataType test_float64(void);
DLDataType test_float16(void);

/* Largest |x - y| / max(1, |y|) over n values. */
double test_max_relative_error(const float* actual, const double* expected, int64_t n);

#ifdef __cplusplus
}
#endif

#endif /* KABI_TESTS_CPP_TEST_KERNELS_H_ */
