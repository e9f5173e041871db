// cuBLASLt as kabi candidates. Its heuristic ranks algorithms per problem, but a kabi kernel is registered once, at
// init, before any problem is known. So the plugin registers kSlots "slot" kernels per op, cuda.cublaslt.algo0 ..
// algoN: slot i computes a problem with the i-th algorithm the heuristic returns for it, and its supports()
// declines a problem for which the heuristic returns fewer than i + 1. The tuner then measures the heuristic's top
// algorithms as separate candidates and the cache records which slot won. A slot's fingerprint names the cuBLASLt
// build: the heuristic's ranking is a function of that build, the device (the cache's device signature) and the
// problem, so a record stays meaningful exactly as long as all three are unchanged.
//
// row-major out[M, N] = a[M, K] @ b[K, N] is computed as its column-major transpose, out^T = b^T @ a^T: cuBLASLt's
// A is b, its B is a, and its D is out read as an N x M column-major matrix, whose rows (N) the bias runs along.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cublaslt_library.hpp"
#include "gemm_plan.hpp"
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
  if (call.bias != nullptr) epilogue = (epilogue == lt::kEpilogueDefault ? 0 : epilogue) | lt::kEpilogueBias;
  return epilogue;
}

// What the descriptors and the heuristic depend on (never the data addresses, which must be 16-byte aligned).
using PlanKey = std::tuple<int32_t, uint32_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t, int64_t,
                           int64_t, uint32_t>;

PlanKey key_of(const GemmCall& call, uint32_t epilogue) {
  return {call.device_index, call.dtype, call.m, call.n, call.k, call.batch, call.lda, call.ldb,
          static_cast<int32_t>(call.b_order), call.batch_stride_a, call.batch_stride_b, epilogue};
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
  bool is_linear = false;
  std::string name, fingerprint;
};

std::string status_text(const char* what, lt::Status status) {
  return std::string(what) + " failed with cublasStatus " + std::to_string(status);
}

// Build the descriptors and ask the heuristic (with the call's device current).
void build_plan(Cublaslt& state, const GemmCall& call, uint32_t epilogue, lt::Handle handle, Plan* plan) {
  const lt::Library& lib = state.library;
  const int32_t type = call.dtype == KABI_DTYPE_BFLOAT16 ? lt::kCudaR16BF : lt::kCudaR16F;
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
  if (call.bias != nullptr) {
    // The heuristic reads the bias pointer's alignment; launches set the real one (also 16-byte aligned).
    const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
    lib.desc_set(plan->desc, lt::kDescBiasPointer, &aligned, sizeof aligned);
  }
  // cuBLASLt's A: b, N x K (row-major b read as column-major) or K x N (column-major b, transposed).
  const bool b_row_major = call.b_order == MatrixOrder::kRowMajor;
  status = lib.layout_create(&plan->a, type, b_row_major ? call.n : call.k, b_row_major ? call.k : call.n, call.ldb);
  if (status == 0) status = lib.layout_create(&plan->b, type, call.k, call.m, call.lda);
  if (status == 0) status = lib.layout_create(&plan->d, type, call.n, call.m, call.n);
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

std::string check(const SlotKernel& kernel, const kabi_problem& problem, const kabi_args& args, bool require_output,
                  GemmCall* call, uint32_t* epilogue, std::shared_ptr<Plan>* plan) {
  std::string reason = kernel.is_linear ? plan_linear(problem, args, require_output, call)
                                        : plan_matmul(problem, args, require_output, call);
  if (!reason.empty()) return reason;
  *epilogue = epilogue_of(*call);
  if (*epilogue == 0) return "cuBLASLt has no epilogue computing this activation exactly (only relu and gelu_tanh)";
  for (const void* pointer : {call->a, call->b, call->bias, static_cast<const void*>(call->out)}) {
    if (pointer != nullptr && reinterpret_cast<uintptr_t>(pointer) % 16 != 0) {
      return "a data address is not 16-byte aligned";
    }
  }
  *plan = plan_of(*call, *epilogue, &reason);
  if (*plan == nullptr) return reason;
  if (!(*plan)->error.empty()) return (*plan)->error;
  if ((*plan)->algorithms <= kernel.slot) {
    return "cuBLASLt's heuristic offers " + std::to_string((*plan)->algorithms) + " algorithm(s) for this problem";
  }
  return {};
}

kabi_status run(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const auto& kernel = *static_cast<const SlotKernel*>(user_data);
  const PluginContext& context = plugin_context();
  try {
    if (problem == nullptr || args == nullptr) {
      return context.fail(KABI_STATUS_INVALID_ARGUMENT, kernel.name + ": problem or args is NULL");
    }
    GemmCall call;
    uint32_t epilogue = 0;
    std::shared_ptr<Plan> plan;
    const std::string reason = check(kernel, *problem, *args, /*require_output=*/true, &call, &epilogue, &plan);
    if (!reason.empty()) return context.fail(KABI_STATUS_CONSTRAINT_VIOLATED, kernel.name + ": " + reason);
    const lt::HeuristicResult& result = plan->results[kernel.slot];
    if (result.workspace_size > args->workspace_size) {
      return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": the algorithm needs " +
                                                    std::to_string(result.workspace_size) + " bytes of workspace");
    }
    Cublaslt& state = cublaslt();
    DeviceGuard device(call.device_index);
    if (!device.ok()) return context.fail(KABI_STATUS_UNAVAILABLE, kernel.name + ": " + device.error());
    lt::Handle handle;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      handle = state.handles[call.device_index];
    }
    const float alpha = 1.0f, beta = 0.0f;
    lt::Status status;
    {
      std::lock_guard<std::mutex> lock(plan->mutex);
      if (call.bias != nullptr) state.library.desc_set(plan->desc, lt::kDescBiasPointer, &call.bias, sizeof call.bias);
      status = state.library.matmul(handle, plan->desc, &alpha, call.b, plan->a, call.a, plan->b, &beta, call.out,
                                    plan->d, call.out, plan->d, &result.algo, args->workspace, args->workspace_size,
                                    call.stream);
    }
    if (status != 0) {
      return context.fail(KABI_STATUS_KERNEL_FAILED, kernel.name + ": " + status_text("cublasLtMatmul", status));
    }
    return KABI_STATUS_OK;
  } catch (const std::exception& error) {
    return context.fail(KABI_STATUS_INTERNAL, kernel.name + ": " + error.what());
  }
}

int32_t supports(void* user_data, const kabi_problem* problem, const kabi_args* args, char* reason,
                 size_t reason_size) {
  const auto& kernel = *static_cast<const SlotKernel*>(user_data);
  try {
    GemmCall call;
    uint32_t epilogue = 0;
    std::shared_ptr<Plan> plan;
    const std::string why_not = check(kernel, *problem, *args, /*require_output=*/false, &call, &epilogue, &plan);
    if (why_not.empty()) return 1;
    std::snprintf(reason, reason_size, "%s", why_not.c_str());
  } catch (const std::exception& error) {
    std::snprintf(reason, reason_size, "%s", error.what());
  }
  return 0;
}

kabi_status workspace(void*, const kabi_problem*, size_t* out_bytes) {
  *out_bytes = kWorkspaceBytes;
  return KABI_STATUS_OK;
}

void free_kernel(void* user_data) { delete static_cast<SlotKernel*>(user_data); }

}  // namespace

kabi_status register_cublaslt_kernels(const kabi_host_api* host, PluginContext& context) {
  Cublaslt& state = cublaslt();
  std::string error;
  // Without cuBLASLt the plugin still serves its CUTLASS kernels; the slots are simply absent.
  if (!lt::open_cublaslt(context.plugin_directory, &state.library, &error)) return KABI_STATUS_OK;
  // Tensor-core bfloat16 GEMMs need sm_80.
  if (std::none_of(context.archs.begin(), context.archs.end(), [](int32_t arch) { return arch >= 80; })) {
    return KABI_STATUS_OK;
  }
  const std::string version = std::to_string(state.library.version);
  for (const char* op : {"matmul", "linear"}) {
    for (int slot = 0; slot < kSlots; ++slot) {
      auto kernel = std::make_unique<SlotKernel>();
      kernel->slot = slot;
      kernel->is_linear = std::string(op) == "linear";
      kernel->name = "cuda.cublaslt.algo" + std::to_string(slot);
      kernel->fingerprint = kernel->name + "/1 cublasLt " + version;

      kabi_kernel_desc desc{};
      desc.struct_size = sizeof(desc);
      desc.op = op;
      desc.name = kernel->name.c_str();
      desc.backend = "cuda";
      desc.device_type = kDLCUDA;
      desc.arch_min = 80;
      desc.priority = slot == 0 ? kFirstSlotPriority : kOtherSlotPriority;
      desc.required_features = KABI_FEATURE_TENSOR_CORES | KABI_FEATURE_BF16_MMA;
      desc.dtypes = KABI_DTYPE_BFLOAT16 | KABI_DTYPE_FLOAT16;
      desc.layouts = KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED | KABI_LAYOUT_COL_STRIDED |
                     (kernel->is_linear ? KABI_LAYOUT_GENERAL : 0u);
      desc.alignment = 16;
      desc.batch_mode = KABI_BATCH_UNIFORM;
      desc.kind = KABI_KERNEL_FUNCTION;
      desc.function = run;
      desc.supports = supports;
      desc.workspace = workspace;
      desc.user_data = kernel.get();
      desc.user_data_free = free_kernel;
      desc.fingerprint = kernel->fingerprint.c_str();
      kabi_kernel registered = nullptr;
      const kabi_status status = host->kernel_register(&desc, &registered);
      if (status != KABI_STATUS_OK) return status;
      kernel.release();
    }
  }
  return KABI_STATUS_OK;
}

}  // namespace kabi::cuda
