// cuBLASLt as kabi candidates. Its heuristic ranks algorithms per problem, but a kabi kernel is registered once, at
// init, before any problem is known. So the plugin registers kSlots "slot" kernels per op, cuda.cublaslt.algo0 ..
// algoN (scaled_mm's FP8 ones are cuda.cublaslt.fp8.algo0 .. algoN): slot i computes a problem with the i-th
// algorithm the heuristic returns for it, and its supports() declines a problem for which the heuristic returns
// fewer than i + 1. The tuner then measures the heuristic's top algorithms as separate candidates.
//
// What a slot runs differs per problem, so its static fingerprint names only the cuBLASLt build; each slot also
// names, per problem, the algorithm it runs (its kabi_variant_fn, KABI_EXTENSION_KERNEL_VARIANT): the algorithm's
// configuration as cublasLtMatmulAlgoConfigGetAttribute reads it, e.g. "algo=66 tile=20 stages=35 splitk=1
// reduction=0 swizzle=0 custom=0 inner=0 cluster=2" (the enums' numeric values: tile is a cublasLtMatmulTile_t,
// stages a cublasLtMatmulStages_t, reduction a cublasLtReductionScheme_t; inner and cluster shapes only where the
// cuBLASLt version has them). The tuning cache records that text beside each slot's measurement, so it says which
// algorithm won, kabi.explain shows it, and a record whose algorithm is no longer the one the heuristic puts in that
// slot (another cuBLASLt build under the same version number, another workspace limit) is stale and measured again.
//
// row-major out[M, N] = a[M, K] @ b[K, N] is computed as its column-major transpose, out^T = b^T @ a^T: cuBLASLt's
// A is b, its B is a, and its D is out read as an N x M column-major matrix, whose rows (N) the bias runs along.
// scaled_mm's FP8 slots follow from that: cuBLASLt's A scale is scale_b and its B scale is scale_a, and row-wise
// scales are its outer-vector scale mode (one float per row of its A, i.e. per column of out, and per column of its
// B, i.e. per row of out). A call with use_fast_accum sets the descriptor's FAST_ACCUM, so the heuristic offers the
// algorithms that keep the partial sums in the tensor cores' accumulator; without it they stay off.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <tuple>
#include <vector>

#include "cublaslt_library.hpp"
#include "gemm_plan.hpp"
#include "gemm_registration.hpp"
#include "padded_copy.hpp"
#include "plugin_context.hpp"

namespace kabi::cuda {
namespace {

constexpr int kSlots = 4;
// The workspace every slot declares and the heuristic may use: what cuBLAS itself reserves per stream on Hopper.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// The problems whose descriptors and heuristic results are kept; past it the oldest are dropped as a whole.
constexpr size_t kMaxPlans = 4096;
// The first slot is the vendor's own pick: the heuristic (untuned) choice among native kernels. The others only
// matter once measured.
constexpr int32_t kFirstSlotPriority = 10;
constexpr int32_t kOtherSlotPriority = 1;

// cuBLASLt's epilogue for linear's activation, where its semantics match the op's exactly: cuBLASLt's GELU is the
// tanh approximation (gelu_tanh); it has no erf GELU and no SiLU. 0: none.
uint32_t epilogue_of(const GemmCall& call) {
  uint32_t epilogue = 0;
  switch (call.activation) {
    case Activation::kNone: epilogue = lt::kEpilogueDefault; break;
    case Activation::kRelu: epilogue = lt::kEpilogueRelu; break;
    case Activation::kGeluTanh: epilogue = lt::kEpilogueGelu; break;
    default: return 0;
  }
  if (call.has_bias) epilogue = (epilogue == lt::kEpilogueDefault ? 0 : epilogue) | lt::kEpilogueBias;
  return epilogue;
}

// What the descriptors and the heuristic depend on (never the data addresses, which must be 16-byte aligned).
using PlanKey = std::tuple<int32_t, uint32_t, uint32_t, uint32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int32_t, int64_t, int64_t, uint32_t, bool, bool, bool, bool>;

PlanKey key_of(const GemmCall& call, uint32_t epilogue) {
  return {call.device_index, call.dtype, call.a_dtype, call.b_dtype, call.m, call.n, call.k, call.batch, call.lda,
          call.ldb, static_cast<int32_t>(call.b_order), call.batch_stride_a, call.batch_stride_b, epilogue,
          call.scaled, call.scale_a_row_wise, call.scale_b_row_wise, call.fast_accumulation};
}

// The cudaDataType_t of a KABI_DTYPE_* bit the slots take.
int32_t cuda_type_of(uint32_t dtype) {
  switch (dtype) {
    case KABI_DTYPE_BFLOAT16: return lt::kCudaR16BF;
    case KABI_DTYPE_FLOAT16: return lt::kCudaR16F;
    case KABI_DTYPE_FLOAT8_E4M3FN: return lt::kCudaR8FE4M3;
    case KABI_DTYPE_FLOAT8_E5M2: return lt::kCudaR8FE5M2;
    default: return lt::kCudaR32F;
  }
}

// The descriptors of one problem and the heuristic's algorithms for it. Launches set the bias pointer on the shared
// descriptor, so they hold the mutex from then until the matmul is queued.
struct Plan {
  explicit Plan(const lt::Library& library) : library(library) {}
  ~Plan() {
    for (lt::MatrixLayout layout : {a, b, d}) {
      if (layout != nullptr) library.layout_destroy(layout);
    }
    if (desc != nullptr) library.desc_destroy(desc);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  const lt::Library& library;
  std::mutex mutex;
  lt::MatmulDesc desc = nullptr;
  lt::MatrixLayout a = nullptr, b = nullptr, d = nullptr;
  int algorithms = 0;
  lt::HeuristicResult results[kSlots] = {};
  std::string variants[kSlots];  // each algorithm's configuration, as its slot names its variant
  std::string error;  // why the descriptors or the heuristic failed ("" when they did not)
};

struct Cublaslt {
  lt::Library library;
  std::mutex mutex;
  std::map<int32_t, lt::Handle> handles;  // per device
  // Shared: a launch keeps its plan alive while the table drops it.
  std::map<PlanKey, std::shared_ptr<Plan>> plans;
  std::vector<PlanKey> order;  // insertion order, for dropping the oldest plans
};

Cublaslt& cublaslt() {
  static Cublaslt state;
  return state;
}

struct SlotKernel {
  int slot = 0;
  GemmOp op = GemmOp::kMatmul;
  std::string name, fingerprint;
};

std::string status_text(const char* what, lt::Status status) {
  return std::string(what) + " failed with cublasStatus " + std::to_string(status);
}

// The scale pointers and, for row-wise scales, the outer-vector scale modes of an FP8 call. The heuristic may read
// the pointers' alignment; launches set the real ones (also 16-byte aligned).
std::string set_scales(const lt::Library& lib, const GemmCall& call, lt::MatmulDesc desc) {
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
  lib.desc_set(desc, lt::kDescAScalePointer, &aligned, sizeof aligned);
  lib.desc_set(desc, lt::kDescBScalePointer, &aligned, sizeof aligned);
  for (auto [attribute, row_wise] : {std::pair{lt::kDescAScaleMode, call.scale_b_row_wise},
                                     std::pair{lt::kDescBScaleMode, call.scale_a_row_wise}}) {
    if (!row_wise) continue;
    const int32_t mode = lt::kScaleOuterVector32F;
    const lt::Status status = lib.desc_set(desc, attribute, &mode, sizeof mode);
    if (status != 0) {
      return "cuBLASLt " + std::to_string(lib.version) + " has no row-wise (outer-vector) FP8 scales (" +
             status_text("cublasLtMatmulDescSetAttribute", status) + "); they need cuBLASLt 12.9 or later";
    }
  }
  return {};
}

// The configuration that identifies an algorithm, as "name=value" items: the attributes the cuBLASLt version has
// (each read at the size it reports, so the integer widths of cublasLt.h need not be repeated here).
std::string describe_algorithm(const lt::Library& lib, const lt::MatmulAlgo& algo) {
  static constexpr std::pair<const char*, int32_t> kAttributes[] = {
      {"algo", lt::kAlgoConfigId},
      {"tile", lt::kAlgoConfigTileId},
      {"stages", lt::kAlgoConfigStagesId},
      {"splitk", lt::kAlgoConfigSplitKNum},
      {"reduction", lt::kAlgoConfigReductionScheme},
      {"swizzle", lt::kAlgoConfigCtaSwizzling},
      {"custom", lt::kAlgoConfigCustomOption},
      {"inner", lt::kAlgoConfigInnerShapeId},
      {"cluster", lt::kAlgoConfigClusterShapeId}};
  std::string text;
  for (const auto& [name, attribute] : kAttributes) {
    size_t size = 0;
    if (lib.algo_config_get(&algo, attribute, nullptr, 0, &size) != 0 || size == 0 || size > sizeof(uint64_t)) {
      continue;  // not in this cuBLASLt version
    }
    unsigned char bytes[sizeof(uint64_t)] = {};
    size_t written = 0;
    if (lib.algo_config_get(&algo, attribute, bytes, size, &written) != 0) continue;
    // Little-endian (x86-64, aarch64): the value's low bytes come first, whatever its width. ID and SPLITK_NUM are
    // signed int32.
    uint64_t value = 0;
    std::memcpy(&value, bytes, size);
    const bool is_signed = attribute == lt::kAlgoConfigId || attribute == lt::kAlgoConfigSplitKNum;
    const std::string number = is_signed && size == sizeof(int32_t)
                                   ? std::to_string(static_cast<int32_t>(static_cast<uint32_t>(value)))
                                   : std::to_string(value);
    text += (text.empty() ? "" : " ") + std::string(name) + "=" + number;
  }
  return text;
}

// Build the descriptors and ask the heuristic (with the call's device current).
void build_plan(Cublaslt& state, const GemmCall& call, uint32_t epilogue, lt::Handle handle, Plan* plan) {
  const lt::Library& lib = state.library;
  lt::Status status = lib.desc_create(&plan->desc, lt::kCompute32F, lt::kCudaR32F);
  if (status != 0) {
    plan->error = status_text("cublasLtMatmulDescCreate", status);
    return;
  }
  const int32_t trans_a = call.b_order == MatrixOrder::kRowMajor ? lt::kOpN : lt::kOpT;
  const int32_t trans_b = lt::kOpN;
  lib.desc_set(plan->desc, lt::kDescTransA, &trans_a, sizeof trans_a);
  lib.desc_set(plan->desc, lt::kDescTransB, &trans_b, sizeof trans_b);
  lib.desc_set(plan->desc, lt::kDescEpilogue, &epilogue, sizeof epilogue);
  if (call.has_bias) {
    // The heuristic reads the bias pointer's alignment; launches set the real one (also 16-byte aligned).
    const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
    lib.desc_set(plan->desc, lt::kDescBiasPointer, &aligned, sizeof aligned);
  }
  if (call.scaled) {
    plan->error = set_scales(lib, call, plan->desc);
    if (!plan->error.empty()) return;
  }
  if (call.fast_accumulation) {
    const int8_t fast_accumulation = 1;
    status = lib.desc_set(plan->desc, lt::kDescFastAccum, &fast_accumulation, sizeof fast_accumulation);
    if (status != 0) {
      plan->error = status_text("cublasLtMatmulDescSetAttribute(FAST_ACCUM)", status);
      return;
    }
  }
  // cuBLASLt's A: b, N x K (row-major b read as column-major) or K x N (column-major b, transposed).
  const bool b_row_major = call.b_order == MatrixOrder::kRowMajor;
  status = lib.layout_create(&plan->a, cuda_type_of(call.b_dtype), b_row_major ? call.n : call.k,
                             b_row_major ? call.k : call.n, call.ldb);
  if (status == 0) status = lib.layout_create(&plan->b, cuda_type_of(call.a_dtype), call.k, call.m, call.lda);
  if (status == 0) status = lib.layout_create(&plan->d, cuda_type_of(call.dtype), call.n, call.m, call.n);
  if (status != 0) {
    plan->error = status_text("cublasLtMatrixLayoutCreate", status);
    return;
  }
  if (call.batch > 1) {
    const int32_t count = static_cast<int32_t>(call.batch);
    const int64_t out_stride = call.m * call.n;
    for (auto [layout, stride] : {std::pair{plan->a, call.batch_stride_b}, std::pair{plan->b, call.batch_stride_a},
                                  std::pair{plan->d, out_stride}}) {
      lib.layout_set(layout, lt::kLayoutBatchCount, &count, sizeof count);
      lib.layout_set(layout, lt::kLayoutStridedBatchOffset, &stride, sizeof stride);
    }
  }
  lt::Preference preference = nullptr;
  status = lib.preference_create(&preference);
  if (status != 0) {
    plan->error = status_text("cublasLtMatmulPreferenceCreate", status);
    return;
  }
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t alignment = 16;
  lib.preference_set(preference, lt::kPrefMaxWorkspaceBytes, &workspace, sizeof workspace);
  for (int32_t attribute : {lt::kPrefMinAlignmentA, lt::kPrefMinAlignmentB, lt::kPrefMinAlignmentC,
                            lt::kPrefMinAlignmentD}) {
    lib.preference_set(preference, attribute, &alignment, sizeof alignment);
  }
  status = lib.heuristic(handle, plan->desc, plan->a, plan->b, plan->d, plan->d, preference, kSlots, plan->results,
                         &plan->algorithms);
  lib.preference_destroy(preference);
  if (status != 0) {
    plan->algorithms = 0;
    plan->error = status_text("cublasLtMatmulAlgoGetHeuristic", status);
    return;
  }
  for (int slot = 0; slot < plan->algorithms; ++slot) {
    plan->variants[slot] = describe_algorithm(lib, plan->results[slot].algo);
  }
}

// The plan of a call, built on first sight. Returns NULL with *error set when the device cannot be made current.
std::shared_ptr<Plan> plan_of(const GemmCall& call, uint32_t epilogue, std::string* error) {
  Cublaslt& state = cublaslt();
  std::lock_guard<std::mutex> lock(state.mutex);
  const PlanKey key = key_of(call, epilogue);
  auto found = state.plans.find(key);
  if (found != state.plans.end()) return found->second;

  DeviceGuard device(call.device_index);
  if (!device.ok()) {
    *error = device.error();
    return nullptr;
  }
  lt::Handle& handle = state.handles[call.device_index];
  if (handle == nullptr) {
    const lt::Status status = state.library.create(&handle);
    if (status != 0) {
      handle = nullptr;
      *error = status_text("cublasLtCreate", status);
      return nullptr;
    }
  }
  if (state.plans.size() >= kMaxPlans) {
    // The oldest half goes; a launch using one of them still holds it.
    const size_t drop = state.order.size() / 2;
    for (size_t i = 0; i < drop; ++i) state.plans.erase(state.order[i]);
    state.order.erase(state.order.begin(), state.order.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  auto plan = std::make_shared<Plan>(state.library);
  build_plan(state, call, epilogue, handle, plan.get());
  state.plans.emplace(key, plan);
  state.order.push_back(key);
  return plan;
}

// What cuBLASLt's FP8 GEMM takes (its documented type and layout combinations) beyond what the heuristic checks.
std::string check_fp8(const GemmCall& call) {
  if (call.b_order != MatrixOrder::kColumnMajor) {
    return "cuBLASLt's FP8 GEMM reads b column-major only (the transposed view of an [N, K] weight)";
  }
  if (call.a_dtype == KABI_DTYPE_FLOAT8_E5M2 && call.b_dtype == KABI_DTYPE_FLOAT8_E5M2) {
    return "cuBLASLt has no FP8 GEMM of two float8_e5m2 operands";
  }
  if (call.has_bias && call.dtype == KABI_DTYPE_FLOAT32) {
    return "cuBLASLt's FP8 bias with a float32 output is bfloat16, not float32 as the op's bias";
  }
  if (call.k % 16 != 0 || call.n % 16 != 0) {
    return "cuBLASLt's FP8 GEMM needs K and N multiples of 16; K=" + std::to_string(call.k) +
           ", N=" + std::to_string(call.n);
  }
  return check_16_byte_alignment(call);
}

// The plan of a call, where the heuristic offers it an algorithm for `slot`.
std::string plan_slot(const GemmCall& call, uint32_t epilogue, int slot, std::shared_ptr<Plan>* plan) {
  std::string reason;
  *plan = plan_of(call, epilogue, &reason);
  if (*plan == nullptr) return reason;
  if (!(*plan)->error.empty()) return (*plan)->error;
  if ((*plan)->algorithms <= slot) {
    return "cuBLASLt's heuristic offers " + std::to_string((*plan)->algorithms) + " algorithm(s) for this problem";
  }
  return {};
}

std::string check(const SlotKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                  GemmCall* call, uint32_t* epilogue, std::shared_ptr<Plan>* plan) {
  std::string reason = plan_call(kernel.op, problem, args, require_output, call);
  if (!reason.empty()) return reason;
  *epilogue = epilogue_of(*call);
  if (*epilogue == 0) return "cuBLASLt has no epilogue computing this activation exactly (only relu and gelu_tanh)";
  if (kernel.op == GemmOp::kScaledMm) {
    reason = check_fp8(*call);
    if (!reason.empty()) return reason;
  }
  for (const void* pointer : {call->a, call->b, call->bias, static_cast<const void*>(call->out)}) {
    if (!aligned_to_16_bytes(pointer)) {
      return "a data address is not 16-byte aligned";
    }
  }
  return plan_slot(*call, *epilogue, kernel.slot, plan);
}

// Queue the plan's algorithm `slot` for `call` on the call's stream, with the call's device current.
lt::Status queue_matmul(Plan& plan, int slot, const GemmCall& call, void* workspace, size_t workspace_size) {
  Cublaslt& state = cublaslt();
  lt::Handle handle;
  {
    std::lock_guard<std::mutex> lock(state.mutex);
    handle = state.handles[call.device_index];
  }
  const float alpha = 1.0f, beta = 0.0f;
  std::lock_guard<std::mutex> lock(plan.mutex);
  if (call.bias != nullptr) state.library.desc_set(plan.desc, lt::kDescBiasPointer, &call.bias, sizeof call.bias);
  if (call.scale_a != nullptr) {
    state.library.desc_set(plan.desc, lt::kDescAScalePointer, &call.scale_b, sizeof call.scale_b);
    state.library.desc_set(plan.desc, lt::kDescBScalePointer, &call.scale_a, sizeof call.scale_a);
  }
  return state.library.matmul(handle, plan.desc, &alpha, call.b, plan.a, call.a, plan.b, &beta, call.out, plan.d,
                              call.out, plan.d, &plan.results[slot].algo, workspace, workspace_size, call.stream);
}

kabi_status launch_slot(const SlotKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GemmCall call;
  uint32_t epilogue = 0;
  std::shared_ptr<Plan> plan;
  const std::string reason = check(kernel, problem, args, /*require_output=*/true, &call, &epilogue, &plan);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  if (plan->results[kernel.slot].workspace_size > args.workspace_size) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": the algorithm needs " +
                                                  std::to_string(plan->results[kernel.slot].workspace_size) +
                                                  " bytes of workspace");
  }
  DeviceGuard device(call.device_index);
  if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
  const lt::Status status = queue_matmul(*plan, kernel.slot, call, args.workspace, args.workspace_size);
  if (status != 0) {
    return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + status_text("cublasLtMatmul", status));
  }
  return KABI_STATUS_OK;
}

std::string slot_why_not(const SlotKernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  GemmCall call;
  uint32_t epilogue = 0;
  std::shared_ptr<Plan> plan;
  return check(kernel, problem, args, /*require_output=*/false, &call, &epilogue, &plan);
}

// The configuration of the algorithm the slot runs for the problem: its kabi_variant_fn's text.
std::string slot_algorithm(const SlotKernel& kernel, const kabi_problem& problem, const kabi_args& args,
                           std::string* text) {
  GemmCall call;
  uint32_t epilogue = 0;
  std::shared_ptr<Plan> plan;
  const std::string reason = check(kernel, problem, args, /*require_output=*/false, &call, &epilogue, &plan);
  if (reason.empty()) *text = plan->variants[kernel.slot];
  return reason;
}

// The kabi_variant_fn of a kernel whose `describe(kernel, problem, args, &text)` gives the text, or why it cannot.
template <class Kernel, std::string (*describe)(const Kernel&, const kabi_problem&, const kabi_args&, std::string*)>
kabi_status variant_by(void* user_data, const kabi_problem* problem, const kabi_args* args, char* buffer,
                       size_t buffer_size) {
  const auto& kernel = *static_cast<const Kernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    std::string text;
    const std::string reason = describe(kernel, *problem, *args, &text);
    if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
    if (text.size() >= buffer_size) {
      return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": the algorithm's description \"" + text +
                                                    "\" does not fit in " + std::to_string(buffer_size) + " bytes");
    }
    std::memcpy(buffer, text.c_str(), text.size() + 1);
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

kabi_status workspace(void*, const kabi_problem*, size_t* out_bytes) {
  *out_bytes = kWorkspaceBytes;
  return KABI_STATUS_OK;
}

// The aligned-copies kernel (cuda.cublaslt.aligned_copies): a problem whose rows start off 16 bytes, or whose K is not
// a multiple of 8 elements, gets only cuBLASLt's slow kernels (4093x4099x4091 bfloat16 on the H200: 867 us, where the
// product of aligned copies took 179 us). This kernel computes it as its padded form instead: K and N rounded up to
// multiples of 8, each operand not already in that form copied into the workspace with zeros around it (a's zero
// columns meet b's zero rows and add nothing), the heuristic's first algorithm for the padded problem writing the
// product at pitch padded N, and its first N columns copied into out. The composition of the Python aligned-copies
// kernels (kabi.backends.torch_native.aligned_product), queued from C: the copies cost no host time of their own.

// Elements of 2 bytes per 16 bytes: the multiple every padded K and N is.
constexpr int64_t kPitchMultiple = 8;
constexpr size_t kBufferAlignment = 256;

int64_t padded_length(int64_t length) { return (length + kPitchMultiple - 1) / kPitchMultiple * kPitchMultiple; }

size_t buffer_bytes(int64_t elements) {
  const size_t bytes = static_cast<size_t>(elements) * 2;
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// Where each padded buffer lies in the workspace, behind cuBLASLt's own: the same for every call of a problem, so the
// workspace function, which sees shapes only, asks for all of them.
struct CopiesLayout {
  size_t a = 0, b = 0, bias = 0, out = 0, bytes = 0;
};

CopiesLayout copies_layout(int64_t m, int64_t padded_k, int64_t padded_n) {
  CopiesLayout layout;
  layout.a = kWorkspaceBytes;
  layout.b = layout.a + buffer_bytes(m * padded_k);
  layout.bias = layout.b + buffer_bytes(padded_k * padded_n);
  layout.out = layout.bias + buffer_bytes(padded_n);
  layout.bytes = layout.out + buffer_bytes(m * padded_n);
  return layout;
}

struct AlignedCopies {
  GemmCall padded;  // what cuBLASLt computes: the workspace's copies where copies are made
  bool copy_a = false, copy_b = false, copy_bias = false, copy_out = false;
  size_t workspace_bytes = 0;
};

// The padded form of `call`, its copies at `workspace` (NULL while selecting: the addresses are then left NULL).
std::string plan_aligned_copies(const GemmCall& call, void* workspace, AlignedCopies* copies) {
  if (call.batch != 1) return "a batch of products (it copies one product, or a batch folded into its rows)";
  if (check_16_byte_alignment(call).empty()) {
    return "every address and pitch is 16-byte aligned already: cuBLASLt computes the problem without copies";
  }
  const int64_t padded_k = padded_length(call.k), padded_n = padded_length(call.n);
  const CopiesLayout layout = copies_layout(call.m, padded_k, padded_n);
  auto buffer = [workspace](size_t offset) -> void* {
    return workspace == nullptr ? nullptr : static_cast<char*>(workspace) + offset;
  };
  GemmCall& padded = copies->padded = call;
  padded.k = padded_k;
  padded.n = padded_n;
  copies->copy_a = !(call.k == padded_k && call.lda % kPitchMultiple == 0 && aligned_to_16_bytes(call.a));
  if (copies->copy_a) {
    padded.a = buffer(layout.a);
    padded.lda = padded_k;
  }
  const bool b_row_major = call.b_order == MatrixOrder::kRowMajor;
  copies->copy_b = !(call.k == padded_k && call.n == padded_n && call.ldb % kPitchMultiple == 0 &&
                     aligned_to_16_bytes(call.b));
  if (copies->copy_b) {
    padded.b = buffer(layout.b);
    padded.ldb = b_row_major ? padded_n : padded_k;
  }
  copies->copy_bias = call.has_bias && !(call.n == padded_n && aligned_to_16_bytes(call.bias));
  if (copies->copy_bias) padded.bias = buffer(layout.bias);
  copies->copy_out = call.n != padded_n || !aligned_to_16_bytes(call.out);
  if (copies->copy_out) padded.out = buffer(layout.out);
  copies->workspace_bytes = layout.bytes;
  return {};
}

struct AlignedCopiesKernel {
  GemmOp op = GemmOp::kMatmul;
  std::string name, fingerprint;
};

std::string check_aligned_copies(const AlignedCopiesKernel& kernel, const kabi_problem& problem,
                                 const kabi_args& args, bool require_output, GemmCall* call, AlignedCopies* copies,
                                 std::shared_ptr<Plan>* plan) {
  std::string reason = plan_call(kernel.op, problem, args, require_output, call);
  if (!reason.empty()) return reason;
  const uint32_t epilogue = epilogue_of(*call);
  if (epilogue == 0) return "cuBLASLt has no epilogue computing this activation exactly (only relu and gelu_tanh)";
  reason = plan_aligned_copies(*call, args.workspace, copies);
  if (!reason.empty()) return reason;
  return plan_slot(copies->padded, epilogue, 0, plan);
}

kabi_status launch_aligned_copies(const AlignedCopiesKernel& kernel, const kabi_problem& problem,
                                  const kabi_args& args) {
  const PluginContext& context = plugin_context();
  GemmCall call;
  AlignedCopies copies;
  std::shared_ptr<Plan> plan;
  const std::string reason = check_aligned_copies(kernel, problem, args, /*require_output=*/true, &call, &copies,
                                                  &plan);
  if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
  if (args.workspace == nullptr || args.workspace_size < copies.workspace_bytes ||
      plan->results[0].workspace_size > kWorkspaceBytes) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": a workspace of " +
                                                  std::to_string(args.workspace_size) + " bytes; it needs " +
                                                  std::to_string(copies.workspace_bytes));
  }
  DeviceGuard device(call.device_index);
  if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
  const GemmCall& padded = copies.padded;
  const auto stream = static_cast<cudaStream_t>(call.stream);
  const int32_t multiprocessors = context.multiprocessors_of(call.device_index);
  struct Copy {
    bool wanted;
    SourceMatrix source;
    TargetMatrix target;
  };
  // b's stored rows: K of N elements (row-major), or N of K (column-major: the [N, K] weight).
  const bool b_row_major = call.b_order == MatrixOrder::kRowMajor;
  const int64_t b_rows = b_row_major ? call.k : call.n, b_columns = b_row_major ? call.n : call.k;
  const int64_t padded_b_rows = b_row_major ? padded.k : padded.n;
  const Copy operands[] = {
      {copies.copy_a, {call.a, call.m, call.k, call.lda}, {const_cast<void*>(padded.a), call.m, padded.k, padded.lda}},
      {copies.copy_b, {call.b, b_rows, b_columns, call.ldb},
       {const_cast<void*>(padded.b), padded_b_rows, padded.ldb, padded.ldb}},
      {copies.copy_bias, {call.bias, 1, call.n, call.n}, {const_cast<void*>(padded.bias), 1, padded.n, padded.n}}};
  for (const Copy& copy : operands) {
    if (!copy.wanted) continue;
    const cudaError_t error = launch_padded_copy(copy.source, copy.target, multiprocessors, stream);
    if (error != cudaSuccess) {
      return context.fail(KABI_STATUS_KERNEL_FAILED,
                          kernel.name + ": the padded copy failed to launch: " + cudaGetErrorString(error));
    }
  }
  const lt::Status status = queue_matmul(*plan, 0, padded, args.workspace, kWorkspaceBytes);
  if (status != 0) {
    return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + status_text("cublasLtMatmul", status));
  }
  if (copies.copy_out) {
    const cudaError_t error = launch_padded_copy({padded.out, call.m, call.n, padded.n},
                                                 {call.out, call.m, call.n, call.n}, multiprocessors, stream);
    if (error != cudaSuccess) {
      return context.fail(KABI_STATUS_KERNEL_FAILED,
                          kernel.name + ": the copy of the product failed to launch: " + cudaGetErrorString(error));
    }
  }
  return KABI_STATUS_OK;
}

std::string aligned_copies_why_not(const AlignedCopiesKernel& kernel, const kabi_problem& problem,
                                   const kabi_args& args) {
  GemmCall call;
  AlignedCopies copies;
  std::shared_ptr<Plan> plan;
  return check_aligned_copies(kernel, problem, args, /*require_output=*/false, &call, &copies, &plan);
}

// The algorithm cuBLASLt runs for the padded problem.
std::string aligned_copies_algorithm(const AlignedCopiesKernel& kernel, const kabi_problem& problem,
                                     const kabi_args& args, std::string* text) {
  GemmCall call;
  AlignedCopies copies;
  std::shared_ptr<Plan> plan;
  const std::string reason = check_aligned_copies(kernel, problem, args, /*require_output=*/false, &call, &copies,
                                                  &plan);
  if (reason.empty()) *text = plan->variants[0];
  return reason;
}

kabi_status workspace_aligned_copies(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  const auto& kernel = *static_cast<const AlignedCopiesKernel*>(user_data);
  const GemmCall call = workspace_call(*problem, kernel.op, /*folded=*/true);
  *out_bytes = copies_layout(call.m, padded_length(call.k), padded_length(call.n)).bytes;
  return KABI_STATUS_OK;
}

// Registers the aligned-copies kernel of `op`: alignment 2 (any address of a 2-byte element), priority below the
// slots', so only a measurement picks it.
kabi_status register_aligned_copies(const kabi_host_api* host, GemmOp op, const std::string& version) {
  auto kernel = std::make_unique<AlignedCopiesKernel>();
  kernel->op = op;
  kernel->name = "cuda.cublaslt.aligned_copies";
  kernel->fingerprint = kernel->name + "/1 cublasLt " + version;
  kabi_kernel_desc desc = gemm_kernel_desc(op, kernel->name, kernel->fingerprint,
                                           run_guarded<AlignedCopiesKernel, launch_aligned_copies>,
                                           supports_unless<AlignedCopiesKernel, aligned_copies_why_not>,
                                           workspace_aligned_copies);
  kabi_kernel_variant_extension variant_extension{};
  variant_extension.extension.struct_size = sizeof variant_extension;
  variant_extension.extension.type = KABI_EXTENSION_KERNEL_VARIANT;
  variant_extension.variant = variant_by<AlignedCopiesKernel, aligned_copies_algorithm>;
  desc.extensions = &variant_extension.extension;
  desc.alignment = 2;
  desc.arch_min = 80;
  desc.priority = kOtherSlotPriority;
  desc.required_features = KABI_FEATURE_TENSOR_CORES | KABI_FEATURE_BF16_MMA;
  desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
  return register_gemm_kernel(host, desc, std::move(kernel));
}

// The context a thread has current, its device, and the driver's function that makes it current on another thread.
struct CurrentContext {
  void* context = nullptr;
  int32_t device_index = -1;
  int (*make_current)(void* context) = nullptr;
};

// The calling thread's current context, read through the driver: unlike the runtime, it never creates a context to
// answer. False when there is none (no driver loaded, or no context current).
bool find_current_context(CurrentContext* found) {
  // RTLD_NOLOAD: only a driver the process has already loaded. The reference it takes is kept for the warm-up
  // thread's calls into the driver.
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (driver == nullptr) return false;
  const auto get_current = reinterpret_cast<int (*)(void**)>(dlsym(driver, "cuCtxGetCurrent"));
  const auto get_device = reinterpret_cast<int (*)(int*)>(dlsym(driver, "cuCtxGetDevice"));
  found->make_current = reinterpret_cast<int (*)(void*)>(dlsym(driver, "cuCtxSetCurrent"));
  int device = -1;
  if (get_current == nullptr || get_device == nullptr || found->make_current == nullptr ||
      get_current(&found->context) != 0 || found->context == nullptr || get_device(&device) != 0) {
    return false;
  }
  found->device_index = device;
  return true;
}

// cuBLASLt starts up on its first heuristic query in a process: 72-102 ms on the H100 and H200, where a later query
// takes 0.3 ms, and it is the process's start-up, not a thread's: after a query on another thread, the main thread's
// first query took 0.2-0.4 ms (benchmarks/results/debug-warm-first-call-probe-threads-nvidia-h100.txt). A process's
// first selection asks the slots' supports predicates, whose first plan makes that query, so the start-up sat on the
// process's first call. Started at registration, on a thread of its own, it overlaps the host's registration of its
// other backends (the Triton binaries: 25-55 ms), and the first plan_of waits on the state's mutex for whatever is
// left of it. Only in the context the loading thread has current: warming up never creates a context, nor touches a
// device the process does not use.
class WarmUp {
 public:
  // Once per process; a second plugin load finds the thread started.
  void start(const CurrentContext& current) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (owner_ != 0) return;
    owner_ = getpid();
    // Detached, with its end kept in done_: a forked child inherits the object but not the thread, and a joinable
    // std::thread there could be neither joined nor destroyed.
    std::thread([this, current] {
      run(current);
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      // Under the mutex: once a waiting destructor can proceed, this thread no longer touches the object.
      finished_.notify_all();
    }).detach();
  }

  // A process that exits before the queries end waits for them, rather than unloading cuBLASLt under them; a forked
  // child, which has no such thread, does not wait.
  ~WarmUp() {
    // Before the mutex: a child forked while the thread held it would find it held forever.
    if (owner_ != getpid()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] { return done_; });
  }

 private:
  static void run(const CurrentContext& current) {
    if (current.make_current(current.context) != 0) return;
    // One bfloat16 matmul of 64 rows, columns and depth, b column-major (an nn.Linear weight, the common case). The
    // start-up is not per size or layout: after a 64x64x64 row-major query on another thread, the first query of a
    // 37x4096x4096 nn.Linear problem took 0.5-0.8 ms on the H100
    // (benchmarks/results/debug-warm-first-call-probe-warm-up-thread-nvidia-h100.txt). Its plan stays in the table
    // like any other.
    GemmCall call;
    call.dtype = call.a_dtype = call.b_dtype = KABI_DTYPE_BFLOAT16;
    call.m = call.n = call.k = 64;
    call.lda = call.ldb = 64;
    call.b_order = MatrixOrder::kColumnMajor;
    call.device_index = current.device_index;
    // A warm-up that fails leaves the same work, and its report, to the first plan_of.
    try {
      std::string error;
      plan_of(call, epilogue_of(call), &error);
    } catch (...) {
    }
  }

  std::mutex mutex_;
  std::condition_variable finished_;
  bool done_ = false;
  pid_t owner_ = 0;  // the process that started the thread; 0 until one has
};

// Constructed after cublaslt()'s state (registration reads that first), so destroyed, and joined, before it.
WarmUp& warm_up() {
  static WarmUp instance;
  return instance;
}

}  // namespace

kabi_status register_cublaslt_kernels(const kabi_host_api* host, PluginContext& context) {
  Cublaslt& state = cublaslt();
  std::string error;
  // Without cuBLASLt the plugin still serves its CUTLASS kernels; the slots are simply absent.
  if (!lt::open_cublaslt(context.plugin_directory, &state.library, &error)) return KABI_STATUS_OK;
  const std::string version = std::to_string(state.library.version);
  for (GemmOp op : {GemmOp::kMatmul, GemmOp::kLinear, GemmOp::kScaledMm}) {
    const bool fp8 = op == GemmOp::kScaledMm;
    // Tensor-core bfloat16 GEMMs need sm_80, FP8 ones sm_89.
    const int32_t arch_min = fp8 ? 89 : 80;
    if (std::none_of(context.archs.begin(), context.archs.end(), [&](int32_t arch) { return arch >= arch_min; })) {
      continue;
    }
    for (int slot = 0; slot < kSlots; ++slot) {
      auto kernel = std::make_unique<SlotKernel>();
      kernel->slot = slot;
      kernel->op = op;
      kernel->name = std::string(fp8 ? "cuda.cublaslt.fp8.algo" : "cuda.cublaslt.algo") + std::to_string(slot);
      kernel->fingerprint = kernel->name + "/1 cublasLt " + version;

      kabi_kernel_desc desc =
          gemm_kernel_desc(op, kernel->name, kernel->fingerprint, run_guarded<SlotKernel, launch_slot>,
                           supports_unless<SlotKernel, slot_why_not>, workspace);
      kabi_kernel_variant_extension variant_extension{};
      variant_extension.extension.struct_size = sizeof variant_extension;
      variant_extension.extension.type = KABI_EXTENSION_KERNEL_VARIANT;
      variant_extension.variant = variant_by<SlotKernel, slot_algorithm>;
      desc.extensions = &variant_extension.extension;
      desc.arch_min = arch_min;
      desc.priority = slot == 0 ? kFirstSlotPriority : kOtherSlotPriority;
      desc.required_features = KABI_FEATURE_TENSOR_CORES | (fp8 ? KABI_FEATURE_FP8_MMA : KABI_FEATURE_BF16_MMA);
      // scaled_mm: out's dtype (O), and a's and b's formats; supports() declines the pair cuBLASLt lacks.
      desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16 | (fp8 ? KABI_DTYPE_FLOAT32 : 0u);
      desc.type_constraints = fp8 ? "F8A: float8_e4m3fn, float8_e5m2; F8B: float8_e4m3fn, float8_e5m2" : nullptr;
      const kabi_status status = register_gemm_kernel(host, desc, std::move(kernel));
      if (status != KABI_STATUS_OK) return status;
    }
    if (!fp8) {
      const kabi_status status = register_aligned_copies(host, op, version);
      if (status != KABI_STATUS_OK) return status;
    }
  }
  CurrentContext current;
  if (find_current_context(&current) && current.device_index >= 0 &&
      static_cast<size_t>(current.device_index) < context.archs.size() &&
      context.archs[static_cast<size_t>(current.device_index)] >= 80) {
    warm_up().start(current);
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
