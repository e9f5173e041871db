/*
 * kabi.hpp - a header-only C++17 wrapper over kabi.h.
 *
 * Errors become kabi::Error exceptions here, on the caller's side of the C boundary. Handles are small values
 * (libkabi owns the objects; a KernelRegistration owns its registration); TensorView describes caller memory as a
 * DLTensor without owning it.
 *
 *   kabi::load_builtin_plugins();
 *   kabi::Op matmul = kabi::Op::find("matmul");
 *   std::vector<float> a(m * k), b(k * n), out(m * n);
 *   kabi::Call call({kabi::TensorView::of(a.data(), {m, k}), kabi::TensorView::of(b.data(), {k, n})},
 *                   {kabi::TensorView::of(out.data(), {m, n})});
 *   kabi::Selection selection = kabi::select(matmul, call);   // once
 *   for (...) selection.launch(call);                         // many times
 */
#ifndef KABI_KABI_HPP_
#define KABI_KABI_HPP_

#include <cstdint>
#include <iterator>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kabi/kabi.h"

namespace kabi {

/** A failed kabi call: the status and the message libkabi set for it. */
class Error : public std::runtime_error {
 public:
  Error(kabi_status status, const std::string& message)
      : std::runtime_error(std::string(kabi_status_name(status)) + ": " + message), status_(status) {}
  kabi_status status() const noexcept { return status_; }

 private:
  kabi_status status_;
};

/** Throw kabi::Error for a status other than KABI_STATUS_OK, with the calling thread's last error. */
inline void check(kabi_status status) {
  if (status != KABI_STATUS_OK) throw Error(status, kabi_last_error());
}

/* ---------------------------------------------------------------------------------------------------------- */
/* Dtypes and tensors                                                                                          */
/* ---------------------------------------------------------------------------------------------------------- */

constexpr DLDataType kFloat16{kDLFloat, 16, 1};
constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr DLDataType kFloat64{kDLFloat, 64, 1};
constexpr DLDataType kInt32{kDLInt, 32, 1};
constexpr DLDataType kInt64{kDLInt, 64, 1};

/** The DLPack dtype of a C++ element type: dtype_of<float>() is kFloat32. */
template <typename T>
constexpr DLDataType dtype_of();
template <>
constexpr DLDataType dtype_of<float>() { return kFloat32; }
template <>
constexpr DLDataType dtype_of<double>() { return kFloat64; }
template <>
constexpr DLDataType dtype_of<int32_t>() { return kInt32; }
template <>
constexpr DLDataType dtype_of<int64_t>() { return kInt64; }

/** A DLTensor over memory the caller owns (which must outlive the view). Strides are in elements; without them
 *  the view is C-contiguous. */
class TensorView {
 public:
  TensorView(void* data, std::vector<int64_t> shape, DLDataType dtype, DLDevice device = {kDLCPU, 0})
      : TensorView(data, std::move(shape), {}, dtype, device) {}

  TensorView(void* data, std::vector<int64_t> shape, std::vector<int64_t> strides, DLDataType dtype,
             DLDevice device = {kDLCPU, 0})
      : shape_(std::move(shape)), strides_(std::move(strides)) {
    if (strides_.empty()) {
      strides_.resize(shape_.size());
      int64_t step = 1;
      for (size_t d = shape_.size(); d-- > 0;) {
        strides_[d] = step;
        step *= shape_[d];
      }
    }
    if (strides_.size() != shape_.size()) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, "TensorView: " + std::to_string(strides_.size()) +
                                                    " strides for a shape of rank " + std::to_string(shape_.size()));
    }
    tensor_ = DLTensor{};
    tensor_.data = data;
    tensor_.device = device;
    tensor_.dtype = dtype;
    bind();
  }

  /** An optional input left out of a call: a zero-filled DLTensor (dtype.bits 0), as kabi_args describes. */
  static TensorView absent() { return TensorView(nullptr, {}, DLDataType{0, 0, 0}, DLDevice{kDLCPU, 0}); }

  /** A view of typed memory: TensorView::of(values.data(), {rows, cols}). */
  template <typename T>
  static TensorView of(T* data, std::vector<int64_t> shape, std::vector<int64_t> strides = {},
                       DLDevice device = {kDLCPU, 0}) {
    return TensorView(const_cast<void*>(static_cast<const void*>(data)), std::move(shape), std::move(strides),
                      dtype_of<std::remove_const_t<T>>(), device);
  }

  TensorView(const TensorView& other) : shape_(other.shape_), strides_(other.strides_), tensor_(other.tensor_) {
    bind();
  }
  TensorView& operator=(const TensorView& other) {
    shape_ = other.shape_;
    strides_ = other.strides_;
    tensor_ = other.tensor_;
    bind();
    return *this;
  }
  TensorView(TensorView&& other) noexcept
      : shape_(std::move(other.shape_)), strides_(std::move(other.strides_)), tensor_(other.tensor_) {
    bind();
  }
  TensorView& operator=(TensorView&& other) noexcept {
    shape_ = std::move(other.shape_);
    strides_ = std::move(other.strides_);
    tensor_ = other.tensor_;
    bind();
    return *this;
  }
  ~TensorView() = default;

  const DLTensor& dl() const { return tensor_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  DLDataType dtype() const { return tensor_.dtype; }
  DLDevice device() const { return tensor_.device; }
  void* data() const { return tensor_.data; }
  int64_t numel() const {
    int64_t count = 1;
    for (int64_t extent : shape_) count *= extent;
    return count;
  }

 private:
  void bind() {
    tensor_.ndim = static_cast<int32_t>(shape_.size());
    tensor_.shape = shape_.data();
    tensor_.strides = strides_.data();
  }

  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor tensor_;
};

/** The tensors of one call of an op, in schema order, the stream (NULL: default stream, or the CPU) and the
 *  attributes in schema order (those left out take their defaults). */
class Call {
 public:
  Call(std::vector<TensorView> inputs, std::vector<TensorView> outputs = {}, void* stream = nullptr,
       std::vector<kabi_attribute_value> attributes = {})
      : views_(std::move(inputs)), num_inputs_(static_cast<int32_t>(views_.size())), attributes_(std::move(attributes)) {
    views_.insert(views_.end(), std::make_move_iterator(outputs.begin()), std::make_move_iterator(outputs.end()));
    tensors_.reserve(views_.size());
    for (const TensorView& view : views_) tensors_.push_back(view.dl());
    args_ = kabi_args{};
    args_.struct_size = sizeof(kabi_args);
    args_.inputs = tensors_.data();
    args_.num_inputs = num_inputs_;
    args_.num_outputs = static_cast<int32_t>(views_.size()) - num_inputs_;
    args_.outputs = args_.num_outputs > 0 ? tensors_.data() + num_inputs_ : nullptr;
    args_.stream = stream;
    args_.attributes = attributes_.empty() ? nullptr : attributes_.data();
    args_.num_attributes = static_cast<int32_t>(attributes_.size());
  }
  // args() points into this object's own storage.
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  const kabi_args& args() const { return args_; }

 private:
  std::vector<TensorView> views_;
  int32_t num_inputs_;
  std::vector<kabi_attribute_value> attributes_;
  std::vector<DLTensor> tensors_;
  kabi_args args_;
};

/* ---------------------------------------------------------------------------------------------------------- */
/* Ops, kernels, selection                                                                                     */
/* ---------------------------------------------------------------------------------------------------------- */

/** A registered kernel (a handle libkabi owns). */
class Kernel {
 public:
  explicit Kernel(kabi_kernel handle = nullptr) : handle_(handle) {}

  static Kernel find(const std::string& op, const std::string& name) {
    kabi_kernel handle = nullptr;
    check(kabi_kernel_find(op.c_str(), name.c_str(), &handle));
    return Kernel(handle);
  }

  kabi_kernel_info info() const {
    kabi_kernel_info info{};
    info.struct_size = sizeof(info);
    check(kabi_kernel_info_get(handle_, &info));
    return info;
  }
  std::string name() const { return info().name; }
  std::string backend() const { return info().backend; }
  /** The plugin that registered it; "" when registered directly. */
  std::string plugin() const { return info().plugin; }

  /** Run on a call's tensors; the kernel's constraints are checked first. */
  void launch(const Call& call) const { check(kabi_launch(handle_, &call.args())); }

  kabi_kernel handle() const { return handle_; }
  explicit operator bool() const { return handle_ != nullptr; }

 private:
  kabi_kernel handle_;
};

/** A kernel this program registered (kabi_kernel_register), unregistered when the object is destroyed. Move-only.
 *
 *    kabi_kernel_desc desc{};  // struct_size, op, name, backend, device_type, dtypes, layouts, kind, function...
 *    kabi::KernelRegistration registration(desc);
 */
class KernelRegistration {
 public:
  explicit KernelRegistration(const kabi_kernel_desc& desc) {
    kabi_kernel handle = nullptr;
    check(kabi_kernel_register(&desc, &handle));
    kernel_ = Kernel(handle);
    op_ = desc.op;
    name_ = desc.name;
  }
  KernelRegistration(const KernelRegistration&) = delete;
  KernelRegistration& operator=(const KernelRegistration&) = delete;
  KernelRegistration(KernelRegistration&& other) noexcept
      : kernel_(other.kernel_), op_(std::move(other.op_)), name_(std::move(other.name_)) {
    other.name_.clear();
  }
  KernelRegistration& operator=(KernelRegistration&& other) noexcept {
    if (this != &other) {
      release();
      kernel_ = other.kernel_;
      op_ = std::move(other.op_);
      name_ = std::move(other.name_);
      other.name_.clear();
    }
    return *this;
  }
  ~KernelRegistration() { release(); }

  const Kernel& kernel() const { return kernel_; }

 private:
  void release() noexcept {
    // A destructor cannot throw: a kernel that is already gone (unregistered elsewhere) is fine.
    if (!name_.empty()) kabi_kernel_unregister(op_.c_str(), name_.c_str());
    name_.clear();
  }

  Kernel kernel_;
  std::string op_;
  std::string name_;
};

/** One candidate as a selection saw it. */
struct Candidate {
  Kernel kernel;
  bool eligible = false;
  bool picked = false;
  /** From the tuning cache, in microseconds; negative when none is recorded. */
  double tuned_time_us = -1.0;
  /** Why it is not eligible, or "". */
  std::string reason;
  /** Its correctness-gate verdict on the problem. */
  kabi_gate_verdict gate = KABI_GATE_NONE;
  /** The mode tuned_time_us was measured in. */
  kabi_execution_mode tuned_execution_mode = KABI_EXECUTION_EAGER;
  /** tuned_time_us is a screened time: the tuner's screen cut the kernel, and it is never picked by that time. */
  bool tuned_screened = false;
  /** The variant the kernel runs for the problem (kabi_kernel_variant_extension), or "". */
  std::string variant;
  /** Its tuning records on the problem were set aside as stale: made for stale_variant, not variant. */
  bool has_stale_record = false;
  std::string stale_variant;
};

/** Options of a selection: force a backend or kernel name, whether KABI_FORCE (and KABI_ALLOW_UNVERIFIED) and
 *  the tuning cache's timings count, the two opt-outs of the correctness gate, and whether the call runs eagerly or
 *  replayed in a CUDA graph (see kabi_select_options). */
struct SelectOptions {
  std::string force;
  bool use_environment = true;
  bool use_tuning_cache = true;
  bool allow_unverified = false;
  bool allow_failed_gate = false;
  kabi_execution_mode execution_mode = KABI_EXECUTION_EAGER;

  kabi_select_options raw() const {
    kabi_select_options options{};
    options.struct_size = sizeof(options);
    options.force = force.empty() ? nullptr : force.c_str();
    options.use_environment = use_environment ? 1 : 0;
    options.use_tuning_cache = use_tuning_cache ? 1 : 0;
    options.allow_unverified = allow_unverified ? 1 : 0;
    options.allow_failed_gate = allow_failed_gate ? 1 : 0;
    options.execution_mode = execution_mode;
    return options;
  }
};

/** The outcome of a selection: the kernel, why, every candidate, and the problem. Select once, launch many. */
class Selection {
 public:
  Kernel kernel() const { return Kernel(selection_.kernel); }
  kabi_pick_reason pick_reason() const { return selection_.pick_reason; }
  /** A sentence such as "tuned: fastest of 2 measured (12.1 us)". */
  std::string reason() const { return selection_.reason; }
  const std::vector<Candidate>& candidates() const { return candidates_; }
  const kabi_problem& problem() const { return selection_.problem; }
  /** Whether the pick has passed the correctness gate on the problem (false only for opted-in picks). */
  bool verified() const { return selection_.verified != 0; }
  void launch(const Call& call) const { kernel().launch(call); }

 private:
  friend Selection select(kabi_op op, const Call& call, const SelectOptions& options);
  kabi_selection selection_{};
  std::vector<Candidate> candidates_;
};

/** Pick the kernel for a call (outputs may be omitted). Throws kabi::Error when nothing is eligible. */
inline Selection select(kabi_op op, const Call& call, const SelectOptions& options = {}) {
  const kabi_select_options raw_options = options.raw();

  Selection result;
  std::vector<kabi_candidate> raw(16);
  for (;;) {
    for (kabi_candidate& candidate : raw) {
      candidate = kabi_candidate{};
      candidate.struct_size = sizeof(kabi_candidate);
    }
    result.selection_ = kabi_selection{};
    result.selection_.struct_size = sizeof(kabi_selection);
    result.selection_.problem.struct_size = sizeof(kabi_problem);
    result.selection_.candidates = raw.data();
    result.selection_.candidates_capacity = static_cast<int32_t>(raw.size());
    check(kabi_select(op, &call.args(), &raw_options, &result.selection_));
    if (result.selection_.num_candidates <= result.selection_.candidates_capacity) break;
    raw.resize(static_cast<size_t>(result.selection_.num_candidates));
  }
  for (int32_t i = 0; i < result.selection_.num_candidates; ++i) {
    const kabi_candidate& candidate = raw[static_cast<size_t>(i)];
    result.candidates_.push_back(Candidate{Kernel(candidate.kernel), candidate.eligible != 0,
                                           candidate.picked != 0, candidate.tuned_time_us, candidate.reason,
                                           candidate.gate,
                                           static_cast<kabi_execution_mode>(candidate.tuned_execution_mode),
                                           candidate.tuned_screened != 0, candidate.variant,
                                           candidate.has_stale_record != 0, candidate.stale_variant});
  }
  result.selection_.candidates = nullptr;
  result.selection_.candidates_capacity = 0;
  return result;
}

/** An op (a handle libkabi owns). */
class Op {
 public:
  explicit Op(kabi_op handle = nullptr) : handle_(handle) {}

  /** Throws kabi::Error (KABI_STATUS_NOT_FOUND) for an unknown name. */
  static Op find(const std::string& name) {
    kabi_op handle = nullptr;
    check(kabi_op_find(name.c_str(), &handle));
    return Op(handle);
  }

  kabi_op_info info() const {
    kabi_op_info info{};
    info.struct_size = sizeof(info);
    check(kabi_op_info_get(handle_, &info));
    return info;
  }
  std::string name() const { return info().name; }

  /** Changes with every change that can alter this op's selections, and with no other (kabi_op_generation). */
  uint64_t generation() const { return kabi_op_generation(handle_); }
  /** The op's choice in KABI_FORCE as selection applies it, "" when none; throws kabi::Error for a malformed value
   *  or an op named twice. */
  std::string environment_force() const {
    char choice[1024] = {};
    check(kabi_op_environment_force(handle_, choice, sizeof choice));
    return choice;
  }

  Selection select(const Call& call, const SelectOptions& options = {}) const {
    return kabi::select(handle_, call, options);
  }
  /** Select (through libkabi's decision cache) and launch in one call. */
  void call(const Call& call, const SelectOptions& options = {}) const {
    const kabi_select_options raw_options = options.raw();
    check(kabi_call(handle_, &call.args(), &raw_options));
  }

  kabi_op handle() const { return handle_; }

 private:
  kabi_op handle_;
};

inline Selection select(const Op& op, const Call& call, const SelectOptions& options = {}) {
  return select(op.handle(), call, options);
}
inline void launch(const Kernel& kernel, const Call& call) { kernel.launch(call); }
inline void call(const Op& op, const Call& call, const SelectOptions& options = {}) { op.call(call, options); }

/* ---------------------------------------------------------------------------------------------------------- */
/* Devices, plugins, versions                                                                                  */
/* ---------------------------------------------------------------------------------------------------------- */

/** Every device of a DLDeviceType (empty when its driver is missing). */
inline std::vector<kabi_device_info> devices(int32_t device_type) {
  int32_t count = 0;
  check(kabi_device_count(device_type, &count));
  std::vector<kabi_device_info> result(static_cast<size_t>(count));
  for (int32_t index = 0; index < count; ++index) {
    kabi_device_info& info = result[static_cast<size_t>(index)];
    info.struct_size = sizeof(info);
    check(kabi_device_info_get(device_type, index, &info));
  }
  return result;
}

/** How a launch on `stream` (a CUstream of `device`) runs now: KABI_EXECUTION_GRAPH while the stream is being
 *  captured into a CUDA graph, else KABI_EXECUTION_EAGER. A loop that selected once per mode launches the pick of
 *  the mode this returns. */
inline kabi_execution_mode stream_execution_mode(DLDevice device, void* stream) {
  int32_t mode = KABI_EXECUTION_EAGER;
  check(kabi_stream_execution_mode(device, stream, &mode));
  return static_cast<kabi_execution_mode>(mode);
}

/** The signature tuning decisions are keyed by, e.g. "cpu|...|abi1". */
inline std::string device_signature(int32_t device_type, int32_t device_index) {
  char buffer[512];
  check(kabi_device_signature(device_type, device_index, buffer, sizeof(buffer)));
  return buffer;
}

/** One plugin load, successful or refused. */
struct PluginRecord {
  std::string path;
  std::string name;
  std::string version;
  uint32_t abi_version = 0;
  bool loaded = false;
  /** Why it was refused; "" when loaded. */
  std::string message;
  int32_t num_kernels = 0;
  /** A KABI_BINARY_PATH directory of device binaries rather than a plugin library. */
  bool binaries = false;
};

/** Load a plugin library; throws kabi::Error naming the plugin and the reason when it is refused. */
inline void load_plugin(const std::string& path) { check(kabi_plugin_load(path.c_str())); }

/** Load the plugins that ship beside libkabi (the CPU plugin, and the CUDA plugin where built). */
inline void load_builtin_plugins() { check(kabi_plugin_load_builtin()); }

/** Load the plugins KABI_PLUGIN_PATH names, then the device-binary directories KABI_BINARY_PATH names; refusals
 *  are recorded (see plugins()), not thrown. */
inline void load_plugins_from_environment() { check(kabi_plugin_load_from_environment()); }

inline std::vector<PluginRecord> plugins() {
  std::vector<PluginRecord> result;
  const int32_t count = kabi_plugin_count();
  for (int32_t index = 0; index < count; ++index) {
    kabi_plugin_record record{};
    record.struct_size = sizeof(record);
    check(kabi_plugin_at(index, &record));
    result.push_back(PluginRecord{record.path != nullptr ? record.path : "", record.name != nullptr ? record.name : "", record.version != nullptr ? record.version : "",
                                  record.abi_version, record.state == KABI_PLUGIN_LOADED,
                                  record.message != nullptr ? record.message : "", record.num_kernels,
                                  record.kind == KABI_PLUGIN_KIND_BINARIES});
  }
  return result;
}

/** The ABI version libkabi implements, as KABI_ABI_VERSION packs it. */
inline uint32_t abi_version() { return kabi_abi_version(); }
inline std::string library_version() { return kabi_library_version(); }

}  // namespace kabi

#endif /* KABI_KABI_HPP_ */
