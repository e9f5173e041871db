/* A C99 caller of libkabi: registers a kernel through the ABI, selects, launches, checks the result against a
 * reference on random inputs, and walks every error path of the C API. Exit status 0 when all checks pass. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kabi/kabi.h"
#include "test_check.h"
#include "test_kernels.h"

#define M 37
#define K 19
#define N 23

static kabi_op matmul;
static test_counters naive_counters;

static kabi_args make_args(DLTensor* inputs, DLTensor* outputs, int32_t num_outputs) {
  kabi_args args;
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 2;
  args.outputs = outputs;
  args.num_outputs = num_outputs;
  return args;
}

static void test_versions_and_names(void) {
  DLDataType bfloat16;
  DLDataType complex128;
  kabi_device_info info;
  char signature[512];
  int32_t count = -1;
  CHECK(kabi_abi_version() == KABI_ABI_VERSION);
  CHECK(strlen(kabi_library_version()) > 0);
  CHECK(strcmp(kabi_status_name(KABI_STATUS_NOT_FOUND), "KABI_STATUS_NOT_FOUND") == 0);
  CHECK(strcmp(kabi_feature_name(KABI_FEATURE_AVX2), "avx2") == 0);
  CHECK(kabi_feature_name(UINT64_C(1) << 60) == NULL);
  bfloat16.code = kDLBfloat;
  bfloat16.bits = 16;
  bfloat16.lanes = 1;
  CHECK(kabi_dtype_bit(bfloat16) == KABI_DTYPE_BFLOAT16);
  CHECK(kabi_dtype_bit(test_float16()) == KABI_DTYPE_FLOAT16);
  CHECK(strcmp(kabi_dtype_name(KABI_DTYPE_FLOAT32), "float32") == 0);
  /* ABI 1.2: complex, uint8 and int16, as DLPack codes them. */
  complex128.code = kDLComplex;
  complex128.bits = 128;
  complex128.lanes = 1;
  CHECK(kabi_dtype_bit(complex128) == KABI_DTYPE_COMPLEX128);
  CHECK(strcmp(kabi_dtype_name(KABI_DTYPE_COMPLEX64), "complex64") == 0);
  CHECK(strcmp(kabi_dtype_name(KABI_DTYPE_UINT8), "uint8") == 0);
  CHECK(strcmp(kabi_dtype_name(KABI_DTYPE_INT16), "int16") == 0);
  CHECK(kabi_device_count(kDLCPU, &count) == KABI_STATUS_OK && count == 1);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_device_info_get(kDLCPU, 0, &info) == KABI_STATUS_OK);
  CHECK(info.device_type == kDLCPU && info.compute_units >= 1 && info.total_memory_bytes > 0);
  CHECK(strlen(info.name) > 0);
  CHECK(kabi_device_signature(kDLCPU, 0, signature, sizeof signature) == KABI_STATUS_OK);
  CHECK(strncmp(signature, "cpu|", 4) == 0 && strstr(signature, "|abi2") != NULL);
  CHECK_STATUS(kabi_device_signature(kDLCPU, 0, signature, 3), KABI_STATUS_INVALID_ARGUMENT, "too small");
  CHECK_STATUS(kabi_device_info_get(kDLCPU, 5, &info), KABI_STATUS_NOT_FOUND, "no device cpu:5");
  info.struct_size = 4;
  CHECK_STATUS(kabi_device_info_get(kDLCPU, 0, &info), KABI_STATUS_INVALID_ARGUMENT, "struct_size");
}

static void test_builtin_op(void) {
  kabi_op_info info;
  kabi_op missing;
  CHECK(kabi_op_find("matmul", &matmul) == KABI_STATUS_OK);
  CHECK(kabi_op_count() >= 1);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(matmul, &info) == KABI_STATUS_OK);
  CHECK(info.num_inputs == 2 && info.num_outputs == 1);
  CHECK(strcmp(info.schema, "a: [..., M, K] T, b: [..., K, N] T -> out: [..., M, N] T") == 0);
  /* Every dtype torch.matmul takes on the CPU (registry/ops/matmul.toml). */
  CHECK(strcmp(info.type_variables,
               "T: float16, bfloat16, float32, float64, complex64, complex128, uint8, int8, int16, int32, int64") == 0);
  CHECK(info.num_type_variables == 1 && info.num_attributes == 0 && info.num_dims == 3);
  CHECK(strcmp(info.dim_names[0], "M") == 0 && strcmp(info.dim_names[1], "K") == 0 &&
        strcmp(info.dim_names[2], "N") == 0);
  CHECK_STATUS(kabi_op_find("no_such_op", &missing), KABI_STATUS_NOT_FOUND, "no_such_op");
  CHECK_STATUS(kabi_op_find(NULL, &missing), KABI_STATUS_INVALID_ARGUMENT, "name is NULL");
}

static void test_register_select_launch(void) {
  static float a[M * K], b[K * N], out[M * N];
  static double a64[M * K], b64[K * N], expected[M * N];
  int64_t a_shape[2] = {M, K}, b_shape[2] = {K, N}, out_shape[2] = {M, N};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_kernel_desc desc = test_naive_desc("c.naive", "c-test");
  kabi_kernel kernel = NULL;
  kabi_selection selection;
  kabi_candidate candidates[4];
  int i;
  for (i = 0; i < M * K; ++i) a[i] = (float)test_random_uniform();
  for (i = 0; i < K * N; ++i) b[i] = (float)test_random_uniform();
  for (i = 0; i < M * K; ++i) a64[i] = a[i];
  for (i = 0; i < K * N; ++i) b64[i] = b[i];
  test_reference_matmul(a64, b64, expected, M, N, K);

  desc.user_data = &naive_counters;
  desc.user_data_free = test_count_free;
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK && kernel != NULL);
  desc.user_data_free = NULL;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_ALREADY_EXISTS, "c.naive");

  inputs[0] = test_tensor(a, test_float32(), 2, a_shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, b_shape, NULL);
  outputs[0] = test_tensor(out, test_float32(), 2, out_shape, NULL);
  args = make_args(inputs, outputs, 1);

  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  candidates[0].struct_size = sizeof candidates[0];
  selection.candidates = candidates;
  selection.candidates_capacity = 4;
  CHECK(kabi_select(matmul, &args, NULL, &selection) == KABI_STATUS_OK);
  CHECK(selection.kernel == kernel);
  CHECK(selection.pick_reason == KABI_PICK_HEURISTIC);
  CHECK(strncmp(selection.reason, "heuristic", 9) == 0);
  CHECK(selection.num_candidates == 1 && candidates[0].picked == 1 && candidates[0].eligible == 1);
  CHECK(selection.problem.dims[0] == M && selection.problem.dims[1] == K && selection.problem.dims[2] == N);
  CHECK(strcmp(selection.problem.key, "float32|contiguous,contiguous|1|64|23|19") == 0);

  memset(out, 0, sizeof out);
  CHECK(kabi_launch(selection.kernel, &args) == KABI_STATUS_OK);
  CHECK(naive_counters.calls == 1);
  CHECK(test_max_relative_error(out, expected, M * N) < 1e-5);

  memset(out, 0, sizeof out);
  CHECK(kabi_call(matmul, &args, NULL) == KABI_STATUS_OK);
  CHECK(test_max_relative_error(out, expected, M * N) < 1e-5);
}

static void test_error_paths(void) {
  float a[8 * 4], b[3 * 5], out[8 * 5];
  int64_t a_shape[2] = {2, 4}, b_shape[2] = {3, 5}, out_shape[2] = {2, 5};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_selection selection;
  kabi_kernel_desc desc = test_naive_desc("c.other", "c-test");
  kabi_problem problem;
  memset(a, 0, sizeof a);
  inputs[0] = test_tensor(a, test_float32(), 2, a_shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, b_shape, NULL);
  outputs[0] = test_tensor(out, test_float32(), 2, out_shape, NULL);
  args = make_args(inputs, outputs, 1);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;

  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "matmul: b has shape [3, 5] but a has shape [2, 4]: b's dimension K (-2) must be 4");
  CHECK_STATUS(kabi_select(NULL, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "op is NULL");
  CHECK_STATUS(kabi_select(matmul, NULL, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "args is NULL");
  CHECK_STATUS(kabi_select(matmul, &args, NULL, NULL), KABI_STATUS_INVALID_ARGUMENT, "out_selection is NULL");
  args.struct_size = 4;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "args->struct_size is 4");
  args.struct_size = sizeof args;
  selection.struct_size = 2;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "struct_size is 2");
  selection.struct_size = sizeof selection;

  b_shape[0] = 4;
  inputs[1].dtype = test_float64();
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_UNSUPPORTED_DTYPE,
               "a is float32 but b is float64");
  inputs[1].dtype = test_float32();
  args.num_inputs = 1;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "expected 2 inputs (a, b), got 1");
  args.num_inputs = 2;
  inputs[0].ndim = 1;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "a has shape [2] (rank 1); expected [..., M, K] (rank at least 2)");
  inputs[0].ndim = 2;
  a_shape[0] = -2;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "negative size");
  a_shape[0] = 2;
  inputs[1].device.device_type = kDLCUDA;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "a is on cpu:0 but b is on cuda:0");
  inputs[1].device.device_type = kDLCPU;
  out_shape[1] = 6;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "out has shape [2, 6]; expected [2, 5]");
  out_shape[1] = 5;
  outputs[0].dtype = test_float64();
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_UNSUPPORTED_DTYPE,
               "out is float64 but a is float32 (both have type T)");
  outputs[0].dtype = test_float32();
  inputs[0].shape = NULL;
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT, "a.shape is NULL");
  inputs[0].shape = a_shape;

  /* No eligible kernel: the only CPU kernels take float32/float64, not float16. */
  inputs[0].dtype = inputs[1].dtype = outputs[0].dtype = test_float16();
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "dtype of T float16 not in {float32, float64}");
  CHECK(selection.kernel == NULL && selection.num_candidates >= 1);
  inputs[0].dtype = inputs[1].dtype = outputs[0].dtype = test_float32();

  memset(&problem, 0, sizeof problem);
  problem.struct_size = sizeof problem;
  CHECK(kabi_problem_describe(matmul, &args, &problem) == KABI_STATUS_OK);
  CHECK(problem.num_outputs == 1 && problem.output_ranks[0] == 2 && problem.output_shapes[0][0] == 2 &&
        problem.output_shapes[0][1] == 5);
  CHECK(problem.num_type_variables == 1 && problem.type_bindings[0] == KABI_DTYPE_FLOAT32 &&
        problem.dtype == KABI_DTYPE_FLOAT32 && problem.num_inputs == 2 && problem.inputs_present == 3u);
  CHECK(problem.batch_mode == KABI_BATCH_NONE && problem.batch_size == 1);

  /* Registration errors. */
  desc.op = "no_such_op";
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_NOT_FOUND, "no_such_op");
  desc.op = "matmul";
  desc.struct_size = 8;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT, "struct_size");
  desc.struct_size = sizeof desc;
  desc.function = NULL;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT, "function is NULL");
  CHECK_STATUS(kabi_kernel_register(NULL, NULL), KABI_STATUS_INVALID_ARGUMENT, "desc is NULL");
  CHECK_STATUS(kabi_kernel_unregister("matmul", "never.registered"), KABI_STATUS_NOT_FOUND, "never.registered");
  CHECK_STATUS(kabi_launch(NULL, &args), KABI_STATUS_INVALID_ARGUMENT, "kernel handle is NULL");
}

static float* align_to_64(float* storage) {
  return (float*)(((uintptr_t)storage + 63) & ~(uintptr_t)63);
}

static void test_forced_and_constraints(void) {
  /* 16 spare floats make room to align each buffer to 64 bytes. */
  static float a_storage[M * K + 16], b_storage[K * N + 32], out_storage[M * N + 16];
  float* a = align_to_64(a_storage);
  float* b = align_to_64(b_storage);
  float* out = align_to_64(out_storage);
  int64_t a_shape[2] = {M, K}, b_shape[2] = {K, N}, out_shape[2] = {M, N};
  int64_t b_transposed_strides[2] = {1, K};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_selection selection;
  kabi_select_options options;
  kabi_kernel_desc desc = test_naive_desc("c.aligned", "c-test");
  kabi_kernel aligned = NULL;
  int i;
  for (i = 0; i < M * K; ++i) a[i] = (float)test_random_uniform();
  for (i = 0; i < K * N + 1; ++i) b[i] = (float)test_random_uniform();
  desc.backend = "strict";
  desc.layouts = KABI_LAYOUT_CONTIGUOUS;
  desc.alignment = 64;
  desc.priority = 5;
  CHECK(kabi_kernel_register(&desc, &aligned) == KABI_STATUS_OK);

  inputs[0] = test_tensor(a, test_float32(), 2, a_shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, b_shape, b_transposed_strides);
  outputs[0] = test_tensor(out, test_float32(), 2, out_shape, NULL);
  args = make_args(inputs, outputs, 1);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = "strict";
  options.use_environment = 0;
  options.use_tuning_cache = 0;
  /* Without the environment, this test of forcing opts in to unverified picks itself. */
  options.allow_unverified = 1;
  CHECK_STATUS(kabi_select(matmul, &args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "forced \"strict\" (options) has no eligible kernel");
  CHECK_STATUS(kabi_select(matmul, &args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL, "b is col_strided");
  options.force = "nothing.like.this";
  CHECK_STATUS(kabi_select(matmul, &args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "names no backend or kernel");

  /* Contiguous b: the forced strict kernel qualifies and wins by name too. */
  inputs[1].strides = NULL;
  options.force = "c.aligned";
  CHECK(kabi_select(matmul, &args, &options, &selection) == KABI_STATUS_OK);
  CHECK(selection.kernel == aligned && selection.pick_reason == KABI_PICK_FORCED);
  /* Unforced, the higher priority picks it as well. */
  CHECK(kabi_select(matmul, &args, NULL, &selection) == KABI_STATUS_OK && selection.kernel == aligned);

  /* A misaligned pointer: launching the kernel anyway is refused; selection and kabi_call pass over it. */
  inputs[1].data = b + 1;
  CHECK_STATUS(kabi_launch(aligned, &args), KABI_STATUS_CONSTRAINT_VIOLATED, "not aligned to 64 bytes");
  CHECK_STATUS(kabi_select(matmul, &args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "c.aligned: data aligned to 4 bytes; kernel needs 64");
  CHECK(kabi_call(matmul, &args, NULL) == KABI_STATUS_OK);
  /* Selection without data pointers cannot check alignment and accepts the kernel. */
  inputs[0].data = inputs[1].data = outputs[0].data = NULL;
  CHECK(kabi_select(matmul, &args, &options, &selection) == KABI_STATUS_OK && selection.kernel == aligned);
  inputs[0].data = a;
  outputs[0].data = out;
  /* A transposed b at launch violates the layout constraint. */
  inputs[1].data = b;
  inputs[1].strides = b_transposed_strides;
  CHECK_STATUS(kabi_launch(aligned, &args), KABI_STATUS_CONSTRAINT_VIOLATED, "b is col_strided");
  inputs[1].strides = NULL;
  /* No outputs at launch. */
  args.num_outputs = 0;
  CHECK_STATUS(kabi_launch(aligned, &args), KABI_STATUS_INVALID_ARGUMENT, "expected 1 outputs (out), got 0");
  args.num_outputs = 1;

  CHECK(kabi_kernel_unregister("matmul", "c.aligned") == KABI_STATUS_OK);
  CHECK_STATUS(kabi_launch(aligned, &args), KABI_STATUS_NOT_FOUND, "does not name a registered kernel");
}

static void test_environment_force(void) {
  char choice[64];
  CHECK(setenv("KABI_FORCE", " other = cpu , matmul = c.naive ", 1) == 0);
  CHECK(kabi_op_environment_force(matmul, choice, sizeof choice) == KABI_STATUS_OK && strcmp(choice, "c.naive") == 0);
  CHECK(setenv("KABI_FORCE", "other=cpu", 1) == 0);
  CHECK(kabi_op_environment_force(matmul, choice, sizeof choice) == KABI_STATUS_OK && choice[0] == '\0');
  /* Naming an op twice is refused by every reader, instead of each reader taking a different one of the two. */
  CHECK(setenv("KABI_FORCE", "matmul=torch,matmul=c.naive", 1) == 0);
  CHECK_STATUS(kabi_op_environment_force(matmul, choice, sizeof choice), KABI_STATUS_INVALID_ARGUMENT,
               "KABI_FORCE names op matmul twice; give each op one choice (KABI_FORCE=\"matmul=torch,matmul=c.naive\")");
  CHECK(setenv("KABI_FORCE", "matmul", 1) == 0);
  CHECK_STATUS(kabi_op_environment_force(matmul, choice, sizeof choice), KABI_STATUS_INVALID_ARGUMENT,
               "KABI_FORCE entry \"matmul\" is not op=backend-or-kernel");
  CHECK(unsetenv("KABI_FORCE") == 0);
  CHECK(kabi_op_environment_force(matmul, choice, sizeof choice) == KABI_STATUS_OK && choice[0] == '\0');
  CHECK_STATUS(kabi_op_environment_force(NULL, choice, sizeof choice), KABI_STATUS_INVALID_ARGUMENT, "op is NULL");
}

/* What the last call of problem_kernel saw. */
static int64_t seen_batch_size = -1;
static int64_t seen_batch_strides[2] = {-1, -1};

/* A kernel that reads the problem: notes the batch stride of each input as kabi.h says to derive it, then computes
 * with the naive kernel. */
static kabi_status problem_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  int t;
  seen_batch_size = problem->batch_size;
  for (t = 0; t < 2; ++t) {
    const DLTensor* tensor = &args->inputs[t];
    const int missing = problem->batch_rank - (tensor->ndim - 2);
    int j;
    seen_batch_strides[t] = 0;
    for (j = problem->batch_rank - 1; j >= 0; --j) {
      if (problem->batch_shape[j] == 1) continue;
      if (j - missing >= 0 && tensor->shape[j - missing] != 1) seen_batch_strides[t] = tensor->strides[j - missing];
      break;
    }
  }
  return test_naive_matmul(user_data, problem, args);
}

static void test_kernel_reads_problem(void) {
  /* a: [3, 2, 4] (batch stride 8), b: [4, 5] broadcast over the batch. */
  static float a[3 * 2 * 4], b[4 * 5], out[3 * 2 * 5];
  int64_t a_shape[3] = {3, 2, 4}, a_strides[3] = {8, 4, 1}, b_shape[2] = {4, 5}, b_strides[2] = {5, 1};
  int64_t out_shape[3] = {3, 2, 5};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_select_options options;
  kabi_kernel_desc desc = test_naive_desc("c.reads_problem", "c-test");
  kabi_kernel kernel = NULL;
  int i;
  for (i = 0; i < 3 * 2 * 4; ++i) a[i] = (float)i;
  for (i = 0; i < 4 * 5; ++i) b[i] = (float)(i % 3);
  desc.function = problem_kernel;
  desc.batch_mode = KABI_BATCH_UNIFORM;
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK);

  inputs[0] = test_tensor(a, test_float32(), 3, a_shape, a_strides);
  inputs[1] = test_tensor(b, test_float32(), 2, b_shape, b_strides);
  outputs[0] = test_tensor(out, test_float32(), 3, out_shape, NULL);
  args = make_args(inputs, outputs, 1);
  CHECK(kabi_launch(kernel, &args) == KABI_STATUS_OK);
  CHECK(seen_batch_size == 3 && seen_batch_strides[0] == 8 && seen_batch_strides[1] == 0);
  /* Batch 2, row 1, column 3: sum over k of a[2][1][k] * b[k][3]. */
  {
    float expected = 0;
    int k;
    for (k = 0; k < 4; ++k) expected += a[2 * 8 + 4 + k] * b[k * 5 + 3];
    CHECK(fabsf(out[2 * 10 + 5 + 3] - expected) < 1e-4f);
  }
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = "c.reads_problem";
  options.allow_unverified = 1; /* a test of what the kernel receives, not of the gate */
  seen_batch_size = -1;
  CHECK(kabi_call(matmul, &args, &options) == KABI_STATUS_OK && seen_batch_size == 3);
  CHECK(kabi_kernel_unregister("matmul", "c.reads_problem") == KABI_STATUS_OK);
}

static void test_outputs_must_not_alias_inputs(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, spare[4];
  int64_t shape[2] = {2, 2};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_selection selection;
  kabi_kernel naive = NULL;
  CHECK(kabi_kernel_find("matmul", "c.naive", &naive) == KABI_STATUS_OK);
  inputs[0] = test_tensor(a, test_float32(), 2, shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, shape, NULL);
  outputs[0] = test_tensor(b, test_float32(), 2, shape, NULL);
  args = make_args(inputs, outputs, 1);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  CHECK_STATUS(kabi_launch(naive, &args), KABI_STATUS_INVALID_ARGUMENT,
               "matmul: out overlaps the memory of input b; an output must not alias an input");
  CHECK_STATUS(kabi_call(matmul, &args, NULL), KABI_STATUS_INVALID_ARGUMENT, "out overlaps the memory of input b");
  CHECK_STATUS(kabi_select(matmul, &args, NULL, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "out overlaps the memory of input b");
  /* A partial overlap counts: out's last element is a's first. */
  outputs[0].data = spare;
  outputs[0].byte_offset = 0;
  inputs[0].data = spare + 3;
  CHECK_STATUS(kabi_launch(naive, &args), KABI_STATUS_INVALID_ARGUMENT, "out overlaps the memory of input a");
  /* Adjacent memory does not overlap. */
  {
    float memory[8] = {1, 2, 3, 4, 0, 0, 0, 0};
    inputs[0].data = memory;
    outputs[0].data = memory + 4;
    CHECK(kabi_launch(naive, &args) == KABI_STATUS_OK);
  }
  /* Selection without data pointers cannot tell and accepts the call. */
  inputs[0].data = inputs[1].data = outputs[0].data = NULL;
  CHECK(kabi_select(matmul, &args, NULL, &selection) == KABI_STATUS_OK);
}

static void test_op_generations(void) {
  char directory[] = "/tmp/kabi-c-api-cache-XXXXXX";
  float x[2] = {1, 2}, a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  int64_t x_shape[1] = {2}, shape[2] = {2, 2};
  DLTensor inputs[2];
  kabi_args args;
  kabi_op scale = NULL;
  kabi_op_desc op_desc;
  kabi_kernel_desc desc = test_naive_desc("c.generation", "c-test");
  uint64_t matmul_generation, scale_generation;
  CHECK(mkdtemp(directory) != NULL && kabi_cache_set_directory(directory) == KABI_STATUS_OK);
  memset(&op_desc, 0, sizeof op_desc);
  op_desc.struct_size = sizeof op_desc;
  op_desc.name = "c.scale";
  op_desc.schema = "x: [N] float32 -> out: [N] float32";
  op_desc.tuning_key = "N";
  CHECK(kabi_op_register(&op_desc, &scale) == KABI_STATUS_OK);
  CHECK(kabi_op_generation(NULL) == 0);

  /* Registering a matmul kernel moves matmul's generation only. */
  matmul_generation = kabi_op_generation(matmul);
  scale_generation = kabi_op_generation(scale);
  CHECK(kabi_kernel_register(&desc, NULL) == KABI_STATUS_OK);
  CHECK(kabi_op_generation(matmul) > matmul_generation && kabi_op_generation(scale) == scale_generation);

  /* A tuning store moves only the generation of the op it stores for. */
  inputs[0] = test_tensor(a, test_float32(), 2, shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, shape, NULL);
  args = make_args(inputs, NULL, 0);
  matmul_generation = kabi_op_generation(matmul);
  CHECK(kabi_tuning_store(matmul, &args, NULL, 0) == KABI_STATUS_OK);
  CHECK(kabi_op_generation(matmul) > matmul_generation && kabi_op_generation(scale) == scale_generation);
  inputs[0] = test_tensor(x, test_float32(), 1, x_shape, NULL);
  args.num_inputs = 1;
  matmul_generation = kabi_op_generation(matmul);
  CHECK(kabi_tuning_store(scale, &args, NULL, 0) == KABI_STATUS_OK);
  CHECK(kabi_op_generation(scale) > scale_generation && kabi_op_generation(matmul) == matmul_generation);

  /* Clearing the cache changes every op's records. */
  scale_generation = kabi_op_generation(scale);
  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  CHECK(kabi_op_generation(scale) > scale_generation && kabi_op_generation(matmul) > matmul_generation);
  CHECK(kabi_kernel_unregister("matmul", "c.generation") == KABI_STATUS_OK);
  CHECK(kabi_cache_set_directory(NULL) == KABI_STATUS_OK);
  (void)rmdir(directory); /* left behind only if the cache kept a file there */
}

static void test_failing_kernel_and_unregister(void) {
  float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, out[4];
  int64_t shape[2] = {2, 2};
  DLTensor inputs[2], outputs[1];
  kabi_args args;
  kabi_kernel_desc desc = test_naive_desc("c.failing", "c-test");
  kabi_kernel failing = NULL;
  kabi_select_options options;
  desc.function = test_failing_kernel;
  CHECK(kabi_kernel_register(&desc, &failing) == KABI_STATUS_OK);
  inputs[0] = test_tensor(a, test_float32(), 2, shape, NULL);
  inputs[1] = test_tensor(b, test_float32(), 2, shape, NULL);
  outputs[0] = test_tensor(out, test_float32(), 2, shape, NULL);
  args = make_args(inputs, outputs, 1);
  CHECK_STATUS(kabi_launch(failing, &args), KABI_STATUS_KERNEL_FAILED, "kernel matmul/c.failing failed");
  /* The kernel's own message, set with kabi_set_last_error, reaches the caller. */
  CHECK(strstr(kabi_last_error(), "the accumulator overflowed") != NULL);
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = "c.failing";
  options.use_environment = 1;
  CHECK_STATUS(kabi_call(matmul, &args, &options), KABI_STATUS_KERNEL_FAILED, "c.failing");
  CHECK(kabi_kernel_unregister("matmul", "c.failing") == KABI_STATUS_OK);

  CHECK(naive_counters.frees == 0);
  CHECK(kabi_kernel_unregister("matmul", "c.naive") == KABI_STATUS_OK);
  CHECK(naive_counters.frees == 1);
  CHECK(kabi_kernel_count("matmul") == 0);
}

/* Without a capture there is no graph mode: a CPU device and the legacy CUDA stream run eagerly, whatever the
 * machine has. A real CUDA stream needs a driver (tests/python/test_cuda_graphs.py asks about captured ones). */
static void test_stream_execution_mode(void) {
  DLDevice cpu = {kDLCPU, 0}, cuda = {kDLCUDA, 0};
  int32_t mode = -1;
  int32_t cuda_devices = 0;
  CHECK(kabi_stream_execution_mode(cpu, NULL, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_EAGER);
  mode = -1;
  CHECK(kabi_stream_execution_mode(cuda, NULL, &mode) == KABI_STATUS_OK && mode == KABI_EXECUTION_EAGER);
  CHECK_STATUS(kabi_stream_execution_mode(cpu, NULL, NULL), KABI_STATUS_INVALID_ARGUMENT, "out_mode is NULL");
  CHECK(kabi_device_count(kDLCUDA, &cuda_devices) == KABI_STATUS_OK);
  if (cuda_devices == 0) {
    /* Never dereferenced: without a driver there is no stream to ask about. */
    CHECK(kabi_stream_execution_mode(cuda, (void*)&mode, &mode) == KABI_STATUS_UNAVAILABLE);
  }
}

static void test_plugins(void) {
  kabi_plugin_record record;
  const int32_t before = kabi_plugin_count();
  CHECK_STATUS(kabi_plugin_load("/nonexistent/libkabi_missing.so"), KABI_STATUS_NOT_FOUND, "could not be loaded");
  CHECK(kabi_plugin_count() == before + 1);
  CHECK_STATUS(kabi_plugin_load("/nonexistent/libkabi_missing.so"), KABI_STATUS_NOT_FOUND, "could not be loaded");
  CHECK(kabi_plugin_count() == before + 1);
  memset(&record, 0, sizeof record);
  record.struct_size = sizeof record;
  CHECK(kabi_plugin_at(before, &record) == KABI_STATUS_OK);
  CHECK(record.state == KABI_PLUGIN_REFUSED && strstr(record.message, "libkabi_missing.so") != NULL);
  CHECK_STATUS(kabi_plugin_load(NULL), KABI_STATUS_INVALID_ARGUMENT, "path is NULL");
  CHECK(kabi_plugin_load_builtin() == KABI_STATUS_OK);
  CHECK(kabi_plugin_load_builtin() == KABI_STATUS_OK);
}

int main(void) {
  test_versions_and_names();
  test_builtin_op();
  test_register_select_launch();
  test_error_paths();
  test_forced_and_constraints();
  test_environment_force();
  test_kernel_reads_problem();
  test_outputs_must_not_alias_inputs();
  test_op_generations();
  test_failing_kernel_and_unregister();
  CHECK(naive_counters.frees == 1);
  test_stream_execution_mode();
  test_plugins();
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all C API checks passed\n");
  return 0;
}
