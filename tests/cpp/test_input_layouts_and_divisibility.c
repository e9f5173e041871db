/* What ABI 2.4 adds, from a C caller: layout masks per input (kabi_kernel_desc.input_layouts) select a kernel only for
 * the layouts it declares for each input, with a reason that names the input; bad masks are refused; a desc or info
 * struct of the ABI 2.3 size keeps working. And the divisibility a device binary assumes of its dim and stride
 * parameters (kabi_launch_param.divisible_by): a problem whose value is not a multiple is rejected at selection (also
 * when forced) and refused at launch, and kabi_call's remembered decisions tell such problems apart. And what ABI 2.5
 * adds to device binaries: a zeroed-scratch parameter (KABI_PARAM_ZEROED_SCRATCH). Device binaries here carry a fake
 * cubin: nothing launches one, so no GPU is needed. C99. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_check.h"
#include "test_kernels.h"

#define OP "c24.mm"

static kabi_op op = NULL;
static int fallback_calls = 0;

/* An ELF header and a few bytes: a cubin as far as registration can tell. */
static const unsigned char fake_cubin[16] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static kabi_status counting_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  (void)user_data;
  (void)problem;
  (void)args;
  ++fallback_calls;
  return KABI_STATUS_OK;
}

static kabi_kernel_desc function_desc(const char* name, int32_t device_type) {
  kabi_kernel_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = OP;
  desc.name = name;
  desc.backend = "c24";
  desc.device_type = device_type;
  desc.dtypes = KABI_DTYPE_FLOAT32;
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_NONE;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = device_type == kDLCPU ? test_naive_matmul : counting_kernel;
  return desc;
}

static kabi_select_options unverified_options(const char* force) {
  kabi_select_options options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.force = force;
  options.use_environment = 0;
  options.use_tuning_cache = 1;
  options.allow_unverified = 1;
  return options;
}

/* The reason selection gives the one candidate of the op on the args' device; "" when it is eligible. */
static const char* only_reason(const kabi_args* args, kabi_candidate* candidate) {
  kabi_selection selection;
  kabi_select_options options = unverified_options(NULL);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  memset(candidate, 0, sizeof *candidate);
  candidate->struct_size = sizeof *candidate;
  selection.candidates = candidate;
  selection.candidates_capacity = 1;
  kabi_select(op, args, &options, &selection);
  CHECK(selection.num_candidates == 1);
  return candidate->reason;
}

/* a[4, 8] @ b[8, 4] on the CPU; b contiguous or a transposed view (column-major). */
typedef struct cpu_call {
  float a[32], b[32], out[16];
  int64_t a_shape[2], b_shape[2], out_shape[2];
  int64_t a_col_strides[2], b_col_strides[2];
  DLTensor inputs[2], outputs[1];
  kabi_args args;
} cpu_call;

static void make_cpu_call(cpu_call* call, int a_column_major, int b_column_major) {
  int i;
  for (i = 0; i < 32; ++i) {
    call->a[i] = (float)test_random_uniform();
    call->b[i] = (float)test_random_uniform();
  }
  call->a_shape[0] = 4, call->a_shape[1] = 8;
  call->b_shape[0] = 8, call->b_shape[1] = 4;
  call->out_shape[0] = 4, call->out_shape[1] = 4;
  call->a_col_strides[0] = 1, call->a_col_strides[1] = 4;
  call->b_col_strides[0] = 1, call->b_col_strides[1] = 8;
  call->inputs[0] = test_tensor(call->a, test_float32(), 2, call->a_shape, a_column_major ? call->a_col_strides : NULL);
  call->inputs[1] = test_tensor(call->b, test_float32(), 2, call->b_shape, b_column_major ? call->b_col_strides : NULL);
  call->outputs[0] = test_tensor(call->out, test_float32(), 2, call->out_shape, NULL);
  memset(&call->args, 0, sizeof call->args);
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = 2;
  call->args.outputs = call->outputs;
  call->args.num_outputs = 1;
}

static void test_per_input_layouts(void) {
  const uint32_t linear_layouts[2] = {KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED, KABI_LAYOUT_COL_STRIDED};
  const uint32_t b_only[2] = {0, KABI_LAYOUT_COL_STRIDED};
  const uint32_t three[3] = {KABI_LAYOUT_ANY, KABI_LAYOUT_ANY, KABI_LAYOUT_ANY};
  const uint32_t unknown_bit[2] = {KABI_LAYOUT_ANY, KABI_LAYOUT_COL_STRIDED | (1u << 7)};
  kabi_kernel_desc desc = function_desc("c24.linear_layout", kDLCPU);
  kabi_kernel kernel = NULL;
  kabi_kernel_info info;
  kabi_candidate candidate;
  cpu_call call;

  /* Refused: more masks than inputs, a negative count, a NULL array, bits that are no layout class. */
  desc.input_layouts = three;
  desc.num_input_layouts = 3;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "kernel c24.mm/c24.linear_layout: num_input_layouts is 3; op c24.mm has 2 inputs");
  desc.num_input_layouts = -1;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT, "num_input_layouts is -1");
  desc.input_layouts = NULL;
  desc.num_input_layouts = 2;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "input_layouts is NULL but num_input_layouts is 2");
  desc.input_layouts = unknown_bit;
  CHECK_STATUS(kabi_kernel_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "input_layouts[1] (input b) has bits that are not KABI_LAYOUT_* classes");
  CHECK(kabi_kernel_count(OP) == 0);

  /* nn.Linear's layout: a row-major, b column-major. */
  desc.input_layouts = linear_layouts;
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK);
  CHECK(info.num_input_layouts == 2 && info.input_layouts[0] == linear_layouts[0] &&
        info.input_layouts[1] == KABI_LAYOUT_COL_STRIDED && info.layouts == KABI_LAYOUT_ANY);

  make_cpu_call(&call, 0, 0);
  CHECK(strcmp(only_reason(&call.args, &candidate), "b is contiguous; the kernel takes {col_strided} for b") == 0);
  make_cpu_call(&call, 1, 1);
  CHECK(strcmp(only_reason(&call.args, &candidate),
               "a is col_strided; the kernel takes {contiguous, row_strided} for a") == 0);
  make_cpu_call(&call, 0, 1);
  CHECK(strcmp(only_reason(&call.args, &candidate), "") == 0 && candidate.picked == 1);

  /* kabi_launch checks the same rule: a handle launched on b contiguous is refused, on b column-major it runs. */
  CHECK(kabi_launch(kernel, &call.args) == KABI_STATUS_OK);
  {
    double a[32], b[32], expected[16];
    int i, j;
    for (i = 0; i < 4; ++i)
      for (j = 0; j < 8; ++j) a[i * 8 + j] = call.a[i * 8 + j];
    for (i = 0; i < 8; ++i)
      for (j = 0; j < 4; ++j) b[i * 4 + j] = call.b[j * 8 + i];
    test_reference_matmul(a, b, expected, 4, 4, 8);
    CHECK(test_max_relative_error(call.out, expected, 16) < 1e-5);
  }
  make_cpu_call(&call, 0, 0);
  CHECK_STATUS(kabi_launch(kernel, &call.args), KABI_STATUS_CONSTRAINT_VIOLATED,
               "b is contiguous; the kernel takes {col_strided} for b");
  CHECK(kabi_kernel_unregister(OP, "c24.linear_layout") == KABI_STATUS_OK);

  /* A 0 entry means `layouts`, and info reports it resolved. */
  desc.layouts = KABI_LAYOUT_CONTIGUOUS;
  desc.input_layouts = b_only;
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK);
  CHECK(info.num_input_layouts == 2 && info.input_layouts[0] == KABI_LAYOUT_CONTIGUOUS &&
        info.input_layouts[1] == KABI_LAYOUT_COL_STRIDED);
  make_cpu_call(&call, 1, 1);
  CHECK(strcmp(only_reason(&call.args, &candidate),
               "a is col_strided; the kernel takes {contiguous} for a") == 0);
  CHECK(kabi_kernel_unregister(OP, "c24.linear_layout") == KABI_STATUS_OK);
}

static void test_abi23_sized_structs(void) {
  kabi_kernel_desc desc = function_desc("c24.older", kDLCPU);
  kabi_kernel kernel = NULL;
  kabi_kernel_info info;
  const unsigned char* info_bytes = (const unsigned char*)&info;
  kabi_candidate candidate;
  cpu_call call;

  /* A 2.3 desc ends before input_layouts: what lies there is not read, and `layouts` filters every input. */
  desc.layouts = KABI_LAYOUT_CONTIGUOUS;
  desc.input_layouts = (const uint32_t*)&desc;
  desc.num_input_layouts = 99;
  desc.struct_size = offsetof(kabi_kernel_desc, input_layouts);
  CHECK(kabi_kernel_register(&desc, &kernel) == KABI_STATUS_OK);
  make_cpu_call(&call, 0, 0);
  CHECK(strcmp(only_reason(&call.args, &candidate), "") == 0);
  make_cpu_call(&call, 0, 1);
  CHECK(strcmp(only_reason(&call.args, &candidate), "b is col_strided; kernel takes {contiguous}") == 0);

  /* A 2.3 info is written only up to has_variant; a 2.4 one reports no per-input masks. */
  memset(&info, 0xCD, sizeof info);
  info.struct_size = offsetof(kabi_kernel_info, num_input_layouts);
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK);
  CHECK(info.layouts == KABI_LAYOUT_CONTIGUOUS && info.has_variant == 0);
  CHECK(info_bytes[offsetof(kabi_kernel_info, num_input_layouts)] == 0xCD && info_bytes[sizeof info - 1] == 0xCD);
  memset(&info, 0xCD, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK && info.num_input_layouts == 0);
  CHECK(kabi_kernel_unregister(OP, "c24.older") == KABI_STATUS_OK);
}

/* A device binary of c24.mm: pointers, M N K (K assumed a multiple of 16), the row strides of a and b (multiples of
 * 16) and of out (no assumption). */
typedef struct binary_declaration {
  kabi_launch_param params[9];
  kabi_device_binary binary;
  kabi_kernel_desc desc;
} binary_declaration;

static kabi_launch_param launch_param(int32_t kind, int32_t index, int32_t dim, const char* name, int64_t divisor) {
  kabi_launch_param param;
  memset(&param, 0, sizeof param);
  param.struct_size = sizeof param;
  param.kind = kind;
  param.size_bytes = kind == KABI_PARAM_TENSOR_DATA ? 8 : 4;
  param.index = index;
  param.dim = dim;
  param.name = name;
  param.divisible_by = divisor;
  return param;
}

static void make_binary_declaration(binary_declaration* declaration, const char* name) {
  declaration->params[0] = launch_param(KABI_PARAM_TENSOR_DATA, 0, 0, NULL, 0);
  declaration->params[1] = launch_param(KABI_PARAM_TENSOR_DATA, 1, 0, NULL, 0);
  declaration->params[2] = launch_param(KABI_PARAM_TENSOR_DATA, 2, 0, NULL, 0);
  declaration->params[3] = launch_param(KABI_PARAM_DIM, 0, 0, "M", 0);
  declaration->params[4] = launch_param(KABI_PARAM_DIM, 0, 0, "N", 1);
  declaration->params[5] = launch_param(KABI_PARAM_DIM, 0, 0, "K", 16);
  declaration->params[6] = launch_param(KABI_PARAM_STRIDE, 0, -2, NULL, 16);
  declaration->params[7] = launch_param(KABI_PARAM_STRIDE, 1, -2, NULL, 16);
  declaration->params[8] = launch_param(KABI_PARAM_STRIDE, 2, -2, NULL, 0);
  memset(&declaration->binary, 0, sizeof declaration->binary);
  declaration->binary.struct_size = sizeof declaration->binary;
  declaration->binary.format = KABI_BINARY_CUBIN;
  declaration->binary.arch = 90;
  declaration->binary.image = fake_cubin;
  declaration->binary.image_size = sizeof fake_cubin;
  declaration->binary.entry = "mm_kernel";
  declaration->binary.params = declaration->params;
  declaration->binary.num_params = 9;
  declaration->binary.grid[0] = "cdiv(M, 16) * cdiv(N, 16)";
  declaration->binary.block[0] = 128;
  declaration->binary.block[1] = 1;
  declaration->binary.block[2] = 1;
  declaration->binary.cluster_size = 1;
  declaration->desc = function_desc(name, kDLCUDA);
  declaration->desc.kind = KABI_KERNEL_DEVICE_BINARY;
  declaration->desc.function = NULL;
  declaration->desc.binary = &declaration->binary;
  declaration->desc.priority = 10;
}

/* a[32, K] (row stride a_stride) @ b[K, 16] (contiguous) -> out[32, 16], on cuda:0, with fake data pointers that
 * only a launch would read. */
typedef struct cuda_call {
  int64_t a_shape[2], a_strides[2], b_shape[2], out_shape[2];
  DLTensor inputs[2], outputs[1];
  kabi_args args;
} cuda_call;

/* Host memory as large as the views, so that the core's aliasing check finds the tensors apart; never read. */
static float fake_a[32 * 80], fake_b[64 * 16], fake_out[32 * 16];

static void make_cuda_call(cuda_call* call, int64_t k, int64_t a_stride) {
  int i;
  call->a_shape[0] = 32, call->a_shape[1] = k;
  call->a_strides[0] = a_stride, call->a_strides[1] = 1;
  call->b_shape[0] = k, call->b_shape[1] = 16;
  call->out_shape[0] = 32, call->out_shape[1] = 16;
  call->inputs[0] = test_tensor(fake_a, test_float32(), 2, call->a_shape, call->a_strides);
  call->inputs[1] = test_tensor(fake_b, test_float32(), 2, call->b_shape, NULL);
  call->outputs[0] = test_tensor(fake_out, test_float32(), 2, call->out_shape, NULL);
  for (i = 0; i < 2; ++i) call->inputs[i].device.device_type = kDLCUDA;
  call->outputs[0].device.device_type = kDLCUDA;
  memset(&call->args, 0, sizeof call->args);
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = 2;
  call->args.outputs = call->outputs;
  call->args.num_outputs = 1;
}

static void test_divisibility_refusals(void) {
  binary_declaration declaration;
  unsigned char older_params[3 * offsetof(kabi_launch_param, divisible_by)];
  const size_t older_size = offsetof(kabi_launch_param, divisible_by);
  kabi_kernel kernel = NULL;
  kabi_kernel_info info;
  char fingerprint[64];
  int i;

  make_binary_declaration(&declaration, "c24.refused");
  declaration.params[0].divisible_by = 16;
  CHECK_STATUS(kabi_kernel_register(&declaration.desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "params[0].divisible_by is 16; only dim and stride parameters take one");
  declaration.params[0].divisible_by = 1;
  declaration.params[6].divisible_by = -16;
  CHECK_STATUS(kabi_kernel_register(&declaration.desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "params[6].divisible_by is -16; expected 0 (no assumption) or a power of two");
  declaration.params[6].divisible_by = 24;
  CHECK_STATUS(kabi_kernel_register(&declaration.desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "params[6].divisible_by is 24");
  CHECK(kabi_kernel_count(OP) == 0);

  /* Parameters of the 2.3 size (strided by their struct_size, without divisible_by) assume nothing: their binary's
   * default fingerprint is the one of the same parameters at the 2.4 size with no assumption. */
  make_binary_declaration(&declaration, "c24.older_params");
  declaration.binary.num_params = 3;
  for (i = 0; i < 3; ++i) {
    declaration.params[i].struct_size = older_size;
    memcpy(older_params + (size_t)i * older_size, &declaration.params[i], older_size);
  }
  declaration.binary.params = (const kabi_launch_param*)(const void*)older_params;
  CHECK(kabi_kernel_register(&declaration.desc, &kernel) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK);
  snprintf(fingerprint, sizeof fingerprint, "%s", info.fingerprint);
  CHECK(kabi_kernel_unregister(OP, "c24.older_params") == KABI_STATUS_OK);
  make_binary_declaration(&declaration, "c24.older_params");
  declaration.binary.num_params = 3;
  CHECK(kabi_kernel_register(&declaration.desc, &kernel) == KABI_STATUS_OK);
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK && strcmp(info.fingerprint, fingerprint) == 0);
  CHECK(kabi_kernel_unregister(OP, "c24.older_params") == KABI_STATUS_OK);
}

static void test_divisibility_at_selection_and_launch(void) {
  binary_declaration declaration;
  kabi_kernel kernel = NULL;
  kabi_candidate candidate;
  kabi_selection selection;
  kabi_select_options forced = unverified_options("c24.binary");
  cuda_call call;
  kabi_status status;

  make_binary_declaration(&declaration, "c24.binary");
  CHECK(kabi_kernel_register(&declaration.desc, &kernel) == KABI_STATUS_OK);

  make_cuda_call(&call, 64, 64);
  CHECK(strcmp(only_reason(&call.args, &candidate), "") == 0);
  make_cuda_call(&call, 64, 80);
  CHECK(strcmp(only_reason(&call.args, &candidate), "") == 0);
  make_cuda_call(&call, 64, 68);
  CHECK(strcmp(only_reason(&call.args, &candidate),
               "param 6 (stride of a, dim -2) is 68, not a multiple of 16 as the image assumes") == 0);
  make_cuda_call(&call, 60, 64);
  CHECK(strcmp(only_reason(&call.args, &candidate),
               "param 5 (dim K) is 60, not a multiple of 16 as the image assumes") == 0);

  /* Forcing it does not make it run such a problem: the error says why. */
  make_cuda_call(&call, 64, 68);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  CHECK_STATUS(kabi_select(op, &call.args, &forced, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "c24.binary: param 6 (stride of a, dim -2) is 68, not a multiple of 16 as the image assumes");

  /* A handle selected for one problem and launched on another is refused before anything reaches the driver; on a
   * problem it takes, the launch goes on (and fails here only for want of a GPU, or of a real image). */
  CHECK_STATUS(kabi_launch(kernel, &call.args), KABI_STATUS_CONSTRAINT_VIOLATED,
               "kernel c24.mm/c24.binary: param 6 (stride of a, dim -2) is 68, not a multiple of 16");
  make_cuda_call(&call, 64, 80);
  status = kabi_launch(kernel, &call.args);
  CHECK(status != KABI_STATUS_OK && status != KABI_STATUS_CONSTRAINT_VIOLATED);
}

/* kabi_call remembers its decisions per problem: a row-strided a of stride 68 and one of stride 80 are the same
 * problem but for the binary's assumption, and each keeps its own kernel, in whichever order they come. */
static void test_call_tells_strides_apart(void) {
  kabi_kernel_desc fallback = function_desc("c24.fallback", kDLCUDA);
  kabi_select_options options = unverified_options(NULL);
  cuda_call call;
  kabi_status status;
  int round;

  CHECK(kabi_kernel_register(&fallback, NULL) == KABI_STATUS_OK);
  for (round = 0; round < 2; ++round) {
    make_cuda_call(&call, 64, 68);
    CHECK(kabi_call(op, &call.args, &options) == KABI_STATUS_OK);
    CHECK(fallback_calls == round + 1);
    make_cuda_call(&call, 64, 80);
    status = kabi_call(op, &call.args, &options);
    CHECK(status != KABI_STATUS_OK && status != KABI_STATUS_CONSTRAINT_VIOLATED);
    CHECK(fallback_calls == round + 1);
  }
  CHECK(kabi_kernel_unregister(OP, "c24.fallback") == KABI_STATUS_OK);
  CHECK(kabi_kernel_unregister(OP, "c24.binary") == KABI_STATUS_OK);
}

/* A binary whose last two parameters are scratch and zeroed scratch (serial split-K's partial sums and tile counters)
 * registers; a negative size of either is refused naming the parameter, and so is a kind past the last one. */
static void test_zeroed_scratch_parameters(void) {
  binary_declaration declaration;
  make_binary_declaration(&declaration, "c25.zeroed_scratch");
  declaration.params[7] = launch_param(KABI_PARAM_SCRATCH, 0, 0, NULL, 0);
  declaration.params[7].value = 1024;
  declaration.params[8] = launch_param(KABI_PARAM_ZEROED_SCRATCH, 0, 0, NULL, 0);
  declaration.params[8].value = -4;
  CHECK_STATUS(kabi_kernel_register(&declaration.desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "params[8].value is -4; expected bytes >= 0");
  declaration.params[8].kind = KABI_PARAM_ZEROED_SCRATCH + 1;
  CHECK_STATUS(kabi_kernel_register(&declaration.desc, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "params[8].kind is 9; expected a kabi_param_kind");
  CHECK(kabi_kernel_count(OP) == 0);
  declaration.params[8].kind = KABI_PARAM_ZEROED_SCRATCH;
  declaration.params[8].value = 4;
  CHECK(kabi_kernel_register(&declaration.desc, NULL) == KABI_STATUS_OK);
  CHECK(kabi_kernel_unregister(OP, "c25.zeroed_scratch") == KABI_STATUS_OK);
}

int main(void) {
  kabi_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.name = OP;
  desc.schema = "a: [M, K] T, b: [K, N] T -> out: [M, N] T";
  desc.type_variables = "T: float32";
  if (kabi_op_register(&desc, &op) != KABI_STATUS_OK) {
    fprintf(stderr, "registering %s: %s\n", OP, kabi_last_error());
    return 1;
  }
  test_per_input_layouts();
  test_abi23_sized_structs();
  test_divisibility_refusals();
  test_divisibility_at_selection_and_launch();
  test_call_tells_strides_apart();
  test_zeroed_scratch_parameters();
  if (failures != 0) {
    fprintf(stderr, "test_input_layouts_and_divisibility: %d check(s) failed\n", failures);
    return 1;
  }
  printf("test_input_layouts_and_divisibility: all checks passed\n");
  return 0;
}
