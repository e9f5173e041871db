#include "errors.hpp"

#include <array>

namespace py = pybind11;

namespace kabi::python {
namespace {

constexpr int kStatusCount = KABI_STATUS_INTERNAL + 1;

// Borrowed for the life of the process: the classes live in kabi._base.errors, which is never unloaded, and keeping
// them out of static py::object destructors avoids touching Python after the interpreter has finalized.
std::array<PyObject*, kStatusCount> g_exception_of_status{};
PyObject* g_stale_decision = nullptr;
PyObject* g_kabi_error = nullptr;

}  // namespace

void load_error_table() {
  py::module_ errors = py::module_::import("kabi._base.errors");
  py::dict table = errors.attr("STATUS_EXCEPTIONS");
  py::object fallback = errors.attr("InternalError");
  for (int status = 1; status < kStatusCount; ++status) {
    py::str name(kabi_status_name(static_cast<kabi_status>(status)));
    py::object cls = table.contains(name) ? table[name] : fallback;
    g_exception_of_status[status] = cls.release().ptr();
  }
  g_stale_decision = py::object(errors.attr("StaleDecisionError")).release().ptr();
  g_kabi_error = py::object(errors.attr("KabiError")).release().ptr();
}

PyObject* kabi_error_class() { return g_kabi_error; }

void raise_status(kabi_status status, const std::string& message) {
  PyObject* cls = (status > 0 && status < kStatusCount) ? g_exception_of_status[status] : nullptr;
  if (cls == nullptr) cls = g_exception_of_status[KABI_STATUS_INTERNAL];
  if (cls == nullptr) cls = PyExc_RuntimeError;
  std::string text = message.empty() ? std::string(kabi_status_name(status)) : message;
  PyErr_SetString(cls, text.c_str());
  throw py::error_already_set();
}

void raise_status(kabi_status status) { raise_status(status, kabi_last_error()); }

void raise_stale_decision(const std::string& message) {
  PyErr_SetString(g_stale_decision != nullptr ? g_stale_decision : PyExc_RuntimeError, message.c_str());
  throw py::error_already_set();
}

}  // namespace kabi::python
