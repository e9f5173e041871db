// Validating and copying op and kernel declarations received through the ABI.
#include <algorithm>
#include <cstring>

#include "names.hpp"
#include "registry.hpp"
#include "struct_io.hpp"

namespace kabi::core {
namespace {

std::string required_string(const char* text, const std::string& what) {
  if (text == nullptr || *text == '\0') throw Error(KABI_STATUS_INVALID_ARGUMENT, what + " is NULL or empty");
  return text;
}

}  // namespace

Kernel::~Kernel() {
  if (user_data_free != nullptr) user_data_free(user_data);
}

std::unique_ptr<Op> make_op(const kabi_op_desc* caller) {
  const kabi_op_desc desc = read_input_struct(caller, "op desc", KABI_STRUCT_SIZE_THROUGH(kabi_op_desc, schema));
  walk_extensions(desc.extensions, "op desc");
  auto op = std::make_unique<Op>();
  op->name = required_string(desc.name, "op desc: name");
  op->schema_text = required_string(desc.schema, "op " + op->name + ": schema");
  op->type_variables_text = desc.type_variables != nullptr ? desc.type_variables : "";
  op->schema = parse_schema(op->name, op->schema_text, op->type_variables_text);
  op->tuning_key_text = desc.tuning_key != nullptr && *desc.tuning_key != '\0' ? std::string(desc.tuning_key)
                                                                               : default_tuning_key(op->schema);
  op->tuning_key = parse_tuning_key(op->name, op->tuning_key_text, op->schema);
  for (const std::string& name : op->schema.dim_names) op->dim_name_pointers.push_back(name.c_str());
  for (const SchemaAttribute& attribute : op->schema.attributes) {
    std::vector<const char*> values;
    for (const std::string& value : attribute.enum_values) values.push_back(value.c_str());
    op->enum_value_pointers.push_back(std::move(values));
  }
  return op;
}

namespace {

// The dtypes a kernel accepts per type variable of its op: type_constraints where it names the variable, else
// `dtypes`; each must share a dtype with the variable.
std::vector<uint32_t> accepted_dtypes(const Op& op, const Kernel& kernel, const std::string& what) {
  const std::vector<TypeVariable> constraints = parse_type_variables(what + ": type_constraints", kernel.type_constraints);
  const auto& variables = op.schema.type_variables;
  std::vector<uint32_t> accepted(variables.size(), kernel.dtypes);
  for (const TypeVariable& constraint : constraints) {
    const auto found = std::find_if(variables.begin(), variables.end(),
                                    [&](const TypeVariable& variable) { return variable.name == constraint.name; });
    if (found == variables.end()) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": type_constraints names " + constraint.name +
                                                    ", which is not a type variable of op " + op.name);
    }
    accepted[static_cast<size_t>(found - variables.begin())] = constraint.dtypes;
  }
  for (size_t v = 0; v < variables.size(); ++v) {
    if ((accepted[v] & variables[v].dtypes) == 0) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": accepts " + describe_dtype_set(accepted[v]) + " for " +
                                                    variables[v].name + ", none of the op's " +
                                                    describe_dtype_set(variables[v].dtypes));
    }
  }
  return accepted;
}

// The kabi_variant_fn of a kernel's KABI_EXTENSION_KERNEL_VARIANT extension, or null when it chains none.
kabi_variant_fn variant_function(const kabi_extension* chain, const std::string& what) {
  const kabi_extension* found = kabi_extension_find(chain, KABI_EXTENSION_KERNEL_VARIANT);
  if (found == nullptr) return nullptr;
  if (found->struct_size < KABI_STRUCT_SIZE_THROUGH(kabi_kernel_variant_extension, variant)) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT,
                what + ": its variant extension has struct_size " + std::to_string(found->struct_size) +
                    "; at least " + std::to_string(KABI_STRUCT_SIZE_THROUGH(kabi_kernel_variant_extension, variant)) +
                    " bytes are needed (set it to sizeof(kabi_kernel_variant_extension))");
  }
  const auto* extension = reinterpret_cast<const kabi_kernel_variant_extension*>(found);
  if (extension->variant == nullptr) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": its variant extension's variant is NULL");
  }
  return extension->variant;
}

// The declared per-input layout masks (kabi_kernel_desc.input_layouts), checked against the op's inputs.
std::vector<uint32_t> input_layouts(const Op& op, const kabi_kernel_desc& desc, const std::string& what) {
  const auto inputs = static_cast<int32_t>(op.schema.inputs.size());
  if (desc.num_input_layouts < 0 || desc.num_input_layouts > inputs) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": num_input_layouts is " +
                                                  std::to_string(desc.num_input_layouts) + "; op " + op.name + " has " +
                                                  std::to_string(inputs) + " inputs");
  }
  if (desc.num_input_layouts == 0) return {};
  if (desc.input_layouts == nullptr) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": input_layouts is NULL but num_input_layouts is " +
                                                  std::to_string(desc.num_input_layouts));
  }
  std::vector<uint32_t> masks(desc.input_layouts, desc.input_layouts + desc.num_input_layouts);
  for (size_t i = 0; i < masks.size(); ++i) {
    if ((masks[i] & ~static_cast<uint32_t>(KABI_LAYOUT_ANY)) != 0) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": input_layouts[" + std::to_string(i) + "] (input " +
                                                    op.schema.inputs[i].name + ") has bits that are not " +
                                                    "KABI_LAYOUT_* classes");
    }
  }
  return masks;
}

}  // namespace

KernelPtr make_kernel(const kabi_kernel_desc* caller, Op& op, const ImageFile* image_file) {
  const kabi_kernel_desc desc =
      read_input_struct(caller, "kernel desc", KABI_STRUCT_SIZE_THROUGH(kabi_kernel_desc, function));
  walk_extensions(desc.extensions, "kernel desc");
  auto kernel = std::make_shared<Kernel>();
  kernel->op = &op;
  kernel->name = required_string(desc.name, "kernel desc for op " + op.name + ": name");
  const std::string what = "kernel " + op.name + "/" + kernel->name;
  auto invalid = [&](const std::string& message) { throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": " + message); };

  kernel->backend = required_string(desc.backend, what + ": backend");
  kernel->device_type = desc.device_type;
  kernel->arch_min = desc.arch_min;
  kernel->arch_max = desc.arch_max;
  if (desc.num_archs < 0) invalid("num_archs is negative");
  if (desc.num_archs > 0) {
    if (desc.archs == nullptr) invalid("archs is NULL but num_archs is " + std::to_string(desc.num_archs));
    kernel->archs.assign(desc.archs, desc.archs + desc.num_archs);
    std::sort(kernel->archs.begin(), kernel->archs.end());
    kernel->archs.erase(std::unique(kernel->archs.begin(), kernel->archs.end()), kernel->archs.end());
  } else if (desc.arch_min > 0 && desc.arch_max > 0 && desc.arch_min > desc.arch_max) {
    invalid("arch_min " + std::to_string(desc.arch_min) + " is above arch_max " + std::to_string(desc.arch_max));
  }
  kernel->priority = desc.priority;
  kernel->required_features = desc.required_features;
  kernel->dtypes = desc.dtypes;
  if ((kernel->dtypes & ~kAllDtypes) != 0) invalid("dtypes has bits that are not KABI_DTYPE_* values");
  kernel->type_constraints = desc.type_constraints != nullptr ? desc.type_constraints : "";
  kernel->accepted_dtypes = accepted_dtypes(op, *kernel, what);
  kernel->layouts = desc.layouts;
  if ((kernel->layouts & KABI_LAYOUT_ANY) == 0) invalid("layouts names no KABI_LAYOUT_* class");
  kernel->input_layouts = input_layouts(op, desc, what);
  for (uint32_t& mask : kernel->input_layouts) {
    if (mask == 0) mask = kernel->layouts;
  }
  kernel->alignment = desc.alignment;
  if (kernel->alignment > 1 && (kernel->alignment & (kernel->alignment - 1)) != 0) {
    invalid("alignment " + std::to_string(kernel->alignment) + " is not a power of two");
  }
  kernel->batch_mode = desc.batch_mode;
  if (desc.batch_mode < KABI_BATCH_NONE || desc.batch_mode > KABI_BATCH_ANY) {
    invalid("batch_mode " + std::to_string(desc.batch_mode) + " is not a KABI_BATCH_* value");
  }
  kernel->kind = desc.kind;
  switch (desc.kind) {
    case KABI_KERNEL_FUNCTION:
      if (desc.function == nullptr) invalid("kind is KABI_KERNEL_FUNCTION but function is NULL");
      kernel->function = desc.function;
      break;
    case KABI_KERNEL_DEVICE_BINARY:
      if (desc.binary == nullptr) invalid("kind is KABI_KERNEL_DEVICE_BINARY but binary is NULL");
      try {
        kernel->binary = make_device_binary(desc.binary, op.schema, image_file);
      } catch (const Error& error) {
        throw Error(error.status(), what + ": " + error.what());
      }
      break;
    case KABI_KERNEL_EXTERNAL: break;
    default: invalid("kind " + std::to_string(static_cast<int>(desc.kind)) + " is not a kabi_kernel_kind");
  }
  kernel->supports = desc.supports;
  kernel->workspace = desc.workspace;
  kernel->variant = variant_function(desc.extensions, what);
  kernel->user_data = desc.user_data;
  if (desc.fingerprint != nullptr && *desc.fingerprint != '\0') {
    kernel->fingerprint = desc.fingerprint;
  } else {
    kernel->fingerprint = kernel->backend + ":" + kernel->name;
    if (kernel->binary) kernel->fingerprint += ":" + device_binary_fingerprint(*kernel->binary);
  }
  // Set last: a declaration rejected above must not free the caller's user_data.
  kernel->user_data_free = desc.user_data_free;
  return kernel;
}

}  // namespace kabi::core
