// Binding a call's arguments to an op's schema: validation with messages that name the argument and what was
// expected, the dtype bound to each type variable, the attributes with their defaults, the derived output shapes,
// each input's layout class, the batch mode a kernel needs, and the problem key.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "kabi/kabi.h"
#include "registry.hpp"

namespace kabi::core {

// A call's arguments as the core works with them: a copy of the caller's kabi_args (read up to its struct_size),
// whose inputs hold every input of the schema. Trailing optional inputs the caller left out of num_inputs are
// zero-filled (absent) here, so kernels and the rest of the core always see the schema's inputs in order.
class CallArgs {
 public:
  // Throws INVALID_ARGUMENT for a NULL or too-small args, and for an input count the schema does not allow (naming
  // the inputs). `function` names the caller in errors.
  CallArgs(const Op& op, const kabi_args* caller, const char* function);
  CallArgs(const CallArgs&) = delete;
  CallArgs& operator=(const CallArgs&) = delete;

  const kabi_args& args() const { return args_; }

 private:
  kabi_args args_{};
  std::array<DLTensor, KABI_MAX_TENSORS> completed_inputs_{};
};

enum class ProblemUse {
  kDescribe,  // select and describe: outputs optional, the tuning key formatted
  kLaunch,    // launch and call: outputs required, no tuning key (format_problem_key adds it when needed)
};

// Validates args (as CallArgs completed them) against op and derives the problem. Throws Error with
// INVALID_ARGUMENT, UNSUPPORTED_DTYPE as kabi.h's kabi_problem_describe documents.
kabi_problem describe_problem(const Op& op, const kabi_args& args, ProblemUse use);

// Fills problem.key from the op's tuning key.
void format_problem_key(const Op& op, kabi_problem& problem);

// The dtypes a problem binds, for messages: "float32" for an op with one type variable, "T=float16, F8=float8_e4m3fn"
// for several, "" for none.
std::string describe_bindings(const Op& op, const kabi_problem& problem);

// Whether input `index` of a call is given (an absent optional input is a zero-filled DLTensor: dtype.bits 0).
inline bool input_present(const kabi_problem& problem, int32_t index) {
  return (problem.inputs_present >> index) & 1u;
}

// The largest power of two (up to 256) dividing every non-NULL data pointer of args; 0 when none is given.
uint32_t data_alignment(const kabi_args& args);

// The KABI_LAYOUT_* class of a tensor seen through its last two dimensions.
uint32_t layout_class(const DLTensor& tensor);

// Whether a kernel declaring `accepted` layouts takes an input of class `layout` (a contiguous matrix is also a
// row-strided one).
bool layout_accepted(uint32_t accepted, uint32_t layout);

// Number of elements (product of the shape).
int64_t element_count(const DLTensor& tensor);

}  // namespace kabi::core
