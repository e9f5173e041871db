// Binding a call's tensors to an op's schema: validation with messages that name the argument and what was
// expected, the derived output shape, each input's layout class, the batch mode a kernel needs, and the problem key.
#pragma once

#include <cstdint>
#include <string>

#include "kabi/kabi.h"
#include "registry.hpp"

namespace kabi::core {

// A copy of *args after checking it is readable (NULL and struct_size). `function` names the caller in errors.
kabi_args read_args(const kabi_args* args, const char* function);

enum class ProblemUse {
  kDescribe,  // select and describe: outputs optional, the tuning key formatted
  kLaunch,    // launch and call: outputs required, no tuning key (format_problem_key adds it when needed)
};

// Validates args against op and derives the problem. Throws Error with INVALID_ARGUMENT, UNSUPPORTED_DTYPE as
// kabi.h's kabi_problem_describe documents.
kabi_problem describe_problem(const Op& op, const kabi_args& args, ProblemUse use);

// Fills problem.key from the op's tuning key.
void format_problem_key(const Op& op, int32_t num_inputs, kabi_problem& problem);

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
