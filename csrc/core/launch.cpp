#include "launch.hpp"

#include <cstdint>

#include "byte_span.hpp"
#include "device_binary.hpp"
#include "error.hpp"
#include "memory.hpp"
#include "names.hpp"
#include "problem.hpp"
#include "select.hpp"

namespace kabi::core {
namespace {

[[noreturn]] void violated(const Kernel& kernel, const std::string& message) {
  throw Error(KABI_STATUS_CONSTRAINT_VIOLATED, "kernel " + kernel.op->name + "/" + kernel.name + ": " + message);
}

void check_data(const Kernel& kernel, const DLTensor& tensor, const std::string& name) {
  if (tensor.data == nullptr) {
    if (element_count(tensor) == 0) return;
    throw Error(KABI_STATUS_INVALID_ARGUMENT, kernel.op->name + ": " + name + ".data is NULL");
  }
  if (kernel.alignment > 1) {
    const auto address = reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
    if (address % kernel.alignment != 0) {
      violated(kernel, name + "'s data (" + std::to_string(address) + ") is not aligned to " +
                           std::to_string(kernel.alignment) + " bytes");
    }
  }
}

void check_constraints(const Kernel& kernel, const kabi_args& args, const kabi_problem& problem) {
  if (problem.device_type != kernel.device_type) {
    violated(kernel,
             "runs on " + device_type_name(kernel.device_type) + ", not on " + device_type_name(problem.device_type));
  }
  if (std::string mismatch = dtype_mismatch(kernel, problem); !mismatch.empty()) violated(kernel, mismatch);
  if (std::string mismatch = layout_mismatch(kernel, problem); !mismatch.empty()) violated(kernel, mismatch);
  if (std::string unmet = unmet_assumption(kernel, problem, args); !unmet.empty()) violated(kernel, unmet);
  if (problem.batch_mode > kernel.batch_mode) {
    violated(kernel, std::string("needs batch mode ") + batch_mode_name(problem.batch_mode) + "; kernel takes " +
                         batch_mode_name(kernel.batch_mode));
  }
  const auto& inputs = kernel.op->schema.inputs;
  for (int32_t i = 0; i < args.num_inputs; ++i) {
    if (input_present(problem, i)) check_data(kernel, args.inputs[i], inputs[static_cast<size_t>(i)].name);
  }
  for (int32_t i = 0; i < args.num_outputs; ++i) {
    check_data(kernel, args.outputs[i], kernel.op->schema.outputs[static_cast<size_t>(i)].name);
  }
  if (kernel.supports != nullptr) {
    char reason[256] = {};
    if (kernel.supports(kernel.user_data, &problem, &args, reason, sizeof reason) == 0) {
      reason[sizeof reason - 1] = '\0';
      violated(kernel, std::string("declined: ") + (reason[0] != '\0' ? reason : "by its supports predicate"));
    }
  }
}

KernelPtr decide(Op& op, const kabi_args& args, kabi_problem& problem, const kabi_select_options* options) {
  SelectOptions resolved = resolve_select_options(op, options);
  resolve_gate_options(options, resolved);
  // Exact, not the bucketed tuning key: a supports predicate, an alignment or a device binary's divisibility
  // assumptions may tell two problems of one bucket apart.
  const DecisionKey key(problem, args, data_alignment(args), resolved.use_tuning_cache, resolved.force,
                        resolved.allow_unverified, resolved.allow_failed_gate, resolved.execution_mode);
  const uint64_t generation = op.generation.load(std::memory_order_acquire);
  if (KernelPtr kernel = op.decisions.find(key, generation)) return kernel;
  format_problem_key(op, problem);
  SelectionResult selection = select_kernel(op, args, problem, resolved);
  if (!selection.kernel) throw Error(selection.status, selection.reason);
  op.decisions.remember(key, generation, selection.kernel);
  return selection.kernel;
}

}  // namespace

void check_outputs_do_not_alias_inputs(const Op& op, const kabi_args& args) {
  for (int32_t o = 0; o < args.num_outputs; ++o) {
    const int32_t input = aliased_input(args.outputs[o], args.inputs, args.num_inputs);
    if (input < 0) continue;
    const std::string& output_name = op.schema.outputs[static_cast<size_t>(o)].name;
    const std::string& input_name = op.schema.inputs[static_cast<size_t>(input)].name;
    throw Error(KABI_STATUS_INVALID_ARGUMENT, aliasing_message(op.name, output_name, input_name));
  }
}

size_t workspace_size(const Kernel& kernel, const kabi_problem& problem) {
  if (kernel.workspace == nullptr) return 0;
  size_t bytes = 0;
  set_last_error("");
  const kabi_status status = kernel.workspace(kernel.user_data, &problem, &bytes);
  if (status != KABI_STATUS_OK) {
    const std::string message = last_error();
    throw Error(KABI_STATUS_KERNEL_FAILED, "kernel " + kernel.op->name + "/" + kernel.name +
                                               ": its workspace function failed: " +
                                               (message.empty() ? std::string(status_name(status)) : message));
  }
  return bytes;
}

std::string kernel_variant(const Kernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  if (kernel.variant == nullptr) return "";
  char buffer[KABI_VARIANT_CAPACITY] = {};
  set_last_error("");
  const kabi_status status = kernel.variant(kernel.user_data, &problem, &args, buffer, sizeof buffer);
  const std::string what = "kernel " + kernel.op->name + "/" + kernel.name;
  if (status != KABI_STATUS_OK) {
    const std::string message = last_error();
    throw Error(KABI_STATUS_KERNEL_FAILED, what + ": could not name its variant for the problem: " +
                                               (message.empty() ? std::string(status_name(status)) : message));
  }
  if (buffer[sizeof buffer - 1] != '\0') {
    throw Error(KABI_STATUS_KERNEL_FAILED, what + ": its variant text fills all " + std::to_string(sizeof buffer) +
                                               " bytes of the buffer without a NUL; it must be shorter");
  }
  return buffer;
}

void launch_kernel(const Kernel& kernel, const kabi_args& args, const kabi_problem& problem) {
  check_outputs_do_not_alias_inputs(*kernel.op, args);
  check_constraints(kernel, args, problem);
  // What the kernel sees: every input in schema order (CallArgs completed them), every attribute with the defaults
  // filled in, and its workspace.
  kabi_args full = args;
  full.struct_size = sizeof full;
  full.attributes = problem.attributes;
  full.num_attributes = problem.num_attributes;
  full.workspace = nullptr;
  full.workspace_size = workspace_size(kernel, problem);
  if (full.workspace_size > 0) {
    full.workspace = thread_workspace(problem.device_type, problem.device_index, args.stream, full.workspace_size);
  }
  switch (kernel.kind) {
    case KABI_KERNEL_FUNCTION: {
      set_last_error("");
      const kabi_status status = kernel.function(kernel.user_data, &problem, &full);
      if (status != KABI_STATUS_OK) {
        const std::string message = last_error();
        throw Error(KABI_STATUS_KERNEL_FAILED, "kernel " + kernel.op->name + "/" + kernel.name + " failed: " +
                                                   (message.empty() ? std::string(status_name(status)) : message));
      }
      return;
    }
    case KABI_KERNEL_DEVICE_BINARY: launch_device_binary(*kernel.binary, problem, full); return;
    case KABI_KERNEL_EXTERNAL:
      throw Error(KABI_STATUS_UNAVAILABLE, "kernel " + kernel.op->name + "/" + kernel.name +
                                               " runs outside the core (registered as external, e.g. a Python "
                                               "callable); only its registrant can run it");
  }
  throw Error(KABI_STATUS_INTERNAL, "kernel " + kernel.name + " has an unknown kind");
}

void call_op(Op& op, const kabi_args& args, const kabi_select_options* options) {
  kabi_problem problem = describe_problem(op, args, ProblemUse::kLaunch);
  const KernelPtr kernel = decide(op, args, problem, options);
  launch_kernel(*kernel, args, problem);
}

}  // namespace kabi::core
