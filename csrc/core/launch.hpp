// Running a selected kernel: the checks that need the call's data, then the kernel itself by its kind; and
// kabi_call's select-and-launch with a per-op decision cache.
#pragma once

#include <cstddef>
#include <string>

#include "kabi/kabi.h"
#include "registry.hpp"

namespace kabi::core {

// Checks what selection could not see (alignment of every data pointer, and that these args still meet the
// kernel's dtype, layout, batch and device constraints: KABI_STATUS_CONSTRAINT_VIOLATED), then runs the kernel.
void launch_kernel(const Kernel& kernel, const kabi_args& args, const kabi_problem& problem);

// The workspace bytes the kernel asks for the problem (0 without a workspace function); KABI_STATUS_KERNEL_FAILED
// when its workspace function fails.
size_t workspace_size(const Kernel& kernel, const kabi_problem& problem);

// The variant the kernel reports for the problem (kabi_variant_fn; "" for a kernel without one);
// KABI_STATUS_KERNEL_FAILED, with the kernel's message, when it fails to name it.
std::string kernel_variant(const Kernel& kernel, const kabi_problem& problem, const kabi_args& args);

// KABI_STATUS_INVALID_ARGUMENT naming the output and the input when an output's bytes overlap an input's on the
// same device. Tensors without data pointers (selection before the memory exists) overlap nothing.
void check_outputs_do_not_alias_inputs(const Op& op, const kabi_args& args);

// Select (remembering the decision per problem, device and forcing until the op's generation changes) and launch.
// `args` as CallArgs completed them.
void call_op(Op& op, const kabi_args& args, const kabi_select_options* options);

}  // namespace kabi::core
