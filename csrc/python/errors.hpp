// kabi_status -> Python exception, through the one table in kabi/_base/errors.py (STATUS_EXCEPTIONS).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "kabi/kabi.h"

namespace kabi::python {

// Read STATUS_EXCEPTIONS and StaleDecisionError from kabi._base.errors; called once when the module loads.
void load_error_table();

// Raise the exception registered for `status`, with the calling thread's kabi_last_error() as the message.
[[noreturn]] void raise_status(kabi_status status);

// Raise the exception registered for `status` with an explicit message.
[[noreturn]] void raise_status(kabi_status status, const std::string& message);

// kabi._base.errors.KabiError, borrowed (nullptr before load_error_table): the base of everything kabi raises on
// purpose.
PyObject* kabi_error_class();

// Raise kabi._base.errors.StaleDecisionError: a prepared launch outlived the kernel table it was prepared against.
[[noreturn]] void raise_stale_decision(const std::string& message);

inline void check(kabi_status status) {
  if (status != KABI_STATUS_OK) raise_status(status);
}

}  // namespace kabi::python
