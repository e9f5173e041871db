#include "tensors.hpp"

#include <pybind11/stl.h>

#include <algorithm>
#include <string>

#include "errors.hpp"

namespace py = pybind11;

namespace kabi::python {

CallTensors::CallTensors(const py::sequence& inputs, const py::sequence& outputs, std::uintptr_t stream) {
  const std::size_t input_count = py::len(inputs);
  const std::size_t output_count = py::len(outputs);
  dims_.reserve(2 * (input_count + output_count));
  inputs_.reserve(input_count);
  outputs_.reserve(output_count);
  for (std::size_t i = 0; i < input_count; ++i) inputs_.push_back(parse(inputs[i], "input", i));
  for (std::size_t i = 0; i < output_count; ++i) outputs_.push_back(parse(outputs[i], "output", i));
  args_.struct_size = sizeof(kabi_args);
  args_.inputs = inputs_.data();
  args_.num_inputs = static_cast<int32_t>(input_count);
  args_.outputs = outputs_.data();
  args_.num_outputs = static_cast<int32_t>(output_count);
  args_.stream = reinterpret_cast<void*>(stream);
}

DLTensor CallTensors::parse(const py::handle& descriptor, const char* role, std::size_t index) {
  if (!py::isinstance<py::tuple>(descriptor) || py::len(descriptor) != 7) {
    raise_status(KABI_STATUS_INVALID_ARGUMENT,
                 std::string(role) + " " + std::to_string(index) +
                     ": expected a descriptor (data_ptr, shape, strides, dtype_code, dtype_bits, device_type, "
                     "device_index)");
  }
  auto fields = py::reinterpret_borrow<py::tuple>(descriptor);
  auto shape = fields[1].cast<std::vector<int64_t>>();
  auto strides = fields[2].cast<std::vector<int64_t>>();
  if (shape.size() != strides.size()) {
    raise_status(KABI_STATUS_INVALID_ARGUMENT, std::string(role) + " " + std::to_string(index) + ": " +
                                                   std::to_string(shape.size()) + " sizes but " +
                                                   std::to_string(strides.size()) + " strides");
  }
  dims_.push_back(std::move(shape));
  std::vector<int64_t>& stored_shape = dims_.back();
  dims_.push_back(std::move(strides));
  std::vector<int64_t>& stored_strides = dims_.back();

  DLTensor tensor{};
  tensor.data = reinterpret_cast<void*>(fields[0].cast<std::uintptr_t>());
  tensor.ndim = static_cast<int32_t>(stored_shape.size());
  tensor.shape = stored_shape.data();
  tensor.strides = stored_strides.data();
  tensor.dtype.code = fields[3].cast<uint8_t>();
  tensor.dtype.bits = fields[4].cast<uint8_t>();
  tensor.dtype.lanes = 1;
  tensor.device.device_type = static_cast<DLDeviceType>(fields[5].cast<int32_t>());
  tensor.device.device_id = fields[6].cast<int32_t>();
  tensor.byte_offset = 0;
  return tensor;
}

py::dict problem_to_dict(const kabi_problem& problem, int32_t num_inputs) {
  py::dict result;
  result["device_type"] = problem.device_type;
  result["device_index"] = problem.device_index;
  const char* dtype_name = kabi_dtype_name(problem.dtype);
  result["dtype"] = dtype_name != nullptr ? py::str(dtype_name) : py::str("");
  py::dict dims;
  for (int32_t i = 0; i < problem.num_dims && i < 8; ++i) {
    if (problem.dim_names[i] != nullptr) dims[py::str(problem.dim_names[i])] = problem.dims[i];
  }
  result["dims"] = dims;
  const int32_t batch_rank = std::min<int32_t>(std::max<int32_t>(problem.batch_rank, 0), 8);
  py::tuple batch_shape(batch_rank);
  for (int32_t i = 0; i < batch_rank; ++i) batch_shape[i] = problem.batch_shape[i];
  result["batch_shape"] = batch_shape;
  result["batch_size"] = problem.batch_size;
  const int32_t layout_count = std::min<int32_t>(std::max<int32_t>(num_inputs, 0), 8);
  py::tuple layouts(layout_count);
  for (int32_t i = 0; i < layout_count; ++i) layouts[i] = problem.input_layouts[i];
  result["layouts"] = layouts;
  result["batch_mode"] = problem.batch_mode;
  const int32_t output_rank = std::min<int32_t>(std::max<int32_t>(problem.output_rank, 0), 16);
  py::tuple output_shape(output_rank);
  for (int32_t i = 0; i < output_rank; ++i) output_shape[i] = problem.output_shape[i];
  result["output_shape"] = output_shape;
  result["key"] = py::str(problem.key);
  return result;
}

}  // namespace kabi::python
