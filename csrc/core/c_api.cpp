// The extern "C" functions of kabi.h for errors, versions, devices, dtypes, ops and kernels. Each body runs
// through c_boundary() so no exception crosses the ABI.
#include <algorithm>
#include <cstring>

#include "device.hpp"
#include "error.hpp"
#include "names.hpp"
#include "registry.hpp"
#include "struct_io.hpp"

using namespace kabi::core;

namespace {

template <class Handle>
void require_out(Handle* out, const char* function, const char* name) {
  if (out == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(function) + ": " + name + " is NULL");
}

std::string require_name(const char* name, const char* function, const char* what) {
  if (name == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(function) + ": " + what + " is NULL");
  return name;
}

Op& op_from_handle(kabi_op handle, const char* function) {
  if (handle == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(function) + ": op is NULL");
  return *static_cast<Op*>(handle);
}

void check_index(int32_t index, int32_t count, const char* function, const Op& op, const char* what) {
  if (index < 0 || index >= count) {
    throw Error(KABI_STATUS_NOT_FOUND, std::string(function) + ": index " + std::to_string(index) + " is outside [0, " +
                                           std::to_string(count) + "), the " + what + " of op " + op.name);
  }
}

}  // namespace

extern "C" {

KABI_EXPORT const char* kabi_last_error(void) {
  return last_error();
}

KABI_EXPORT void kabi_set_last_error(const char* message) {
  set_last_error(message);
}

KABI_EXPORT const char* kabi_status_name(kabi_status status) {
  return status_name(status);
}

KABI_EXPORT uint32_t kabi_abi_version(void) {
  return KABI_ABI_VERSION;
}

KABI_EXPORT const char* kabi_library_version(void) {
  return KABI_LIBRARY_VERSION;
}

KABI_EXPORT const char* kabi_feature_name(uint64_t feature_bit) {
  return feature_name(feature_bit);
}

KABI_EXPORT uint32_t kabi_dtype_bit(DLDataType dtype) {
  return dtype_bit(dtype);
}

KABI_EXPORT const char* kabi_dtype_name(uint32_t bit) {
  return dtype_name(bit);
}

KABI_EXPORT uint32_t kabi_dtype_from_name(const char* name) {
  return name != nullptr ? dtype_bit_from_name(name) : 0;
}

KABI_EXPORT kabi_status kabi_device_count(int32_t device_type, int32_t* out_count) {
  return c_boundary([&] {
    require_out(out_count, "kabi_device_count", "out_count");
    *out_count = device_count(device_type);
  });
}

KABI_EXPORT kabi_status kabi_device_info_get(int32_t device_type, int32_t device_index, kabi_device_info* out_info) {
  return c_boundary([&] {
    check_output_struct(out_info, "kabi_device_info_get: out_info",
                        KABI_STRUCT_SIZE_THROUGH(kabi_device_info, device_type));
    write_output_struct(out_info, get_device(device_type, device_index));
  });
}

KABI_EXPORT kabi_status kabi_device_signature(int32_t device_type, int32_t device_index, char* buffer,
                                              size_t buffer_size) {
  return c_boundary([&] {
    get_device(device_type, device_index);
    copy_to_buffer(device_signature(device_type, device_index), buffer, buffer_size, "kabi_device_signature");
  });
}

KABI_EXPORT kabi_status kabi_op_register(const kabi_op_desc* desc, kabi_op* out_op) {
  return c_boundary([&] {
    std::unique_ptr<Op> op = make_op(desc);
    Op* registered = Registry::instance().register_op(std::move(op));
    if (out_op != nullptr) *out_op = registered;
  });
}

KABI_EXPORT kabi_status kabi_op_find(const char* name, kabi_op* out_op) {
  return c_boundary([&] {
    const std::string op_name = require_name(name, "kabi_op_find", "name");
    require_out(out_op, "kabi_op_find", "out_op");
    *out_op = &Registry::instance().get_op(op_name);
  });
}

KABI_EXPORT int32_t kabi_op_count(void) {
  return value_boundary<int32_t>(0, [] { return Registry::instance().op_count(); });
}

KABI_EXPORT kabi_status kabi_op_at(int32_t index, kabi_op* out_op) {
  return c_boundary([&] {
    require_out(out_op, "kabi_op_at", "out_op");
    *out_op = Registry::instance().op_at(index);
  });
}

KABI_EXPORT kabi_status kabi_op_info_get(kabi_op handle, kabi_op_info* out_info) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_info_get");
    check_output_struct(out_info, "kabi_op_info_get: out_info", KABI_STRUCT_SIZE_THROUGH(kabi_op_info, name));
    kabi_op_info info{};
    info.struct_size = sizeof info;
    info.name = op.name.c_str();
    info.schema = op.schema_text.c_str();
    info.type_variables = op.type_variables_text.c_str();
    info.tuning_key = op.tuning_key_text.c_str();
    info.num_inputs = static_cast<int32_t>(op.schema.inputs.size());
    info.num_outputs = static_cast<int32_t>(op.schema.outputs.size());
    info.num_attributes = static_cast<int32_t>(op.schema.attributes.size());
    info.num_type_variables = static_cast<int32_t>(op.schema.type_variables.size());
    info.num_dims = static_cast<int32_t>(op.schema.dim_names.size());
    info.dim_names = op.dim_name_pointers.data();
    info.num_tuning_key_items = static_cast<int32_t>(op.tuning_key.size());
    write_output_struct(out_info, info);
  });
}

KABI_EXPORT kabi_status kabi_op_tensor_get(kabi_op handle, int32_t index, kabi_tensor_decl* out_decl) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_tensor_get");
    check_output_struct(out_decl, "kabi_op_tensor_get: out_decl", KABI_STRUCT_SIZE_THROUGH(kabi_tensor_decl, name));
    const auto inputs = static_cast<int32_t>(op.schema.inputs.size());
    const auto count = inputs + static_cast<int32_t>(op.schema.outputs.size());
    check_index(index, count, "kabi_op_tensor_get", op, "tensors");
    const SchemaTensor& tensor = index < inputs ? op.schema.inputs[static_cast<size_t>(index)]
                                                : op.schema.outputs[static_cast<size_t>(index - inputs)];
    kabi_tensor_decl decl{};
    decl.struct_size = sizeof decl;
    decl.name = tensor.name.c_str();
    decl.is_output = tensor.is_output ? 1 : 0;
    decl.optional = tensor.optional ? 1 : 0;
    decl.has_batch = tensor.has_batch ? 1 : 0;
    decl.num_dims = static_cast<int32_t>(tensor.dims.size());
    std::copy(tensor.dims.begin(), tensor.dims.end(), decl.dims);
    decl.type_variable = tensor.type_variable;
    decl.dtypes = tensor.dtypes;
    decl.num_alternative_shapes = static_cast<int32_t>(tensor.alternative_shapes.size());
    for (size_t s = 0; s < tensor.alternative_shapes.size(); ++s) {
      const std::vector<int32_t>& shape = tensor.alternative_shapes[s];
      decl.alternative_ranks[s] = static_cast<int32_t>(shape.size());
      std::copy(shape.begin(), shape.end(), decl.alternative_dims[s]);
    }
    decl.leading_dim_optional = tensor.leading_dim_optional ? 1 : 0;
    decl.present_with_input = tensor.present_with_input;
    decl.present_with_rank = tensor.present_with_rank;
    decl.offsets_of_dim = tensor.offsets_of_dim;
    write_output_struct(out_decl, decl);
  });
}

KABI_EXPORT kabi_status kabi_op_attribute_get(kabi_op handle, int32_t index, kabi_attribute_decl* out_decl) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_attribute_get");
    check_output_struct(out_decl, "kabi_op_attribute_get: out_decl",
                        KABI_STRUCT_SIZE_THROUGH(kabi_attribute_decl, name));
    check_index(index, static_cast<int32_t>(op.schema.attributes.size()), "kabi_op_attribute_get", op, "attributes");
    const SchemaAttribute& attribute = op.schema.attributes[static_cast<size_t>(index)];
    const std::vector<const char*>& values = op.enum_value_pointers[static_cast<size_t>(index)];
    kabi_attribute_decl decl{};
    decl.struct_size = sizeof decl;
    decl.name = attribute.name.c_str();
    decl.type = attribute.type;
    decl.has_default = attribute.has_default ? 1 : 0;
    decl.default_value = attribute.default_value;
    decl.num_enum_values = static_cast<int32_t>(values.size());
    decl.enum_values = values.data();
    decl.in_tuning_key = attribute.in_tuning_key ? 1 : 0;
    decl.type_variable = attribute.type_variable;
    write_output_struct(out_decl, decl);
  });
}

KABI_EXPORT kabi_status kabi_op_tuning_key_get(kabi_op handle, int32_t index, kabi_tuning_key_item* out_item) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_tuning_key_get");
    check_output_struct(out_item, "kabi_op_tuning_key_get: out_item",
                        KABI_STRUCT_SIZE_THROUGH(kabi_tuning_key_item, field));
    check_index(index, static_cast<int32_t>(op.tuning_key.size()), "kabi_op_tuning_key_get", op, "tuning key items");
    const TuningKeyItem& parsed = op.tuning_key[static_cast<size_t>(index)];
    kabi_tuning_key_item item{};
    item.struct_size = sizeof item;
    switch (parsed.kind) {
      case TuningKeyItem::Kind::kDtype: item.field = KABI_TUNING_KEY_DTYPE; break;
      case TuningKeyItem::Kind::kLayout: item.field = KABI_TUNING_KEY_LAYOUT; break;
      case TuningKeyItem::Kind::kBatch: item.field = KABI_TUNING_KEY_BATCH; break;
      case TuningKeyItem::Kind::kDim: item.field = KABI_TUNING_KEY_DIM; break;
      case TuningKeyItem::Kind::kAttribute: item.field = KABI_TUNING_KEY_ATTRIBUTE; break;
    }
    item.index = parsed.index;
    item.pow2 = parsed.pow2 ? 1 : 0;
    item.pow2_cap = parsed.pow2_cap;
    write_output_struct(out_item, item);
  });
}

KABI_EXPORT kabi_status kabi_op_type_variable_get(kabi_op handle, int32_t index, kabi_type_variable_decl* out_decl) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_type_variable_get");
    check_output_struct(out_decl, "kabi_op_type_variable_get: out_decl",
                        KABI_STRUCT_SIZE_THROUGH(kabi_type_variable_decl, name));
    check_index(index, static_cast<int32_t>(op.schema.type_variables.size()), "kabi_op_type_variable_get", op,
                "type variables");
    const TypeVariable& variable = op.schema.type_variables[static_cast<size_t>(index)];
    kabi_type_variable_decl decl{};
    decl.struct_size = sizeof decl;
    decl.name = variable.name.c_str();
    decl.dtypes = variable.dtypes;
    write_output_struct(out_decl, decl);
  });
}

KABI_EXPORT kabi_status kabi_kernel_register(const kabi_kernel_desc* desc, kabi_kernel* out_kernel) {
  return c_boundary([&] {
    check_output_struct(desc, "kabi_kernel_register: desc", KABI_STRUCT_SIZE_THROUGH(kabi_kernel_desc, op));
    const std::string op_name = require_name(desc->op, "kabi_kernel_register", "desc->op");
    Registry& registry = Registry::instance();
    Kernel* kernel = registry.register_kernel(make_kernel(desc, registry.get_op(op_name)));
    if (out_kernel != nullptr) *out_kernel = kernel;
  });
}

KABI_EXPORT kabi_status kabi_kernel_unregister(const char* op, const char* name) {
  return c_boundary([&] {
    Registry::instance().unregister_kernel(require_name(op, "kabi_kernel_unregister", "op"),
                                           require_name(name, "kabi_kernel_unregister", "name"));
  });
}

KABI_EXPORT kabi_status kabi_kernel_find(const char* op, const char* name, kabi_kernel* out_kernel) {
  return c_boundary([&] {
    const std::string op_name = require_name(op, "kabi_kernel_find", "op");
    const std::string kernel_name = require_name(name, "kabi_kernel_find", "name");
    require_out(out_kernel, "kabi_kernel_find", "out_kernel");
    KernelPtr kernel = Registry::instance().find_kernel(op_name, kernel_name);
    if (!kernel) throw Error(KABI_STATUS_NOT_FOUND, "op " + op_name + " has no kernel named \"" + kernel_name + "\"");
    *out_kernel = kernel.get();
  });
}

KABI_EXPORT int32_t kabi_kernel_count(const char* op) {
  return value_boundary<int32_t>(0, [&] { return Registry::instance().kernel_count(op); });
}

KABI_EXPORT kabi_status kabi_kernel_at(const char* op, int32_t index, kabi_kernel* out_kernel) {
  return c_boundary([&] {
    require_out(out_kernel, "kabi_kernel_at", "out_kernel");
    *out_kernel = Registry::instance().kernel_at(op, index).get();
  });
}

KABI_EXPORT kabi_status kabi_kernel_info_get(kabi_kernel handle, kabi_kernel_info* out_info) {
  return c_boundary([&] {
    check_output_struct(out_info, "kabi_kernel_info_get: out_info", KABI_STRUCT_SIZE_THROUGH(kabi_kernel_info, op));
    const KernelPtr kernel = Registry::instance().acquire(handle);
    kabi_kernel_info info{};
    info.struct_size = sizeof info;
    info.op = kernel->op->name.c_str();
    info.name = kernel->name.c_str();
    info.backend = kernel->backend.c_str();
    info.plugin = kernel->plugin.c_str();
    info.fingerprint = kernel->fingerprint.c_str();
    info.device_type = kernel->device_type;
    info.arch_min = kernel->arch_min;
    info.arch_max = kernel->arch_max;
    info.num_archs = static_cast<int32_t>(kernel->archs.size());
    for (size_t i = 0; i < kernel->archs.size() && i < 16; ++i) info.archs[i] = kernel->archs[i];
    info.priority = kernel->priority;
    info.kind = kernel->kind;
    info.required_features = kernel->required_features;
    info.dtypes = kernel->dtypes;
    info.type_constraints = kernel->type_constraints.c_str();
    info.layouts = kernel->layouts;
    info.alignment = kernel->alignment;
    info.batch_mode = kernel->batch_mode;
    info.has_workspace = kernel->workspace != nullptr ? 1 : 0;
    info.has_variant = kernel->variant != nullptr ? 1 : 0;
    info.num_input_layouts = static_cast<int32_t>(kernel->input_layouts.size());
    std::copy(kernel->input_layouts.begin(), kernel->input_layouts.end(), info.input_layouts);
    write_output_struct(out_info, info);
  });
}

KABI_EXPORT uint64_t kabi_registry_generation(void) {
  return value_boundary<uint64_t>(0, [] { return Registry::instance().generation(); });
}

KABI_EXPORT uint64_t kabi_op_generation(kabi_op op) {
  // A plain load: hit paths call this on every call.
  return op == nullptr ? 0 : static_cast<const Op*>(op)->generation.load(std::memory_order_acquire);
}

}  // extern "C"
