/* What a CUDA plugin registers on GPUs this machine does not have: loads the plugin (argv[1]) and calls its
 * kabi_plugin_init with a host table of this program's own, which reports one CUDA device per arch in argv[2..]
 * (compute capability as major * 10 + minor, e.g. 90), and prints each kernel the plugin registers as one JSON line
 * with the keys of kabi._core.kernel_list(). A plugin registers from the host's device facts alone (no CUDA call), so
 * tests/python/test_cuda_plugin.py compares this with the declarations in registry/kernels/cuda on a CPU machine.
 *
 * With --scaled-mm-supports after the archs, it instead asks each scaled_mm kernel's supports predicate about the
 * scaled_mm calls of the table below (tensors with addresses but no memory: a predicate reads only their metadata)
 * and prints one JSON line per kernel and call: {"call", "kernel", "supported", "reason"}. With --grouped-mm-supports
 * it does the same for the grouped_mm kernels and the grouped_mm calls of the second table, and adds the workspace
 * each kernel asks for the call's problem: {"call", "kernel", "supported", "reason", "workspace"}.
 *
 * Exits 0 after a successful init, 1 otherwise (with the plugin's message on stderr). */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"

enum { MAX_DEVICES = 8 };
static int32_t device_archs[MAX_DEVICES];
static int32_t device_count = 0;
static char error_message[1024] = "";

/* The scaled_mm and grouped_mm kernels registered, for --scaled-mm-supports and --grouped-mm-supports. */
enum { MAX_KERNELS = 16 };
typedef struct {
  char name[256];
  kabi_supports_fn supports;
  kabi_workspace_fn workspace;
  void* user_data;
} RegisteredKernel;
static RegisteredKernel scaled_mm_kernels[MAX_KERNELS], grouped_mm_kernels[MAX_KERNELS];
static int scaled_mm_kernel_count = 0, grouped_mm_kernel_count = 0;
static int print_registrations = 1;

static kabi_status count_devices(int32_t device_type, int32_t* out_count) {
  *out_count = device_type == kDLCUDA ? device_count : 0;
  return KABI_STATUS_OK;
}

static kabi_status describe_device(int32_t device_type, int32_t device_index, kabi_device_info* out_info) {
  if (device_type != kDLCUDA || device_index < 0 || device_index >= device_count) return KABI_STATUS_NOT_FOUND;
  out_info->device_type = kDLCUDA;
  out_info->device_index = device_index;
  out_info->arch = device_archs[device_index];
  out_info->compute_units = 132;
  return KABI_STATUS_OK;
}

static void set_error(const char* message) { snprintf(error_message, sizeof error_message, "%s", message); }

static const char* last_error(void) { return error_message; }

static kabi_status refuse_op(const kabi_op_desc* desc, kabi_op* out_op) {
  (void)desc;
  (void)out_op;
  return KABI_STATUS_UNAVAILABLE;
}

static void remember(RegisteredKernel* kernels, int* count, const kabi_kernel_desc* desc) {
  if (desc->supports == NULL || *count >= MAX_KERNELS) return;
  snprintf(kernels[*count].name, sizeof kernels[0].name, "%s", desc->name);
  kernels[*count].supports = desc->supports;
  kernels[*count].workspace = desc->workspace;
  kernels[*count].user_data = desc->user_data;
  ++*count;
}

static kabi_status print_kernel(const kabi_kernel_desc* desc, kabi_kernel* out_kernel) {
  *out_kernel = NULL;
  if (strcmp(desc->op, "scaled_mm") == 0) remember(scaled_mm_kernels, &scaled_mm_kernel_count, desc);
  if (strcmp(desc->op, "grouped_mm") == 0) remember(grouped_mm_kernels, &grouped_mm_kernel_count, desc);
  if (!print_registrations) return KABI_STATUS_OK;
  if (desc->num_input_layouts > 0) {
    /* This host knows no op schema, so it cannot name the inputs that kernel_list() pairs with their masks. */
    fprintf(stderr, "%s declares layouts per input, which this host cannot print\n", desc->name);
    return KABI_STATUS_UNAVAILABLE;
  }
  printf("{\"op\": \"%s\", \"name\": \"%s\", \"backend\": \"%s\", \"kind\": \"%s\", \"device_type\": %d, \"archs\": [",
         desc->op, desc->name, desc->backend, desc->kind == KABI_KERNEL_FUNCTION ? "function" : "other",
         (int)desc->device_type);
  for (int32_t i = 0; i < desc->num_archs; ++i) printf("%s%d", i > 0 ? ", " : "", (int)desc->archs[i]);
  printf("], \"arch_min\": %d, \"arch_max\": %d, \"required_features\": %" PRIu64 ", \"dtypes\": %" PRIu32
         ", \"layouts\": %" PRIu32 ", \"batch_mode\": %d, \"alignment\": %" PRIu32 ", \"priority\": %d, "
         "\"plugin\": \"\", \"fingerprint\": \"%s\", \"type_constraints\": \"%s\", \"has_workspace\": %s, "
         "\"has_variant\": %s, \"input_layouts\": []}\n",
         desc->num_archs > 0 ? 0 : (int)desc->arch_min, desc->num_archs > 0 ? 0 : (int)desc->arch_max,
         desc->required_features, desc->dtypes, desc->layouts, (int)desc->batch_mode, desc->alignment,
         (int)desc->priority, desc->fingerprint != NULL ? desc->fingerprint : "",
         desc->type_constraints != NULL ? desc->type_constraints : "", desc->workspace != NULL ? "true" : "false",
         kabi_extension_find(desc->extensions, KABI_EXTENSION_KERNEL_VARIANT) != NULL ? "true" : "false");
  return KABI_STATUS_OK;
}

/* One scaled_mm call: a [M, K] (row-major unless a_column_major), b [K, N] (column-major unless b_row_major),
 * scale_a [] or [M, 1] (with row stride scale_a_stride), scale_b [] or [1, N], a bias [N] or none, out [M, N], and
 * the attribute use_fast_accum. */
typedef struct {
  const char* name;
  int64_t m, n, k;
  uint8_t a_code, b_code; /* kDLFloat8_e4m3fn or kDLFloat8_e5m2 */
  int a_column_major, b_row_major;
  int scale_a_rows, scale_b_columns;
  int64_t scale_a_stride;
  int with_bias;
  uint32_t out_dtype; /* KABI_DTYPE_BFLOAT16, FLOAT16 or FLOAT32 */
  uintptr_t a_offset; /* bytes added to a's (aligned) address */
  int use_fast_accum;
} ScaledMmCall;

enum { E4M3 = kDLFloat8_e4m3fn, E5M2 = kDLFloat8_e5m2 };
static const ScaledMmCall calls[] = {
    {"aligned", 77, 1040, 272, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"one_row", 1, 256, 128, E4M3, E4M3, 0, 0, 1, 1, 1, 1, KABI_DTYPE_FLOAT16, 0, 0},
    {"row_scales_bias_float32", 333, 512, 1024, E4M3, E4M3, 0, 0, 1, 1, 1, 1, KABI_DTYPE_FLOAT32, 0, 0},
    {"mixed_scales", 96, 256, 64, E4M3, E4M3, 0, 0, 0, 1, 1, 1, KABI_DTYPE_BFLOAT16, 0, 0},
    {"n_136", 96, 136, 128, E4M3, E4M3, 0, 0, 1, 1, 1, 1, KABI_DTYPE_BFLOAT16, 0, 0},
    {"k_40", 64, 128, 40, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"n_100", 64, 100, 64, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"b_row_major", 64, 128, 64, E4M3, E4M3, 0, 1, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"a_column_major", 64, 128, 64, E4M3, E4M3, 1, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"b_e5m2", 64, 128, 64, E4M3, E5M2, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"both_e5m2", 64, 128, 64, E5M2, E5M2, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"strided_scale_a", 64, 128, 64, E4M3, E4M3, 0, 0, 1, 0, 2, 0, KABI_DTYPE_BFLOAT16, 0, 0},
    {"a_off_16_bytes", 64, 128, 64, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 8, 0},
    {"bias_float32", 64, 128, 64, E4M3, E4M3, 0, 0, 0, 0, 1, 1, KABI_DTYPE_FLOAT32, 0, 0},
    {"aligned_fast_accum", 77, 1040, 272, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_BFLOAT16, 0, 1},
    {"row_scales_bias_fast_accum", 333, 512, 1024, E4M3, E4M3, 0, 0, 1, 1, 1, 1, KABI_DTYPE_FLOAT16, 0, 1},
    {"float32_fast_accum", 64, 128, 64, E4M3, E4M3, 0, 0, 0, 0, 1, 0, KABI_DTYPE_FLOAT32, 0, 1},
};

static DLDataType dtype_of(uint32_t dtype) {
  DLDataType type = {kDLFloat, 32, 1};
  if (dtype == KABI_DTYPE_BFLOAT16) type.code = kDLBfloat;
  if (dtype != KABI_DTYPE_FLOAT32) type.bits = 16;
  return type;
}

/* A tensor of CUDA device 0 at a made-up (never read) address. */
static DLTensor tensor(uintptr_t address, DLDataType dtype, int32_t ndim, int64_t* shape, int64_t* strides) {
  DLTensor result;
  memset(&result, 0, sizeof result);
  result.data = (void*)address;
  result.device.device_type = kDLCUDA;
  result.dtype = dtype;
  result.ndim = ndim;
  result.shape = shape;
  result.strides = strides;
  return result;
}

static void print_json_string(const char* text) {
  putchar('"');
  for (; *text != '\0'; ++text) {
    if (*text == '"' || *text == '\\') putchar('\\');
    putchar(*text);
  }
  putchar('"');
}

static void ask_scaled_mm_kernels(void) {
  for (size_t c = 0; c < sizeof calls / sizeof calls[0]; ++c) {
    const ScaledMmCall* call = &calls[c];
    const DLDataType a_type = {call->a_code, 8, 1}, b_type = {call->b_code, 8, 1}, float32 = {kDLFloat, 32, 1};
    int64_t a_shape[2] = {call->m, call->k}, a_strides[2] = {call->k, 1};
    if (call->a_column_major) a_strides[0] = 1, a_strides[1] = call->m;
    int64_t b_shape[2] = {call->k, call->n}, b_strides[2] = {1, call->k};
    if (call->b_row_major) b_strides[0] = call->n, b_strides[1] = 1;
    int64_t scale_a_shape[2] = {call->m, 1}, scale_a_strides[2] = {call->scale_a_stride, 1};
    int64_t scale_b_shape[2] = {1, call->n}, scale_b_strides[2] = {call->n, 1};
    int64_t bias_shape[1] = {call->n}, bias_strides[1] = {1};
    int64_t out_shape[2] = {call->m, call->n}, out_strides[2] = {call->n, 1};
    DLTensor inputs[5];
    inputs[0] = tensor(0x100000 + call->a_offset, a_type, 2, a_shape, a_strides);
    inputs[1] = tensor(0x200000, b_type, 2, b_shape, b_strides);
    inputs[2] = tensor(0x300000, float32, call->scale_a_rows ? 2 : 0, scale_a_shape, scale_a_strides);
    inputs[3] = tensor(0x400000, float32, call->scale_b_columns ? 2 : 0, scale_b_shape, scale_b_strides);
    memset(&inputs[4], 0, sizeof inputs[4]);
    if (call->with_bias) inputs[4] = tensor(0x500000, dtype_of(call->out_dtype), 1, bias_shape, bias_strides);
    DLTensor out = tensor(0x600000, dtype_of(call->out_dtype), 2, out_shape, out_strides);
    kabi_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof args;
    args.inputs = inputs;
    args.num_inputs = 5;
    args.outputs = &out;
    args.num_outputs = 1;
    kabi_problem problem;
    memset(&problem, 0, sizeof problem);
    problem.struct_size = sizeof problem;
    problem.device_type = kDLCUDA;
    problem.dtype = call->out_dtype;
    /* out_dtype (its index in KABI_DTYPE_* bit order: float16, bfloat16, float32) and use_fast_accum. */
    problem.num_attributes = 2;
    problem.attributes[0].integer = call->out_dtype == KABI_DTYPE_FLOAT16    ? 0
                                    : call->out_dtype == KABI_DTYPE_BFLOAT16 ? 1
                                                                             : 2;
    problem.attributes[1].integer = call->use_fast_accum;
    for (int i = 0; i < scaled_mm_kernel_count; ++i) {
      char reason[512] = "";
      const int32_t supported = scaled_mm_kernels[i].supports(scaled_mm_kernels[i].user_data, &problem, &args,
                                                              reason, sizeof reason);
      printf("{\"call\": \"%s\", \"kernel\": \"%s\", \"supported\": %s, \"reason\": ", call->name,
             scaled_mm_kernels[i].name, supported ? "true" : "false");
      print_json_string(reason);
      printf("}\n");
    }
  }
}

/* One grouped_mm call: x [T, K] with offs [E] (the 2-D form), or x [E, M, K] without (the 3-D form, rows = M); w
 * [E, K, N], the transposed view of an [E, N, K] tensor unless w_row_major; out [T, N] or [E, M, N]. Paddings are
 * elements added to a stride, x_offset bytes added to x's (aligned) address. */
typedef struct {
  const char* name;
  int three_d;
  int64_t groups, rows, n, k;
  int w_row_major, x_column_major;
  int64_t x_row_padding, w_group_padding, offs_stride;
  uint32_t dtype; /* KABI_DTYPE_BFLOAT16 or FLOAT16 */
  uintptr_t x_offset;
} GroupedMmCall;

enum { BF16 = KABI_DTYPE_BFLOAT16, FP16 = KABI_DTYPE_FLOAT16 };
static const GroupedMmCall grouped_calls[] = {
    {"linear_weight", 0, 4, 77, 136, 264, 0, 0, 0, 0, 1, BF16, 0},
    {"row_major_weight", 0, 4, 77, 136, 264, 1, 0, 0, 0, 1, FP16, 0},
    {"three_d", 1, 3, 40, 128, 64, 0, 0, 0, 0, 1, BF16, 0},
    {"three_d_row_major_weight", 1, 3, 40, 128, 64, 1, 0, 0, 0, 1, FP16, 0},
    {"one_group_one_row", 0, 1, 1, 8, 8, 0, 0, 0, 0, 1, BF16, 0},
    {"deepseek_v3_gate_up", 0, 256, 32768, 4096, 7168, 0, 0, 0, 0, 1, BF16, 0},
    {"k_100", 0, 4, 77, 136, 100, 0, 0, 0, 0, 1, BF16, 0},
    {"n_100", 0, 4, 77, 100, 264, 0, 0, 0, 0, 1, BF16, 0},
    {"n_100_row_major_weight", 0, 4, 77, 100, 264, 1, 0, 0, 0, 1, BF16, 0},
    {"x_column_major", 0, 4, 77, 136, 264, 0, 1, 0, 0, 1, BF16, 0},
    {"x_rows_off_16_bytes", 0, 4, 77, 136, 264, 0, 0, 4, 0, 1, BF16, 0},
    {"w_groups_off_16_bytes", 0, 4, 77, 136, 264, 0, 0, 0, 4, 1, BF16, 0},
    {"x_off_16_bytes", 0, 4, 77, 136, 264, 0, 0, 0, 0, 1, BF16, 8},
    {"strided_offs", 0, 4, 77, 136, 264, 0, 0, 0, 0, 2, BF16, 0},
    {"no_rows", 0, 4, 0, 136, 264, 0, 0, 0, 0, 1, BF16, 0},
};

static void ask_grouped_mm_kernels(void) {
  for (size_t c = 0; c < sizeof grouped_calls / sizeof grouped_calls[0]; ++c) {
    const GroupedMmCall* call = &grouped_calls[c];
    const DLDataType type = dtype_of(call->dtype), int32 = {kDLInt, 32, 1};
    const int64_t groups = call->groups, rows = call->rows, n = call->n, k = call->k;
    const int64_t x_row_stride = k + call->x_row_padding;
    /* x: [T, K] or [E, M, K]; column-major: each [rows, K] matrix transposed in memory. */
    int64_t x_shape[3] = {groups, rows, k}, x_strides[3] = {rows * x_row_stride, x_row_stride, 1};
    if (call->x_column_major) x_strides[1] = 1, x_strides[2] = rows;
    const int x_rank = call->three_d ? 3 : 2;
    int64_t* x_dims = call->three_d ? x_shape : x_shape + 1;
    int64_t* x_steps = call->three_d ? x_strides : x_strides + 1;
    const int64_t w_group_stride = k * n + call->w_group_padding;
    int64_t w_shape[3] = {groups, k, n}, w_strides[3] = {w_group_stride, 1, k};
    if (call->w_row_major) w_strides[1] = n, w_strides[2] = 1;
    int64_t offs_shape[1] = {groups}, offs_strides[1] = {call->offs_stride};
    int64_t out_shape[3] = {groups, rows, n}, out_strides[3] = {rows * n, n, 1};
    DLTensor inputs[3], out;
    inputs[0] = tensor(0x1000000 + call->x_offset, type, x_rank, x_dims, x_steps);
    inputs[1] = tensor(0x2000000, type, 3, w_shape, w_strides);
    memset(&inputs[2], 0, sizeof inputs[2]);
    if (!call->three_d) inputs[2] = tensor(0x3000000, int32, 1, offs_shape, offs_strides);
    out = tensor(0x4000000, type, x_rank, call->three_d ? out_shape : out_shape + 1,
                 call->three_d ? out_strides : out_strides + 1);
    kabi_args args;
    memset(&args, 0, sizeof args);
    args.struct_size = sizeof args;
    args.inputs = inputs;
    args.num_inputs = call->three_d ? 2 : 3;
    args.outputs = &out;
    args.num_outputs = 1;
    /* The op's dims in schema order ("x: [E?, R, K] T, w: [E, K, N] T, ..."). */
    static const char* const dim_names[4] = {"E", "R", "K", "N"};
    kabi_problem problem;
    memset(&problem, 0, sizeof problem);
    problem.struct_size = sizeof problem;
    problem.device_type = kDLCUDA;
    problem.dtype = call->dtype;
    problem.num_dims = 4;
    problem.dims[0] = groups, problem.dims[1] = rows, problem.dims[2] = k, problem.dims[3] = n;
    for (int d = 0; d < 4; ++d) problem.dim_names[d] = dim_names[d];
    for (int i = 0; i < grouped_mm_kernel_count; ++i) {
      const RegisteredKernel* kernel = &grouped_mm_kernels[i];
      char reason[512] = "";
      size_t workspace = 0;
      const int32_t supported = kernel->supports(kernel->user_data, &problem, &args, reason, sizeof reason);
      if (kernel->workspace != NULL && kernel->workspace(kernel->user_data, &problem, &workspace) != KABI_STATUS_OK) {
        fprintf(stderr, "%s: the workspace function failed on %s: %s\n", kernel->name, call->name, error_message);
        exit(1);
      }
      printf("{\"call\": \"%s\", \"kernel\": \"%s\", \"supported\": %s, \"workspace\": %zu, \"reason\": ",
             call->name, kernel->name, supported ? "true" : "false", workspace);
      print_json_string(reason);
      printf("}\n");
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2 || argc - 2 > MAX_DEVICES) {
    fprintf(stderr, "usage: %s PLUGIN [ARCH...] [--scaled-mm-supports | --grouped-mm-supports] (at most %d archs)\n",
            argv[0], MAX_DEVICES);
    return 1;
  }
  int ask_scaled_mm = 0, ask_grouped_mm = 0;
  for (int i = 2; i < argc; ++i) {
    if (strcmp(argv[i], "--scaled-mm-supports") == 0) {
      ask_scaled_mm = 1;
      print_registrations = 0;
    } else if (strcmp(argv[i], "--grouped-mm-supports") == 0) {
      ask_grouped_mm = 1;
      print_registrations = 0;
    } else {
      device_archs[device_count++] = (int32_t)atoi(argv[i]);
    }
  }
  void* plugin = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (plugin == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  kabi_plugin_init_fn init;
  *(void**)&init = dlsym(plugin, KABI_PLUGIN_INIT_SYMBOL);
  if (init == NULL) {
    fprintf(stderr, "no %s in %s\n", KABI_PLUGIN_INIT_SYMBOL, argv[1]);
    return 1;
  }
  kabi_host_api host;
  memset(&host, 0, sizeof host);
  host.struct_size = sizeof host;
  host.abi_version = KABI_ABI_VERSION;
  host.kernel_register = print_kernel;
  host.op_register = refuse_op;
  host.device_count = count_devices;
  host.device_info_get = describe_device;
  host.set_error = set_error;
  host.last_error = last_error;
  kabi_plugin_info info;
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  const kabi_status status = init(&host, &info);
  if (status != KABI_STATUS_OK) {
    fprintf(stderr, "kabi_plugin_init returned %d: %s\n", (int)status, error_message);
    return 1;
  }
  if (ask_scaled_mm) ask_scaled_mm_kernels();
  if (ask_grouped_mm) ask_grouped_mm_kernels();
  return 0;
}
