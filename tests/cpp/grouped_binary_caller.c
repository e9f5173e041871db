/* A C caller of a Triton grouped GEMM compiled to a device binary: load a directory of manifests
 * (kabi_binaries_load), select the named grouped_mm binary for bfloat16 problems on device memory (forced; a C caller
 * does not tune), launch it in both forms of the op (x[T, K] routed by int32 offsets with an empty group and rows past
 * the last offset; x[E, M, K] with offs left out) and check each result against a double-precision reference on the
 * host. w is read as the binary's name says: the view [E, K, N] of an nn.Linear weight [E, N, K] (".row_column."), or
 * a row-major [E, K, N]. The output starts as NaN, so an element the kernel leaves unwritten fails. The driver API
 * (cuMemAlloc, copies) is opened at run time, as a C application without the CUDA toolkit would.
 *
 *   grouped_binary_caller DIRECTORY KERNEL_NAME
 *
 * Exit status: 0 both results match; 1 a check failed; 2 bad usage; 77 no CUDA device (skipped). C99. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test_support.h"
#include "kabi/kabi.h"

/* Sizes multiples of 16 (as the binary declares) but of no tile; groups of 37, 0, 101, 1 and 64 rows and 9 rows past
 * the last offset. */
enum { GROUPS = 5, ROWS = 212, K = 320, N = 272, ROWS_PER_GROUP = 45 };
static const int32_t group_ends[GROUPS] = {37, 37, 138, 139, 203};

static void fill_random(uint16_t* values, size_t count) {
  size_t i;
  for (i = 0; i < count; ++i) values[i] = to_bfloat16((float)rand() / (float)RAND_MAX * 2.0f - 1.0f);
}

static DLTensor device_tensor(uint64_t data, DLDataType dtype, int32_t ndim, int64_t* shape, int64_t* strides) {
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  tensor.data = (void*)(uintptr_t)data;
  tensor.device.device_type = kDLCUDA;
  tensor.dtype = dtype;
  tensor.ndim = ndim;
  tensor.shape = shape;
  tensor.strides = strides;
  return tensor;
}

static DLDataType bfloat16_type(void) {
  DLDataType dtype;
  dtype.code = kDLBfloat;
  dtype.bits = 16;
  dtype.lanes = 1;
  return dtype;
}

/* The weight of group g at (k, n): w holds an nn.Linear weight [E, N, K] when linear_weight, else [E, K, N]. */
static double weight(const uint16_t* w, int linear_weight, int group, int k, int n) {
  return from_bfloat16(linear_weight ? w[((size_t)group * N + n) * K + k] : w[((size_t)group * K + k) * N + n]);
}

/* The largest error over the largest reference magnitude, as the gate's "extreme" measure (NaN counts as infinite). */
static double extreme_error(const uint16_t* out, const double* reference, size_t count) {
  double worst = 0.0, largest = 0.0;
  size_t i;
  for (i = 0; i < count; ++i) {
    const double difference = fabs(from_bfloat16(out[i]) - reference[i]);
    if (difference != difference) return INFINITY;
    if (difference > worst) worst = difference;
    if (fabs(reference[i]) > largest) largest = fabs(reference[i]);
  }
  return worst / largest;
}

/* Select the named kernel for the call (forced, unverified allowed: a C caller does not tune), launch it with the
 * output poisoned, and return the output copied back in `out`. */
static void run(kabi_op op, const char* name, kabi_args* args, uint64_t out_device, uint16_t* out, size_t count) {
  kabi_select_options options;
  kabi_selection selection;
  kabi_kernel_info info;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = name;
  options.use_tuning_cache = 1;
  options.allow_unverified = 1;
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  memset(out, 0xFF, count * sizeof *out); /* NaN patterns */
  CHECK(cu.to_device(out_device, out, count * sizeof *out) == 0, "cuMemcpyHtoD");
  if (kabi_select(op, args, &options, &selection) != KABI_STATUS_OK) {
    CHECK(0, "kabi_select: %s", kabi_last_error());
    return;
  }
  CHECK(kabi_kernel_info_get(selection.kernel, &info) == KABI_STATUS_OK && info.kind == KABI_KERNEL_DEVICE_BINARY,
        "the pick is not a device binary");
  CHECK(kabi_launch(selection.kernel, args) == KABI_STATUS_OK, "kabi_launch: %s", kabi_last_error());
  CHECK(cu.synchronize() == 0 && cu.to_host(out, out_device, count * sizeof *out) == 0, "copy back");
}

int main(int argc, char** argv) {
  static uint16_t x[ROWS * K], w[GROUPS * K * N], out[ROWS * N];
  static uint16_t x3[GROUPS * ROWS_PER_GROUP * K], out3[GROUPS * ROWS_PER_GROUP * N];
  static double reference[ROWS * N], reference3[GROUPS * ROWS_PER_GROUP * N];
  int64_t x_shape[2] = {ROWS, K}, w_shape[3] = {GROUPS, K, N}, offs_shape[1] = {GROUPS}, out_shape[2] = {ROWS, N};
  int64_t x3_shape[3] = {GROUPS, ROWS_PER_GROUP, K}, out3_shape[3] = {GROUPS, ROWS_PER_GROUP, N};
  int64_t linear_strides[3] = {(int64_t)N * K, 1, K};
  uint64_t x_device = 0, w_device = 0, offs_device = 0, out_device = 0, x3_device = 0, out3_device = 0;
  DLDataType int32_type;
  DLTensor inputs[3], outputs[1];
  kabi_args args;
  kabi_op op = NULL;
  int32_t registered = 0, devices = 0, linear_weight, group, row, column, k;
  double error;

  if (argc != 3) {
    fprintf(stderr, "usage: %s DIRECTORY KERNEL_NAME\n", argv[0]);
    return 2;
  }
  if (kabi_binaries_load(argv[1], &registered) != KABI_STATUS_OK) {
    fprintf(stderr, "FAILED: kabi_binaries_load(%s): %s\n", argv[1], kabi_last_error());
    return 1;
  }
  if (kabi_device_count(kDLCUDA, &devices) != KABI_STATUS_OK || devices == 0 || !open_driver()) {
    printf("no CUDA device: skipped\n");
    return SKIPPED;
  }
  linear_weight = strstr(argv[2], ".row_column.") != NULL;
  CHECK(kabi_op_find("grouped_mm", &op) == KABI_STATUS_OK, "kabi_op_find: %s", kabi_last_error());

  srand(11);
  fill_random(x, ROWS * K);
  fill_random(w, GROUPS * K * N);
  fill_random(x3, GROUPS * ROWS_PER_GROUP * K);
  for (row = 0, group = 0; row < ROWS; ++row) {
    while (group < GROUPS && row >= group_ends[group]) ++group;
    for (column = 0; column < N; ++column) {
      double sum = 0.0;
      for (k = 0; k < K && group < GROUPS; ++k) {
        sum += from_bfloat16(x[row * K + k]) * weight(w, linear_weight, group, k, column);
      }
      reference[row * N + column] = sum;
    }
  }
  for (group = 0; group < GROUPS; ++group) {
    for (row = 0; row < ROWS_PER_GROUP; ++row) {
      for (column = 0; column < N; ++column) {
        double sum = 0.0;
        for (k = 0; k < K; ++k) {
          sum += from_bfloat16(x3[((size_t)group * ROWS_PER_GROUP + row) * K + k]) *
                 weight(w, linear_weight, group, k, column);
        }
        reference3[((size_t)group * ROWS_PER_GROUP + row) * N + column] = sum;
      }
    }
  }

  CHECK(cu.alloc(&x_device, sizeof x) == 0 && cu.alloc(&w_device, sizeof w) == 0 &&
            cu.alloc(&offs_device, sizeof group_ends) == 0 && cu.alloc(&out_device, sizeof out) == 0 &&
            cu.alloc(&x3_device, sizeof x3) == 0 && cu.alloc(&out3_device, sizeof out3) == 0,
        "cuMemAlloc");
  CHECK(cu.to_device(x_device, x, sizeof x) == 0 && cu.to_device(w_device, w, sizeof w) == 0 &&
            cu.to_device(offs_device, group_ends, sizeof group_ends) == 0 &&
            cu.to_device(x3_device, x3, sizeof x3) == 0,
        "cuMemcpyHtoD");
  if (failures != 0) return 1;

  int32_type.code = kDLInt;
  int32_type.bits = 32;
  int32_type.lanes = 1;
  inputs[0] = device_tensor(x_device, bfloat16_type(), 2, x_shape, NULL);
  inputs[1] = device_tensor(w_device, bfloat16_type(), 3, w_shape, linear_weight ? linear_strides : NULL);
  inputs[2] = device_tensor(offs_device, int32_type, 1, offs_shape, NULL);
  outputs[0] = device_tensor(out_device, bfloat16_type(), 2, out_shape, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 3;
  args.outputs = outputs;
  args.num_outputs = 1;
  run(op, argv[2], &args, out_device, out, ROWS * N);
  error = extreme_error(out, reference, ROWS * N);
  CHECK(error <= 4e-2, "2-D form: extreme error %g", error);
  printf("%s 2-D form (%d x %d x %d, %d groups): extreme error %.2e\n", argv[2], ROWS, N, K, GROUPS, error);

  /* The 3-D form: the trailing optional offs left out, which the binary receives as NULL. */
  inputs[0] = device_tensor(x3_device, bfloat16_type(), 3, x3_shape, NULL);
  outputs[0] = device_tensor(out3_device, bfloat16_type(), 3, out3_shape, NULL);
  args.num_inputs = 2;
  run(op, argv[2], &args, out3_device, out3, (size_t)GROUPS * ROWS_PER_GROUP * N);
  error = extreme_error(out3, reference3, (size_t)GROUPS * ROWS_PER_GROUP * N);
  CHECK(error <= 4e-2, "3-D form: extreme error %g", error);
  printf("%s 3-D form (%d x %d x %d x %d): extreme error %.2e\n", argv[2], GROUPS, ROWS_PER_GROUP, N, K, error);

  cu.release(x_device);
  cu.release(w_device);
  cu.release(offs_device);
  cu.release(out_device);
  cu.release(x3_device);
  cu.release(out3_device);
  printf("%s\n", failures == 0 ? "PASSED" : "FAILED");
  return failures == 0 ? 0 : 1;
}
