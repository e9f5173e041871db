// grouped_mm's operands as the built-in plugins (cpu/, cuda/) find them in a call's kabi_args: x, w, the optional
// offs and the output, with the ranks the two forms have. Header-only: a plugin links no libkabi.
#pragma once

#include <string>

#include "kabi/kabi.h"

namespace kabi::plugins {

struct GroupedOperands {
  const DLTensor* x = nullptr;
  const DLTensor* w = nullptr;
  const DLTensor* offs = nullptr;  // NULL in the 3-D form
  const DLTensor* out = nullptr;   // NULL when the call has no output yet (selection)
};

// x [T, K] with offs, or [E, M, K] without; w [E, K, N]. An empty string when they are there with those ranks, else
// why not; with require_output, a call without an output is refused too.
inline std::string find_grouped_operands(const kabi_args& args, bool require_output, GroupedOperands* operands) {
  if (args.inputs == nullptr || args.num_inputs < 2) return "grouped_mm takes the inputs x, w and optional offs";
  operands->x = &args.inputs[0];
  operands->w = &args.inputs[1];
  // An absent optional input is a zero-filled DLTensor, or left out of num_inputs.
  operands->offs = args.num_inputs > 2 && args.inputs[2].dtype.bits != 0 ? &args.inputs[2] : nullptr;
  operands->out = args.num_outputs > 0 && args.outputs != nullptr ? &args.outputs[0] : nullptr;
  if (require_output && operands->out == nullptr) return "the call has no output tensor";
  if (operands->w->ndim != 3) return "w has rank " + std::to_string(operands->w->ndim) + "; expected [E, K, N]";
  if (operands->x->ndim != (operands->offs != nullptr ? 2 : 3)) {
    return "x has rank " + std::to_string(operands->x->ndim) + "; expected [T, K] with offs or [E, M, K] without";
  }
  return {};
}

}  // namespace kabi::plugins
