// The operands of the ops the built-in plugins (cpu/, cuda/) serve, as they find them in a call's kabi_args and
// kabi_problem: which input is which, the optional ones, the output, and linear's activation attribute. Each plugin
// then checks what its own kernels need. Header-only: a plugin links no libkabi.
#pragma once

#include <cstdint>
#include <string>

#include "activation.hpp"
#include "kabi/kabi.h"

namespace kabi::plugins {

// The call's output, or NULL when it has none yet (selection).
inline const DLTensor* output_of(const kabi_args& args) {
  return args.num_outputs > 0 && args.outputs != nullptr ? &args.outputs[0] : nullptr;
}

// An empty string when the call has `required` to `accepted` inputs (and an output, with require_output), else why
// not; `expected` names the op's inputs for that message.
inline std::string check_operand_count(const kabi_args& args, int32_t required, int32_t accepted,
                                       const char* expected, bool require_output) {
  if (args.inputs == nullptr || args.num_inputs < required || args.num_inputs > accepted) return expected;
  if (require_output && output_of(args) == nullptr) return "the call has no output tensor";
  return {};
}

// Optional input `index`, or NULL where it is absent: a zero-filled DLTensor, or left out of num_inputs.
inline const DLTensor* optional_input(const kabi_args& args, int32_t index) {
  return args.num_inputs > index && args.inputs[index].dtype.bits != 0 ? &args.inputs[index] : nullptr;
}

// linear's activation, from the problem's first attribute; an empty string, or why it is not one.
inline std::string read_activation(const kabi_problem& problem, Activation* activation) {
  if (problem.num_attributes < 1) return "the problem carries no activation attribute";
  const int64_t index = problem.attributes[0].integer;
  if (index < 0 || index >= kActivationCount) {
    return "activation " + std::to_string(index) + " is not an index of (none, relu, gelu, gelu_tanh, silu)";
  }
  *activation = static_cast<Activation>(index);
  return {};
}

struct GroupedOperands {
  const DLTensor* x = nullptr;
  const DLTensor* w = nullptr;
  const DLTensor* offs = nullptr;  // NULL in the 3-D form
  const DLTensor* out = nullptr;   // NULL when the call has no output yet (selection)
};

// grouped_mm's x [T, K] with offs, or [E, M, K] without; w [E, K, N]. An empty string when they are there with
// those ranks, else why not; with require_output, a call without an output is refused too.
inline std::string find_grouped_operands(const kabi_args& args, bool require_output, GroupedOperands* operands) {
  if (std::string reason = check_operand_count(args, 2, 3, "grouped_mm takes the inputs x, w and optional offs",
                                               require_output);
      !reason.empty()) {
    return reason;
  }
  operands->x = &args.inputs[0];
  operands->w = &args.inputs[1];
  operands->offs = optional_input(args, 2);
  operands->out = output_of(args);
  if (operands->w->ndim != 3) return "w has rank " + std::to_string(operands->w->ndim) + "; expected [E, K, N]";
  if (operands->x->ndim != (operands->offs != nullptr ? 2 : 3)) {
    return "x has rank " + std::to_string(operands->x->ndim) + "; expected [T, K] with offs or [E, M, K] without";
  }
  return {};
}

}  // namespace kabi::plugins
