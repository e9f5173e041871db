// DLPack's C exchange API (`__dlpack_c_exchange_api__` on a tensor type, DLPack 1.2+; torch 2.10+): C functions that
// describe a tensor as a DLTensor and report the framework's current stream without any Python call. The decision
// table (decision_table.hpp) keys calls by it and prepared launches (dispatch.cpp) read data pointers and streams through it.
#pragma once

#include <Python.h>

#include "dlpack/dlpack.h"

namespace kabi::python {

// The exchange API of a tensor type, or nullptr when the type does not offer a usable one (both
// dltensor_from_py_object_no_sync and current_work_stream are required).
const DLPackExchangeAPI* exchange_api_of(PyTypeObject* type);
// The same, remembered per type (types live as long as the process); call with the GIL held.
const DLPackExchangeAPI* cached_exchange_api_of(PyTypeObject* type);

}  // namespace kabi::python
