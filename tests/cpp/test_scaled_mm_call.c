/* A C caller of the built-in op "scaled_mm": out[M, N] = (scale_a * a[M, K]) @ (scale_b * b[K, N]) + bias[N] in the
 * dtype out_dtype names. The op declares a scale as "[] | [M, 1]" and out_dtype as an attribute typed by its output's
 * type variable (ABI 2.1): this reads both declarations through the C ABI, describes calls with per-tensor and
 * row-wise scales and each output dtype (the bound dtypes, the output shape, the matched shapes and the key), is
 * refused each bad argument with a message naming it, and calls a C kernel of its own through kabi_call with strict
 * selection (a gate verdict recorded first), checked against a loop in double. float8_e4m3fn bytes are decoded here.
 * C99. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_call_helpers.h"
#include "test_check.h"
#include "test_kernels.h"

#define M 5
#define N 6
#define K 7
/* Inputs in schema order. */
enum { kA, kB, kScaleA, kScaleB, kBias, kNumInputs };
/* out_dtype's values in KABI_DTYPE_* bit order, as the op lists them: float16, bfloat16, float32. */
enum { kOutFloat16, kOutBfloat16, kOutFloat32 };

static DLDataType float8_e4m3fn(void) {
  DLDataType dtype;
  dtype.code = kDLFloat8_e4m3fn;
  dtype.bits = 8;
  dtype.lanes = 1;
  return dtype;
}

/* The value of a float8_e4m3fn byte: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities. */
static double decode_e4m3(uint8_t byte) {
  const int sign = byte >> 7, exponent = (byte >> 3) & 0xF, mantissa = byte & 0x7;
  const double magnitude = exponent == 0 ? ldexp(mantissa / 8.0, -6) : ldexp(1 + mantissa / 8.0, exponent - 7);
  return sign ? -magnitude : magnitude;
}

/* A random finite e4m3 byte below 2 in magnitude (exponent field under 8), either sign; never a NaN code. */
static uint8_t random_e4m3(void) {
  const double value = test_random_uniform();
  const uint8_t magnitude = (uint8_t)(fabs(value) * 0x40) & 0x3F;
  return value < 0 ? (uint8_t)(magnitude | 0x80) : magnitude;
}

/* One call's tensors: a [M, K] row-major; b [K, N] column-major (the transposed view of an [N, K] weight); the
 * scales per tensor ([]) or row-wise ([M, 1], [1, N]); bias [N] float32; out [M, N] float32. */
typedef struct scaled_mm_call {
  uint8_t a[M * K], b[N * K];
  float scale_a[M], scale_b[N], bias[N], out[M * N];
  int64_t a_shape[2], b_shape[2], b_strides[2], scale_a_shape[2], scale_b_shape[2], bias_shape[1], out_shape[2];
  DLTensor inputs[kNumInputs];
  DLTensor output;
  kabi_attribute_value out_dtype;
  kabi_args args;
} scaled_mm_call;

static void make_call(scaled_mm_call* call, int row_wise, int with_bias, int64_t out_dtype) {
  int i;
  memset(call, 0, sizeof *call);
  for (i = 0; i < M * K; ++i) call->a[i] = random_e4m3();
  for (i = 0; i < N * K; ++i) call->b[i] = random_e4m3();
  for (i = 0; i < M; ++i) call->scale_a[i] = (float)(1.25 + 0.75 * test_random_uniform());
  for (i = 0; i < N; ++i) call->scale_b[i] = (float)(1.25 + 0.75 * test_random_uniform());
  for (i = 0; i < N; ++i) call->bias[i] = (float)test_random_uniform();
  call->a_shape[0] = M;
  call->a_shape[1] = K;
  call->b_shape[0] = K;
  call->b_shape[1] = N;
  call->b_strides[0] = 1;
  call->b_strides[1] = K;
  call->scale_a_shape[0] = M;
  call->scale_a_shape[1] = 1;
  call->scale_b_shape[0] = 1;
  call->scale_b_shape[1] = N;
  call->bias_shape[0] = N;
  call->out_shape[0] = M;
  call->out_shape[1] = N;
  call->inputs[kA] = test_tensor(call->a, float8_e4m3fn(), 2, call->a_shape, NULL);
  call->inputs[kB] = test_tensor(call->b, float8_e4m3fn(), 2, call->b_shape, call->b_strides);
  call->inputs[kScaleA] = test_tensor(call->scale_a, test_float32(), row_wise ? 2 : 0, call->scale_a_shape, NULL);
  call->inputs[kScaleB] = test_tensor(call->scale_b, test_float32(), row_wise ? 2 : 0, call->scale_b_shape, NULL);
  if (with_bias) call->inputs[kBias] = test_tensor(call->bias, test_float32(), 1, call->bias_shape, NULL);
  call->output = test_tensor(call->out, test_float32(), 2, call->out_shape, NULL);
  call->out_dtype.integer = out_dtype;
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = kNumInputs;
  call->args.outputs = &call->output;
  call->args.num_outputs = 1;
  call->args.attributes = &call->out_dtype;
  call->args.num_attributes = 1;
}

static double scale_of(const DLTensor* scale, int64_t index) {
  return ((const float*)scale->data)[scale->ndim == 0 ? 0 : index];
}

/* The test kernel: float32 output only, as its declaration says; any scale kind, bias or none. */
static kabi_status naive_scaled_mm(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const DLTensor* inputs = args->inputs;
  const uint8_t* a = (const uint8_t*)inputs[kA].data;
  const uint8_t* b = (const uint8_t*)inputs[kB].data;
  float* out = (float*)args->outputs[0].data;
  const int64_t m = problem->dims[0], k = problem->dims[1], n = problem->dims[2];
  const int64_t* b_strides = inputs[kB].strides;
  int64_t row, column, inner;
  (void)user_data;
  for (row = 0; row < m; ++row) {
    for (column = 0; column < n; ++column) {
      double sum = 0;
      for (inner = 0; inner < k; ++inner) {
        sum += decode_e4m3(a[row * k + inner]) * decode_e4m3(b[inner * b_strides[0] + column * b_strides[1]]);
      }
      sum *= scale_of(&inputs[kScaleA], row) * scale_of(&inputs[kScaleB], column);
      if (inputs[kBias].dtype.bits != 0) sum += ((const float*)inputs[kBias].data)[column];
      out[row * n + column] = (float)sum;
    }
  }
  return KABI_STATUS_OK;
}

static double max_error(const scaled_mm_call* call, int with_bias) {
  double expected[M * N];
  int row, column, k;
  for (row = 0; row < M; ++row) {
    for (column = 0; column < N; ++column) {
      double sum = 0;
      for (k = 0; k < K; ++k) sum += decode_e4m3(call->a[row * K + k]) * decode_e4m3(call->b[column * K + k]);
      sum *= scale_of(&call->inputs[kScaleA], row) * scale_of(&call->inputs[kScaleB], column);
      expected[row * N + column] = sum + (with_bias ? call->bias[column] : 0.0);
    }
  }
  return test_max_relative_error(call->out, expected, M * N);
}

/* The declarations of ABI 2.1 as a C caller reads them. */
static void test_declaration(kabi_op op) {
  kabi_tensor_decl scale_a;
  kabi_attribute_decl out_dtype;
  kabi_op_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(op, &info) == KABI_STATUS_OK);
  memset(&scale_a, 0, sizeof scale_a);
  scale_a.struct_size = sizeof scale_a;
  CHECK(kabi_op_tensor_get(op, kScaleA, &scale_a) == KABI_STATUS_OK);
  CHECK(strcmp(scale_a.name, "scale_a") == 0 && scale_a.num_dims == 0);
  CHECK(scale_a.num_alternative_shapes == 1 && scale_a.alternative_ranks[0] == 2);
  CHECK(strcmp(info.dim_names[scale_a.alternative_dims[0][0]], "M") == 0);
  CHECK(scale_a.alternative_dims[0][1] == KABI_DIM_ONE);
  memset(&out_dtype, 0, sizeof out_dtype);
  out_dtype.struct_size = sizeof out_dtype;
  CHECK(kabi_op_attribute_get(op, 0, &out_dtype) == KABI_STATUS_OK);
  CHECK(out_dtype.type == KABI_ATTRIBUTE_ENUM && out_dtype.type_variable == 0 && out_dtype.num_enum_values == 3);
  CHECK(strcmp(out_dtype.enum_values[kOutFloat32], "float32") == 0);
  CHECK(out_dtype.has_default && out_dtype.default_value.integer == kOutBfloat16);
}

/* Each scale kind and output dtype: the bound dtypes, the shapes each input matched, the output's shape, the key. */
static void test_describe(kabi_op op) {
  static const uint32_t kOutBits[] = {KABI_DTYPE_FLOAT16, KABI_DTYPE_BFLOAT16, KABI_DTYPE_FLOAT32};
  int row_wise, out_dtype;
  for (row_wise = 0; row_wise <= 1; ++row_wise) {
    for (out_dtype = kOutFloat16; out_dtype <= kOutFloat32; ++out_dtype) {
      scaled_mm_call call;
      kabi_problem problem;
      make_call(&call, row_wise, 0, out_dtype);
      call.args.num_outputs = 0; /* describe derives the output; the caller allocates it after */
      memset(&problem, 0, sizeof problem);
      problem.struct_size = sizeof problem;
      CHECK(kabi_problem_describe(op, &call.args, &problem) == KABI_STATUS_OK);
      CHECK(problem.type_bindings[0] == kOutBits[out_dtype]);
      CHECK(problem.type_bindings[1] == KABI_DTYPE_FLOAT8_E4M3FN);
      CHECK(problem.type_bindings[2] == KABI_DTYPE_FLOAT8_E4M3FN);
      CHECK(problem.output_ranks[0] == 2 && problem.output_shapes[0][0] == M && problem.output_shapes[0][1] == N);
      CHECK(problem.input_shapes[kScaleA] == row_wise && problem.input_shapes[kScaleB] == row_wise);
      CHECK(problem.input_shapes[kA] == 0 && problem.input_layouts[kB] == KABI_LAYOUT_COL_STRIDED);
      CHECK(strstr(problem.key, row_wise ? ",contiguous[M,1],contiguous[1,N],absent|"
                                         : ",contiguous[],contiguous[],absent|") != NULL);
    }
  }
}

static void expect_refused(kabi_op op, scaled_mm_call* call, kabi_status status, const char* fragment) {
  CHECK_STATUS(kabi_call(op, &call->args, NULL), status, fragment);
}

/* Every bad argument is refused before any kernel runs, naming it. */
static void test_bad_arguments(kabi_op op) {
  scaled_mm_call call;
  uint16_t half_bias[N] = {0};
  make_call(&call, 1, 0, kOutFloat32);
  call.scale_a_shape[1] = 2;
  expect_refused(op, &call, KABI_STATUS_INVALID_ARGUMENT,
                 "scale_a has shape [5, 2]; expected [] or [M, 1]: its dimension -1 must be 1");
  make_call(&call, 1, 0, kOutFloat32);
  call.inputs[kScaleB].ndim = 1;
  expect_refused(op, &call, KABI_STATUS_INVALID_ARGUMENT,
                 "scale_b has shape [1] (rank 1); expected [] or [1, N] (rank 0 or 2)");
  make_call(&call, 0, 0, kOutFloat32);
  call.inputs[kA].dtype = test_float32();
  expect_refused(op, &call, KABI_STATUS_UNSUPPORTED_DTYPE, "a is float32, which F8A does not take");
  make_call(&call, 0, 1, kOutBfloat16);
  call.inputs[kBias] = test_tensor(half_bias, test_float16(), 1, call.bias_shape, NULL);
  expect_refused(op, &call, KABI_STATUS_UNSUPPORTED_DTYPE,
                 "out_dtype is bfloat16 but bias is float16 (both have type O)");
  make_call(&call, 0, 0, kOutBfloat16);
  expect_refused(op, &call, KABI_STATUS_UNSUPPORTED_DTYPE, "out is float32 but out_dtype is bfloat16");
  make_call(&call, 0, 0, 3);
  expect_refused(op, &call, KABI_STATUS_INVALID_ARGUMENT,
                 "attribute out_dtype is 3; expected an index below 3 (float16, bfloat16, float32)");
}

/* The C kernel served through kabi_call once a verdict says it passed the gate, for each scale kind and bias. */
static void test_call(kabi_op op, kabi_kernel kernel) {
  int row_wise, with_bias;
  for (row_wise = 0; row_wise <= 1; ++row_wise) {
    for (with_bias = 0; with_bias <= 1; ++with_bias) {
      scaled_mm_call call;
      double error;
      make_call(&call, row_wise, with_bias, kOutFloat32);
      CHECK_STATUS(kabi_call(op, &call.args, NULL), KABI_STATUS_NO_ELIGIBLE_KERNEL,
                   "no eligible kernel has passed the correctness gate");
      test_record_passed_gate(op, kernel, &call.args);
      CHECK(kabi_call(op, &call.args, NULL) == KABI_STATUS_OK);
      error = max_error(&call, with_bias);
      if (error >= 1e-6) {
        fprintf(stderr, "scaled_mm, %s scales, bias %s: max relative error %g\n", row_wise ? "row-wise" : "tensor",
                with_bias ? "present" : "absent", error);
        ++failures;
      }
    }
  }
}

int main(void) {
  kabi_op op = NULL;
  kabi_kernel kernel = NULL;
  kabi_kernel_desc desc;
  test_call_start("scaled-mm");
  CHECK(kabi_op_find("scaled_mm", &op) == KABI_STATUS_OK);
  if (op == NULL) {
    fprintf(stderr, "scaled_mm is missing: %s\n", kabi_last_error());
    return 1;
  }
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = "scaled_mm";
  desc.name = "c.naive_scaled_mm";
  desc.backend = "c";
  desc.device_type = kDLCPU;
  desc.dtypes = KABI_DTYPE_FLOAT8_E4M3FN;
  desc.type_constraints = "O: float32; F8A: float8_e4m3fn; F8B: float8_e4m3fn";
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_NONE;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = naive_scaled_mm;
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK);
  test_declaration(op);
  test_describe(op);
  test_bad_arguments(op);
  test_call(op, kernel);
  CHECK(kabi_kernel_unregister("scaled_mm", "c.naive_scaled_mm") == KABI_STATUS_OK);
  return test_call_finish("scaled_mm");
}
