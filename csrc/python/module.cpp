// kabi._core: the thin pybind11 binding of libkabi's C ABI. Errors become the exceptions of kabi/_base/errors.py;
// tensors cross as raw descriptors (see tensors.hpp). Everything user-facing is built in Python on top of this.
#include <pybind11/pybind11.h>

#include "bindings.hpp"
#include "errors.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "The binding of libkabi's C ABI; use the kabi package rather than this module.";
  kabi::python::load_error_table();
  kabi::python::bind_registry(m);
  kabi::python::bind_dispatch(m);
  kabi::python::bind_runtime(m);
  kabi::python::bind_front(m);
  kabi::python::bind_dlpack_exchange(m);
  kabi::python::bind_allocator(m);
}
