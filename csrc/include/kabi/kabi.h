/*
 * kabi.h - the stable C ABI of kabi, a portable kernel ABI with a hardware-dispatch registry.
 *
 * This header is the whole contract between libkabi, its callers (C, C++, the Python binding) and its plugins.
 * Rules it follows:
 *   - C99, usable from C++17; every symbol is exported with KABI_EXPORT, everything else in libkabi is hidden.
 *   - KABI_ABI_VERSION_MAJOR / _MINOR describe this header; kabi_abi_version() reports the library's at run time.
 *     A MINOR bump only appends: new functions, new enum values, new fields at the end of structs.
 *   - Every struct that crosses the boundary starts with `size_t struct_size`, set by whoever allocates the struct
 *     to sizeof() of its own version of it. The receiver reads (or, for output structs, writes) only the fields that
 *     struct_size covers, so a caller or plugin built against an older MINOR keeps working.
 *   - Arrays of structs are strided by the struct_size of their first element.
 *   - Handles are opaque pointers owned by libkabi; they stay valid until the object is unregistered.
 *   - Functions return kabi_status; on failure the calling thread's message is kabi_last_error().
 *     No C++ exception crosses this boundary.
 *   - Tensors are DLPack DLTensor; streams are passed explicitly (a CUstream for CUDA, NULL for the default stream).
 *   - Outputs are the last parameters.
 *   - The input structs a later version may need to grow without a MAJOR (op, kernel and device-binary
 *     declarations, call arguments, selection options, the host table, the allocator) carry an extension chain
 *     right after struct_size, as PJRT's extension_start: see kabi_extension.
 *
 * ABI 2.0 (the op model) differs from 1.x in: per-tensor dtypes with type variables, typed attributes, optional
 * inputs and several outputs in the schema; a workspace that kernels declare and the host allocates through a
 * replaceable stream-ordered allocator; the problem handed to every function kernel; the extension chains. A plugin
 * or device-binary manifest built for ABI 1.x is refused with a message that says to rebuild it.
 *
 * ABI 2.1 appends: a literal 1 among a tensor's dims and shape alternatives ("[M, 1] | []"; KABI_DIM_ONE, the
 * alternative_* fields of kabi_tensor_decl, kabi_problem.input_shapes), attributes typed by a type variable,
 * whose value binds it (kabi_attribute_decl.type_variable), and inputs that come in forms: an optional first dim
 * "E?", an optional input's presence condition "offs?(x.rank == 2)" and the offsets(R) value rule
 * (kabi_tensor_decl.leading_dim_optional, present_with_input/_rank, offsets_of_dim).
 *
 * ABI 2.2 appends: screened tuning records (KABI_TUNING_RECORD_SCREENED, kabi_candidate.tuned_screened).
 *
 * ABI 2.3 appends: the first extension type, KABI_EXTENSION_KERNEL_VARIANT (kabi_kernel_variant_extension): a kernel
 * that runs one of several variants chosen per problem (a vendor library's algorithm) names the variant, the tuning
 * cache records it beside each measurement and verdict, and a record of another variant than the kernel now runs is
 * stale (kabi_candidate.variant and stale_variant, kabi_cache_entry.variant).
 *
 * ABI 2.4 appends: layout masks per input (kabi_kernel_desc.input_layouts, num_input_layouts, and the same in
 * kabi_kernel_info), so that one kernel can take, say, a row-major a and a column-major b (nn.Linear's weight); and
 * the divisibility a device binary assumes of a dim or stride parameter (kabi_launch_param.divisible_by): a problem
 * whose value is not a multiple is not that kernel's, at selection and at launch.
 *
 * ABI 2.5 appends: zeroed scratch for device binaries (KABI_PARAM_ZEROED_SCRATCH): memory that is zero when the
 * kernel starts and that the kernel leaves zero, such as the tile counters of a split-K kernel that adds its K
 * slices in the same launch.
 *
 * ABI 2.6 reads a STRIDE parameter of a dimension counted from the end that the tensor does not have as 0 (2.5
 * refused the launch): a broadcast dimension, as torch aligns shapes from the end, so that one image reads a
 * per-tensor scale [] and a row-wise one [M, 1] through the same stride.
 *
 * ABI 2.7 appends: kabi_binary_load_many, which registers a list of manifests all or nothing, reading them in
 * parallel (a backend registers some 300 at a process's first call).
 *
 * ABI 2.8 appends: kabi_stream_execution_mode, whether a launch on a stream runs eagerly or is being captured into a
 * CUDA graph, so that a caller holding a pick per kabi_execution_mode launches the one for each call.
 */
#ifndef KABI_KABI_H_
#define KABI_KABI_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#define KABI_ABI_VERSION_MAJOR 2
#define KABI_ABI_VERSION_MINOR 8
/** The version this header describes, as (MAJOR << 16) | MINOR. */
#define KABI_ABI_VERSION ((uint32_t)((KABI_ABI_VERSION_MAJOR << 16) | KABI_ABI_VERSION_MINOR))
/** The MAJOR part of a packed version. */
#define KABI_ABI_VERSION_MAJOR_OF(version) ((uint32_t)(version) >> 16)
/** The MINOR part of a packed version. */
#define KABI_ABI_VERSION_MINOR_OF(version) ((uint32_t)(version) & 0xFFFFu)

#if defined(_WIN32)
#if defined(KABI_BUILDING_LIBRARY)
#define KABI_EXPORT __declspec(dllexport)
#else
#define KABI_EXPORT __declspec(dllimport)
#endif
#define KABI_PLUGIN_EXPORT __declspec(dllexport)
#else
#define KABI_EXPORT __attribute__((visibility("default")))
#define KABI_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------------------ */
/* Status and errors                                                                                             */
/* ------------------------------------------------------------------------------------------------------------ */

/** Result of every kabi call. The Python binding maps each kind to one exception class. */
typedef enum kabi_status {
  KABI_STATUS_OK = 0,
  /** Bad input: a null pointer, a struct_size too small, a shape or layout the op does not accept. */
  KABI_STATUS_INVALID_ARGUMENT = 1,
  /** A dtype the op or kernel does not accept, or dtypes that do not agree. */
  KABI_STATUS_UNSUPPORTED_DTYPE = 2,
  /** Unknown op, kernel, device or plugin. */
  KABI_STATUS_NOT_FOUND = 3,
  /** No registered kernel is eligible for the problem (or for the forced choice). */
  KABI_STATUS_NO_ELIGIBLE_KERNEL = 4,
  /** A name that must be unique is already registered. */
  KABI_STATUS_ALREADY_EXISTS = 5,
  /** A kernel reported failure, or its launch failed. */
  KABI_STATUS_KERNEL_FAILED = 6,
  /** A plugin, manifest or struct was built for an incompatible ABI version. */
  KABI_STATUS_ABI_MISMATCH = 7,
  /** A needed system component is missing (e.g. no CUDA driver). */
  KABI_STATUS_UNAVAILABLE = 8,
  /** The arguments do not meet the kernel's declared constraints (launch after select with other arguments). */
  KABI_STATUS_CONSTRAINT_VIOLATED = 9,
  /** Reading or writing a file (tuning cache, manifest, plugin) failed. */
  KABI_STATUS_IO_ERROR = 10,
  /** A bug in kabi. */
  KABI_STATUS_INTERNAL = 11
} kabi_status;

/** The calling thread's message for the last failed kabi call; "" if none. Valid until the next call on the
 *  thread. Never NULL. */
KABI_EXPORT const char* kabi_last_error(void);

/** Set the calling thread's error message. A native kernel registered directly (not through a plugin's host
 *  table) calls this before returning a failure status, so the caller's kabi_last_error() says why. */
KABI_EXPORT void kabi_set_last_error(const char* message);

/** A static name for a status ("KABI_STATUS_NOT_FOUND"); never NULL. */
KABI_EXPORT const char* kabi_status_name(kabi_status status);

/** The ABI version libkabi implements, as KABI_ABI_VERSION packs it. This signature never changes. */
KABI_EXPORT uint32_t kabi_abi_version(void);

/** The library's release version, e.g. "0.1.0". Static storage; never NULL. */
KABI_EXPORT const char* kabi_library_version(void);

/* ------------------------------------------------------------------------------------------------------------ */
/* Extension chains                                                                                              */
/* ------------------------------------------------------------------------------------------------------------ */

/** One link of an extension chain. An extension is a struct that starts with a kabi_extension (its struct_size
 *  covering the whole extension, its type saying which one it is); the chain is a singly linked list through
 *  `next`. A reader walks the chain and skips the types it does not know, so a caller built against a later MINOR
 *  can pass extensions an older libkabi (or plugin) ignores. Types below KABI_EXTENSION_VENDOR_FIRST are kabi's;
 *  vendors number theirs from it upwards. */
typedef struct kabi_extension {
  size_t struct_size;
  uint32_t type;
  const struct kabi_extension* next;
} kabi_extension;

#define KABI_EXTENSION_VENDOR_FIRST 0x10000u

/* kabi's extension types (kabi_extension.type). */
/** On a kabi_kernel_desc: a kabi_kernel_variant_extension. Since ABI 2.3. */
#define KABI_EXTENSION_KERNEL_VARIANT 1u

/** The first extension of `type` in a chain, or NULL. Header-only, so plugins need no link to libkabi. */
static inline const kabi_extension* kabi_extension_find(const kabi_extension* chain, uint32_t type) {
  for (; chain != NULL; chain = chain->next) {
    if (chain->type == type) return chain;
  }
  return NULL;
}

/* ------------------------------------------------------------------------------------------------------------ */
/* Devices                                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/* Feature flags. CPU features occupy the low 32 bits, accelerator features the high 32. */
#define KABI_FEATURE_SSE4_2 (UINT64_C(1) << 0)
#define KABI_FEATURE_AVX (UINT64_C(1) << 1)
#define KABI_FEATURE_AVX2 (UINT64_C(1) << 2)
#define KABI_FEATURE_FMA (UINT64_C(1) << 3)
#define KABI_FEATURE_AVX512F (UINT64_C(1) << 4)
#define KABI_FEATURE_AVX512BW (UINT64_C(1) << 5)
#define KABI_FEATURE_AVX512_VNNI (UINT64_C(1) << 6)
#define KABI_FEATURE_AVX512_BF16 (UINT64_C(1) << 7)
#define KABI_FEATURE_AVX512_FP16 (UINT64_C(1) << 8)
#define KABI_FEATURE_AMX_TILE (UINT64_C(1) << 9)
#define KABI_FEATURE_AMX_BF16 (UINT64_C(1) << 10)
#define KABI_FEATURE_AMX_INT8 (UINT64_C(1) << 11)
#define KABI_FEATURE_NEON (UINT64_C(1) << 12)
#define KABI_FEATURE_SVE (UINT64_C(1) << 13)
/** Tensor cores (CUDA sm_70+). */
#define KABI_FEATURE_TENSOR_CORES (UINT64_C(1) << 32)
/** bf16 tensor-core math (CUDA sm_80+). */
#define KABI_FEATURE_BF16_MMA (UINT64_C(1) << 33)
/** fp8 tensor-core math (CUDA sm_89+). */
#define KABI_FEATURE_FP8_MMA (UINT64_C(1) << 34)
/** The Tensor Memory Accelerator, bulk tensor copies (CUDA sm_90+). */
#define KABI_FEATURE_TMA (UINT64_C(1) << 35)
/** Warpgroup MMA, which needs code built for exactly sm_90a. */
#define KABI_FEATURE_WGMMA (UINT64_C(1) << 36)

/** A static lower-case name for one feature bit ("avx2", "wgmma"), or NULL for an unknown bit. */
KABI_EXPORT const char* kabi_feature_name(uint64_t feature_bit);

/** What kabi knows of one device. Output struct: the caller sets struct_size. */
typedef struct kabi_device_info {
  size_t struct_size;
  /** A DLDeviceType: kDLCPU, kDLCUDA, ... */
  int32_t device_type;
  int32_t device_index;
  /** CUDA: compute capability as major * 10 + minor (90 for sm_90). CPU: x86-64 micro-architecture level 1-4
   *  (3 = AVX2/FMA, 4 = AVX-512), 0 where unknown or not x86. */
  int32_t arch;
  /** CUDA: streaming multiprocessors. CPU: logical cores. */
  int32_t compute_units;
  /** KABI_FEATURE_* bits. */
  uint64_t features;
  /** CUDA driver API version (13000 for 13.0); 0 for the CPU. */
  int32_t driver_version;
  int32_t reserved0;
  uint64_t total_memory_bytes;
  char vendor[64];
  char name[256];
} kabi_device_info;

/** Number of devices of a DLDeviceType. A missing driver means zero devices, not an error. */
KABI_EXPORT kabi_status kabi_device_count(int32_t device_type, int32_t* out_count);

/** Fill *out_info (whose struct_size the caller set) for one device. */
KABI_EXPORT kabi_status kabi_device_info_get(int32_t device_type, int32_t device_index, kabi_device_info* out_info);

/** The device signature that keys tuning decisions: type, name, arch, features, driver and kabi ABI versions,
 *  e.g. "cuda|NVIDIA H200|sm90|drv13000|abi2". Writes a NUL-terminated string of at most buffer_size bytes. */
KABI_EXPORT kabi_status kabi_device_signature(int32_t device_type, int32_t device_index, char* buffer,
                                              size_t buffer_size);

/* ------------------------------------------------------------------------------------------------------------ */
/* Dtypes and layouts                                                                                            */
/* ------------------------------------------------------------------------------------------------------------ */

/* Dtype sets are bit masks of these. */
#define KABI_DTYPE_FLOAT16 (1u << 0)
#define KABI_DTYPE_BFLOAT16 (1u << 1)
#define KABI_DTYPE_FLOAT32 (1u << 2)
#define KABI_DTYPE_FLOAT64 (1u << 3)
#define KABI_DTYPE_INT8 (1u << 4)
#define KABI_DTYPE_INT32 (1u << 5)
#define KABI_DTYPE_INT64 (1u << 6)
#define KABI_DTYPE_FLOAT8_E4M3FN (1u << 7)
#define KABI_DTYPE_FLOAT8_E5M2 (1u << 8)
/* The rest of torch.matmul's CPU dtypes. */
#define KABI_DTYPE_UINT8 (1u << 9)
#define KABI_DTYPE_INT16 (1u << 10)
#define KABI_DTYPE_COMPLEX64 (1u << 11)
#define KABI_DTYPE_COMPLEX128 (1u << 12)

/** The KABI_DTYPE_* bit of a DLPack dtype (lanes must be 1), or 0 if kabi has no bit for it. */
KABI_EXPORT uint32_t kabi_dtype_bit(DLDataType dtype);

/** A static name for one dtype bit ("bfloat16"), or NULL. */
KABI_EXPORT const char* kabi_dtype_name(uint32_t dtype_bit);

/** The dtype bit of a name as kabi_dtype_name writes it ("bfloat16"), or 0 for an unknown name. */
KABI_EXPORT uint32_t kabi_dtype_from_name(const char* name);

/* The layout class of one tensor argument, seen through its last two dimensions (an op's matrix dims); a tensor of
 * rank 0 or 1 is CONTIGUOUS when its one stride is 1 (or it has none), else GENERAL. An absent optional input has
 * class 0. Kernels declare the classes they accept as a bit mask. */
/** Dense row-major: the whole tensor is C-contiguous. */
#define KABI_LAYOUT_CONTIGUOUS (1u << 0)
/** Each matrix is row-major (last stride 1) with a row stride >= its columns; batch strides are free. */
#define KABI_LAYOUT_ROW_STRIDED (1u << 1)
/** Each matrix is column-major (second-to-last stride 1): a transposed view. */
#define KABI_LAYOUT_COL_STRIDED (1u << 2)
/** Any other strides (neither inner dimension has stride 1, or overlapping). */
#define KABI_LAYOUT_GENERAL (1u << 3)
/** Every layout. */
#define KABI_LAYOUT_ANY (KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED | KABI_LAYOUT_GENERAL)

/* How a kernel treats the leading ("...") dimensions of an op's schema. */
/** Only tensors with no leading dimensions (plain matrices). */
#define KABI_BATCH_NONE 0
/** Leading dimensions that flatten into one batch dimension with a single stride per tensor; a broadcast input
 *  (stride 0) counts as flattenable. */
#define KABI_BATCH_UNIFORM 1
/** Any leading dimensions, broadcasting included. */
#define KABI_BATCH_ANY 2

/* ------------------------------------------------------------------------------------------------------------ */
/* Ops                                                                                                           */
/* ------------------------------------------------------------------------------------------------------------ */

/** An op: a named computation with a schema. Built-in ops (the files in registry/ops) are registered when libkabi
 *  loads. */
typedef struct kabi_op_s* kabi_op;

/* Limits of one op: tensors (inputs + outputs), named dimensions, type variables and attributes. */
#define KABI_MAX_TENSORS 16
#define KABI_MAX_OUTPUTS 4
#define KABI_MAX_DIMS 16
#define KABI_MAX_BATCH_RANK 8
#define KABI_MAX_TYPE_VARIABLES 8
#define KABI_MAX_ATTRIBUTES 16
/** The most shapes one input may declare ("[M, 1] | []" declares two). */
#define KABI_MAX_SHAPE_ALTERNATIVES 4
/** A dim that is a literal 1 in the schema ("[1, N]"), where other dims hold an index into dim_names. */
#define KABI_DIM_ONE (-1)

/** Declaration of an op. Input struct.
 *
 *  The schema names the op's inputs (tensors, then attributes) and, after "->", its output tensors:
 *    "x: [..., K] T, w: [N, K] T, bias?: [N] T, activation: enum(none, relu, gelu, gelu_tanh, silu) = none
 *       -> out: [..., N] T"
 *  - A tensor is `name: [dims] dtype`. Dims are named ("M"; one name is one size across the call) or a literal 1,
 *    and may start with "...", a group of leading dimensions that broadcast as torch.matmul's do; [] is a 0-d
 *    tensor. An input may list other shapes it may have instead, each of its own rank and without "...":
 *    `scale_a: [M, 1] | [] float32` is a row-wise or a per-tensor scale; a call's rank picks the shape. Only inputs
 *    of one shape define the dimensions of outputs.
 *    `name?:` marks an optional input: a call passes it absent as a zero-filled DLTensor (see kabi_args).
 *  - Inputs that come in forms (grouped_mm: "x: [E?, R, K] T, w: [E, K, N] T, offs?(x.rank == 2): [E] int32
 *    offsets(R) -> out: [E?, R, N] T"): a first dim "E?" may be left out, and an output's "E?" is there exactly
 *    when the inputs have it; `name?(input.rank == N)` is an optional input given exactly when that earlier
 *    required input has rank N; `offsets(R)` after an int32/int64 1-D input's dtype says its values are group end
 *    offsets along R, non-decreasing from 0 to R's size (checked for host memory; a kernel reading device offsets
 *    must stay inside its tensors whatever they hold).
 *  - The dtype is a type variable declared in type_variables (all tensors typed by one variable share its dtype in
 *    a call), or a concrete dtype name ("float32", "int32").
 *  - An attribute is `name: int`, `float`, `bool` or `enum(value, ...)`, optionally `= default` (an integer, a
 *    number, true/false, or one of the enum's values). One without a default must be passed by every call.
 *    An attribute typed by a type variable, `out_dtype: O = bfloat16`, is an enum of the variable's dtype names (in
 *    KABI_DTYPE_* bit order) whose value binds the variable: an output typed O then has the dtype the caller
 *    chose, and any tensor typed O must agree with it.
 *  Parsed once, here; kabi_op_tensor_get, kabi_op_attribute_get and kabi_op_type_variable_get return the parsed
 *  form. A syntax error is KABI_STATUS_INVALID_ARGUMENT naming the op and the offending text. */
typedef struct kabi_op_desc {
  size_t struct_size;
  const kabi_extension* extensions;
  /** Unique name, e.g. "linear". Copied. */
  const char* name;
  /** The schema, as above. Copied. */
  const char* schema;
  /** The type variables and the dtypes each may take: "T: float16, bfloat16, float32, float64; F8: float8_e4m3fn".
   *  Copied. May be NULL when the schema names only concrete dtypes. */
  const char* type_variables;
  /** The problem key used by tuning: comma-separated items among
   *    "dtype" (the dtype of every type variable, in declaration order),
   *    "layout" (the layout class of each input; "absent" for an optional one not given),
   *    "batch" (the product of the leading dims), a dimension name, or an attribute name,
   *  a dimension (or batch) optionally bucketed as "M:pow2" (next power of two) or "M:pow2<=N" (next power of two,
   *  capped: larger values stay exact). Attributes not named here do not take part in tuning: one decision serves
   *  every value. An op with optional inputs must name "layout" (kernels differ by which inputs are given).
   *  e.g. "dtype,layout,batch:pow2<=4096,N,K,activation". Copied; NULL: "dtype,layout,batch," then every dimension
   *  and every attribute. */
  const char* tuning_key;
} kabi_op_desc;

/** Register an op. Fails with KABI_STATUS_ALREADY_EXISTS for a name in use, KABI_STATUS_INVALID_ARGUMENT for a
 *  declaration that does not parse (the message names the part). */
KABI_EXPORT kabi_status kabi_op_register(const kabi_op_desc* desc, kabi_op* out_op);

/** Find an op by name; KABI_STATUS_NOT_FOUND if there is none. */
KABI_EXPORT kabi_status kabi_op_find(const char* name, kabi_op* out_op);

/** Number of registered ops. */
KABI_EXPORT int32_t kabi_op_count(void);

/** The op at index (0 <= index < kabi_op_count()), in registration order. */
KABI_EXPORT kabi_status kabi_op_at(int32_t index, kabi_op* out_op);

/** Facts about an op. Output struct. The strings belong to libkabi and live as long as the op. */
typedef struct kabi_op_info {
  size_t struct_size;
  const char* name;
  const char* schema;
  const char* type_variables;
  /** The tuning key in use (the default one when the declaration gave none). */
  const char* tuning_key;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_attributes;
  int32_t num_type_variables;
  /** Named dimensions, in order of first appearance in the schema (the order of kabi_problem.dims). */
  int32_t num_dims;
  const char* const* dim_names;
  /** Items of the tuning key, in key order (kabi_op_tuning_key_get). Since ABI 2.1. */
  int32_t num_tuning_key_items;
} kabi_op_info;

KABI_EXPORT kabi_status kabi_op_info_get(kabi_op op, kabi_op_info* out_info);

/** One tensor of an op's schema, as parsed. Output struct; strings live as long as the op. */
typedef struct kabi_tensor_decl {
  size_t struct_size;
  const char* name;
  /** 1 for an output. */
  int32_t is_output;
  /** 1 for an optional input ("bias?"). */
  int32_t optional;
  /** 1 when its shape starts with "...". */
  int32_t has_batch;
  /** Its named dims, outermost first, as indices into kabi_op_info.dim_names. */
  int32_t num_dims;
  int32_t dims[KABI_MAX_DIMS];
  /** Index of its type variable, or -1 for a concrete dtype. */
  int32_t type_variable;
  /** The dtypes it may have: its variable's set, or its one concrete dtype's bit. */
  uint32_t dtypes;
  /** ABI 2.1: the shapes it may have instead of dims ("[M, 1] | []": one alternative, of rank 0), each as
   *  alternative_ranks[i] entries of alternative_dims[i] (indices into dim_names, or KABI_DIM_ONE). */
  int32_t num_alternative_shapes;
  int32_t alternative_ranks[KABI_MAX_SHAPE_ALTERNATIVES - 1];
  int32_t alternative_dims[KABI_MAX_SHAPE_ALTERNATIVES - 1][KABI_MAX_DIMS];
  /** ABI 2.1: 1 when its first dim may be left out ("[E?, M, K]"). */
  int32_t leading_dim_optional;
  /** ABI 2.1: an optional input's presence condition ("offs?(x.rank == 2)"): given exactly when input
   *  present_with_input (an index, -1 for no condition) has rank present_with_rank. */
  int32_t present_with_input;
  int32_t present_with_rank;
  /** ABI 2.1: for "[E] int32 offsets(R)", the index of R in kabi_op_info.dim_names; -1 otherwise. */
  int32_t offsets_of_dim;
} kabi_tensor_decl;

/** Tensor `index` of the op: inputs first (0 <= index < num_inputs), then outputs. */
KABI_EXPORT kabi_status kabi_op_tensor_get(kabi_op op, int32_t index, kabi_tensor_decl* out_decl);

/** The type of an attribute. */
typedef enum kabi_attribute_type {
  KABI_ATTRIBUTE_INT = 1,
  KABI_ATTRIBUTE_FLOAT = 2,
  KABI_ATTRIBUTE_BOOL = 3,
  /** One of a fixed list of names, passed as its index in that list. */
  KABI_ATTRIBUTE_ENUM = 4
} kabi_attribute_type;

/** The value of one attribute in a call: `integer` for INT, BOOL (0 or 1) and ENUM (the index of the value);
 *  `real` for FLOAT. A plain value type, like DLDataType: it never grows, so arrays of it carry no struct_size. */
typedef struct kabi_attribute_value {
  int64_t integer;
  double real;
} kabi_attribute_value;

/** One attribute of an op's schema, as parsed. Output struct; strings live as long as the op. */
typedef struct kabi_attribute_decl {
  size_t struct_size;
  const char* name;
  kabi_attribute_type type;
  int32_t has_default;
  kabi_attribute_value default_value;
  /** ENUM: the values' names, in declaration order. */
  int32_t num_enum_values;
  const char* const* enum_values;
  /** 1 when the op's tuning key names it. */
  int32_t in_tuning_key;
  /** ABI 2.1: for an ENUM of dtype names typed by a type variable ("out_dtype: O"), the variable its value binds
   *  (an index as kabi_tensor_decl.type_variable); -1 otherwise. */
  int32_t type_variable;
} kabi_attribute_decl;

KABI_EXPORT kabi_status kabi_op_attribute_get(kabi_op op, int32_t index, kabi_attribute_decl* out_decl);

/** One type variable of an op, as parsed. Output struct; the name lives as long as the op. */
typedef struct kabi_type_variable_decl {
  size_t struct_size;
  const char* name;
  /** The KABI_DTYPE_* bits it may take. */
  uint32_t dtypes;
} kabi_type_variable_decl;

KABI_EXPORT kabi_status kabi_op_type_variable_get(kabi_op op, int32_t index, kabi_type_variable_decl* out_decl);

/** What one item of a tuning key reads from a problem. */
typedef enum kabi_tuning_key_field {
  /** The type variables' bindings ("dtype"). */
  KABI_TUNING_KEY_DTYPE = 1,
  /** Each input's layout class, "absent" for an optional input not given ("layout"). */
  KABI_TUNING_KEY_LAYOUT = 2,
  /** The batch's element count, the product of the leading ("...") dimensions ("batch"). */
  KABI_TUNING_KEY_BATCH = 3,
  /** A named dimension ("M"). */
  KABI_TUNING_KEY_DIM = 4,
  /** An attribute's value ("activation"). */
  KABI_TUNING_KEY_ATTRIBUTE = 5
} kabi_tuning_key_field;

/** One item of an op's tuning key, as parsed (e.g. "M:pow2<=4096"). Output struct. Since ABI 2.1. */
typedef struct kabi_tuning_key_item {
  size_t struct_size;
  /** A kabi_tuning_key_field. */
  int32_t field;
  /** DIM: the index into kabi_op_info.dim_names; ATTRIBUTE: the attribute's index; otherwise -1. */
  int32_t index;
  /** 1 when the value is rounded up to the next power of two ("pow2"). */
  int32_t pow2;
  /** With pow2: values above this stay exact ("pow2<=4096"); 0 for no cap. */
  int64_t pow2_cap;
} kabi_tuning_key_item;

/** Item `index` (0 <= index < kabi_op_info.num_tuning_key_items) of the op's tuning key. Since ABI 2.1. */
KABI_EXPORT kabi_status kabi_op_tuning_key_get(kabi_op op, int32_t index, kabi_tuning_key_item* out_item);

/* ------------------------------------------------------------------------------------------------------------ */
/* Call arguments                                                                                                */
/* ------------------------------------------------------------------------------------------------------------ */

/** The arguments of one call of an op. Input struct.
 *  - inputs: every input tensor in schema order; an optional input not given is a zero-filled DLTensor (its
 *    dtype.bits is 0; data, shape and strides NULL). Optional inputs at the end may also be left out of
 *    num_inputs.
 *  - attributes: values in schema order; attributes past num_attributes take their defaults.
 *  For kabi_select and kabi_problem_describe the outputs may be omitted (num_outputs 0) and data pointers may be
 *  NULL: only shapes, strides, dtypes and devices are read, and alignment is then checked at launch. */
typedef struct kabi_args {
  size_t struct_size;
  const kabi_extension* extensions;
  const DLTensor* inputs;
  int32_t num_inputs;
  int32_t num_outputs;
  DLTensor* outputs;
  const kabi_attribute_value* attributes;
  int32_t num_attributes;
  /** CUstream for CUDA devices; NULL for the default stream or for the CPU. */
  void* stream;
  /** Set by the core for a kernel that declared a workspace (kabi_workspace_fn): at least the bytes it asked for,
   *  on the call's device, usable in stream order on `stream`, aligned to 256 bytes. Callers leave them NULL / 0. */
  void* workspace;
  size_t workspace_size;
} kabi_args;

/** What the core derives from an op's schema and a call's arguments. Output struct. */
typedef struct kabi_problem {
  size_t struct_size;
  /** The device all tensors live on. */
  int32_t device_type;
  int32_t device_index;
  /** The dtype bound to each type variable in the call, in declaration order, as KABI_DTYPE_* bits; dtype is the
   *  first of them (0 for an op with none). */
  uint32_t dtype;
  int32_t num_type_variables;
  uint32_t type_bindings[KABI_MAX_TYPE_VARIABLES];
  /** Values of the schema's named dimensions, in order of first appearance (kabi_op_info.dim_names). A dimension
   *  that only an absent optional input names is 0. */
  int32_t num_dims;
  int64_t dims[KABI_MAX_DIMS];
  /** Names of those dimensions; static for the op's life. */
  const char* dim_names[KABI_MAX_DIMS];
  /** Leading ("...") dimensions of the outputs after broadcasting, and their product. */
  int32_t batch_rank;
  int64_t batch_shape[KABI_MAX_BATCH_RANK];
  int64_t batch_size;
  /** KABI_LAYOUT_* class of each input (0 for an absent one), and a bit per input that is given. */
  int32_t num_inputs;
  uint32_t input_layouts[KABI_MAX_TENSORS];
  uint32_t inputs_present;
  /** The largest KABI_BATCH_* mode any kernel would need for this call. */
  int32_t batch_mode;
  /** Each output's rank and shape. */
  int32_t num_outputs;
  int32_t output_ranks[KABI_MAX_OUTPUTS];
  int64_t output_shapes[KABI_MAX_OUTPUTS][KABI_MAX_BATCH_RANK + KABI_MAX_DIMS];
  /** Every attribute of the op, in schema order, defaults filled in. */
  int32_t num_attributes;
  kabi_attribute_value attributes[KABI_MAX_ATTRIBUTES];
  /** The tuning key, as the op's tuning_key formats it, e.g. "float32|contiguous,contiguous|1|256|256|256". */
  char key[256];
  /** ABI 2.1: the declared shape each input matched: 0 for its dims, i + 1 for alternative i (0 when absent). */
  int32_t input_shapes[KABI_MAX_TENSORS];
} kabi_problem;

/** Validate a call against its op (each tensor's dtype is allowed and agrees with the others of its type variable,
 *  shapes match the schema, devices agree, required inputs and attributes are given and attributes are in range,
 *  outputs have the derived shape and dtype) and fill *out_problem. The error message names the argument and what
 *  was expected, e.g. "matmul: b has shape [3, 5] but a has shape [2, 4]: b's dimension K (-2) must be 4",
 *  "linear: attribute activation is 7; expected an index below 5 (none, relu, gelu, gelu_tanh, silu)". */
KABI_EXPORT kabi_status kabi_problem_describe(kabi_op op, const kabi_args* args, kabi_problem* out_problem);

/* ------------------------------------------------------------------------------------------------------------ */
/* Kernels                                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/** A registered implementation of an op. */
typedef struct kabi_kernel_s* kabi_kernel;

/** How a kernel runs. */
typedef enum kabi_kernel_kind {
  /** A C function with the kabi_kernel_fn signature. */
  KABI_KERNEL_FUNCTION = 1,
  /** A cubin or PTX with a launch spec; the core launches it through the CUDA driver API. */
  KABI_KERNEL_DEVICE_BINARY = 2,
  /** Runs outside the core (a Python callable): it takes part in selection, but only its registrant can run
   *  it; kabi_launch returns KABI_STATUS_UNAVAILABLE naming the kernel. */
  KABI_KERNEL_EXTERNAL = 3
} kabi_kernel_kind;

/** A native kernel: compute args->outputs from args->inputs on args->stream. user_data is the pointer given at
 *  registration; problem is the one the core derived for the call (the same one supports() sees, except that
 *  problem->key may be empty at launch). Returns KABI_STATUS_OK, or a status with a message set through the host's
 *  set_error.
 *
 *  Outputs never alias inputs: the core refuses a call whose output's bytes overlap any input's on the same
 *  device (KABI_STATUS_INVALID_ARGUMENT naming the output and the input) at kabi_select (when data pointers are
 *  given), kabi_launch and kabi_call, so a kernel may write its outputs while it still reads its inputs.
 *
 *  A KABI_BATCH_UNIFORM kernel finds each tensor's one batch stride from the problem: with problem->batch_rank
 *  leading dimensions broadcast to problem->batch_shape, it is the stride of the tensor's innermost leading
 *  dimension whose batch_shape entry is not 1 (0 when the tensor has extent 1 there or lacks that dimension:
 *  broadcast); batch entry i of a tensor starts i times that stride after its data. problem->batch_size is the
 *  number of entries. */
typedef kabi_status (*kabi_kernel_fn)(void* user_data, const kabi_problem* problem, const kabi_args* args);

/** How many bytes of workspace a kernel needs for a problem (0: none). Called at selection and launch; the core
 *  keeps one buffer per thread, device and stream that grows to the largest need, so after the first call of a
 *  problem no allocation happens on the call path. A CUDA graph captured with a workspace replays its address, so a
 *  buffer the core outgrows stays allocated until the thread exits or kabi_allocator_set replaces the allocator (each
 *  new buffer at least doubles the last, so the outgrown ones add up to less than the one in use). */
typedef kabi_status (*kabi_workspace_fn)(void* user_data, const kabi_problem* problem, size_t* out_bytes);

/** A kernel's own eligibility test, run after the declared filters pass: return 1 if the kernel handles the
 *  problem, else 0 and write a short reason (NUL-terminated, at most reason_size bytes). Selection shows the
 *  reason as the candidate's, prefixed with "declined: " ("declined: out is not C-contiguous"), or "declined by
 *  its supports predicate" when it wrote none; a launch it declines fails with KABI_STATUS_CONSTRAINT_VIOLATED and
 *  the same "declined: " text. */
typedef int32_t (*kabi_supports_fn)(void* user_data, const kabi_problem* problem, const kabi_args* args,
                                    char* reason, size_t reason_size);

/** The most bytes a kernel's variant text may take, its NUL included: the buffer a kabi_variant_fn writes into. */
#define KABI_VARIANT_CAPACITY 256

/** Names the variant of its code a kernel runs for a problem, for a kernel whose variant is chosen per problem
 *  after registration (a vendor library's heuristic picking an algorithm), so that its fingerprint cannot name it:
 *  a short text that identifies the variant completely, e.g. "algo=66 tile=20 stages=35 splitk=1 reduction=0
 *  swizzle=0" (a cuBLASLt algorithm's configuration). Write it NUL-terminated into buffer (buffer_size is KABI_VARIANT_CAPACITY; longer text is an
 *  error, not truncated) and return KABI_STATUS_OK; "" says the kernel runs no particular variant for the problem.
 *  On failure return a status with a message set through the host's set_error. Called with the problem and args
 *  supports() sees, for kernels that passed every filter: at every selection (a failure makes the kernel
 *  ineligible, with the message as its reason) and at every kabi_tuning_store of a record for it (a failure fails
 *  the store). Same problem, same answer: the text must not depend on data pointers. Since ABI 2.3. */
typedef kabi_status (*kabi_variant_fn)(void* user_data, const kabi_problem* problem, const kabi_args* args,
                                       char* buffer, size_t buffer_size);

/** The extension (type KABI_EXTENSION_KERNEL_VARIANT, struct_size sizeof) that gives a kernel a kabi_variant_fn,
 *  chained on kabi_kernel_desc.extensions; called with the desc's user_data. The tuning cache then records, beside
 *  each measurement and verdict of the kernel, the variant it ran; a record whose variant differs from the one the
 *  kernel now reports for the problem (a record without one included: it was written before the kernel named its
 *  variants) is stale: selection ignores it as if the kernel had never been measured on the problem, so the
 *  problem is tuned again, and says so (kabi_candidate.stale_variant). The kernel's fingerprint still names its
 *  code; the variant names what that code chose for one problem. Since ABI 2.3. */
typedef struct kabi_kernel_variant_extension {
  kabi_extension extension;
  kabi_variant_fn variant;
} kabi_kernel_variant_extension;

/* Launch parameters of a device binary. */
typedef enum kabi_param_kind {
  /** Pointer to the data (data + byte_offset) of tensor `index`: inputs first, then outputs; NULL for an absent
   *  optional input. */
  KABI_PARAM_TENSOR_DATA = 1,
  /** A named dimension of the problem (`name`, e.g. "M"), or "batch" for the batch size. */
  KABI_PARAM_DIM = 2,
  /** The stride, in elements, of dimension `dim` of tensor `index` (dim < 0 counts from the end; a dim of a
   *  broadcast batch, and since ABI 2.6 any dim counted from the end that the tensor lacks, reads 0). For batch
   *  dims flattened to one, dim = -3 reads the batch stride. */
  KABI_PARAM_STRIDE = 3,
  /** A constant `value`. */
  KABI_PARAM_CONSTANT = 4,
  /** Device scratch of `value` bytes per program (per block of the grid); the pointer is passed. `value` 0
   *  passes NULL (Triton's global and profile scratch parameters when a kernel uses none). */
  KABI_PARAM_SCRATCH = 5,
  /** The value of attribute `index` (its integer, or its real as a float of size_bytes 4 or 8). */
  KABI_PARAM_ATTRIBUTE = 6,
  /** The workspace pointer (the kernel's desc declares its size). */
  KABI_PARAM_WORKSPACE = 7,
  /** Device memory of `value` bytes per program (per block of the grid) that is zero when the kernel starts, and
   *  that the kernel must leave zero when it ends; the pointer is passed (`value` 0: NULL). The host zeroes it once,
   *  on the launch's stream, when it allocates it, and keeps it per (device, stream) as scratch; in CUDA-graph
   *  capture it is allocated and zeroed (a memset on the capturing stream) with every launch. Since ABI 2.5. */
  KABI_PARAM_ZEROED_SCRATCH = 8
} kabi_param_kind;

/** One parameter of a device binary's entry, in order. */
typedef struct kabi_launch_param {
  size_t struct_size;
  /** A kabi_param_kind. */
  int32_t kind;
  /** Width in bytes of an integer parameter (4 or 8); pointers are always 8. */
  int32_t size_bytes;
  /** Tensor index for TENSOR_DATA and STRIDE; attribute index for ATTRIBUTE. */
  int32_t index;
  /** Dimension for STRIDE. */
  int32_t dim;
  /** Dimension name for DIM. */
  const char* name;
  /** Value for CONSTANT, SCRATCH and ZEROED_SCRATCH. */
  int64_t value;
  /** For DIM and STRIDE: the image assumes the value is a multiple of this power of two (Triton's tt.divisibility
   *  of 16 lets it emit wide loads); 0 or 1: no assumption. A problem whose value is not a multiple is not the
   *  kernel's: selection rejects it ("param 7 (stride of b, dim -2) is 4100, not a multiple of 16 as the image
   *  assumes"), a forced selection fails saying so, and kabi_launch refuses it with
   *  KABI_STATUS_CONSTRAINT_VIOLATED. Registration refuses it on other kinds, negative, or not a power of two.
   *  Since ABI 2.4. */
  int64_t divisible_by;
} kabi_launch_param;

/* Image formats of a device binary. */
#define KABI_BINARY_CUBIN 1
#define KABI_BINARY_PTX 2

/** A device binary and how to launch it. Input struct; everything is copied at registration. */
typedef struct kabi_device_binary {
  size_t struct_size;
  const kabi_extension* extensions;
  int32_t format;
  /** The compute capability the image was built for (90; exact for sm_90a images). */
  int32_t arch;
  const void* image;
  size_t image_size;
  /** The entry function's (mangled) name. */
  const char* entry;
  const kabi_launch_param* params;
  int32_t num_params;
  /** Grid rule: one integer expression per axis over the problem's dimension names and "batch", with + - * /
   *  ( ), cdiv(a, b), min(a, b), max(a, b) and integer literals; e.g. "cdiv(M, 128) * cdiv(N, 128)". */
  const char* grid[3];
  int32_t block[3];
  /** Dynamic shared memory per block, in bytes (raised past 48 KiB with the function attribute as needed). */
  int32_t shared_memory_bytes;
  /** Thread-block cluster size (1 = no clusters). */
  int32_t cluster_size;
} kabi_device_binary;

/** Declaration of a kernel. Input struct; strings and arrays are copied. */
typedef struct kabi_kernel_desc {
  size_t struct_size;
  /** Extensions it may chain: KABI_EXTENSION_KERNEL_VARIANT (kabi_kernel_variant_extension). Read at registration
   *  and not kept: the chain may be freed once kabi_kernel_register returns. */
  const kabi_extension* extensions;
  /** The op this implements, by name. */
  const char* op;
  /** Unique among the op's kernels, e.g. "cpu.openblas.gemm". */
  const char* name;
  /** Family of the implementation: "torch", "cpu", "triton", "cuda", or a vendor's name. kabi.use(op=backend)
   *  forces a backend. */
  const char* backend;
  /** A DLDeviceType. */
  int32_t device_type;
  /** Inclusive arch range; 0 means unbounded. Ignored when num_archs > 0. */
  int32_t arch_min;
  int32_t arch_max;
  /** An exact set of archs (e.g. {90} for an sm_90a kernel). */
  const int32_t* archs;
  int32_t num_archs;
  int32_t priority;
  /** KABI_FEATURE_* bits the device must have. */
  uint64_t required_features;
  /** KABI_DTYPE_* bits accepted for every type variable that type_constraints does not name. */
  uint32_t dtypes;
  /** The dtypes accepted per type variable, in the op's type_variables syntax: "F8: float8_e4m3fn; OutT: bfloat16".
   *  NULL: `dtypes` for every variable. Copied. */
  const char* type_constraints;
  /** KABI_LAYOUT_* classes accepted for every given input that input_layouts does not cover (outputs are always
   *  written dense row-major). */
  uint32_t layouts;
  /** Bytes every data pointer must be aligned to (0 or 1: none). Checked at launch. */
  uint32_t alignment;
  /** A KABI_BATCH_* mode. */
  int32_t batch_mode;
  kabi_kernel_kind kind;
  /** KABI_KERNEL_FUNCTION: the entry. */
  kabi_kernel_fn function;
  /** KABI_KERNEL_DEVICE_BINARY: the image and launch spec. */
  const kabi_device_binary* binary;
  /** Optional; NULL accepts every problem that passes the declared filters. */
  kabi_supports_fn supports;
  /** Optional: the workspace a problem needs; NULL for none. A device binary's workspace reaches it as a
   *  KABI_PARAM_WORKSPACE parameter. */
  kabi_workspace_fn workspace;
  /** Passed to function, supports and workspace. */
  void* user_data;
  /** Optional; called with user_data when the kernel is unregistered. Not called at process exit (the table is
   *  never torn down, since the code behind user_data may already be gone then), nor when registration fails:
   *  user_data then stays the caller's. */
  void (*user_data_free)(void* user_data);
  /** Identifies the kernel's code and configuration; tuning entries recorded under another fingerprint are
   *  ignored. NULL: derived from name and backend (binaries: also a hash of the image). */
  const char* fingerprint;
  /** KABI_LAYOUT_* classes accepted per input, in the op's input order: input i < num_input_layouts is filtered by
   *  input_layouts[i] (0 there: by `layouts`), the others by `layouts`. E.g. {CONTIGUOUS | ROW_STRIDED,
   *  COL_STRIDED} for a matmul whose a is row-major and b column-major. Copied. num_input_layouts is 0 to the op's
   *  number of inputs; a mask with bits that are not KABI_LAYOUT_* classes is refused. Since ABI 2.4. */
  const uint32_t* input_layouts;
  int32_t num_input_layouts;
} kabi_kernel_desc;

/** Register a kernel. KABI_STATUS_NOT_FOUND if the op does not exist, KABI_STATUS_ALREADY_EXISTS if the name is
 *  taken for that op. */
KABI_EXPORT kabi_status kabi_kernel_register(const kabi_kernel_desc* desc, kabi_kernel* out_kernel);

/** Remove a kernel by op and name; its handle becomes invalid and its user_data_free is called. */
KABI_EXPORT kabi_status kabi_kernel_unregister(const char* op, const char* name);

/** Find a kernel by op and name. */
KABI_EXPORT kabi_status kabi_kernel_find(const char* op, const char* name, kabi_kernel* out_kernel);

/** Number of kernels registered for an op (all ops if op is NULL). */
KABI_EXPORT int32_t kabi_kernel_count(const char* op);

/** The kernel at index among those kabi_kernel_count(op) counts, in registration order. */
KABI_EXPORT kabi_status kabi_kernel_at(const char* op, int32_t index, kabi_kernel* out_kernel);

/** Facts about a kernel. Output struct; strings live as long as the kernel. */
typedef struct kabi_kernel_info {
  size_t struct_size;
  const char* op;
  const char* name;
  const char* backend;
  /** Name of the plugin that registered it; "" when registered directly. */
  const char* plugin;
  const char* fingerprint;
  int32_t device_type;
  int32_t arch_min;
  int32_t arch_max;
  int32_t num_archs;
  /** Up to 16 of the exact archs. */
  int32_t archs[16];
  int32_t priority;
  kabi_kernel_kind kind;
  uint64_t required_features;
  uint32_t dtypes;
  /** As declared ("" when none). */
  const char* type_constraints;
  uint32_t layouts;
  uint32_t alignment;
  int32_t batch_mode;
  /** 1 when it declares a workspace function. */
  int32_t has_workspace;
  /** 1 when it names its variant per problem (kabi_kernel_variant_extension). (ABI 2.3) */
  int32_t has_variant;
  /** The layouts it takes per input, as declared in kabi_kernel_desc.input_layouts: input i < num_input_layouts
   *  takes input_layouts[i] (a 0 declared there reads as `layouts`), the others `layouts`. (ABI 2.4) */
  int32_t num_input_layouts;
  uint32_t input_layouts[KABI_MAX_TENSORS];
} kabi_kernel_info;

KABI_EXPORT kabi_status kabi_kernel_info_get(kabi_kernel kernel, kabi_kernel_info* out_info);

/* ------------------------------------------------------------------------------------------------------------ */
/* Selection and launch                                                                                          */
/* ------------------------------------------------------------------------------------------------------------ */

/** Why a kernel was picked. */
typedef enum kabi_pick_reason {
  KABI_PICK_NONE = 0,
  /** Forced by the options or KABI_FORCE. */
  KABI_PICK_FORCED = 1,
  /** Recorded as measured fastest in the tuning cache. */
  KABI_PICK_TUNED = 2,
  /** The most specific arch match, then the highest priority, then the earliest registered. */
  KABI_PICK_HEURISTIC = 3
} kabi_pick_reason;

/** How a selected kernel will be run, so that selection uses times measured the same way. */
typedef enum kabi_execution_mode {
  /** Launched call after call from the host: host launch cost counts where it exceeds the device time. */
  KABI_EXECUTION_EAGER = 0,
  /** Replayed inside a captured CUDA graph: no host launch cost per call. */
  KABI_EXECUTION_GRAPH = 1
} kabi_execution_mode;

/** Options of one selection. Input struct; NULL options mean all defaults. */
typedef struct kabi_select_options {
  size_t struct_size;
  const kabi_extension* extensions;
  /** A backend name or kernel name to force, or NULL. When NULL and use_environment is set, the op's entry of
   *  KABI_FORCE ("matmul=torch,other=cpu.openblas.gemm") is used; see kabi_op_environment_force. */
  const char* force;
  /** Read KABI_FORCE when force is NULL (default 1). */
  int32_t use_environment;
  /** Consult the tuning cache's timings (default 1). Gate verdicts are honoured either way: a kernel that failed
   *  the correctness gate on the problem is never eligible, and the pick must have passed it (see below). */
  int32_t use_tuning_cache;
  /** Let the pick be a kernel with no gate verdict on the problem (default 0: strict). Strict selection
   *  picks only kernels that passed the correctness gate on the problem (tuned, or verified by `kabi verify`) and
   *  fails with KABI_STATUS_NO_ELIGIBLE_KERNEL when none has; the heuristic prefers verified kernels either way.
   *  For development; KABI_ALLOW_UNVERIFIED=1 in the environment does the same when use_environment is set. */
  int32_t allow_unverified;
  /** Let a forced kernel run although it failed the correctness gate on the problem (default 0: such a
   *  force fails, naming the gate failure). Unforced selection never picks a kernel that failed. */
  int32_t allow_failed_gate;
  /** How the call will run, a kabi_execution_mode (default KABI_EXECUTION_EAGER; a fixed-width integer, so that a
   *  value this header does not know is refused rather than undefined). KABI_EXECUTION_GRAPH picks by the times
   *  measured under CUDA-graph replay (KABI_TUNING_RECORD_GRAPH_MODE records) when every eligible kernel has one,
   *  else by the eager times, and never picks a kernel whose graph-mode record failed; eager selection ignores
   *  graph-mode records. Gate verdicts count in both modes. */
  int32_t execution_mode;
} kabi_select_options;

/** The op's choice in KABI_FORCE, exactly as selection applies it: a NUL-terminated backend or kernel
 *  name of at most buffer_size bytes, or "" when the variable names no choice for the op. libkabi is the one
 *  reader of KABI_FORCE; an entry that is not op=choice, or an op named twice, is KABI_STATUS_INVALID_ARGUMENT
 *  with a message quoting the variable (and every selection that reads the variable fails the same way). */
KABI_EXPORT kabi_status kabi_op_environment_force(kabi_op op, char* buffer, size_t buffer_size);
/** A kernel's correctness-gate verdict on a problem, as the tuning cache records it under the kernel's current
 *  fingerprint. */
typedef enum kabi_gate_verdict {
  /** Never gated on the problem. */
  KABI_GATE_NONE = 0,
  /** Passed the gate and was timed (tuned_time_us holds the time). */
  KABI_GATE_PASSED_TIMED = 1,
  /** Passed the gate, not timed (a KABI_TUNING_RECORD_GATE_ONLY record). */
  KABI_GATE_PASSED_UNTIMED = 2,
  /** Failed the gate: not eligible for the problem; the candidate's reason holds the recorded note. */
  KABI_GATE_FAILED = 3
} kabi_gate_verdict;

/** One candidate as selection saw it. Output struct (arrays are strided by struct_size of element 0). */
typedef struct kabi_candidate {
  size_t struct_size;
  kabi_kernel kernel;
  /** 1 if every filter passed and it has not failed the correctness gate on the problem. */
  int32_t eligible;
  /** 1 for the pick. */
  int32_t picked;
  /** Time recorded in the tuning cache for this problem, in microseconds; INFINITY when it failed the correctness
   *  gate; negative when none (also when it passed the gate untimed). */
  double tuned_time_us;
  /** Why it is not eligible ("arch 80 outside [90, 90]", "dtype bfloat16 not in {float32, float64}", "failed the
   *  correctness gate on this problem: wrong result: ..."), or "". */
  char reason[256];
  /** Its gate verdict on the problem. */
  kabi_gate_verdict gate;
  /** The kabi_execution_mode tuned_time_us was measured in (KABI_EXECUTION_GRAPH only for a graph-mode selection
   *  that used graph-mode times). */
  int32_t tuned_execution_mode;
  /** 1 when tuned_time_us is a screened time (a KABI_TUNING_RECORD_SCREENED record): the kernel lost, and is never
   *  picked by that time. (ABI 2.2) */
  int32_t tuned_screened;
  /** The variant the kernel reports for the problem (kabi_kernel_variant_extension); "" for a kernel without one,
   *  or one rejected by a filter before it was asked. (ABI 2.3) */
  char variant[KABI_VARIANT_CAPACITY];
  /** 1 when the tuning cache holds records of the kernel on the problem that were set aside as stale: measured or
   *  gated on stale_variant, not on the variant it runs now. Its verdict and time are then as if it had none.
   *  (ABI 2.3) */
  int32_t has_stale_record;
  /** The variant of that stale record ("" when it was recorded without one). (ABI 2.3) */
  char stale_variant[KABI_VARIANT_CAPACITY];
} kabi_candidate;

/** The outcome of a selection. Output struct. candidates/candidates_capacity may be set by the caller to also
 *  receive every candidate of the op on the problem's device type; num_candidates gets the full count even when
 *  it exceeds the capacity. */
typedef struct kabi_selection {
  size_t struct_size;
  kabi_kernel kernel;
  kabi_pick_reason pick_reason;
  /** A sentence: "tuned: fastest of 3 measured (12.1 us)", "heuristic: exact arch 90, priority 10". */
  char reason[512];
  kabi_candidate* candidates;
  int32_t candidates_capacity;
  int32_t num_candidates;
  /** The problem the selection was for. */
  kabi_problem problem;
  /** 1 when the pick has passed the correctness gate on the problem; 0 for a pick allowed by
   *  allow_unverified (or a forced one allowed by allow_failed_gate). */
  int32_t verified;
} kabi_selection;

/** Pick the kernel for a call: validate (as kabi_problem_describe; with data pointers, also that no output
 *  overlaps an input), filter candidates (device type, arch, features, dtype, layout, a device binary's divisibility
 *  assumptions, batch mode, supports, a failed gate verdict), then forced > tuned > heuristic, the pick having passed
 *  the correctness gate on the problem unless allow_unverified. KABI_STATUS_NO_ELIGIBLE_KERNEL (with the reasons and
 *  the remedy in the message) when nothing qualifies, also when the forced name has no eligible kernel;
 *  out_selection still lists every candidate then.
 *
 *  C callers do not tune: no kabi function measures candidates. A C caller (kabi_select, kabi_call) gets the tuned
 *  pick if the tuning cache has one; else the heuristic among the kernels that passed the gate on the problem
 *  (`kabi verify` records such verdicts offline, and every Python call gates its pick before first use); else, with
 *  allow_unverified, the heuristic among kernels not recorded as having failed the gate; else an error naming the
 *  remedy. Tuning happens where a caller can time and check candidates against the op's reference (the Python tuner,
 *  `kabi tune`); what it stores in the tuning cache (kabi_tuning_store) reaches C callers through the cache. */
KABI_EXPORT kabi_status kabi_select(kabi_op op, const kabi_args* args, const kabi_select_options* options,
                                    kabi_selection* out_selection);

/** Run a kernel on a call's arguments (outputs allocated by the caller). Checks the kernel's constraints first
 *  (KABI_STATUS_CONSTRAINT_VIOLATED: dtypes, layouts, batch mode, alignment, a device binary's divisibility
 *  assumptions, supports). A select-once, launch-many loop calls this directly. */
KABI_EXPORT kabi_status kabi_launch(kabi_kernel kernel, const kabi_args* args);

/** Select (with a per-op decision cache keyed by the problem) and launch in one call. */
KABI_EXPORT kabi_status kabi_call(kabi_op op, const kabi_args* args, const kabi_select_options* options);

/** The kabi_execution_mode of a launch on `stream` (a CUstream of `device`) now: KABI_EXECUTION_GRAPH while the
 *  stream is being captured into a CUDA graph, else KABI_EXECUTION_EAGER. EAGER also for the legacy stream (NULL),
 *  which is never captured, and for a device that is not CUDA. A caller that selected once per mode (the
 *  execution_mode of kabi_select_options) asks this per call, to launch the pick made for the way the call runs.
 *  KABI_STATUS_UNAVAILABLE for a CUDA device without a CUDA driver. Since ABI 2.8. */
KABI_EXPORT kabi_status kabi_stream_execution_mode(DLDevice device, void* stream, int32_t* out_mode);

/** Incremented by every change to ops, kernels or the tuning cache that can change a selection. */
KABI_EXPORT uint64_t kabi_registry_generation(void);

/** Changes with every change that can alter a selection of this op, and only those: registering or
 *  unregistering one of its kernels, a plugin load that registered kernels of it, kabi_tuning_store for it, and
 *  replacing, reloading, clearing or importing the tuning cache (which changes every op's). A caller that
 *  remembers decisions compares this per op, so tuning one op keeps every other op's decisions. Values never
 *  repeat; 0 for a NULL op. Cheap enough for every call. */
KABI_EXPORT uint64_t kabi_op_generation(kabi_op op);

/* ------------------------------------------------------------------------------------------------------------ */
/* Tuning cache                                                                                                  */
/* ------------------------------------------------------------------------------------------------------------ */

/* The cache persists decisions as records keyed by (device signature, op, problem key, kernel fingerprint). It
 * lives in a directory: KABI_CACHE_DIR, else $XDG_CACHE_HOME/kabi, else ~/.cache/kabi. Many processes may write at
 * once; a torn or corrupt record is skipped and reported once. */

/** Flags of a tuning record (kabi_tuning_record.flags, kabi_cache_entry.flags). */
typedef enum kabi_tuning_flag {
  /** A verdict, not a measurement: the kernel passed the correctness gate on the problem and was not timed
   *  (time_us is 0 and means nothing). A record with time_us INFINITY is the opposite verdict: it failed. */
  KABI_TUNING_RECORD_GATE_ONLY = 1u << 0,
  /** Kept in this process only, never written to the cache file: e.g. a measurement that stayed too noisy to be
   *  trusted by later processes. */
  KABI_TUNING_RECORD_MEMORY_ONLY = 1u << 1,
  /** Measured replayed inside a captured CUDA graph (KABI_EXECUTION_GRAPH), not eager. Kept beside the
   *  kernel's eager record for the problem, never replacing it. A finite time, or INFINITY when the kernel could
   *  not run inside a graph (then graph-mode selection never picks it); never GATE_ONLY: gate verdicts are eager
   *  records and hold for both modes. */
  KABI_TUNING_RECORD_GRAPH_MODE = 1u << 2,
  /** A time that says the kernel was measured and lost, but is not final: the tuner's short screen found it
   *  clearly slower than the fastest candidate (or its full measurement stayed noisy yet far behind the pick, or it
   *  lost to the pick in an earlier run). A finite time_us; the problem counts as tuned, selection never picks a
   *  kernel by such a time, and the kernel counts as having passed the gate. Never GATE_ONLY. */
  KABI_TUNING_RECORD_SCREENED = 1u << 3
} kabi_tuning_flag;

/** One measurement (or gate verdict) of one kernel on one problem. Input struct. */
typedef struct kabi_tuning_record {
  size_t struct_size;
  kabi_kernel kernel;
  /** Median time in microseconds; INFINITY for a kernel that failed the correctness gate or raised. */
  double time_us;
  /** Why a failed kernel failed ("" otherwise). */
  const char* note;
  /** Kabi_tuning_flag bits. */
  uint32_t flags;
  /** Relative spread of the timing, (slowest - fastest) / median of the measurement's rounds; 0 when
   *  unknown or not timed. */
  double spread;
  /** When it was measured, in seconds since the Unix epoch; 0 lets libkabi stamp the time of the store. */
  int64_t recorded_at;
} kabi_tuning_record;

/** Store the measured candidates (or gate verdicts) for a call's problem; the fastest finite timed one becomes the
 *  tuned pick. Writes through to the cache file, except records flagged KABI_TUNING_RECORD_MEMORY_ONLY. Each record
 *  of a kernel that names its variants (kabi_kernel_variant_extension) is stored with the variant the kernel
 *  reports for the problem now; a kernel that fails to name it fails the store, and nothing is stored. */
KABI_EXPORT kabi_status kabi_tuning_store(kabi_op op, const kabi_args* args, const kabi_tuning_record* records,
                                          int32_t num_records);

/** One record of the cache as kabi_cache_list shows it. Output struct; the strings live until the visit returns. */
typedef struct kabi_cache_entry {
  size_t struct_size;
  const char* device_signature;
  const char* op;
  const char* problem_key;
  const char* kernel_name;
  const char* fingerprint;
  double time_us;
  const char* note;
  uint32_t flags;
  double spread;
  /** Seconds since the Unix epoch; 0 for records written before kabi kept it. */
  int64_t recorded_at;
  /** The variant the kernel ran (kabi_kernel_variant_extension); "" for a kernel without variants, or a record
   *  written before kabi kept them. (ABI 2.3) */
  const char* variant;
} kabi_cache_entry;

/** Called once per record by kabi_cache_list; return nonzero to stop early. */
typedef int (*kabi_cache_visit_fn)(void* user_data, const kabi_cache_entry* entry);

/** Visit every live record (the latest per device, op, problem and kernel), on disk and this process's
 *  memory-only ones, sorted by device, op, problem and kernel; only op's when op is not NULL. The file is re-read
 *  first, so records other processes stored are included. */
KABI_EXPORT kabi_status kabi_cache_list(const char* op, kabi_cache_visit_fn visit, void* user_data);

/** Use another cache directory from now on (NULL: back to the environment/default); reloads. This process's
 *  memory-only records of the previous directory are dropped. */
KABI_EXPORT kabi_status kabi_cache_set_directory(const char* directory);

/** The cache directory in use (NUL-terminated, at most buffer_size bytes). */
KABI_EXPORT kabi_status kabi_cache_directory(char* buffer, size_t buffer_size);

/** The default cache directory, whatever kabi_cache_set_directory chose: KABI_CACHE_DIR, else
 *  $XDG_CACHE_HOME/kabi, else $HOME/.cache/kabi, read from the environment now. Compiled kernel images live under it
 *  (they stay valid whichever tuning cache is in use). KABI_STATUS_NOT_FOUND when none of those is set. Since ABI
 *  2.1. */
KABI_EXPORT kabi_status kabi_cache_default_directory(char* buffer, size_t buffer_size);

/** Re-read the cache file(s): picks up what other processes wrote. */
KABI_EXPORT kabi_status kabi_cache_reload(void);

/** Forget every decision, in memory and on disk. */
KABI_EXPORT kabi_status kabi_cache_clear(void);

/** Write every valid record to path (the cache's own format); import merges such a file in. */
KABI_EXPORT kabi_status kabi_cache_export(const char* path);
KABI_EXPORT kabi_status kabi_cache_import(const char* path);

/** Number of valid records in the cache, and of corrupt records skipped since the last load. */
KABI_EXPORT kabi_status kabi_cache_stats(int64_t* out_records, int64_t* out_corrupt_records);

/* ------------------------------------------------------------------------------------------------------------ */
/* Memory: the allocator behind workspaces                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/** A stream-ordered allocator. libkabi's default uses malloc for the CPU and cuMemAllocAsync / cuMemFreeAsync for
 *  CUDA; the Python binding installs torch's caching allocator for CUDA. Input struct; copied by kabi_allocator_set. */
typedef struct kabi_allocator {
  size_t struct_size;
  const kabi_extension* extensions;
  /** Passed to both functions. */
  void* context;
  /** Allocate `bytes` (> 0) on the device, usable by work queued on `stream` from now on; set *out_pointer. */
  kabi_status (*allocate)(void* context, int32_t device_type, int32_t device_index, size_t bytes, void* stream,
                          void** out_pointer);
  /** Give back what allocate returned, once the work queued on `stream` so far is done with it. */
  void (*release)(void* context, int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                  void* stream);
  /** The device types this allocator serves, as bits KABI_DEVICE_TYPE_BIT(device_type); 0 (or a struct_size that
   *  ends before this field) for every one. libkabi's default serves the others. */
  uint64_t device_types;
} kabi_allocator;

/** The bit of a DLDeviceType in kabi_allocator.device_types. */
#define KABI_DEVICE_TYPE_BIT(device_type) ((uint64_t)1 << (device_type))

/** Use this allocator for workspaces from now on (NULL: back to libkabi's default). Workspace buffers the previous
 *  allocator gave are released through it as each thread next needs a workspace (or exits), so it must stay usable
 *  until then. */
KABI_EXPORT kabi_status kabi_allocator_set(const kabi_allocator* allocator);

/** Allocate through the allocator in use (for plugins: kabi_host_api.memory_allocate). */
KABI_EXPORT kabi_status kabi_memory_allocate(int32_t device_type, int32_t device_index, size_t bytes, void* stream,
                                             void** out_pointer);

/** Release what kabi_memory_allocate returned, with the same device, size and stream. */
KABI_EXPORT void kabi_memory_release(int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                                     void* stream);

/** The bytes of workspace a kernel needs for a call (0 when it declares none): for C callers that launch in a
 *  loop and want to know. kabi_launch and kabi_call provide the workspace themselves. */
KABI_EXPORT kabi_status kabi_kernel_workspace_size(kabi_kernel kernel, const kabi_args* args, size_t* out_bytes);

/* ------------------------------------------------------------------------------------------------------------ */
/* Plugins                                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/** The host functions a plugin may call. Given to kabi_plugin_init; a plugin needs no link to libkabi. */
typedef struct kabi_host_api {
  size_t struct_size;
  const kabi_extension* extensions;
  /** The host's KABI_ABI_VERSION. */
  uint32_t abi_version;
  kabi_status (*kernel_register)(const kabi_kernel_desc* desc, kabi_kernel* out_kernel);
  kabi_status (*op_register)(const kabi_op_desc* desc, kabi_op* out_op);
  kabi_status (*device_count)(int32_t device_type, int32_t* out_count);
  kabi_status (*device_info_get)(int32_t device_type, int32_t device_index, kabi_device_info* out_info);
  /** Set the calling thread's error message; a kernel calls this before returning a failure status. */
  void (*set_error)(const char* message);
  const char* (*last_error)(void);
  /** The host's allocator (kabi_memory_allocate / kabi_memory_release), for memory a kernel needs beyond its
   *  declared workspace. */
  kabi_status (*memory_allocate)(int32_t device_type, int32_t device_index, size_t bytes, void* stream,
                                 void** out_pointer);
  void (*memory_release)(int32_t device_type, int32_t device_index, void* pointer, size_t bytes, void* stream);
} kabi_host_api;

/** What a plugin says of itself. Output struct filled by kabi_plugin_init. */
typedef struct kabi_plugin_info {
  size_t struct_size;
  /** Short unique name, e.g. "kabi-cpu" or "acme-npu". */
  const char* name;
  /** The plugin's own version. */
  const char* version;
} kabi_plugin_info;

/** Name of the version symbol every plugin exports: uint32_t kabi_plugin_abi_version(void), returning the
 *  KABI_ABI_VERSION it was built against. A MAJOR different from the host's is refused before init runs, with a
 *  message that names both versions and says to rebuild the plugin against this kabi's headers. */
#define KABI_PLUGIN_ABI_VERSION_SYMBOL "kabi_plugin_abi_version"
/** Name of the init symbol: kabi_status kabi_plugin_init(const kabi_host_api*, kabi_plugin_info*). The kernels
 *  it registers are kept only if it returns KABI_STATUS_OK. */
#define KABI_PLUGIN_INIT_SYMBOL "kabi_plugin_init"

typedef uint32_t (*kabi_plugin_abi_version_fn)(void);
typedef kabi_status (*kabi_plugin_init_fn)(const kabi_host_api* host, kabi_plugin_info* out_info);

/** Defines the version symbol in a plugin's source. */
#define KABI_DEFINE_PLUGIN_ABI_VERSION()                                                                       \
  KABI_PLUGIN_EXPORT uint32_t kabi_plugin_abi_version(void) { return KABI_ABI_VERSION; }

/** The state of one plugin load. */
typedef enum kabi_plugin_state {
  KABI_PLUGIN_LOADED = 1,
  /** Refused: see the record's message. */
  KABI_PLUGIN_REFUSED = 2
} kabi_plugin_state;

/** What a load record describes. */
typedef enum kabi_plugin_kind {
  /** A plugin shared library (kabi_plugin_load, KABI_PLUGIN_PATH, the built-in plugins). */
  KABI_PLUGIN_KIND_LIBRARY = 1,
  /** A directory of device binaries named in KABI_BINARY_PATH (path is the directory). */
  KABI_PLUGIN_KIND_BINARIES = 2
} kabi_plugin_kind;

/** One plugin load, successful or not. Output struct; strings live until libkabi unloads. */
typedef struct kabi_plugin_record {
  size_t struct_size;
  const char* path;
  /** The plugin's name, or the file name if it never said. */
  const char* name;
  const char* version;
  uint32_t abi_version;
  kabi_plugin_state state;
  /** Why it was refused ("" when loaded). */
  const char* message;
  /** Kernels it registered. */
  int32_t num_kernels;
  /** A library or a KABI_BINARY_PATH directory. */
  kabi_plugin_kind kind;
} kabi_plugin_record;

/** Load a plugin shared library: dlopen, check kabi_plugin_abi_version, run kabi_plugin_init. A refusal returns
 *  KABI_STATUS_ABI_MISMATCH / NOT_FOUND / KERNEL_FAILED with a message naming the plugin and why, is recorded, and
 *  leaves kabi working. Loading the same path twice is a no-op.
 *  A plugin runs in the caller's process, with its rights: an init (or kernel) that crashes, hangs or exits takes
 *  the process with it, and no status can report that. Check an untrusted plugin first in a child process
 *  (`kabi plugins check PATH`). */
KABI_EXPORT kabi_status kabi_plugin_load(const char* path);

/** Load every plugin named in KABI_PLUGIN_PATH, in process as kabi_plugin_load (entries separated by ':'; a
 *  directory loads each shared library in it), then every directory of device binaries named in KABI_BINARY_PATH (':'-separated; each as
 *  kabi_binaries_load). Each binaries directory is recorded like a plugin (kind KABI_PLUGIN_KIND_BINARIES): path is the directory, num_kernels the
 *  kernels it registered, or state REFUSED with the message of its first bad manifest; later directories still
 *  load. Entries already recorded are not loaded again. Returns OK even if some were refused (see kabi_plugin_at). */
KABI_EXPORT kabi_status kabi_plugin_load_from_environment(void);

/** Register the built-in plugins that ship inside libkabi's directory (the CPU plugin, and the CUDA plugin where
 *  built). Idempotent. */
KABI_EXPORT kabi_status kabi_plugin_load_builtin(void);

/** Register the built-in plugin that serves one device type: kDLCPU the CPU plugin, kDLCUDA the CUDA plugin where
 *  built. Loading the CUDA plugin enumerates the CUDA devices, which initialises the driver (a few hundred
 *  milliseconds): a process can defer it until it first needs a CUDA kernel. A type without a built-in plugin
 *  loads nothing. Idempotent. (ABI 2.2) */
KABI_EXPORT kabi_status kabi_plugin_load_builtin_device(int32_t device_type);

/** Number of plugin loads recorded (loaded and refused). */
KABI_EXPORT int32_t kabi_plugin_count(void);

KABI_EXPORT kabi_status kabi_plugin_at(int32_t index, kabi_plugin_record* out_record);

/* ------------------------------------------------------------------------------------------------------------ */
/* Device binaries on disk                                                                                       */
/* ------------------------------------------------------------------------------------------------------------ */

/** Register every kernel described by the manifests (files named NAME.kabi-manifest, a line-oriented `key = value` text format,
 *  docs/manifest.md) in a directory, each naming its op, kernel declaration, image file and launch spec. A corrupt,
 *  mismatched (ABI major) or incomplete manifest, or one whose image file is missing, is refused with a message naming
 *  the file and the field. The image's bytes are read and checked (format, the manifest's image_fnv1a64) at the
 *  kernel's first launch, which refuses an image that fails (KABI_STATUS_INVALID_ARGUMENT, or KABI_STATUS_IO_ERROR
 *  when unreadable) with the manifest's line and the image named. *out_registered may be NULL. */
KABI_EXPORT kabi_status kabi_binaries_load(const char* directory, int32_t* out_registered);

/** Register the one kernel that the manifest file manifest_path describes (as kabi_binaries_load reads it), with an
 *  optional supports predicate (NULL: the declared filters only), the way a kernel declared in code has one:
 *  user_data is passed to supports and freed with user_data_free (may be NULL) once the kernel is unregistered. A
 *  kernel already registered under the same op, name and fingerprint is kept (*out_kernel is that one, and
 *  user_data is freed at once); on an error user_data is freed too. *out_kernel may be NULL. Since ABI 2.1. */
KABI_EXPORT kabi_status kabi_binary_load(const char* manifest_path, kabi_supports_fn supports, void* user_data,
                                         void (*user_data_free)(void* user_data), kabi_kernel* out_kernel);

/** One manifest of kabi_binary_load_many: kabi_binary_load's arguments, and the op the manifest must declare.
 *  Since ABI 2.7. */
typedef struct kabi_binary_load_request {
  size_t struct_size;
  const kabi_extension* extensions;
  const char* manifest_path;
  /** The op the manifest must declare (a supports predicate is written for one op's problem), or NULL: any. */
  const char* op;
  kabi_supports_fn supports;
  void* user_data;
  void (*user_data_free)(void* user_data);
} kabi_binary_load_request;

/** Register the kernels that `count` manifest files describe, each as kabi_binary_load would, all or nothing. The
 *  manifests are read in parallel and committed together, in the requests' order (the order breaks ties between
 *  equal priorities, so it is the caller's). A request naming a kernel that an earlier request or the table already
 *  holds with the same fingerprint gets that kernel, and its user_data is freed at once. On any error nothing is
 *  registered, every request's user_data is freed, and the message names the first failing request in order and its
 *  file. out_kernels (may be NULL) receives `count` kernels. Since ABI 2.7. */
KABI_EXPORT kabi_status kabi_binary_load_many(const kabi_binary_load_request* requests, int32_t count,
                                              kabi_kernel* out_kernels);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KABI_KABI_H_ */
