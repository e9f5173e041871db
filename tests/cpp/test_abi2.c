/* What ABI 2.0 adds, through the C API only: schemas with type variables, optional inputs, attributes and 0-d
 * tensors (and their parse errors); per-tensor dtype and attribute validation; tuning keys with attributes and capped
 * batch buckets; kernel type_constraints; workspaces from a replaced allocator and from the default one; extension
 * chains; and structs of an older (smaller) and a newer (larger) struct_size. C99. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_check.h"
#include "test_kernels.h"

/* The linear-like op most checks use: three required inputs (one of a concrete dtype, 0-d), two optional ones (lora
 * names a dimension, R, that nothing else does), an attribute without a default and two with one. */
#define LINEAR_SCHEMA                                                                                          \
  "x: [..., K] T, w: [N, K] T, scale: [] float32, bias?: [N] T, lora?: [R, K] T, groups: int, "               \
  "activation: enum(none, relu, gelu, gelu_tanh, silu) = none, alpha: float = 0.5 -> out: [..., N] T"
#define LINEAR_TYPES "T: float16, bfloat16, float32, float64"

static kabi_op linear = NULL;

static kabi_op_desc op_desc(const char* name, const char* schema, const char* type_variables, const char* key) {
  kabi_op_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.name = name;
  desc.schema = schema;
  desc.type_variables = type_variables;
  desc.tuning_key = key;
  return desc;
}

static DLTensor absent_tensor(void) {
  DLTensor tensor;
  memset(&tensor, 0, sizeof tensor);
  return tensor;
}

static void check_refused(const char* schema, const char* type_variables, const char* key, const char* fragment) {
  const kabi_op_desc desc = op_desc("c2.refused", schema, type_variables, key);
  CHECK_STATUS(kabi_op_register(&desc, NULL), KABI_STATUS_INVALID_ARGUMENT, fragment);
}

static void test_schema_parse_errors(void) {
  check_refused("x: [N] T -> out: [N] T", "T float32", NULL, "\"T float32\" is not 'NAME: dtype, dtype'");
  check_refused("x: [N] T -> out: [N] T", "1T: float32", NULL, "\"1T\" is not a valid type variable name");
  check_refused("x: [N] T -> out: [N] T", "T: float32, float17", NULL, "type variable T: unknown dtype \"float17\"");
  check_refused("x: [N] U -> out: [N] U", "T: float32", NULL,
                "x: \"U\" is neither a declared type variable (T) nor a dtype kabi knows");
  check_refused("x: [N] float99 -> out: [N] float32", NULL, NULL, "x: \"float99\" is neither");
  check_refused("x: [N] T, mode: enum -> out: [N] T", "T: float32", NULL,
                "attribute mode: enum needs its values, as in enum(none, relu)");
  check_refused("x: [N] T, mode: enum() -> out: [N] T", "T: float32", NULL, "attribute mode: enum() has no values");
  check_refused("x: [N] T, mode: enum(a, b) = c -> out: [N] T", "T: float32", NULL,
                "attribute mode: default \"c\" is not one of its values (a, b)");
  check_refused("x: [N] T, count: int = many -> out: [N] T", "T: float32", NULL,
                "attribute count: default \"many\" is not an integer");
  check_refused("x: [N] T -> out: [M] T", "T: float32", NULL, "output out: dimension M is not defined by any input");
  check_refused("x: [N] T, y?: [M] T -> out: [M] T", "T: float32", NULL,
                "output out: dimension M is defined only by optional inputs");
  check_refused("x: [N] T -> out?: [N] T", "T: float32", NULL, "output out is marked optional");
  check_refused("x: [N] T, count: int, y: [N] T -> out: [N] T", "T: float32", NULL,
                "y: tensor after attribute count; tensors come first");
  check_refused("x: [N] T, y?: [N] T -> out: [N] T", "T: float32", "dtype,N",
                "the op has optional inputs, so its key must name \"layout\"");
  check_refused("x: [N] T -> out: [N] T", "T: float32", "dtype,flavour", "\"flavour\" is neither");
  check_refused("x: [N] T, mode: enum(a, b) -> out: [N] T", "T: float32", "mode:pow2",
                "only dimensions and batch can be bucketed, not \"mode\"");
  check_refused("x: [N] T -> out: [N] T", "T: float32; U: float16", NULL, "type variable U types no tensor");
}

/* The key "dtype,layout,batch:pow2<=4,N,K,activation" of c2.linear, item by item as the core parsed it. */
static void test_parsed_tuning_key(void) {
  static const int32_t fields[] = {KABI_TUNING_KEY_DTYPE, KABI_TUNING_KEY_LAYOUT, KABI_TUNING_KEY_BATCH,
                                   KABI_TUNING_KEY_DIM,   KABI_TUNING_KEY_DIM,    KABI_TUNING_KEY_ATTRIBUTE};
  kabi_op_info info;
  kabi_tuning_key_item item;
  int32_t i;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(linear, &info) == KABI_STATUS_OK);
  CHECK(info.num_tuning_key_items == 6);
  for (i = 0; i < 6; ++i) {
    memset(&item, 0, sizeof item);
    item.struct_size = sizeof item;
    CHECK(kabi_op_tuning_key_get(linear, i, &item) == KABI_STATUS_OK);
    CHECK(item.field == fields[i]);
    CHECK(item.pow2 == (i == 2) && item.pow2_cap == (i == 2 ? 4 : 0));
  }
  CHECK(kabi_op_tuning_key_get(linear, 3, &item) == KABI_STATUS_OK);
  CHECK(strcmp(info.dim_names[item.index], "N") == 0);
  CHECK(kabi_op_tuning_key_get(linear, 5, &item) == KABI_STATUS_OK && item.index == 1);
  CHECK(kabi_op_tuning_key_get(linear, 0, &item) == KABI_STATUS_OK && item.index == -1);
  CHECK_STATUS(kabi_op_tuning_key_get(linear, 6, &item), KABI_STATUS_NOT_FOUND, "index 6 is outside [0, 6)");
  /* A caller built against ABI 2.0 passes the smaller kabi_op_info; the host writes only what it covers. */
  memset(&info, 0, sizeof info);
  info.struct_size = offsetof(kabi_op_info, num_tuning_key_items);
  CHECK(kabi_op_info_get(linear, &info) == KABI_STATUS_OK && info.num_tuning_key_items == 0);
}

static void test_parsed_model(void) {
  const kabi_op_desc desc = op_desc("c2.linear", LINEAR_SCHEMA, LINEAR_TYPES, "dtype,layout,batch:pow2<=4,N,K,activation");
  kabi_op_info info;
  kabi_tensor_decl tensor;
  kabi_attribute_decl attribute;
  kabi_type_variable_decl variable;
  CHECK(kabi_op_register(&desc, &linear) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(linear, &info) == KABI_STATUS_OK);
  CHECK(info.num_inputs == 5 && info.num_outputs == 1 && info.num_attributes == 3 && info.num_type_variables == 1);
  CHECK(info.num_dims == 3 && strcmp(info.dim_names[0], "K") == 0 && strcmp(info.dim_names[1], "N") == 0 &&
        strcmp(info.dim_names[2], "R") == 0);
  CHECK(strcmp(info.type_variables, LINEAR_TYPES) == 0);

  memset(&tensor, 0, sizeof tensor);
  tensor.struct_size = sizeof tensor;
  CHECK(kabi_op_tensor_get(linear, 3, &tensor) == KABI_STATUS_OK);
  CHECK(strcmp(tensor.name, "bias") == 0 && tensor.optional == 1 && tensor.is_output == 0 && tensor.has_batch == 0);
  CHECK(tensor.num_dims == 1 && tensor.dims[0] == 1 && tensor.type_variable == 0);
  CHECK(tensor.dtypes == (KABI_DTYPE_FLOAT16 | KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64));
  CHECK(kabi_op_tensor_get(linear, 2, &tensor) == KABI_STATUS_OK);
  CHECK(strcmp(tensor.name, "scale") == 0 && tensor.num_dims == 0 && tensor.type_variable == -1 &&
        tensor.dtypes == KABI_DTYPE_FLOAT32);
  CHECK(kabi_op_tensor_get(linear, 5, &tensor) == KABI_STATUS_OK);
  CHECK(strcmp(tensor.name, "out") == 0 && tensor.is_output == 1 && tensor.has_batch == 1);
  CHECK_STATUS(kabi_op_tensor_get(linear, 6, &tensor), KABI_STATUS_NOT_FOUND, "index 6 is outside [0, 6)");

  memset(&attribute, 0, sizeof attribute);
  attribute.struct_size = sizeof attribute;
  CHECK(kabi_op_attribute_get(linear, 1, &attribute) == KABI_STATUS_OK);
  CHECK(strcmp(attribute.name, "activation") == 0 && attribute.type == KABI_ATTRIBUTE_ENUM);
  CHECK(attribute.has_default == 1 && attribute.default_value.integer == 0 && attribute.in_tuning_key == 1);
  CHECK(attribute.num_enum_values == 5 && strcmp(attribute.enum_values[4], "silu") == 0);
  CHECK(kabi_op_attribute_get(linear, 0, &attribute) == KABI_STATUS_OK);
  CHECK(attribute.type == KABI_ATTRIBUTE_INT && attribute.has_default == 0 && attribute.in_tuning_key == 0);
  CHECK(kabi_op_attribute_get(linear, 2, &attribute) == KABI_STATUS_OK);
  CHECK(attribute.type == KABI_ATTRIBUTE_FLOAT && attribute.default_value.real == 0.5);

  memset(&variable, 0, sizeof variable);
  variable.struct_size = sizeof variable;
  CHECK(kabi_op_type_variable_get(linear, 0, &variable) == KABI_STATUS_OK);
  CHECK(strcmp(variable.name, "T") == 0 && variable.dtypes == tensor.dtypes);
  CHECK(kabi_dtype_from_name("bfloat16") == KABI_DTYPE_BFLOAT16 && kabi_dtype_from_name("float17") == 0);
  CHECK(kabi_dtype_from_name(NULL) == 0);
  test_parsed_tuning_key();
}

/* The tensors of one linear call: x [batch, 8], w [6, 8], scale [], bias [6], lora [3, 8]. */
typedef struct linear_call {
  int64_t x_shape[2], w_shape[2], bias_shape[1], lora_shape[2];
  DLTensor inputs[5];
  kabi_attribute_value attributes[3];
  kabi_args args;
} linear_call;

static void make_linear_call(linear_call* call, int64_t batch) {
  static float storage[64];
  memset(call, 0, sizeof *call);
  call->x_shape[0] = batch;
  call->x_shape[1] = 8;
  call->w_shape[0] = 6;
  call->w_shape[1] = 8;
  call->bias_shape[0] = 6;
  call->lora_shape[0] = 3;
  call->lora_shape[1] = 8;
  call->inputs[0] = test_tensor(storage, test_float32(), 2, call->x_shape, NULL);
  call->inputs[1] = test_tensor(storage, test_float32(), 2, call->w_shape, NULL);
  call->inputs[2] = test_tensor(storage, test_float32(), 0, NULL, NULL);
  call->inputs[3] = test_tensor(storage, test_float32(), 1, call->bias_shape, NULL);
  call->inputs[4] = test_tensor(storage, test_float32(), 2, call->lora_shape, NULL);
  call->attributes[0].integer = 1;
  call->args.struct_size = sizeof call->args;
  call->args.inputs = call->inputs;
  call->args.num_inputs = 5;
  call->args.attributes = call->attributes;
  call->args.num_attributes = 1;
}

static kabi_problem describe(const kabi_args* args) {
  kabi_problem problem;
  memset(&problem, 0, sizeof problem);
  problem.struct_size = sizeof problem;
  CHECK(kabi_problem_describe(linear, args, &problem) == KABI_STATUS_OK);
  return problem;
}

static void test_validation(void) {
  linear_call call;
  kabi_problem problem;

  /* Everything given; the defaults of activation and alpha are filled in. */
  make_linear_call(&call, 3);
  problem = describe(&call.args);
  CHECK(problem.inputs_present == 0x1Fu && problem.num_inputs == 5 && problem.type_bindings[0] == KABI_DTYPE_FLOAT32);
  CHECK(problem.num_attributes == 3 && problem.attributes[0].integer == 1 && problem.attributes[1].integer == 0 &&
        problem.attributes[2].real == 0.5);
  CHECK(problem.dims[0] == 8 && problem.dims[1] == 6 && problem.dims[2] == 3);
  CHECK(problem.num_outputs == 1 && problem.output_ranks[0] == 2 && problem.output_shapes[0][0] == 3 &&
        problem.output_shapes[0][1] == 6 && problem.batch_size == 3);
  /* batch:pow2<=4 buckets 3 to 4; the attribute prints its value's name. */
  CHECK(strcmp(problem.key, "float32|contiguous,contiguous,contiguous,contiguous,contiguous|4|6|8|none") == 0);

  /* An absent optional input in the middle (bias), the trailing one (lora) left out of num_inputs: R is then 0, and a
   * batch above the cap stays exact. */
  make_linear_call(&call, 5);
  call.inputs[3] = absent_tensor();
  call.args.num_inputs = 4;
  call.attributes[1].integer = 1;
  call.args.num_attributes = 2;
  problem = describe(&call.args);
  CHECK(problem.inputs_present == 0x7u && problem.input_layouts[3] == 0 && problem.input_layouts[4] == 0);
  CHECK(problem.dims[2] == 0);
  CHECK(strcmp(problem.key, "float32|contiguous,contiguous,contiguous,absent,absent|5|6|8|relu") == 0);

  /* A required input passed absent, or left out. */
  make_linear_call(&call, 1);
  call.inputs[1] = absent_tensor();
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "c2.linear: input w is required but was passed absent");
  call.args.num_inputs = 2;
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "c2.linear: expected 3 to 5 inputs (x, w, scale, bias?, lora?), got 2");

  /* A type variable's tensors disagree; a concrete dtype given another one. */
  make_linear_call(&call, 1);
  call.inputs[3].dtype = test_float64();
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_UNSUPPORTED_DTYPE,
               "c2.linear: x is float32 but bias is float64 (both have type T)");
  make_linear_call(&call, 1);
  call.inputs[2].dtype = test_float16();
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_UNSUPPORTED_DTYPE,
               "c2.linear: scale is float16; expected float32");

  /* Attributes: out of range, missing without a default, too many. */
  make_linear_call(&call, 1);
  call.attributes[1].integer = 7;
  call.args.num_attributes = 2;
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "c2.linear: attribute activation is 7; expected an index below 5 (none, relu, gelu, gelu_tanh, silu)");
  call.args.num_attributes = 0;
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "c2.linear: attribute groups was not passed and has no default");
  call.args.num_attributes = 4;
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "expected at most 3 attributes (groups, activation, alpha), got 4");
}

/* A bool attribute takes 0 or 1 only. */
static void test_bool_attribute(void) {
  const kabi_op_desc desc = op_desc("c2.flag", "x: [N] T, flag: bool = false -> out: [N] T", "T: float32", NULL);
  kabi_op op = NULL;
  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  DLTensor input = test_tensor(x, test_float32(), 1, shape, NULL);
  kabi_attribute_value flag;
  kabi_args args;
  kabi_problem problem;
  kabi_op_info info;
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(op, &info) == KABI_STATUS_OK && strcmp(info.tuning_key, "dtype,layout,batch,N,flag") == 0);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = &input;
  args.num_inputs = 1;
  args.attributes = &flag;
  args.num_attributes = 1;
  flag.integer = 2;
  flag.real = 0;
  memset(&problem, 0, sizeof problem);
  problem.struct_size = sizeof problem;
  CHECK_STATUS(kabi_problem_describe(op, &args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "c2.flag: attribute flag is 2; expected 0 or 1 (a bool)");
  flag.integer = 1;
  CHECK(kabi_problem_describe(op, &args, &problem) == KABI_STATUS_OK && strcmp(problem.key, "float32|contiguous|1|2|true") == 0);
}

static kabi_status never_runs(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  (void)user_data;
  (void)problem;
  (void)args;
  return KABI_STATUS_INTERNAL;
}

static kabi_kernel_desc kernel_desc(const char* op, const char* name) {
  kabi_kernel_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.op = op;
  desc.name = name;
  desc.backend = "c2";
  desc.device_type = kDLCPU;
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_ANY;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = never_runs;
  return desc;
}

static void test_type_constraints(void) {
  const kabi_op_desc desc =
      op_desc("c2.mixed", "a: [N] T, b: [N] U -> out: [N] T", "T: float32, float64; U: float16, float32", NULL);
  kabi_op op = NULL;
  kabi_kernel_desc kernel = kernel_desc("c2.mixed", "c2.mixed.half_b");
  kabi_kernel handle = NULL;
  kabi_kernel_info info;
  float a[4] = {0};
  int64_t shape[1] = {4};
  DLTensor inputs[2];
  kabi_args args;
  kabi_selection selection;
  kabi_candidate candidate;
  kabi_select_options options;
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);

  /* `dtypes` covers every variable type_constraints does not name: here T. */
  kernel.dtypes = KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64;
  kernel.type_constraints = "V: float16";
  CHECK_STATUS(kabi_kernel_register(&kernel, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "type_constraints names V, which is not a type variable of op c2.mixed");
  kernel.type_constraints = "U: bfloat16";
  CHECK_STATUS(kabi_kernel_register(&kernel, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "accepts {bfloat16} for U, none of the op's {float16, float32}");
  kernel.type_constraints = "U: float16";
  CHECK(kabi_kernel_register(&kernel, &handle) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(handle, &info) == KABI_STATUS_OK && strcmp(info.type_constraints, "U: float16") == 0);
  CHECK(info.has_workspace == 0);

  inputs[0] = test_tensor(a, test_float32(), 1, shape, NULL);
  inputs[1] = test_tensor(a, test_float32(), 1, shape, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 2;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.allow_unverified = 1;
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  memset(&candidate, 0, sizeof candidate);
  candidate.struct_size = sizeof candidate;
  selection.candidates = &candidate;
  selection.candidates_capacity = 1;
  CHECK_STATUS(kabi_select(op, &args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "dtype of U float32 not in {float16}");
  CHECK(selection.num_candidates == 1 && strcmp(candidate.reason, "dtype of U float32 not in {float16}") == 0);
  inputs[1].dtype = test_float16();
  CHECK(kabi_select(op, &args, &options, &selection) == KABI_STATUS_OK && selection.kernel == handle);
  CHECK(selection.problem.type_bindings[0] == KABI_DTYPE_FLOAT32 && selection.problem.type_bindings[1] == KABI_DTYPE_FLOAT16);
  CHECK(kabi_kernel_unregister("c2.mixed", "c2.mixed.half_b") == KABI_STATUS_OK);
}

/* The allocator tests install: aligned malloc, counting. */
typedef struct counting_allocator {
  int allocations;
  int releases;
  size_t last_bytes;
} counting_allocator;

static kabi_status counted_allocate(void* context, int32_t device_type, int32_t device_index, size_t bytes,
                                    void* stream, void** out_pointer) {
  (void)device_index;
  (void)stream;
  if (device_type != kDLCPU) return KABI_STATUS_UNAVAILABLE;
  ++((counting_allocator*)context)->allocations;
  ((counting_allocator*)context)->last_bytes = bytes;
  return posix_memalign(out_pointer, 256, bytes) == 0 ? KABI_STATUS_OK : KABI_STATUS_INTERNAL;
}

static void counted_release(void* context, int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                            void* stream) {
  (void)device_type;
  (void)device_index;
  (void)bytes;
  (void)stream;
  ++((counting_allocator*)context)->releases;
  free(pointer);
}

/* The sum kernel: asks for N floats of workspace, copies x there and sums it. */
static size_t seen_workspace_size = 0;

static kabi_status sum_workspace(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  (void)user_data;
  *out_bytes = (size_t)problem->dims[0] * sizeof(float);
  return KABI_STATUS_OK;
}

static kabi_status sum_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const float* x = (const float*)args->inputs[0].data;
  float* scratch = (float*)args->workspace;
  float total = 0;
  int64_t i;
  (void)user_data;
  seen_workspace_size = args->workspace_size;
  if (scratch == NULL || args->workspace_size < (size_t)problem->dims[0] * sizeof(float) ||
      (uintptr_t)scratch % 256 != 0) {
    kabi_set_last_error("no workspace of the size asked");
    return KABI_STATUS_INTERNAL;
  }
  for (i = 0; i < problem->dims[0]; ++i) scratch[i] = x[i];
  for (i = 0; i < problem->dims[0]; ++i) total += scratch[i];
  *(float*)args->outputs[0].data = total;
  return KABI_STATUS_OK;
}

static kabi_status call_sum(kabi_op op, float* x, int64_t n, float* out) {
  int64_t shape[1];
  DLTensor input, output;
  kabi_args args;
  kabi_select_options options;
  shape[0] = n;
  input = test_tensor(x, test_float32(), 1, shape, NULL);
  output = test_tensor(out, test_float32(), 0, NULL, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = &input;
  args.num_inputs = 1;
  args.outputs = &output;
  args.num_outputs = 1;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.allow_unverified = 1;
  return kabi_call(op, &args, &options);
}

static void test_workspace(void) {
  const kabi_op_desc desc = op_desc("c2.sum", "x: [N] float32 -> out: [] float32", NULL, NULL);
  kabi_op op = NULL;
  kabi_kernel_desc kernel = kernel_desc("c2.sum", "c2.sum.workspace");
  kabi_kernel handle = NULL;
  kabi_kernel_info info;
  counting_allocator counts = {0, 0, 0};
  kabi_allocator allocator;
  float x[100], out = 0;
  int64_t shape[1] = {100};
  DLTensor input = test_tensor(x, test_float32(), 1, shape, NULL);
  kabi_args args;
  size_t bytes = 0;
  void* memory = NULL;
  int i;
  for (i = 0; i < 100; ++i) x[i] = (float)i;
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);
  kernel.function = sum_kernel;
  kernel.workspace = sum_workspace;
  CHECK(kabi_kernel_register(&kernel, &handle) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(handle, &info) == KABI_STATUS_OK && info.has_workspace == 1);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = &input;
  args.num_inputs = 1;
  CHECK(kabi_kernel_workspace_size(handle, &args, &bytes) == KABI_STATUS_OK && bytes == 400);

  memset(&allocator, 0, sizeof allocator);
  allocator.struct_size = sizeof allocator;
  allocator.context = &counts;
  allocator.allocate = counted_allocate;
  CHECK_STATUS(kabi_allocator_set(&allocator), KABI_STATUS_INVALID_ARGUMENT, "allocate and release must both be set");
  allocator.release = counted_release;
  CHECK(kabi_allocator_set(&allocator) == KABI_STATUS_OK);

  /* The first call of a problem allocates; the second allocates nothing. */
  CHECK(call_sum(op, x, 64, &out) == KABI_STATUS_OK && out == 2016.0f);
  CHECK(counts.allocations == 1 && counts.releases == 0 && seen_workspace_size >= 256);
  CHECK(call_sum(op, x, 64, &out) == KABI_STATUS_OK && out == 2016.0f);
  CHECK(counts.allocations == 1 && counts.releases == 0);
  /* A smaller problem reuses the buffer; a larger one grows it, at least doubling it, and keeps the outgrown one (a
   * CUDA graph captured with it may replay it). */
  const size_t first_bytes = counts.last_bytes;
  CHECK(call_sum(op, x, 10, &out) == KABI_STATUS_OK && out == 45.0f && counts.allocations == 1);
  CHECK(call_sum(op, x, 100, &out) == KABI_STATUS_OK && out == 4950.0f);
  CHECK(counts.allocations == 2 && counts.releases == 0 && counts.last_bytes >= 2 * first_bytes);
  /* kabi_memory_allocate goes through the installed allocator too. */
  CHECK(kabi_memory_allocate(kDLCPU, 0, 32, NULL, &memory) == KABI_STATUS_OK && memory != NULL);
  kabi_memory_release(kDLCPU, 0, memory, 32, NULL);
  CHECK(counts.allocations == 3 && counts.releases == 1);

  /* Back to the default: the replaced allocator's buffers, in use and outgrown, go back to it at the next workspace,
   * and the default's CPU memory serves. */
  CHECK(kabi_allocator_set(NULL) == KABI_STATUS_OK);
  CHECK(call_sum(op, x, 100, &out) == KABI_STATUS_OK && out == 4950.0f);
  CHECK(counts.allocations == 3 && counts.releases == 3);
  memory = NULL;
  CHECK(kabi_memory_allocate(kDLCPU, 0, 1000, NULL, &memory) == KABI_STATUS_OK && (uintptr_t)memory % 256 == 0);
  memset(memory, 1, 1000);
  kabi_memory_release(kDLCPU, 0, memory, 1000, NULL);
  CHECK_STATUS(kabi_memory_allocate(kDLCPU, 0, 0, NULL, &memory), KABI_STATUS_INVALID_ARGUMENT, "0 bytes");

  /* An allocator that serves only CUDA leaves the CPU to the default; one that names the CPU serves it. */
  allocator.device_types = KABI_DEVICE_TYPE_BIT(kDLCUDA);
  CHECK(kabi_allocator_set(&allocator) == KABI_STATUS_OK);
  CHECK(kabi_memory_allocate(kDLCPU, 0, 64, NULL, &memory) == KABI_STATUS_OK && counts.allocations == 3);
  kabi_memory_release(kDLCPU, 0, memory, 64, NULL);
  CHECK(counts.releases == 3);
  allocator.device_types = KABI_DEVICE_TYPE_BIT(kDLCUDA) | KABI_DEVICE_TYPE_BIT(kDLCPU);
  CHECK(kabi_allocator_set(&allocator) == KABI_STATUS_OK);
  CHECK(kabi_memory_allocate(kDLCPU, 0, 64, NULL, &memory) == KABI_STATUS_OK && counts.allocations == 4);
  kabi_memory_release(kDLCPU, 0, memory, 64, NULL);
  CHECK(counts.releases == 4);
  CHECK(kabi_allocator_set(NULL) == KABI_STATUS_OK);
  CHECK(kabi_kernel_unregister("c2.sum", "c2.sum.workspace") == KABI_STATUS_OK);
}

static void test_extension_chains(void) {
  kabi_extension later = {sizeof(kabi_extension) + 16, KABI_EXTENSION_VENDOR_FIRST + 7, NULL};
  kabi_extension first = {sizeof(kabi_extension), 3, NULL};
  kabi_extension broken = {4, 5, NULL};
  kabi_op_desc desc = op_desc("c2.extended", "x: [N] float32 -> out: [N] float32", NULL, NULL);
  linear_call call;
  kabi_problem problem;
  first.next = &later;
  desc.extensions = &first;
  CHECK(kabi_op_register(&desc, NULL) == KABI_STATUS_OK);
  make_linear_call(&call, 1);
  call.args.extensions = &first;
  problem = describe(&call.args);
  CHECK(problem.inputs_present == 0x1Fu);
  call.args.extensions = &broken;
  CHECK_STATUS(kabi_problem_describe(linear, &call.args, &problem), KABI_STATUS_INVALID_ARGUMENT,
               "extension of type 5 has struct_size 4");
  CHECK(kabi_extension_find(&first, KABI_EXTENSION_VENDOR_FIRST + 7) == &later);
  CHECK(kabi_extension_find(&first, 99) == NULL);
}

/* A struct followed by bytes a later MINOR would have appended, all set, so reading past struct_size would show. */
#define NEWER(type) \
  struct {          \
    type value;     \
    unsigned char future[64]; \
  }

static void test_struct_sizes(void) {
  NEWER(kabi_op_desc) newer_op;
  NEWER(kabi_args) newer_args;
  NEWER(kabi_select_options) newer_options;
  NEWER(kabi_kernel_desc) newer_kernel;
  NEWER(kabi_allocator) newer_allocator;
  NEWER(kabi_op_info) newer_info;
  kabi_op_desc older_op = op_desc("c2.older", "x: [N] float32, factor: float = 2.0 -> out: [N] float32", NULL,
                                  "not,a,valid,key");
  kabi_op older = NULL, newer = NULL;
  kabi_op_info info, older_info;
  const unsigned char* older_info_bytes = (const unsigned char*)&older_info;
  kabi_attribute_value garbage = {-5, -5.0};
  float x[4] = {0};
  int64_t shape[1] = {4};
  DLTensor input = test_tensor(x, test_float32(), 1, shape, NULL);
  kabi_args older_args;
  kabi_problem problem;
  kabi_select_options older_options;
  kabi_selection selection;
  kabi_kernel_desc older_kernel;
  kabi_kernel kernel = NULL;
  kabi_kernel_info kernel_info;
  counting_allocator counts = {0, 0, 0};

  /* An older op desc ends before tuning_key: the default key serves. A newer one's extra bytes are not read. */
  older_op.struct_size = offsetof(kabi_op_desc, tuning_key);
  CHECK(kabi_op_register(&older_op, &older) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_op_info_get(older, &info) == KABI_STATUS_OK && strcmp(info.tuning_key, "dtype,layout,batch,N,factor") == 0);
  memset(&newer_op, 0xAB, sizeof newer_op);
  newer_op.value = op_desc("c2.newer", "x: [N] float32 -> out: [N] float32", NULL, NULL);
  newer_op.value.struct_size = sizeof newer_op;
  CHECK(kabi_op_register(&newer_op.value, &newer) == KABI_STATUS_OK);
  older_op.struct_size = offsetof(kabi_op_desc, name);
  CHECK_STATUS(kabi_op_register(&older_op, NULL), KABI_STATUS_INVALID_ARGUMENT, "op desc->struct_size is");

  /* Output structs: an older caller's is written only up to its size; a newer one's tail is left alone. */
  memset(&older_info, 0xCD, sizeof older_info);
  older_info.struct_size = offsetof(kabi_op_info, num_inputs);
  CHECK(kabi_op_info_get(older, &older_info) == KABI_STATUS_OK);
  CHECK(older_info_bytes[offsetof(kabi_op_info, num_inputs)] == 0xCD &&
        older_info_bytes[sizeof older_info - 1] == 0xCD);
  CHECK(strcmp(older_info.tuning_key, "dtype,layout,batch,N,factor") == 0);
  memset(&newer_info, 0xCD, sizeof newer_info);
  newer_info.value.struct_size = sizeof newer_info;
  CHECK(kabi_op_info_get(older, &newer_info.value) == KABI_STATUS_OK);
  CHECK(newer_info.value.num_attributes == 1 && newer_info.future[0] == 0xCD && newer_info.future[63] == 0xCD);
  CHECK(newer_info.value.struct_size == sizeof newer_info);

  /* Older args end before attributes: the garbage there is not read and the default of factor serves. */
  memset(&older_args, 0, sizeof older_args);
  older_args.struct_size = offsetof(kabi_args, attributes);
  older_args.inputs = &input;
  older_args.num_inputs = 1;
  older_args.attributes = &garbage;
  older_args.num_attributes = 99;
  memset(&problem, 0, sizeof problem);
  problem.struct_size = sizeof problem;
  CHECK(kabi_problem_describe(older, &older_args, &problem) == KABI_STATUS_OK && problem.attributes[0].real == 2.0);
  memset(&newer_args, 0xAB, sizeof newer_args);
  newer_args.value = older_args;
  newer_args.value.struct_size = sizeof newer_args;
  newer_args.value.extensions = NULL;
  newer_args.value.num_attributes = 1;
  newer_args.value.stream = NULL;
  CHECK(kabi_problem_describe(older, &newer_args.value, &problem) == KABI_STATUS_OK &&
        problem.attributes[0].real == -5.0);

  /* Kernel descs: an older one ends before workspace (the workspace function and fingerprint past it are not read);
   * a newer one is accepted. */
  older_kernel = kernel_desc("c2.older", "c2.older.kernel");
  older_kernel.struct_size = offsetof(kabi_kernel_desc, workspace);
  older_kernel.workspace = sum_workspace;
  older_kernel.fingerprint = "unread";
  CHECK(kabi_kernel_register(&older_kernel, &kernel) == KABI_STATUS_OK);
  memset(&kernel_info, 0, sizeof kernel_info);
  kernel_info.struct_size = sizeof kernel_info;
  CHECK(kabi_kernel_info_get(kernel, &kernel_info) == KABI_STATUS_OK && kernel_info.has_workspace == 0);
  CHECK(strcmp(kernel_info.fingerprint, "c2:c2.older.kernel") == 0);
  memset(&newer_kernel, 0xAB, sizeof newer_kernel);
  newer_kernel.value = kernel_desc("c2.older", "c2.newer.kernel");
  newer_kernel.value.struct_size = sizeof newer_kernel;
  CHECK(kabi_kernel_register(&newer_kernel.value, NULL) == KABI_STATUS_OK);

  /* Select options: an older struct (through force only) keeps the defaults of the rest; a newer one is read. */
  memset(&older_options, 0, sizeof older_options);
  older_options.struct_size = offsetof(kabi_select_options, use_environment);
  older_options.force = "c2.older.kernel";
  older_options.use_environment = 0;
  older_options.allow_unverified = 0;
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  older_args.struct_size = sizeof older_args;
  older_args.num_attributes = 0;
  setenv("KABI_ALLOW_UNVERIFIED", "1", 1);
  CHECK(kabi_select(older, &older_args, &older_options, &selection) == KABI_STATUS_OK && selection.kernel == kernel);
  memset(&newer_options, 0xAB, sizeof newer_options);
  memset(&newer_options.value, 0, sizeof newer_options.value);
  newer_options.value.struct_size = sizeof newer_options;
  newer_options.value.force = "c2.newer.kernel";
  newer_options.value.allow_unverified = 1;
  CHECK(kabi_select(older, &older_args, &newer_options.value, &selection) == KABI_STATUS_OK);
  CHECK(selection.kernel != kernel && selection.kernel != NULL);

  /* Allocators: one too small to hold release is refused; a newer one is accepted. */
  memset(&newer_allocator, 0xAB, sizeof newer_allocator);
  memset(&newer_allocator.value, 0, sizeof newer_allocator.value);
  newer_allocator.value.struct_size = offsetof(kabi_allocator, release);
  newer_allocator.value.context = &counts;
  newer_allocator.value.allocate = counted_allocate;
  newer_allocator.value.release = counted_release;
  CHECK_STATUS(kabi_allocator_set(&newer_allocator.value), KABI_STATUS_INVALID_ARGUMENT, "struct_size");
  newer_allocator.value.struct_size = sizeof newer_allocator;
  CHECK(kabi_allocator_set(&newer_allocator.value) == KABI_STATUS_OK);
  CHECK(kabi_allocator_set(NULL) == KABI_STATUS_OK);
  CHECK(kabi_kernel_unregister("c2.older", "c2.older.kernel") == KABI_STATUS_OK);
  CHECK(kabi_kernel_unregister("c2.older", "c2.newer.kernel") == KABI_STATUS_OK);
}

int main(void) {
  test_schema_parse_errors();
  test_parsed_model();
  test_validation();
  test_bool_attribute();
  test_type_constraints();
  test_workspace();
  test_extension_chains();
  test_struct_sizes();
  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all ABI 2.0 checks passed\n");
  return 0;
}
