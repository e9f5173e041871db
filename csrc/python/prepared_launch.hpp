// A native kernel bound to one problem: the kabi_args are built once; each call supplies only the data pointers
// of its tensors (inputs, then outputs) and the stream. Python calls it with tensors (kabi._core.PreparedLaunch);
// an op front's hit path (front.cpp) calls launch_with() with the pointers it already read while keying the call,
// so a native decision runs with no Python frame at all.
//
// A change of the kernel table since preparation (the kernel may be gone) or of the op's tuning records since
// preparation makes a launch stale, so that the caller selects again; changes to other ops do not.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kabi/kabi.h"
#include "tensors.hpp"

namespace kabi::python {

class PreparedLaunch {
 public:
  PreparedLaunch(const std::string& op_name, const std::string& kernel_name, const pybind11::sequence& inputs,
                 const pybind11::sequence& outputs, std::uintptr_t stream, const pybind11::sequence& attributes);

  // Python's calls: the tensors (inputs, None for an absent optional one, then outputs) on the prepared stream, on
  // another stream (a CUstream as an integer), or on the current stream of the tensors' framework (torch's: a side
  // stream, a CUDA-graph capture stream), asked through the first tensor type's DLPack exchange API. Errors raise.
  void operator()(const pybind11::args& tensors);
  void on_stream(std::uintptr_t stream, const pybind11::args& tensors);
  void on_current_stream(const pybind11::args& tensors);

  // The outcome of launch_with: kStale when the op changed since preparation (nothing ran), else the launch's
  // status (kabi_last_error() holds the message of a failure).
  struct Outcome {
    bool stale = false;
    kabi_status status = KABI_STATUS_OK;
  };
  // Launches on `stream` (nullptr: the prepared one) with data[i] the data pointer of tensor i (inputs, then
  // outputs; ignored for an absent optional input). Called with the GIL held; releases it around a large kernel.
  Outcome launch_with(void* stream, void* const* data) const;

  std::size_t input_count() const { return input_count_; }
  std::size_t tensor_count() const { return tensor_count_; }
  // The prepared output i (its shape and strides are those a caller's out must have to be written in place).
  const DLTensor& output(std::size_t i) const { return tensors_->outputs()[i]; }
  // The prepared device of the inputs (the stream a CUDA launch runs on belongs to it).
  DLDevice device() const;
  const std::string& kernel_name() const { return kernel_name_; }

 private:
  void launch_on(void* stream, const pybind11::args& tensors) const;

  std::string op_name_;
  std::string kernel_name_;
  kabi_op op_;
  uint64_t generation_;
  kabi_kernel kernel_;
  std::unique_ptr<CallTensors> tensors_;
  std::size_t input_count_ = 0;
  std::size_t tensor_count_ = 0;
  bool release_gil_ = false;
};

}  // namespace kabi::python
