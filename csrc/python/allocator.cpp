// The allocator behind workspaces, from Python: a kabi_allocator whose functions call two Python callables, for the
// device types the caller names (libkabi's default keeps the others). kabi._bootstrap installs torch's caching
// allocator this way for CUDA.
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "errors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

// The callables one installation calls. Never freed: kabi.h lets a thread release the buffer a replaced allocator
// gave through that allocator until the thread next needs a workspace or exits, which can be after the interpreter
// has finalized (then release does nothing, and dropping these references there would crash).
struct PythonAllocator {
  py::object allocate;
  py::object release;
};

kabi_status allocate_through_python(void* context, int32_t device_type, int32_t device_index, size_t bytes,
                                    void* stream, void** out_pointer) {
  if (!Py_IsInitialized()) {
    kabi_set_last_error("the Python allocator cannot run after the interpreter has finalized");
    return KABI_STATUS_UNAVAILABLE;
  }
  const auto& allocator = *static_cast<const PythonAllocator*>(context);
  py::gil_scoped_acquire gil;
  try {
    const py::object pointer = allocator.allocate(device_type, device_index, bytes,
                                                  reinterpret_cast<uintptr_t>(stream));
    if (!py::isinstance<py::int_>(pointer)) {
      kabi_set_last_error(("the Python allocator's allocate returned " +
                           std::string(py::str(py::type::of(pointer).attr("__name__"))) +
                           "; expected the memory's address as an int")
                              .c_str());
      return KABI_STATUS_INTERNAL;
    }
    *out_pointer = reinterpret_cast<void*>(pointer.cast<uintptr_t>());
    return KABI_STATUS_OK;
  } catch (py::error_already_set& error) {
    // The exception's type and message; what() would add the Python traceback to the kabi error's one line.
    const std::string raised =
        std::string(py::str(error.type().attr("__name__"))) + ": " + std::string(py::str(error.value()));
    kabi_set_last_error(("the Python allocator's allocate raised " + raised).c_str());
    return KABI_STATUS_INTERNAL;
  } catch (const py::cast_error& error) {
    kabi_set_last_error(("the Python allocator's allocate returned an address that does not fit a pointer: " +
                         std::string(error.what()))
                            .c_str());
    return KABI_STATUS_INTERNAL;
  }
}

void release_through_python(void* context, int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                            void* stream) {
  // At process exit the memory goes back with the process.
  if (!Py_IsInitialized()) return;
  const auto& allocator = *static_cast<const PythonAllocator*>(context);
  py::gil_scoped_acquire gil;
  try {
    allocator.release(device_type, device_index, reinterpret_cast<uintptr_t>(pointer), bytes,
                      reinterpret_cast<uintptr_t>(stream));
  } catch (py::error_already_set& error) {
    // release returns nothing to the core, so the failure is reported as Python reports errors nobody can catch.
    error.discard_as_unraisable("kabi: the Python allocator's release");
  }
}

void set_allocator(const std::vector<int32_t>& device_types, const py::function& allocate,
                   const py::function& release) {
  if (device_types.empty()) {
    throw py::value_error("set_allocator: device_types is empty; name the DLPack device types it serves");
  }
  uint64_t served = 0;
  for (const int32_t device_type : device_types) {
    if (device_type < 1 || device_type >= 64) {
      throw py::value_error("set_allocator: device_types has " + std::to_string(device_type) +
                            "; expected DLPack device types (1 = CPU, 2 = CUDA, ...)");
    }
    served |= KABI_DEVICE_TYPE_BIT(device_type);
  }
  kabi_allocator table{};
  table.struct_size = sizeof(table);
  table.context = new PythonAllocator{allocate, release};
  table.allocate = allocate_through_python;
  table.release = release_through_python;
  table.device_types = served;
  check(kabi_allocator_set(&table));
}

}  // namespace

void bind_allocator(py::module_& m) {
  m.def("set_allocator", &set_allocator, py::arg("device_types"), py::arg("allocate"), py::arg("release"),
        "Allocate workspaces of the given DLPack device types through allocate(device_type, device_index, nbytes, "
        "stream) -> address (int) and give them back through release(device_type, device_index, address, nbytes, "
        "stream), stream being the CUstream's address (0: the default stream). libkabi's default keeps the other "
        "device types. A raising allocate fails the launch that needed the workspace with its message.");
  m.def(
      "reset_allocator", []() { check(kabi_allocator_set(nullptr)); },
      "Allocate every workspace through libkabi's default again (malloc for the CPU, cuMemAllocAsync for CUDA).");
}

}  // namespace kabi::python
