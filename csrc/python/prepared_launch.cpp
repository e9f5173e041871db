#include "prepared_launch.hpp"

#include <vector>

#include "bindings.hpp"
#include "dlpack_exchange.hpp"
#include "errors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

// Problems at least this large (output elements x reduced size, summed over the batch) release the GIL while
// the kernel runs; smaller ones finish in less time than releasing and retaking it costs.
constexpr double kReleaseGilWork = 1 << 18;

void* data_pointer(const py::args& tensors, std::size_t position) {
  static PyObject* method_name = PyUnicode_InternFromString("data_ptr");
  PyObject* tensor = PyTuple_GET_ITEM(tensors.ptr(), static_cast<Py_ssize_t>(position));
  if (tensor == Py_None) return nullptr;
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

}  // namespace

PreparedLaunch::PreparedLaunch(const std::string& op_name, const std::string& kernel_name, const py::sequence& inputs,
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
  input_count_ = tensors_->inputs().size();
  tensor_count_ = input_count_ + tensors_->outputs().size();
}

void PreparedLaunch::operator()(const py::args& tensors) { launch_on(tensors_->args().stream, tensors); }

void PreparedLaunch::on_stream(std::uintptr_t stream, const py::args& tensors) {
  launch_on(reinterpret_cast<void*>(stream), tensors);
}

void PreparedLaunch::on_current_stream(const py::args& tensors) {
  const DLPackExchangeAPI* api =
      PyTuple_GET_SIZE(tensors.ptr()) > 0 ? cached_exchange_api_of(Py_TYPE(PyTuple_GET_ITEM(tensors.ptr(), 0)))
                                          : nullptr;
  if (api == nullptr) {
    raise_status(KABI_STATUS_INVALID_ARGUMENT, "prepared launch of " + kernel_name_ +
                                                   ": the first tensor's type has no DLPack exchange API to ask "
                                                   "for its current stream; pass the stream with on_stream");
  }
  const DLDevice prepared = device();
  void* stream = nullptr;
  if (api->current_work_stream(prepared.device_type, prepared.device_id, &stream) != 0) {
    throw py::error_already_set();
  }
  launch_on(stream, tensors);
}

DLDevice PreparedLaunch::device() const {
  return input_count_ > 0 ? tensors_->inputs().front().device : DLDevice{};
}

void PreparedLaunch::launch_on(void* stream, const py::args& tensors) const {
  if (static_cast<std::size_t>(PyTuple_GET_SIZE(tensors.ptr())) != tensor_count_) {
    raise_status(KABI_STATUS_INVALID_ARGUMENT, "prepared launch of " + kernel_name_ + " takes " +
                                                   std::to_string(tensor_count_) + " tensors (inputs, outputs)");
  }
  constexpr std::size_t kInline = 8;
  void* inline_data[kInline];
  std::vector<void*> heap_data;
  void** data = inline_data;
  if (tensor_count_ > kInline) {
    heap_data.resize(tensor_count_);
    data = heap_data.data();
  }
  for (std::size_t position = 0; position < tensor_count_; ++position) data[position] = data_pointer(tensors, position);
  const Outcome outcome = launch_with(stream, data);
  if (outcome.stale) {
    raise_stale_decision(op_name_ + ": its kernels or tuning records changed since " + kernel_name_ + " was chosen");
  }
  check(outcome.status);
}

PreparedLaunch::Outcome PreparedLaunch::launch_with(void* stream, void* const* data) const {
  if (kabi_op_generation(op_) != generation_) return Outcome{true, KABI_STATUS_OK};
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
    // An absent optional input stays the zero-filled DLTensor it was prepared as.
    if (call_tensors[position].dtype.bits != 0) call_tensors[position].data = data[position];
  }
  kabi_args args = tensors_->args();
  args.stream = stream;
  args.inputs = call_tensors;
  args.outputs = call_tensors + input_count_;
  Outcome outcome;
  if (release_gil_) {
    Py_BEGIN_ALLOW_THREADS outcome.status = kabi_launch(kernel_, &args);
    Py_END_ALLOW_THREADS
  } else {
    outcome.status = kabi_launch(kernel_, &args);
  }
  return outcome;
}

}  // namespace kabi::python
