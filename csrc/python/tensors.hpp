// The tensors of one call, built as DLTensor structs from the raw descriptors Python extracts from its arrays:
// (data_ptr, shape, strides, dtype_code, dtype_bits, device_type, device_index). No DLPack capsule is involved.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::python {

class CallTensors {
 public:
  // `inputs` and `outputs` are sequences of descriptors (None for an absent optional input); `stream` is a CUstream
  // as an integer (0: default); `attributes` are the op's attribute values in schema order (int, float, bool, or an
  // enum attribute's value name), converted through the op's parsed schema (read only when some are given).
  CallTensors(kabi_op op, const pybind11::sequence& inputs, const pybind11::sequence& outputs, std::uintptr_t stream,
              const pybind11::sequence& attributes);
  CallTensors(const CallTensors&) = delete;
  CallTensors& operator=(const CallTensors&) = delete;

  const kabi_args& args() const { return args_; }
  std::vector<DLTensor>& inputs() { return inputs_; }
  std::vector<DLTensor>& outputs() { return outputs_; }

 private:
  DLTensor parse(const pybind11::handle& descriptor, const char* role, std::size_t index);

  // Each tensor's shape and strides; the DLTensors point into these buffers, which never move once filled.
  std::vector<std::vector<int64_t>> dims_;
  std::vector<DLTensor> inputs_;
  std::vector<DLTensor> outputs_;
  std::vector<kabi_attribute_value> attributes_;
  kabi_args args_{};
};

// The attribute values of a call as kabi_attribute_value, in schema order: an int, float or bool for attributes of
// those types, an enum attribute's value as its name (or index). InvalidArgumentError names the attribute otherwise.
std::vector<kabi_attribute_value> attribute_values(kabi_op op, const pybind11::sequence& values);

// A kabi_problem as a dict: device_type, device_index, dtype (the first type variable's dtype name), type_bindings
// (one dtype name per type variable, "" for one bound by no given tensor), dims ({name: size}), batch_shape,
// batch_size, layouts (one KABI_LAYOUT_* bit per input, 0 for an absent one), inputs_present (a bool per input),
// batch_mode, output_shape (output 0's), output_shapes, attributes (Python values in schema order: int, float, bool,
// an enum's value name), key. `op` decodes the attributes.
pybind11::dict problem_to_dict(kabi_op op, const kabi_problem& problem);

}  // namespace kabi::python
