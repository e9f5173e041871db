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
  // `inputs` and `outputs` are sequences of descriptors; `stream` is a CUstream as an integer (0: default).
  CallTensors(const pybind11::sequence& inputs, const pybind11::sequence& outputs, std::uintptr_t stream);
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
  kabi_args args_{};
};

// A kabi_problem as a dict: device_type, device_index, dtype (name), dims ({name: size}), batch_shape,
// batch_size, layouts (one KABI_LAYOUT_* bit per input), batch_mode, output_shape, key.
pybind11::dict problem_to_dict(const kabi_problem& problem, int32_t num_inputs);

}  // namespace kabi::python
