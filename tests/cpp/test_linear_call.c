/* A C caller of the built-in op "linear": out[..., N] = activation(x[..., K] @ w[N, K]^T + bias[N]), through
 * kabi_call on float32 CPU tensors served by the built-in CPU plugin's cpu.openblas.linear, with the bias present
 * and absent and every activation (the attribute passed as its enum index), checked against a naive loop in double.
 * Selection is strict here (no allow_unverified, KABI_ALLOW_UNVERIFIED unset): a problem without a gate verdict is
 * refused with the remedy, and serves once the verdict `kabi verify linear` would record is in the tuning cache.
 * C99. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_call_helpers.h"
#include "test_check.h"
#include "test_kernels.h"

#define ROWS_OUTER 2
#define ROWS_INNER 3
#define ROWS (ROWS_OUTER * ROWS_INNER)
#define K 13
#define N 7

/* The op's enum(none, relu, gelu, gelu_tanh, silu), in its order: the index is the attribute's value. */
static const char* const kActivations[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};
#define NUM_ACTIVATIONS 5

static double activate(double value, int activation) {
  switch (activation) {
    case 1:
      return value < 0 ? 0 : value;
    case 2:
      return 0.5 * value * (1 + erf(value / sqrt(2.0)));
    case 3:
      return 0.5 * value * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (value + 0.044715 * value * value * value)));
    case 4:
      return value / (1 + exp(-value));
    default:
      return value;
  }
}

/* One call's tensors: x [2, 3, K], w [N, K], bias [N] (absent: a zero-filled DLTensor), out [2, 3, N]. */
typedef struct linear_call {
  float x[ROWS * K], w[N * K], bias[N], out[ROWS * N];
  int64_t x_shape[3], w_shape[2], bias_shape[1], out_shape[3];
  DLTensor inputs[3];
  DLTensor output;
  kabi_attribute_value activation;
  kabi_args args;
} linear_call;

static void make_call(linear_call* call, int with_bias, int activation) {
  int i;
  memset(call, 0, sizeof *call);
  for (i = 0; i < ROWS * K; ++i) call->x[i] = (float)(2 * test_random_uniform());
  for (i = 0; i < N * K; ++i) call->w[i] = (float)test_random_uniform();
  for (i = 0; i < N; ++i) call->bias[i] = (float)test_random_uniform();
  call->x_shape[0] = ROWS_OUTER;
  call->x_shape[1] = ROWS_INNER;
  call->x_shape[2] = K;
  call->w_shape[0] = N;
  call->w_shape[1] = K;
  call->bias_shape[0] = N;
  call->out_shape[0] = ROWS_OUTER;
  call->out_shape[1] = ROWS_INNER;
  call->out_shape[2] = N;
  call->inputs[0] = test_tensor(call->x, test_float32(), 3, call->x_shape, NULL);
  call->inputs[1] = test_tensor(call->w, test_float32(), 2, call->w_shape, NULL);
  if (with_bias) call->inputs[2] = test_tensor(call->bias, test_float32(), 1, call->bias_shape, NULL);
  call->output = test_tensor(call->out, test_float32(), 3, call->out_shape, NULL);
  call->activation.integer = activation;
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = 3;
  call->args.outputs = &call->output;
  call->args.num_outputs = 1;
  call->args.attributes = &call->activation;
  call->args.num_attributes = 1;
}

/* Largest |out - reference| / max(1, |reference|) against the loop in double. */
static double max_error(const linear_call* call, int with_bias) {
  double expected[ROWS * N];
  int row, column, k;
  for (row = 0; row < ROWS; ++row) {
    for (column = 0; column < N; ++column) {
      double sum = with_bias ? call->bias[column] : 0.0;
      for (k = 0; k < K; ++k) sum += (double)call->x[row * K + k] * call->w[column * K + k];
      expected[row * N + column] = activate(sum, (int)call->activation.integer);
    }
  }
  return test_max_relative_error(call->out, expected, ROWS * N);
}

static kabi_selection select_strictly(kabi_op op, const kabi_args* args, kabi_status expected) {
  kabi_selection selection;
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  CHECK(kabi_select(op, args, NULL, &selection) == expected);
  return selection;
}

/* Every (bias, activation): each is its own problem (the key has the bias's layout, "absent" without one, and the
 * activation), refused until a verdict says its kernel passed the gate on it, then served. */
static void test_every_bias_and_activation(kabi_op op, kabi_kernel kernel) {
  int with_bias, activation;
  for (with_bias = 0; with_bias <= 1; ++with_bias) {
    for (activation = 0; activation < NUM_ACTIVATIONS; ++activation) {
      linear_call call;
      kabi_selection selection;
      double error;
      make_call(&call, with_bias, activation);
      CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_NO_ELIGIBLE_KERNEL,
                   "no eligible kernel has passed the correctness gate");
      CHECK(strstr(kabi_last_error(), "kabi verify linear") != NULL);
      test_record_passed_gate(op, kernel, &call.args);
      selection = select_strictly(op, &call.args, KABI_STATUS_OK);
      CHECK(selection.kernel == kernel && selection.verified == 1);
      CHECK(strstr(selection.problem.key, with_bias ? ",contiguous|" : ",absent|") != NULL);
      CHECK(strcmp(strrchr(selection.problem.key, '|') + 1, kActivations[activation]) == 0);
      CHECK(kabi_call(op, &call.args, NULL) == KABI_STATUS_OK);
      error = max_error(&call, with_bias);
      if (error >= 1e-5) {
        fprintf(stderr, "linear, bias %s, activation %s: max relative error %g\n", with_bias ? "present" : "absent",
                kActivations[activation], error);
        ++failures;
      }
    }
  }
}

/* An activation index outside the enum is refused before any kernel runs. */
static void test_bad_activation(kabi_op op) {
  linear_call call;
  make_call(&call, 0, NUM_ACTIVATIONS);
  CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "linear: attribute activation is 5; expected an index below 5 (none, relu, gelu, gelu_tanh, silu)");
}

int main(void) {
  kabi_op op;
  kabi_kernel kernel;
  test_call_start("linear");
  if (!test_find_builtin_kernel("linear", "cpu.openblas.linear", &op, &kernel)) return 1;
  test_every_bias_and_activation(op, kernel);
  test_bad_activation(op);
  return test_call_finish("linear");
}
