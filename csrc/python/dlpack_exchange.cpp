#include "dlpack_exchange.hpp"

#include <pybind11/pybind11.h>

#include <utility>
#include <vector>

namespace kabi::python {

const DLPackExchangeAPI* exchange_api_of(PyTypeObject* type) {
  PyObject* capsule = PyObject_GetAttrString(reinterpret_cast<PyObject*>(type), "__dlpack_c_exchange_api__");
  if (capsule == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  const auto* api = static_cast<const DLPackExchangeAPI*>(PyCapsule_GetPointer(capsule, "dlpack_exchange_api"));
  Py_DECREF(capsule);
  if (api == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  // The DLTensor layout is fixed within a DLPack major version; the function this path needs arrived in 1.2.
  const DLPackVersion version = api->header.version;
  if (version.major != DLPACK_MAJOR_VERSION || version.minor < 2 || api->dltensor_from_py_object_no_sync == nullptr ||
      api->current_work_stream == nullptr) {
    return nullptr;
  }
  return api;
}

const DLPackExchangeAPI* cached_exchange_api_of(PyTypeObject* type) {
  static std::vector<std::pair<PyTypeObject*, const DLPackExchangeAPI*>> known;
  for (const auto& [known_type, api] : known) {
    if (known_type == type) return api;
  }
  const DLPackExchangeAPI* api = exchange_api_of(type);
  Py_INCREF(type);  // the pointer is a key for the life of the process
  known.emplace_back(type, api);
  return api;
}

void bind_dlpack_exchange(pybind11::module_& m) {
  m.def(
      "dlpack_exchange_available",
      [](const pybind11::type& type) { return exchange_api_of(reinterpret_cast<PyTypeObject*>(type.ptr())) != nullptr; },
      pybind11::arg("tensor_type"),
      "Whether tensor_type offers the DLPack C exchange API kabi's hit path and native launches use.");
}

}  // namespace kabi::python
