// Ops and kernels: lookup, listing, and registration of EXTERNAL kernels whose code is a Python callable.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "errors.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

const char* kind_name(kabi_kernel_kind kind) {
  switch (kind) {
    case KABI_KERNEL_FUNCTION:
      return "function";
    case KABI_KERNEL_DEVICE_BINARY:
      return "device_binary";
    case KABI_KERNEL_EXTERNAL:
      return "external";
  }
  return "unknown";
}

kabi_op_info op_info_of(kabi_op op) {
  kabi_op_info info{};
  info.struct_size = sizeof(info);
  check(kabi_op_info_get(op, &info));
  return info;
}

py::dict op_to_dict(kabi_op op) {
  const kabi_op_info info = op_info_of(op);
  py::dict result;
  result["name"] = info.name;
  result["schema"] = info.schema;
  result["type_variables"] = info.type_variables;
  result["num_inputs"] = info.num_inputs;
  result["num_outputs"] = info.num_outputs;
  result["num_attributes"] = info.num_attributes;
  result["tuning_key"] = info.tuning_key;
  return result;
}

// The names of the KABI_DTYPE_* bits in a mask, in bit order.
py::tuple dtype_names(uint32_t dtypes) {
  py::list names;
  for (int bit = 0; bit < 32; ++bit) {
    if ((dtypes >> bit) & 1u) names.append(py::str(kabi_dtype_name(1u << bit)));
  }
  return py::tuple(names);
}

const char* attribute_type_name(kabi_attribute_type type) {
  switch (type) {
    case KABI_ATTRIBUTE_INT:
      return "int";
    case KABI_ATTRIBUTE_FLOAT:
      return "float";
    case KABI_ATTRIBUTE_BOOL:
      return "bool";
    case KABI_ATTRIBUTE_ENUM:
      return "enum";
  }
  return "unknown";
}

// The op's schema as the core parsed it, in plain Python values, so Python never parses schema text itself.
const char* tuning_key_kind_name(int32_t field) {
  switch (field) {
    case KABI_TUNING_KEY_DTYPE: return "dtype";
    case KABI_TUNING_KEY_LAYOUT: return "layout";
    case KABI_TUNING_KEY_BATCH: return "batch";
    case KABI_TUNING_KEY_DIM: return "dim";
    case KABI_TUNING_KEY_ATTRIBUTE: return "attribute";
    default: throw std::runtime_error("unknown tuning key field " + std::to_string(field));
  }
}

py::dict op_schema(const std::string& name) {
  kabi_op op = find_op(name);
  const kabi_op_info info = op_info_of(op);
  py::tuple dims(info.num_dims);
  for (int32_t d = 0; d < info.num_dims; ++d) dims[d] = py::str(info.dim_names[d]);
  py::dict type_variables;
  std::vector<std::string> variable_names;
  for (int32_t v = 0; v < info.num_type_variables; ++v) {
    kabi_type_variable_decl decl{};
    decl.struct_size = sizeof(decl);
    check(kabi_op_type_variable_get(op, v, &decl));
    type_variables[py::str(decl.name)] = dtype_names(decl.dtypes);
    variable_names.emplace_back(decl.name);
  }
  py::list inputs;
  py::list outputs;
  for (int32_t t = 0; t < info.num_inputs + info.num_outputs; ++t) {
    kabi_tensor_decl decl{};
    decl.struct_size = sizeof(decl);
    check(kabi_op_tensor_get(op, t, &decl));
    const auto dims_of = [&](const int32_t* indices, int32_t count) {
      py::tuple names(count);
      for (int32_t d = 0; d < count; ++d) names[d] = indices[d] == KABI_DIM_ONE ? py::str("1") : dims[indices[d]];
      return names;
    };
    const py::tuple tensor_dims = dims_of(decl.dims, decl.num_dims);
    py::list shapes;
    shapes.append(tensor_dims);
    for (int32_t s = 0; s < decl.num_alternative_shapes; ++s) {
      shapes.append(dims_of(decl.alternative_dims[s], decl.alternative_ranks[s]));
    }
    py::dict tensor;
    tensor["name"] = decl.name;
    tensor["optional"] = decl.optional != 0;
    tensor["has_batch"] = decl.has_batch != 0;
    tensor["dims"] = tensor_dims;
    tensor["shapes"] = py::tuple(shapes);
    tensor["leading_dim_optional"] = decl.leading_dim_optional != 0;
    tensor["present_with"] = decl.present_with_input >= 0
                                 ? py::object(py::make_tuple(inputs[decl.present_with_input]["name"], decl.present_with_rank))
                                 : py::object(py::none());
    tensor["offsets_of"] = decl.offsets_of_dim >= 0 ? py::object(dims[decl.offsets_of_dim]) : py::object(py::none());
    tensor["type_variable"] =
        decl.type_variable >= 0 ? py::object(py::str(variable_names[static_cast<std::size_t>(decl.type_variable)]))
                                : py::object(py::none());
    tensor["dtype"] = decl.type_variable < 0 ? py::object(py::str(kabi_dtype_name(decl.dtypes))) : py::object(py::none());
    tensor["dtypes"] = dtype_names(decl.dtypes);
    (decl.is_output ? outputs : inputs).append(tensor);
  }
  py::list attributes;
  for (int32_t a = 0; a < info.num_attributes; ++a) {
    kabi_attribute_decl decl{};
    decl.struct_size = sizeof(decl);
    check(kabi_op_attribute_get(op, a, &decl));
    py::tuple values(decl.num_enum_values);
    for (int32_t v = 0; v < decl.num_enum_values; ++v) values[v] = py::str(decl.enum_values[v]);
    py::object default_value = py::none();
    if (decl.has_default) {
      switch (decl.type) {
        case KABI_ATTRIBUTE_INT: default_value = py::int_(decl.default_value.integer); break;
        case KABI_ATTRIBUTE_FLOAT: default_value = py::float_(decl.default_value.real); break;
        case KABI_ATTRIBUTE_BOOL: default_value = py::bool_(decl.default_value.integer != 0); break;
        case KABI_ATTRIBUTE_ENUM: default_value = values[decl.default_value.integer]; break;
      }
    }
    py::dict attribute;
    attribute["name"] = decl.name;
    attribute["type"] = attribute_type_name(decl.type);
    attribute["enum_values"] = values;
    attribute["has_default"] = decl.has_default != 0;
    attribute["default"] = default_value;
    attribute["in_tuning_key"] = decl.in_tuning_key != 0;
    attribute["type_variable"] = decl.type_variable >= 0
                                     ? py::object(py::str(variable_names[static_cast<std::size_t>(decl.type_variable)]))
                                     : py::object(py::none());
    attributes.append(attribute);
  }
  py::list key_items;
  for (int32_t k = 0; k < info.num_tuning_key_items; ++k) {
    kabi_tuning_key_item item{};
    item.struct_size = sizeof(item);
    check(kabi_op_tuning_key_get(op, k, &item));
    py::dict key_item;
    const char* kind = tuning_key_kind_name(item.field);
    key_item["kind"] = kind;
    key_item["name"] = item.field == KABI_TUNING_KEY_DIM         ? py::object(dims[item.index])
                       : item.field == KABI_TUNING_KEY_ATTRIBUTE ? py::object(attributes[static_cast<std::size_t>(item.index)]["name"])
                                                                 : py::object(py::str(kind));
    key_item["pow2"] = item.pow2 != 0;
    key_item["pow2_cap"] = item.pow2_cap;
    key_items.append(key_item);
  }
  py::dict result;
  result["name"] = info.name;
  result["schema"] = info.schema;
  result["inputs"] = py::tuple(inputs);
  result["outputs"] = py::tuple(outputs);
  result["attributes"] = py::tuple(attributes);
  result["type_variables"] = type_variables;
  result["dims"] = dims;
  result["tuning_key"] = info.tuning_key;
  result["tuning_key_items"] = py::tuple(key_items);
  return result;
}

void register_op(const std::string& name, const std::string& schema, const std::optional<std::string>& type_variables,
                 const std::optional<std::string>& tuning_key) {
  kabi_op_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.name = name.c_str();
  desc.schema = schema.c_str();
  desc.type_variables = type_variables ? type_variables->c_str() : nullptr;
  desc.tuning_key = tuning_key ? tuning_key->c_str() : nullptr;
  check(kabi_op_register(&desc, nullptr));
}

void write_reason(char* buffer, std::size_t size, const std::string& text) {
  if (buffer == nullptr || size == 0) return;
  const std::size_t length = std::min(text.size(), size - 1);
  std::memcpy(buffer, text.data(), length);
  buffer[length] = '\0';
}

// What a kernel with a Python supports predicate (an EXTERNAL kernel, or a device binary loaded by binary_load) hands
// libkabi as user_data: the predicate (a strong reference) and its op, which decodes the problem's attributes.
struct PythonPredicate {
  PyObject* predicate;
  kabi_op op;
  // A device binary's predicate also runs at every kabi_launch, where a Python call would cost more than the launch:
  // its verdict per distinct problem (the predicate sees nothing else) is remembered, and asked for once.
  bool remember_verdicts = false;
  std::mutex mutex;
  std::unordered_map<std::string, std::pair<int32_t, std::string>> verdicts;
};

// Everything of a problem a Python predicate can see (problem_to_dict's inputs), as bytes: the memo's key.
std::string problem_bytes(const kabi_problem& problem) {
  std::string bytes;
  const auto append = [&bytes](const void* data, std::size_t size) {
    bytes.append(static_cast<const char*>(data), size);
  };
  append(&problem.device_type, sizeof problem.device_type);
  append(&problem.device_index, sizeof problem.device_index);
  append(&problem.dtype, sizeof problem.dtype);
  append(problem.type_bindings, sizeof(uint32_t) * static_cast<std::size_t>(problem.num_type_variables));
  append(problem.dims, sizeof(int64_t) * static_cast<std::size_t>(problem.num_dims));
  append(problem.batch_shape, sizeof(int64_t) * static_cast<std::size_t>(problem.batch_rank));
  append(&problem.batch_size, sizeof problem.batch_size);
  append(problem.input_layouts, sizeof(uint32_t) * static_cast<std::size_t>(problem.num_inputs));
  append(&problem.inputs_present, sizeof problem.inputs_present);
  append(&problem.batch_mode, sizeof problem.batch_mode);
  for (int32_t i = 0; i < problem.num_attributes; ++i) {
    append(&problem.attributes[i].integer, sizeof(int64_t));
    append(&problem.attributes[i].real, sizeof(double));
  }
  return bytes;
}

constexpr std::size_t kMaxRememberedVerdicts = 4096;

// The supports trampoline: libkabi may call it from any thread, with or without the GIL held. The predicate
// (a Python callable taking the problem as a dict) returns True, or a str saying why the kernel declines.
int32_t python_supports(void* user_data, const kabi_problem* problem, const kabi_args* /*args*/, char* reason,
                        std::size_t reason_size) {
  if (!Py_IsInitialized()) {
    write_reason(reason, reason_size, "its Python predicate cannot run: the interpreter has shut down");
    return 0;
  }
  auto& bound = *static_cast<PythonPredicate*>(user_data);
  std::string key;
  if (bound.remember_verdicts) {
    key = problem_bytes(*problem);
    const std::lock_guard<std::mutex> lock(bound.mutex);
    const auto found = bound.verdicts.find(key);
    if (found != bound.verdicts.end()) {
      write_reason(reason, reason_size, found->second.second);
      return found->second.first;
    }
  }
  int32_t accepted = 0;
  std::string why;
  {
    py::gil_scoped_acquire gil;
    try {
      auto predicate = py::reinterpret_borrow<py::object>(bound.predicate);
      py::object verdict = predicate(problem_to_dict(bound.op, *problem));
      if (py::isinstance<py::str>(verdict)) {
        why = verdict.cast<std::string>();
      } else if (verdict.is_none() || !py::bool_(verdict)) {
        why = "declined by its supports predicate";
      } else {
        accepted = 1;
      }
    } catch (py::error_already_set& error) {
      // Not remembered: the next call asks again.
      write_reason(reason, reason_size, std::string("its supports predicate raised ") + error.what());
      return 0;
    }
  }
  if (bound.remember_verdicts) {
    const std::lock_guard<std::mutex> lock(bound.mutex);
    if (bound.verdicts.size() >= kMaxRememberedVerdicts) bound.verdicts.clear();
    bound.verdicts.emplace(std::move(key), std::make_pair(accepted, why));
  }
  write_reason(reason, reason_size, why);
  return accepted;
}

void release_python_predicate(void* user_data) {
  auto* bound = static_cast<PythonPredicate*>(user_data);
  // At process exit libkabi may outlive the interpreter: the reference is then simply abandoned.
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    Py_DECREF(bound->predicate);
  }
  delete bound;
}

void register_external_kernel(const std::string& op, const std::string& name, const std::string& backend,
                              int32_t device_type, int32_t arch_min, int32_t arch_max,
                              const std::vector<int32_t>& archs, int32_t priority, uint64_t required_features,
                              uint32_t dtypes, const std::optional<std::string>& type_constraints, uint32_t layouts,
                              const std::vector<uint32_t>& input_layouts, uint32_t alignment, int32_t batch_mode,
                              const py::object& supports, const std::optional<std::string>& fingerprint) {
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.op = op.c_str();
  desc.name = name.c_str();
  desc.backend = backend.c_str();
  desc.device_type = device_type;
  desc.arch_min = arch_min;
  desc.arch_max = arch_max;
  desc.archs = archs.empty() ? nullptr : archs.data();
  desc.num_archs = static_cast<int32_t>(archs.size());
  desc.priority = priority;
  desc.required_features = required_features;
  desc.dtypes = dtypes;
  desc.type_constraints = type_constraints ? type_constraints->c_str() : nullptr;
  desc.layouts = layouts;
  desc.input_layouts = input_layouts.empty() ? nullptr : input_layouts.data();
  desc.num_input_layouts = static_cast<int32_t>(input_layouts.size());
  desc.alignment = alignment;
  desc.batch_mode = batch_mode;
  desc.kind = KABI_KERNEL_EXTERNAL;
  desc.fingerprint = fingerprint ? fingerprint->c_str() : nullptr;
  if (!supports.is_none()) {
    if (!PyCallable_Check(supports.ptr())) {
      raise_status(KABI_STATUS_INVALID_ARGUMENT, "kernel " + name + ": supports must be callable");
    }
    desc.supports = &python_supports;
    desc.user_data = new PythonPredicate{supports.inc_ref().ptr(), find_op(op)};
    desc.user_data_free = &release_python_predicate;
  }
  kabi_kernel kernel = nullptr;
  const kabi_status status = kabi_kernel_register(&desc, &kernel);
  if (status != KABI_STATUS_OK) {
    // libkabi did not take ownership: release what was handed over above.
    if (desc.user_data != nullptr) release_python_predicate(desc.user_data);
    raise_status(status);
  }
}

// Device binaries from their manifest files, each (path, op, supports or None) with a Python supports predicate
// (None: the declared filters only), registered all or nothing through kabi_binary_load_many; returns the kernels'
// names. The op names the manifest's op: the predicate decodes the problem's attributes with it.
std::vector<std::string> load_binaries(const std::vector<std::tuple<std::string, std::string, py::object>>& loads) {
  std::vector<kabi_binary_load_request> requests(loads.size());
  try {
    for (size_t i = 0; i < loads.size(); ++i) {
      const auto& [manifest_path, op, supports] = loads[i];
      kabi_binary_load_request& request = requests[i];
      request.struct_size = sizeof(request);
      request.manifest_path = manifest_path.c_str();
      request.op = op.c_str();
      if (supports.is_none()) continue;
      if (!PyCallable_Check(supports.ptr())) {
        raise_status(KABI_STATUS_INVALID_ARGUMENT, manifest_path + ": supports must be callable");
      }
      const kabi_op op_handle = find_op(op);
      auto* predicate = new PythonPredicate{supports.inc_ref().ptr(), op_handle};
      predicate->remember_verdicts = true;
      request.supports = &python_supports;
      request.user_data = predicate;
      request.user_data_free = &release_python_predicate;
    }
  } catch (...) {
    // libkabi was handed nothing yet: release the predicates made so far.
    for (const kabi_binary_load_request& request : requests) {
      if (request.user_data != nullptr) release_python_predicate(request.user_data);
    }
    throw;
  }
  std::vector<kabi_kernel> kernels(loads.size());
  // libkabi owns the predicates from here on, and frees them itself when the load fails.
  check(kabi_binary_load_many(requests.data(), static_cast<int32_t>(requests.size()), kernels.data()));
  // The declarations themselves, not their Python records: the Triton backend loads some 300 manifests in a first
  // call.
  std::vector<std::string> names;
  names.reserve(kernels.size());
  for (kabi_kernel kernel : kernels) {
    kabi_kernel_info info{};
    info.struct_size = sizeof(info);
    check(kabi_kernel_info_get(kernel, &info));
    names.emplace_back(info.name);
  }
  return names;
}

}  // namespace

kabi_op find_op(const std::string& name) {
  kabi_op op = nullptr;
  check(kabi_op_find(name.c_str(), &op));
  return op;
}

kabi_kernel find_kernel(const std::string& op, const std::string& name) {
  kabi_kernel kernel = nullptr;
  check(kabi_kernel_find(op.c_str(), name.c_str(), &kernel));
  return kernel;
}

py::dict kernel_to_dict(kabi_kernel kernel) {
  kabi_kernel_info info{};
  info.struct_size = sizeof(info);
  check(kabi_kernel_info_get(kernel, &info));
  py::dict result;
  result["op"] = info.op;
  result["name"] = info.name;
  result["backend"] = info.backend;
  result["plugin"] = info.plugin != nullptr ? info.plugin : "";
  result["fingerprint"] = info.fingerprint != nullptr ? info.fingerprint : "";
  result["device_type"] = info.device_type;
  result["arch_min"] = info.arch_min;
  result["arch_max"] = info.arch_max;
  const int32_t arch_count = std::min<int32_t>(std::max<int32_t>(info.num_archs, 0), 16);
  py::tuple archs(arch_count);
  for (int32_t i = 0; i < arch_count; ++i) archs[i] = info.archs[i];
  result["archs"] = archs;
  result["priority"] = info.priority;
  result["kind"] = kind_name(info.kind);
  result["required_features"] = info.required_features;
  result["dtypes"] = info.dtypes;
  result["type_constraints"] = info.type_constraints;
  result["layouts"] = info.layouts;
  // By input name: the masks of the inputs it declared its own for, in the op's input order.
  py::list input_layouts;
  kabi_op op = info.num_input_layouts > 0 ? find_op(info.op) : nullptr;
  for (int32_t i = 0; i < info.num_input_layouts; ++i) {
    kabi_tensor_decl decl{};
    decl.struct_size = sizeof(decl);
    check(kabi_op_tensor_get(op, i, &decl));
    input_layouts.append(py::make_tuple(decl.name, info.input_layouts[i]));
  }
  result["input_layouts"] = input_layouts;
  result["alignment"] = info.alignment;
  result["batch_mode"] = info.batch_mode;
  result["has_workspace"] = info.has_workspace != 0;
  result["has_variant"] = info.has_variant != 0;
  return result;
}

void bind_registry(py::module_& m) {
  m.def(
      "op_info", [](const std::string& name) { return op_to_dict(find_op(name)); }, py::arg("name"),
      "Facts about an op as a dict (name, schema, type_variables, num_inputs, num_outputs, num_attributes, "
      "tuning_key).");
  m.def("op_schema", &op_schema, py::arg("name"),
        "The op's schema as libkabi parsed it: a dict of inputs and outputs (each with name, optional, has_batch, "
        "dims (a literal 1 as \"1\"), shapes (dims first, then the shape alternatives), type_variable or dtype, "
        "dtypes), attributes (name, type, enum_values, has_default, default, in_tuning_key, type_variable: the "
        "variable a dtype attribute binds, or None), type_variables ({name: dtype names}), dims, tuning_key (the "
        "text) and tuning_key_items (each with kind: dtype, layout, batch, dim or attribute; name; pow2; pow2_cap).");
  m.def("register_op", &register_op, py::arg("name"), py::arg("schema"), py::arg("type_variables") = py::none(),
        py::arg("tuning_key") = py::none(),
        "Register an op (kabi_op_register): its schema and type variables in kabi.h's syntax, and its tuning key "
        "(None: the default one).");
  m.def(
      "op_list",
      []() {
        py::list names;
        const int32_t count = kabi_op_count();
        for (int32_t i = 0; i < count; ++i) {
          kabi_op op = nullptr;
          check(kabi_op_at(i, &op));
          names.append(op_to_dict(op)["name"]);
        }
        return names;
      },
      "Names of every registered op, in registration order.");
  m.def(
      "kernel_info",
      [](const std::string& op, const std::string& name) { return kernel_to_dict(find_kernel(op, name)); },
      py::arg("op"), py::arg("name"), "Facts about one kernel as a dict.");
  m.def(
      "kernel_list",
      [](const std::optional<std::string>& op) {
        const char* op_name = op ? op->c_str() : nullptr;
        py::list kernels;
        const int32_t count = kabi_kernel_count(op_name);
        for (int32_t i = 0; i < count; ++i) {
          kabi_kernel kernel = nullptr;
          check(kabi_kernel_at(op_name, i, &kernel));
          kernels.append(kernel_to_dict(kernel));
        }
        return kernels;
      },
      py::arg("op") = py::none(), "Every kernel of an op (or of all ops) as dicts, in registration order.");
  m.def("kernel_register_external", &register_external_kernel, py::arg("op"), py::arg("name"),
        py::arg("backend"), py::arg("device_type"), py::arg("arch_min"), py::arg("arch_max"), py::arg("archs"),
        py::arg("priority"), py::arg("required_features"), py::arg("dtypes"), py::arg("type_constraints"),
        py::arg("layouts"), py::arg("input_layouts"), py::arg("alignment"), py::arg("batch_mode"), py::arg("supports"),
        py::arg("fingerprint"),
        "Register an EXTERNAL kernel (its code runs in Python); input_layouts are the per-input layout masks "
        "(kabi_kernel_desc.input_layouts); supports(problem_dict) -> True | reason str.");
  m.def("binary_load_many", &load_binaries, py::arg("loads"),
        "Register the device binaries that manifest files describe, all or nothing: loads is a list of (manifest "
        "path, op, supports or None), supports(problem_dict) -> True | reason str; returns the kernels' names.");
  m.def(
      "kernel_unregister", [](const std::string& op, const std::string& name) {
        check(kabi_kernel_unregister(op.c_str(), name.c_str()));
      },
      py::arg("op"), py::arg("name"), "Remove a kernel by op and name.");
}

}  // namespace kabi::python
