/* A C caller of the built-in op "grouped_mm" through kabi_call on float32 CPU tensors, served by the CPU plugin's
 * cpu.openblas.grouped_mm: the 2-D form (x[T, K], w the transposed view of an nn.Linear [E, N, K] weight, int32
 * offsets with an empty group and rows past the last offset) and the 3-D form (x[E, M, K] @ w[E, K, N]), checked
 * against a loop in double; then the op's validation as C callers get it: unsorted offsets, offsets past T, a wrong
 * offset dtype, a mismatched E, and offsets given or missing against x's rank, each refused naming the argument.
 * Selection is strict (KABI_ALLOW_UNVERIFIED unset): the verdict `kabi verify grouped_mm` records is stored first.
 * C99. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_call_helpers.h"
#include "test_check.h"
#include "test_kernels.h"

#define GROUPS 3
#define ROWS 11
#define K 5
#define N 4
#define M 2

/* x [ROWS, K]; w_nk [GROUPS, N, K] passed as its transpose [GROUPS, K, N]; groups of 4, 0 and 5 rows, 2 past. */
typedef struct grouped_call {
  float x[ROWS * K], w[GROUPS * N * K], out[ROWS * N];
  int32_t offsets[GROUPS];
  int64_t x_shape[2], w_shape[3], w_strides[3], offsets_shape[1], out_shape[2];
  DLTensor inputs[3];
  DLTensor output;
  kabi_args args;
} grouped_call;

static DLDataType int_dtype(uint8_t bits) {
  DLDataType dtype;
  dtype.code = kDLInt;
  dtype.bits = bits;
  dtype.lanes = 1;
  return dtype;
}

static void make_call(grouped_call* call) {
  int i;
  memset(call, 0, sizeof *call);
  for (i = 0; i < ROWS * K; ++i) call->x[i] = (float)test_random_uniform();
  for (i = 0; i < GROUPS * N * K; ++i) call->w[i] = (float)test_random_uniform();
  for (i = 0; i < ROWS * N; ++i) call->out[i] = 1e30f;
  call->offsets[0] = 4;
  call->offsets[1] = 4;
  call->offsets[2] = 9;
  call->x_shape[0] = ROWS;
  call->x_shape[1] = K;
  call->w_shape[0] = GROUPS;
  call->w_shape[1] = K;
  call->w_shape[2] = N;
  call->w_strides[0] = N * K;
  call->w_strides[1] = 1;
  call->w_strides[2] = K;
  call->offsets_shape[0] = GROUPS;
  call->out_shape[0] = ROWS;
  call->out_shape[1] = N;
  call->inputs[0] = test_tensor(call->x, test_float32(), 2, call->x_shape, NULL);
  call->inputs[1] = test_tensor(call->w, test_float32(), 3, call->w_shape, call->w_strides);
  call->inputs[2] = test_tensor(call->offsets, int_dtype(32), 1, call->offsets_shape, NULL);
  call->output = test_tensor(call->out, test_float32(), 2, call->out_shape, NULL);
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = 3;
  call->args.outputs = &call->output;
  call->args.num_outputs = 1;
}

static double max_error_2d(const grouped_call* call) {
  double expected[ROWS * N];
  int group = 0, row, column, k;
  for (row = 0; row < ROWS; ++row) {
    while (group < GROUPS && row >= call->offsets[group]) ++group;
    for (column = 0; column < N; ++column) {
      double sum = 0.0;
      for (k = 0; k < K && group < GROUPS; ++k) {
        sum += (double)call->x[row * K + k] * call->w[group * N * K + column * K + k];
      }
      expected[row * N + column] = sum;
    }
  }
  return test_max_relative_error(call->out, expected, ROWS * N);
}

static void test_two_d_form(kabi_op op, kabi_kernel kernel) {
  grouped_call call;
  double error;
  make_call(&call);
  test_record_passed_gate(op, kernel, &call.args);
  CHECK(kabi_call(op, &call.args, NULL) == KABI_STATUS_OK);
  error = max_error_2d(&call);
  if (error >= 1e-5) {
    fprintf(stderr, "grouped_mm 2-D: max relative error %g\n", error);
    ++failures;
  }
}

static void test_three_d_form(kabi_op op, kabi_kernel kernel) {
  float x[GROUPS * M * K], w[GROUPS * K * N], out[GROUPS * M * N];
  double expected[GROUPS * M * N];
  int64_t x_shape[3] = {GROUPS, M, K}, w_shape[3] = {GROUPS, K, N}, out_shape[3] = {GROUPS, M, N};
  DLTensor inputs[2], output;
  kabi_args args;
  int i, group;
  for (i = 0; i < GROUPS * M * K; ++i) x[i] = (float)test_random_uniform();
  for (i = 0; i < GROUPS * K * N; ++i) w[i] = (float)test_random_uniform();
  inputs[0] = test_tensor(x, test_float32(), 3, x_shape, NULL);
  inputs[1] = test_tensor(w, test_float32(), 3, w_shape, NULL);
  output = test_tensor(out, test_float32(), 3, out_shape, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 2; /* the trailing optional offs left out */
  args.outputs = &output;
  args.num_outputs = 1;
  test_record_passed_gate(op, kernel, &args);
  CHECK(kabi_call(op, &args, NULL) == KABI_STATUS_OK);
  for (group = 0; group < GROUPS; ++group) {
    int row, column, k;
    for (row = 0; row < M; ++row) {
      for (column = 0; column < N; ++column) {
        double sum = 0.0;
        for (k = 0; k < K; ++k) sum += (double)x[(group * M + row) * K + k] * w[(group * K + k) * N + column];
        expected[(group * M + row) * N + column] = sum;
      }
    }
  }
  if (test_max_relative_error(out, expected, GROUPS * M * N) >= 1e-5) {
    fprintf(stderr, "grouped_mm 3-D: wrong result\n");
    ++failures;
  }
}

static void test_validation(kabi_op op) {
  grouped_call call;
  int64_t x3_shape[3] = {GROUPS, 3, K};
  int64_t short_shape[1] = {GROUPS - 1};
  make_call(&call);
  call.offsets[1] = 2;
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "grouped_mm: offs[1] is 2, below offs[0] = 4: group end offsets must be sorted (non-decreasing) from 0");
  make_call(&call);
  call.offsets[2] = ROWS + 1;
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "grouped_mm: offs[2] is 12, past the end of R (11): group end offsets must not exceed it");
  make_call(&call);
  call.inputs[2].dtype = int_dtype(64);
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_UNSUPPORTED_DTYPE,
               "grouped_mm: offs is int64; expected int32");
  make_call(&call);
  call.inputs[2].shape = short_shape;
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "grouped_mm: offs has shape [2] but w has shape [3, 5, 4]: offs's dimension E (-1) must be 3");
  make_call(&call);
  call.args.num_inputs = 2;
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "grouped_mm: offs is required when x has rank 2 (x has shape [11, 5])");
  make_call(&call);
  call.inputs[0].ndim = 3;
  call.inputs[0].shape = x3_shape;
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "grouped_mm: offs must be absent unless x has rank 2 (x has shape [3, 3, 5])");
}

int main(void) {
  kabi_op op;
  kabi_kernel kernel;
  test_call_start("grouped");
  if (!test_find_builtin_kernel("grouped_mm", "cpu.openblas.grouped_mm", &op, &kernel)) return 1;
  test_two_d_form(op, kernel);
  test_three_d_form(op, kernel);
  test_validation(op);
  return test_call_finish("grouped_mm");
}
