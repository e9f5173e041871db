#include "tensors.hpp"

#include <pybind11/stl.h>

#include <string>

#include "errors.hpp"

namespace py = pybind11;

namespace kabi::python {

CallTensors::CallTensors(kabi_op op, const py::sequence& inputs, const py::sequence& outputs, std::uintptr_t stream,
                         const py::sequence& attributes) {
  const std::size_t input_count = py::len(inputs);
  const std::size_t output_count = py::len(outputs);
  dims_.reserve(2 * (input_count + output_count));
  inputs_.reserve(input_count);
  outputs_.reserve(output_count);
  for (std::size_t i = 0; i < input_count; ++i) {
    // An absent optional input: the zero-filled DLTensor kabi_args describes.
    inputs_.push_back(inputs[i].is_none() ? DLTensor{} : parse(inputs[i], "input", i));
  }
  for (std::size_t i = 0; i < output_count; ++i) outputs_.push_back(parse(outputs[i], "output", i));
  if (py::len(attributes) > 0) attributes_ = attribute_values(op, attributes);
  args_.struct_size = sizeof(kabi_args);
  args_.inputs = inputs_.data();
  args_.num_inputs = static_cast<int32_t>(input_count);
  args_.outputs = outputs_.data();
  args_.num_outputs = static_cast<int32_t>(output_count);
  args_.attributes = attributes_.data();
  args_.num_attributes = static_cast<int32_t>(attributes_.size());
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

namespace {

kabi_attribute_decl attribute_decl(kabi_op op, int32_t index) {
  kabi_attribute_decl decl{};
  decl.struct_size = sizeof(decl);
  check(kabi_op_attribute_get(op, index, &decl));
  return decl;
}

std::string enum_values_text(const kabi_attribute_decl& decl) {
  std::string text;
  for (int32_t i = 0; i < decl.num_enum_values; ++i) text += (i ? ", " : "") + std::string(decl.enum_values[i]);
  return text;
}

}  // namespace

std::vector<kabi_attribute_value> attribute_values(kabi_op op, const py::sequence& values) {
  kabi_op_info info{};
  info.struct_size = sizeof(info);
  check(kabi_op_info_get(op, &info));
  const auto count = static_cast<int32_t>(py::len(values));
  if (count > info.num_attributes) {
    raise_status(KABI_STATUS_INVALID_ARGUMENT, std::string(info.name) + ": expected at most " +
                                                   std::to_string(info.num_attributes) + " attributes, got " +
                                                   std::to_string(count));
  }
  std::vector<kabi_attribute_value> converted(static_cast<std::size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    const kabi_attribute_decl decl = attribute_decl(op, i);
    const py::handle value = values[static_cast<std::size_t>(i)];
    const std::string what = std::string(info.name) + ": attribute " + decl.name;
    kabi_attribute_value& slot = converted[static_cast<std::size_t>(i)];
    const bool is_bool = py::isinstance<py::bool_>(value);
    const bool is_int = py::isinstance<py::int_>(value) && !is_bool;
    switch (decl.type) {
      case KABI_ATTRIBUTE_FLOAT:
        if (!(is_int || py::isinstance<py::float_>(value))) raise_status(KABI_STATUS_INVALID_ARGUMENT, what + " takes a float");
        slot.real = value.cast<double>();
        break;
      case KABI_ATTRIBUTE_BOOL:
        if (!is_bool) raise_status(KABI_STATUS_INVALID_ARGUMENT, what + " takes a bool");
        slot.integer = value.cast<bool>() ? 1 : 0;
        break;
      case KABI_ATTRIBUTE_INT:
        if (!is_int) raise_status(KABI_STATUS_INVALID_ARGUMENT, what + " takes an int");
        slot.integer = value.cast<int64_t>();
        break;
      case KABI_ATTRIBUTE_ENUM: {
        if (is_int) {
          slot.integer = value.cast<int64_t>();  // an index: the core checks its range
          break;
        }
        if (!py::isinstance<py::str>(value)) {
          raise_status(KABI_STATUS_INVALID_ARGUMENT, what + " takes one of " + enum_values_text(decl));
        }
        const std::string name = value.cast<std::string>();
        slot.integer = -1;
        for (int32_t v = 0; v < decl.num_enum_values; ++v) {
          if (name == decl.enum_values[v]) slot.integer = v;
        }
        if (slot.integer < 0) {
          raise_status(KABI_STATUS_INVALID_ARGUMENT,
                       what + " is \"" + name + "\"; expected one of " + enum_values_text(decl));
        }
        break;
      }
    }
  }
  return converted;
}

py::dict problem_to_dict(kabi_op op, const kabi_problem& problem) {
  auto dtype_text = [](uint32_t bit) {
    const char* name = kabi_dtype_name(bit);
    return py::str(name != nullptr ? name : "");
  };
  py::dict result;
  result["device_type"] = problem.device_type;
  result["device_index"] = problem.device_index;
  result["dtype"] = dtype_text(problem.dtype);
  py::tuple bindings(problem.num_type_variables);
  for (int32_t v = 0; v < problem.num_type_variables; ++v) bindings[v] = dtype_text(problem.type_bindings[v]);
  result["type_bindings"] = bindings;
  py::dict dims;
  for (int32_t i = 0; i < problem.num_dims; ++i) dims[py::str(problem.dim_names[i])] = problem.dims[i];
  result["dims"] = dims;
  py::tuple batch_shape(problem.batch_rank);
  for (int32_t i = 0; i < problem.batch_rank; ++i) batch_shape[i] = problem.batch_shape[i];
  result["batch_shape"] = batch_shape;
  result["batch_size"] = problem.batch_size;
  py::tuple layouts(problem.num_inputs);
  py::tuple present(problem.num_inputs);
  py::tuple input_shapes(problem.num_inputs);
  for (int32_t i = 0; i < problem.num_inputs; ++i) {
    layouts[i] = problem.input_layouts[i];
    present[i] = py::bool_((problem.inputs_present >> i) & 1u);
    input_shapes[i] = problem.input_shapes[i];
  }
  result["layouts"] = layouts;
  result["inputs_present"] = present;
  result["input_shapes"] = input_shapes;
  result["batch_mode"] = problem.batch_mode;
  py::tuple output_shapes(problem.num_outputs);
  for (int32_t o = 0; o < problem.num_outputs; ++o) {
    py::tuple shape(problem.output_ranks[o]);
    for (int32_t d = 0; d < problem.output_ranks[o]; ++d) shape[d] = problem.output_shapes[o][d];
    output_shapes[o] = shape;
  }
  result["output_shapes"] = output_shapes;
  result["output_shape"] = problem.num_outputs > 0 ? output_shapes[0] : py::tuple();
  py::tuple attributes(problem.num_attributes);
  for (int32_t i = 0; i < problem.num_attributes; ++i) {
    const kabi_attribute_decl decl = attribute_decl(op, i);
    const kabi_attribute_value& value = problem.attributes[i];
    switch (decl.type) {
      case KABI_ATTRIBUTE_INT: attributes[i] = value.integer; break;
      case KABI_ATTRIBUTE_FLOAT: attributes[i] = value.real; break;
      case KABI_ATTRIBUTE_BOOL: attributes[i] = py::bool_(value.integer != 0); break;
      case KABI_ATTRIBUTE_ENUM: attributes[i] = py::str(decl.enum_values[value.integer]); break;
    }
  }
  result["attributes"] = attributes;
  result["key"] = py::str(problem.key);
  return result;
}

}  // namespace kabi::python
