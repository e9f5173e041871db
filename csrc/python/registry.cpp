// Ops and kernels: lookup, listing, and registration of EXTERNAL kernels whose code is a Python callable.
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
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

py::dict op_to_dict(kabi_op op) {
  kabi_op_info info{};
  info.struct_size = sizeof(info);
  check(kabi_op_info_get(op, &info));
  py::dict result;
  result["name"] = info.name;
  result["schema"] = info.schema;
  result["dtypes"] = info.dtypes;
  result["num_inputs"] = info.num_inputs;
  result["num_outputs"] = info.num_outputs;
  result["tuning_key"] = info.tuning_key != nullptr ? info.tuning_key : "";
  return result;
}

void write_reason(char* buffer, std::size_t size, const std::string& text) {
  if (buffer == nullptr || size == 0) return;
  const std::size_t length = std::min(text.size(), size - 1);
  std::memcpy(buffer, text.data(), length);
  buffer[length] = '\0';
}

// The supports trampoline: libkabi may call it from any thread, with or without the GIL held. The predicate
// (a Python callable taking the problem as a dict) returns True, or a str saying why the kernel declines.
int32_t python_supports(void* user_data, const kabi_problem* problem, const kabi_args* args, char* reason,
                        std::size_t reason_size) {
  if (!Py_IsInitialized()) {
    write_reason(reason, reason_size, "its Python predicate cannot run: the interpreter has shut down");
    return 0;
  }
  py::gil_scoped_acquire gil;
  try {
    auto predicate = py::reinterpret_borrow<py::object>(static_cast<PyObject*>(user_data));
    py::object verdict = predicate(problem_to_dict(*problem, args != nullptr ? args->num_inputs : 0));
    if (py::isinstance<py::str>(verdict)) {
      write_reason(reason, reason_size, verdict.cast<std::string>());
      return 0;
    }
    if (verdict.is_none() || !py::bool_(verdict)) {
      write_reason(reason, reason_size, "declined by its supports predicate");
      return 0;
    }
    return 1;
  } catch (py::error_already_set& error) {
    write_reason(reason, reason_size, std::string("its supports predicate raised ") + error.what());
    return 0;
  }
}

void release_python_object(void* user_data) {
  // At process exit libkabi may outlive the interpreter: the reference is then simply abandoned.
  if (user_data == nullptr || !Py_IsInitialized()) return;
  py::gil_scoped_acquire gil;
  Py_DECREF(static_cast<PyObject*>(user_data));
}

void register_external_kernel(const std::string& op, const std::string& name, const std::string& backend,
                              int32_t device_type, int32_t arch_min, int32_t arch_max,
                              const std::vector<int32_t>& archs, int32_t priority, uint64_t required_features,
                              uint32_t dtypes, uint32_t layouts, uint32_t alignment, int32_t batch_mode,
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
  desc.layouts = layouts;
  desc.alignment = alignment;
  desc.batch_mode = batch_mode;
  desc.kind = KABI_KERNEL_EXTERNAL;
  desc.fingerprint = fingerprint ? fingerprint->c_str() : nullptr;
  if (!supports.is_none()) {
    if (!PyCallable_Check(supports.ptr())) {
      raise_status(KABI_STATUS_INVALID_ARGUMENT, "kernel " + name + ": supports must be callable");
    }
    desc.supports = &python_supports;
    desc.user_data = supports.inc_ref().ptr();
    desc.user_data_free = &release_python_object;
  }
  kabi_kernel kernel = nullptr;
  const kabi_status status = kabi_kernel_register(&desc, &kernel);
  if (status != KABI_STATUS_OK) {
    // libkabi did not take ownership: drop the reference handed over above.
    if (desc.user_data != nullptr) Py_DECREF(static_cast<PyObject*>(desc.user_data));
    raise_status(status);
  }
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
  result["layouts"] = info.layouts;
  result["alignment"] = info.alignment;
  result["batch_mode"] = info.batch_mode;
  return result;
}

void bind_registry(py::module_& m) {
  m.def(
      "op_info", [](const std::string& name) { return op_to_dict(find_op(name)); }, py::arg("name"),
      "Facts about an op as a dict (name, schema, dtypes bit mask, num_inputs, num_outputs, tuning_key).");
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
        py::arg("priority"), py::arg("required_features"), py::arg("dtypes"), py::arg("layouts"),
        py::arg("alignment"), py::arg("batch_mode"), py::arg("supports"), py::arg("fingerprint"),
        "Register an EXTERNAL kernel (its code runs in Python); supports(problem_dict) -> True | reason str.");
  m.def(
      "kernel_unregister", [](const std::string& op, const std::string& name) {
        check(kabi_kernel_unregister(op.c_str(), name.c_str()));
      },
      py::arg("op"), py::arg("name"), "Remove a kernel by op and name.");
}

}  // namespace kabi::python
