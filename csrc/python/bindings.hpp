// The pieces of kabi._core, one function per area; module.cpp calls each once.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "kabi/kabi.h"

namespace kabi::python {

void bind_registry(pybind11::module_& module);  // ops and kernels (registry.cpp)
void bind_dispatch(pybind11::module_& module);  // describe, select, launch (dispatch.cpp)
void bind_runtime(pybind11::module_& module);   // devices, plugins, binaries, tuning cache (runtime.cpp)
void bind_front(pybind11::module_& module);     // the op fronts' C hit path and decision tables (front.cpp)
void bind_dlpack_exchange(pybind11::module_& module);  // whether a tensor type has the exchange API (dlpack_exchange.cpp)
void bind_allocator(pybind11::module_& module);  // the allocator behind workspaces, from Python (allocator.cpp)

// Shared helpers.
kabi_op find_op(const std::string& name);
kabi_kernel find_kernel(const std::string& op, const std::string& name);
pybind11::dict kernel_to_dict(kabi_kernel kernel);

}  // namespace kabi::python
