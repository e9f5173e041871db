// Validation, selection and launch of native kernels. The hot path is PreparedLaunch: shapes, strides, dtypes and
// devices are fixed when a decision is cached, so a call passes only the tensors, whose data pointers it reads.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dlpack_exchange.hpp"
#include "errors.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

const char* pick_reason_name(kabi_pick_reason reason) {
  switch (reason) {
    case KABI_PICK_FORCED:
      return "forced";
    case KABI_PICK_TUNED:
      return "tuned";
    case KABI_PICK_HEURISTIC:
      return "heuristic";
    case KABI_PICK_NONE:
      break;
  }
  return "none";
}

const char* gate_verdict_name(kabi_gate_verdict verdict) {
  switch (verdict) {
    case KABI_GATE_PASSED_TIMED:
      return "passed, timed";
    case KABI_GATE_PASSED_UNTIMED:
      return "passed, untimed";
    case KABI_GATE_FAILED:
      return "failed";
    case KABI_GATE_NONE:
      break;
  }
  return "none";
}

const char* execution_mode_name(kabi_execution_mode mode) {
  return mode == KABI_EXECUTION_GRAPH ? "graph" : "eager";
}

kabi_execution_mode execution_mode_from_name(const std::string& name) {
  if (name == "eager") return KABI_EXECUTION_EAGER;
  if (name == "graph") return KABI_EXECUTION_GRAPH;
  raise_status(KABI_STATUS_INVALID_ARGUMENT, "execution_mode must be \"eager\" or \"graph\", got \"" + name + "\"");
}

py::dict describe(const std::string& op_name, const py::sequence& inputs, const py::sequence& outputs,
                  const py::sequence& attributes) {
  kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, attributes);
  kabi_problem problem{};
  problem.struct_size = sizeof(problem);
  check(kabi_problem_describe(op, &tensors.args(), &problem));
  return problem_to_dict(op, problem);
}

// Select a kernel; with allow_none, a problem no kernel can run still returns the candidates (kernel None and
// "error" holding libkabi's message) so that explain can show every rejection.
py::dict select(const std::string& op_name, const py::sequence& inputs, const py::sequence& outputs,
                const std::optional<std::string>& force, bool use_environment, bool use_tuning_cache,
                bool allow_unverified, bool allow_failed_gate, bool allow_none, const py::sequence& attributes,
                const std::string& execution_mode) {
  kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, attributes);
  kabi_select_options options{};
  options.struct_size = sizeof(options);
  options.force = force ? force->c_str() : nullptr;
  options.use_environment = use_environment ? 1 : 0;
  options.use_tuning_cache = use_tuning_cache ? 1 : 0;
  options.allow_unverified = allow_unverified ? 1 : 0;
  options.allow_failed_gate = allow_failed_gate ? 1 : 0;
  options.execution_mode = execution_mode_from_name(execution_mode);

  std::vector<kabi_candidate> candidates(16);
  kabi_selection selection{};
  kabi_status status = KABI_STATUS_OK;
  for (;;) {
    for (auto& candidate : candidates) {
      candidate = kabi_candidate{};
      candidate.struct_size = sizeof(kabi_candidate);
    }
    selection = kabi_selection{};
    selection.struct_size = sizeof(selection);
    selection.problem.struct_size = sizeof(kabi_problem);
    selection.candidates = candidates.data();
    selection.candidates_capacity = static_cast<int32_t>(candidates.size());
    status = kabi_select(op, &tensors.args(), &options, &selection);
    if (selection.num_candidates <= selection.candidates_capacity) break;
    candidates.resize(static_cast<std::size_t>(selection.num_candidates));
  }
  std::string error;
  if (status != KABI_STATUS_OK) {
    if (!(allow_none && status == KABI_STATUS_NO_ELIGIBLE_KERNEL)) raise_status(status);
    error = kabi_last_error();
  }

  py::dict result;
  result["kernel"] = selection.kernel != nullptr ? py::object(kernel_to_dict(selection.kernel)) : py::none();
  result["pick_reason"] = pick_reason_name(selection.pick_reason);
  result["reason"] = py::str(selection.reason);
  result["error"] = error;
  result["verified"] = selection.verified != 0;
  py::list candidate_list;
  for (int32_t i = 0; i < selection.num_candidates; ++i) {
    const kabi_candidate& candidate = candidates[static_cast<std::size_t>(i)];
    if (candidate.kernel == nullptr) continue;
    py::dict entry = kernel_to_dict(candidate.kernel);
    entry["eligible"] = candidate.eligible != 0;
    entry["picked"] = candidate.picked != 0;
    entry["tuned_time_us"] = candidate.tuned_time_us >= 0 ? py::object(py::float_(candidate.tuned_time_us))
                                                          : py::object(py::none());
    entry["reason"] = py::str(candidate.reason);
    entry["gate"] = gate_verdict_name(candidate.gate);
    entry["tuned_execution_mode"] = execution_mode_name(static_cast<kabi_execution_mode>(candidate.tuned_execution_mode));
    entry["tuned_screened"] = candidate.tuned_screened != 0;
    candidate_list.append(entry);
  }
  result["candidates"] = candidate_list;
  // A selection that found nothing still describes its problem; one that failed validation has none.
  result["problem"] = status == KABI_STATUS_OK || selection.problem.num_outputs > 0
                          ? py::object(problem_to_dict(op, selection.problem))
                          : py::object(py::none());
  return result;
}

// The op's KABI_FORCE choice as the core reads it (None when none), so Python never parses the variable itself.
std::optional<std::string> environment_force(const std::string& op_name) {
  char choice[1024] = {};
  check(kabi_op_environment_force(find_op(op_name), choice, sizeof choice));
  if (choice[0] == '\0') return std::nullopt;
  return std::string(choice);
}

void launch(const std::string& op_name, const std::string& kernel_name, const py::sequence& inputs,
            const py::sequence& outputs, std::uintptr_t stream, const py::sequence& attributes) {
  kabi_kernel kernel = find_kernel(op_name, kernel_name);
  CallTensors tensors(find_op(op_name), inputs, outputs, stream, attributes);
  kabi_status status;
  {
    py::gil_scoped_release release;
    status = kabi_launch(kernel, &tensors.args());
  }
  check(status);
}

// Problems at least this large (output elements x reduced size, summed over the batch) release the GIL while
// the kernel runs; smaller ones finish in less time than releasing and retaking it costs.
constexpr double kReleaseGilWork = 1 << 18;

// A native kernel bound to one problem: the kabi_args are built once; each call reads only the data pointers of
// the tensors it is given (inputs, then outputs). A change of the kernel table since preparation (the kernel may
// be gone) or of the op's tuning records since preparation raises StaleDecisionError so that the caller selects
// again; changes to other ops do not.
class PreparedLaunch {
 public:
  PreparedLaunch(const std::string& op_name, const std::string& kernel_name, const py::sequence& inputs,
                 const py::sequence& outputs, std::uintptr_t stream, const py::sequence& attributes)
      : op_name_(op_name),
        kernel_name_(kernel_name),
        op_(find_op(op_name)),
        generation_(kabi_op_generation(op_)),
        kernel_(find_kernel(op_name, kernel_name)),
        tensors_(std::make_unique<CallTensors>(op_, inputs, outputs, stream, attributes)) {
    kabi_problem problem{};
    problem.struct_size = sizeof(problem);
    check(kabi_problem_describe(op_, &tensors_->args(), &problem));
    double work = static_cast<double>(problem.batch_size > 0 ? problem.batch_size : 1);
    for (int32_t i = 0; i < problem.num_dims; ++i) work *= static_cast<double>(problem.dims[i]);
    release_gil_ = work >= kReleaseGilWork;
    tensor_count_ = tensors_->inputs().size() + tensors_->outputs().size();
  }

  void operator()(const py::args& tensors) { launch_on(tensors_->args().stream, tensors); }

  // The same on another stream (a CUstream as an integer): CUDA callers pass torch's current stream per call.
  void on_stream(std::uintptr_t stream, const py::args& tensors) {
    launch_on(reinterpret_cast<void*>(stream), tensors);
  }

  // The same on the current stream of the first tensor's framework for the prepared device (torch's current stream:
  // a side stream, a CUDA-graph capture stream), asked through the tensor type's DLPack exchange API.
  void on_current_stream(const py::args& tensors) {
    const DLPackExchangeAPI* api =
        PyTuple_GET_SIZE(tensors.ptr()) > 0 ? cached_exchange_api_of(Py_TYPE(PyTuple_GET_ITEM(tensors.ptr(), 0)))
                                            : nullptr;
    if (api == nullptr) {
      raise_status(KABI_STATUS_INVALID_ARGUMENT, "prepared launch of " + kernel_name_ +
                                                     ": the first tensor's type has no DLPack exchange API to ask "
                                                     "for its current stream; pass the stream with on_stream");
    }
    const DLDevice device = tensors_->args().num_inputs > 0 ? tensors_->inputs().front().device : DLDevice{};
    void* stream = nullptr;
    if (api->current_work_stream(device.device_type, device.device_id, &stream) != 0) throw py::error_already_set();
    launch_on(stream, tensors);
  }

  const std::string& kernel_name() const { return kernel_name_; }

 private:
  void launch_on(void* stream, const py::args& tensors) {
    if (static_cast<std::size_t>(PyTuple_GET_SIZE(tensors.ptr())) != tensor_count_) {
      raise_status(KABI_STATUS_INVALID_ARGUMENT, "prepared launch of " + kernel_name_ + " takes " +
                                                     std::to_string(tensor_count_) + " tensors (inputs, outputs)");
    }
    // Per-call copies of the prepared DLTensors (their shapes and strides are shared, read-only): threads may run
    // the same decision at once, with the GIL released while the kernel runs.
    constexpr std::size_t kInline = 8;
    DLTensor inline_tensors[kInline];
    std::vector<DLTensor> heap_tensors;
    DLTensor* call_tensors = inline_tensors;
    if (tensor_count_ > kInline) {
      heap_tensors.resize(tensor_count_);
      call_tensors = heap_tensors.data();
    }
    std::size_t position = 0;
    for (const DLTensor& tensor : tensors_->inputs()) call_tensors[position++] = tensor;
    for (const DLTensor& tensor : tensors_->outputs()) call_tensors[position++] = tensor;
    for (position = 0; position < tensor_count_; ++position) {
      // An absent optional input (passed as None) stays the zero-filled DLTensor it was prepared as.
      if (call_tensors[position].dtype.bits != 0) call_tensors[position].data = data_pointer(tensors, position);
    }
    kabi_args args = tensors_->args();
    args.stream = stream;
    args.inputs = call_tensors;
    args.outputs = call_tensors + tensors_->inputs().size();
    if (kabi_op_generation(op_) != generation_) {
      raise_stale_decision(op_name_ + ": its kernels or tuning records changed since " + kernel_name_ + " was chosen");
    }
    kabi_status status;
    if (release_gil_) {
      py::gil_scoped_release release;
      status = kabi_launch(kernel_, &args);
    } else {
      status = kabi_launch(kernel_, &args);
    }
    check(status);
  }

  static void* data_pointer(const py::args& tensors, std::size_t position) {
    static PyObject* method_name = PyUnicode_InternFromString("data_ptr");
    PyObject* tensor = PyTuple_GET_ITEM(tensors.ptr(), static_cast<Py_ssize_t>(position));
    if (const DLPackExchangeAPI* api = cached_exchange_api_of(Py_TYPE(tensor))) {
      DLTensor view{};
      if (api->dltensor_from_py_object_no_sync(tensor, &view) == 0) {
        return static_cast<char*>(view.data) + view.byte_offset;
      }
      PyErr_Clear();  // e.g. a dtype DLPack cannot describe: ask the tensor itself
    }
    PyObject* address = PyObject_CallMethodNoArgs(tensor, method_name);
    if (address == nullptr) throw py::error_already_set();
    void* pointer = PyLong_AsVoidPtr(address);
    Py_DECREF(address);
    if (pointer == nullptr && PyErr_Occurred()) throw py::error_already_set();
    return pointer;
  }

  std::string op_name_;
  std::string kernel_name_;
  kabi_op op_;
  uint64_t generation_;
  kabi_kernel kernel_;
  std::unique_ptr<CallTensors> tensors_;
  std::size_t tensor_count_ = 0;
  bool release_gil_ = false;
};

}  // namespace

void bind_dispatch(py::module_& m) {
  m.def("describe", &describe, py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::tuple(),
        py::arg("attributes") = py::tuple(),
        "Validate a call (tensor descriptors, None for an absent optional input; attribute values in schema order) "
        "against its op and return the problem as a dict.");
  m.def("select", &select, py::arg("op"), py::arg("inputs"), py::arg("outputs") = py::tuple(),
        py::arg("force") = py::none(), py::arg("use_environment") = true, py::arg("use_tuning_cache") = true,
        py::arg("allow_unverified") = false, py::arg("allow_failed_gate") = false, py::arg("allow_none") = false,
        py::arg("attributes") = py::tuple(), py::arg("execution_mode") = "eager",
        "Pick a kernel for a call run eagerly or replayed in a CUDA graph (execution_mode \"eager\" or \"graph\"): "
        "a dict with kernel (info dict or None), pick_reason, reason, error, verified (the pick passed the "
        "correctness gate), candidates (each with its gate verdict and the mode of its tuned time), problem.");
  m.def("environment_force", &environment_force, py::arg("op"),
        "The op's choice in KABI_FORCE as selection applies it, or None; InvalidArgumentError for a malformed "
        "value or an op named twice.");
  m.def("launch", &launch, py::arg("op"), py::arg("kernel"), py::arg("inputs"), py::arg("outputs"),
        py::arg("stream") = 0, py::arg("attributes") = py::tuple(),
        "Run a native kernel on tensor descriptors (outputs allocated by the caller).");
  m.def("registry_generation", &kabi_registry_generation,
        "A counter that changes with every change to ops, kernels or the tuning cache.");
  m.def(
      "op_generation", [](const std::string& op_name) { return kabi_op_generation(find_op(op_name)); },
      py::arg("op"),
      "A counter that changes with every change that can alter the op's selections (its kernels, its tuning "
      "records, the tuning cache as a whole), and with no other.");
  py::class_<PreparedLaunch>(m, "PreparedLaunch",
                             "A native kernel bound to one problem; call it with the tensors (inputs, then outputs).")
      .def(py::init<const std::string&, const std::string&, const py::sequence&, const py::sequence&,
                    std::uintptr_t, const py::sequence&>(),
           py::arg("op"), py::arg("kernel"), py::arg("inputs"), py::arg("outputs"), py::arg("stream") = 0,
           py::arg("attributes") = py::tuple())
      .def("__call__", &PreparedLaunch::operator())
      .def("on_stream", &PreparedLaunch::on_stream, py::arg("stream"),
           "Launch on a CUstream (an integer) instead of the one given at preparation.")
      .def("on_current_stream", &PreparedLaunch::on_current_stream,
           "Launch on the current stream of the tensors' framework (through its DLPack exchange API).")
      .def_property_readonly("kernel", &PreparedLaunch::kernel_name);
}

}  // namespace kabi::python
