// The hit path of a two-input op front, in C: build the decision-cache key, look it up, call the cached
// implementation. Everything else (misses, validation, `out=` checks) stays in Python (kabi/ops/_front.py), which
// this function calls back. The key is the tuple the Python side builds too (kabi/ops/_front.py, _key):
//   (a.dtype, b.dtype, a.device, b.device, a.requires_grad, b.requires_grad, active kabi.use scope, a.dim(),
//    *a.shape, *a.stride(), *b.shape, *b.stride())
// Before building that tuple, a call with two tensors of the front's exact tensor types and no `out` looks in the
// decision memo (decision_memo.hpp), keyed by the same facts read in C; a tuple-key hit fills the memo.
// A cached implementation that raises a foreign exception surfaces as KernelFailedError naming the kernel, as on the
// miss path; only the error path pays for that.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "decision_memo.hpp"
#include "dlpack_exchange.hpp"
#include "errors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

// The state of one front, passed as the function's `self`: a struct sequence (a tuple underneath, so the slots are
// read with PyTuple_GET_ITEM) whose type name shows in the function's repr.
enum FrontSlot { kEntries = 0, kScopeVar, kMiss, kCallWithOut, kKernelFailed, kMemo, kMemoAccess, kSlotCount };

// What the memo path needs, reached from the state's kMemoAccess capsule without any Python lookup.
struct MemoAccess {
  DecisionMemo* memo = nullptr;
  kabi_op op = nullptr;
  std::vector<std::pair<PyTypeObject*, const DLPackExchangeAPI*>> tensor_types;

  const DLPackExchangeAPI* api_for(PyObject* value) const {
    PyTypeObject* type = Py_TYPE(value);
    for (const auto& [known, api] : tensor_types) {
      if (known == type) return api;
    }
    return nullptr;
  }
};

constexpr const char* kMemoAccessName = "kabi.ops.MemoAccess";

PyTypeObject* front_state_type() {
  static PyStructSequence_Field fields[] = {
      {"entries", "the op's decision cache: key -> implementation"},
      {"scope_var", "the ContextVar of the active kabi.use scope"},
      {"miss", "miss(inputs, out): validate, select, remember, run"},
      {"call_with_out", "call_with_out(implementation, key, inputs, out)"},
      {"kernel_failed", "kernel_failed(key, error): the KernelFailedError for a decision's kernel that raised error"},
      {"memo", "the decision memo (kabi._core.DecisionMemo) in front of entries"},
      {"memo_access", "the memo and the tensor types it keys, for C"},
      {nullptr, nullptr},
  };
  static PyStructSequence_Desc description = {"kabi.ops.OpDispatch", "The state of an op's C hit path.", fields,
                                              kSlotCount};
  static PyTypeObject* type = PyStructSequence_NewType(&description);  // kept for the life of the process
  return type;
}

struct InternedNames {
  PyObject* shape = PyUnicode_InternFromString("shape");
  PyObject* stride = PyUnicode_InternFromString("stride");
  PyObject* dtype = PyUnicode_InternFromString("dtype");
  PyObject* device = PyUnicode_InternFromString("device");
  PyObject* requires_grad = PyUnicode_InternFromString("requires_grad");
  PyObject* out = PyUnicode_InternFromString("out");
};

const InternedNames& names() {
  static const InternedNames interned;  // leaked on purpose: the strings live as long as the interpreter
  return interned;
}

// The key of (a, b), or nullptr with no Python error set when an input lacks the attributes (not a tensor): the
// miss path then reports the mistake properly. Shapes and strides are flattened into plain ints, which hash and
// compare faster than torch.Size objects.
PyObject* build_key(PyObject* a, PyObject* b, PyObject* scope_var) {
  const InternedNames& name = names();
  // dtype a, dtype b, device a, device b, requires_grad a, requires_grad b, scope, rank of a; then the tuples
  // flattened: shape a, stride a, shape b, stride b.
  constexpr int kScalars = 8;
  constexpr int kScope = 6;
  constexpr int kRank = 7;
  PyObject* parts[kScalars + 4] = {
      PyObject_GetAttr(a, name.dtype),         PyObject_GetAttr(b, name.dtype),
      PyObject_GetAttr(a, name.device),        PyObject_GetAttr(b, name.device),
      PyObject_GetAttr(a, name.requires_grad), PyObject_GetAttr(b, name.requires_grad),
      nullptr,
      nullptr,
      PyObject_GetAttr(a, name.shape),         PyObject_CallMethodNoArgs(a, name.stride),
      PyObject_GetAttr(b, name.shape),         PyObject_CallMethodNoArgs(b, name.stride),
  };
  PyObject* key = nullptr;
  bool complete = PyContextVar_Get(scope_var, Py_None, &parts[kScope]) == 0;
  for (int i = 0; i < kScalars + 4; ++i) complete = complete && (i == kRank || parts[i] != nullptr);
  for (int i = kScalars; i < kScalars + 4; ++i) complete = complete && PyTuple_Check(parts[i]);
  if (complete) {
    const Py_ssize_t rank_a = PyTuple_GET_SIZE(parts[kScalars]);
    const Py_ssize_t rank_b = PyTuple_GET_SIZE(parts[kScalars + 2]);
    complete = PyTuple_GET_SIZE(parts[kScalars + 1]) == rank_a && PyTuple_GET_SIZE(parts[kScalars + 3]) == rank_b;
    parts[kRank] = complete ? PyLong_FromSsize_t(rank_a) : nullptr;
    key = parts[kRank] != nullptr ? PyTuple_New(kScalars + 2 * rank_a + 2 * rank_b) : nullptr;
    if (key != nullptr) {
      Py_ssize_t position = 0;
      for (int i = 0; i < kScalars; ++i) PyTuple_SET_ITEM(key, position++, Py_NewRef(parts[i]));
      for (int i = kScalars; i < kScalars + 4; ++i) {
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(parts[i]); ++j) {
          PyTuple_SET_ITEM(key, position++, Py_NewRef(PyTuple_GET_ITEM(parts[i], j)));
        }
      }
    }
  }
  for (PyObject* part : parts) Py_XDECREF(part);
  if (key == nullptr) PyErr_Clear();
  return key;
}

// requires_grad as a C bool; -1 (no Python error set) when it cannot be read.
int requires_grad_of(PyObject* tensor) {
  PyObject* value = PyObject_GetAttr(tensor, names().requires_grad);
  if (value == nullptr) {
    PyErr_Clear();
    return -1;
  }
  const int truth = value == Py_True ? 1 : value == Py_False ? 0 : -1;
  Py_DECREF(value);
  return truth;
}

// The memo key of (a, b[, out]) under scope; false (no Python error set) when the call is not memo material.
bool build_memo_key(const MemoAccess& access, PyObject* const* tensors, int count, PyObject* scope, MemoKey& key) {
  DLTensor views[MemoKey::kMaxTensors] = {};
  bool requires_grad[MemoKey::kMaxTensors] = {};
  for (int i = 0; i < count; ++i) {
    const DLPackExchangeAPI* api = access.api_for(tensors[i]);
    if (api == nullptr) return false;
    if (api->dltensor_from_py_object_no_sync(tensors[i], &views[i]) != 0) {
      PyErr_Clear();  // e.g. a tensor DLPack cannot describe: the tuple key handles it
      return false;
    }
    const int truth = requires_grad_of(tensors[i]);
    if (truth < 0) return false;
    requires_grad[i] = truth == 1;
  }
  return key.assign(views, requires_grad, count, scope);
}

// implementation(a, b) or implementation(a, b, out=out): args and kwnames as the front received them.
PyObject* call_implementation(PyObject* implementation, PyObject* const* args, PyObject* kwnames) {
  Py_INCREF(implementation);  // the table may drop it while it runs (another thread invalidating)
  PyObject* result = PyObject_Vectorcall(implementation, args, 2, kwnames);
  Py_DECREF(implementation);
  return result;
}

// The exception being raised, normalized and holding its traceback; the error indicator is left clear.
PyObject* take_raised_exception() {
#if PY_VERSION_HEX >= 0x030C0000
  return PyErr_GetRaisedException();
#else
  PyObject *type = nullptr, *error = nullptr, *traceback = nullptr;
  PyErr_Fetch(&type, &error, &traceback);
  PyErr_NormalizeException(&type, &error, &traceback);
  if (traceback != nullptr) PyException_SetTraceback(error, traceback);
  Py_XDECREF(type);
  Py_XDECREF(traceback);
  return error;
#endif
}

// Raise `error` (a reference is stolen) as it is: unlike PyErr_SetObject, without chaining the exception being
// handled around the call as its __context__.
void raise_exception(PyObject* error) {
#if PY_VERSION_HEX >= 0x030C0000
  PyErr_SetRaisedException(error);
#else
  PyErr_Restore(Py_NewRef(reinterpret_cast<PyObject*>(Py_TYPE(error))), error, PyException_GetTraceback(error));
#endif
}

// Called when a cached implementation returned nullptr: a foreign Exception becomes the KernelFailedError that the
// front's kernel_failed words for the decision of `key` (built here when nullptr), with the original as its __cause__
// and __context__, like `raise ... from error`. kabi's own errors pass through unchanged, and so do BaseExceptions
// that are no failure of the kernel (KeyboardInterrupt, SystemExit). Returns nullptr, with the exception to raise set.
PyObject* kernel_failed(PyObject* state, PyObject* const* args, PyObject* key) {
  PyObject* kabi_error = kabi_error_class();
  if (!PyErr_ExceptionMatches(PyExc_Exception) || kabi_error == nullptr || PyErr_ExceptionMatches(kabi_error)) {
    return nullptr;
  }
  PyObject* error = take_raised_exception();
  PyObject* decision = key != nullptr ? Py_NewRef(key) : build_key(args[0], args[1], PyTuple_GET_ITEM(state, kScopeVar));
  PyObject* replacement = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(state, kKernelFailed),
                                                       decision != nullptr ? decision : Py_None, error, nullptr);
  Py_XDECREF(decision);
  if (replacement == nullptr) {
    // Wording the error failed: that failure is raised, with the kernel's exception as its context.
    replacement = take_raised_exception();
    PyException_SetContext(replacement, error);
  } else {
    PyException_SetCause(replacement, Py_NewRef(error));  // both steal a reference
    PyException_SetContext(replacement, error);
  }
  raise_exception(replacement);
  return nullptr;
}

PyObject* call_miss(const MemoAccess& access, PyObject* state, PyObject* const* args, Py_ssize_t nargs,
                    PyObject* out) {
  access.memo->count_miss();
  PyObject* inputs = PyTuple_New(nargs);
  if (inputs == nullptr) return nullptr;
  for (Py_ssize_t i = 0; i < nargs; ++i) PyTuple_SET_ITEM(inputs, i, Py_NewRef(args[i]));
  PyObject* result = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(state, kMiss), inputs, out, nullptr);
  Py_DECREF(inputs);
  return result;
}

PyObject* two_input_front(PyObject* state, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  PyObject* out = Py_None;
  if (kwnames != nullptr) {
    const Py_ssize_t keyword_count = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < keyword_count; ++i) {
      PyObject* keyword = PyTuple_GET_ITEM(kwnames, i);
      if (PyUnicode_Compare(keyword, names().out) != 0) {
        PyErr_Format(PyExc_TypeError, "got an unexpected keyword argument '%U' (the only keyword is out)", keyword);
        return nullptr;
      }
      out = args[nargs + i];
    }
  }
  const auto* access =
      static_cast<const MemoAccess*>(PyCapsule_GetPointer(PyTuple_GET_ITEM(state, kMemoAccess), kMemoAccessName));
  if (access == nullptr) return nullptr;
  if (nargs != 2) return call_miss(*access, state, args, nargs, out);
  // The op's kernels or tuning records changed since these decisions were made: the miss path drops them.
  if (kabi_op_generation(access->op) != access->memo->generation()) {
    return call_miss(*access, state, args, nargs, out);
  }
  const uint64_t memo_epoch = access->memo->epoch();
  MemoKey memo_key;
  PyObject* scope = nullptr;
  if (PyContextVar_Get(PyTuple_GET_ITEM(state, kScopeVar), Py_None, &scope) != 0) return nullptr;
  // With out, the front received exactly (a, b, out) and kwnames ("out",): the memo passes them on as they are.
  const bool memo_keyed = build_memo_key(*access, args, out == Py_None ? 2 : 3, scope, memo_key);
  Py_DECREF(scope);  // the memo holds its own reference to a scope it keys
  if (memo_keyed) {
    if (PyObject* implementation = access->memo->find(memo_key)) {
      access->memo->count_hit();
      PyObject* result = call_implementation(implementation, args, out == Py_None ? nullptr : kwnames);
      return result != nullptr ? result : kernel_failed(state, args, nullptr);
    }
  }
  PyObject* key = build_key(args[0], args[1], PyTuple_GET_ITEM(state, kScopeVar));
  if (key == nullptr) return call_miss(*access, state, args, nargs, out);
  PyObject* implementation = PyDict_GetItemWithError(PyTuple_GET_ITEM(state, kEntries), key);
  if (implementation == nullptr) {
    Py_DECREF(key);
    if (PyErr_Occurred()) return nullptr;
    return call_miss(*access, state, args, nargs, out);
  }
  access->memo->count_hit();
  Py_INCREF(implementation);
  PyObject* result = nullptr;
  if (out == Py_None) {
    if (memo_keyed) access->memo->insert(memo_key, implementation, memo_epoch);
    result = PyObject_Vectorcall(implementation, args, 2, nullptr);
  } else {
    PyObject* inputs = PyTuple_Pack(2, args[0], args[1]);
    result = inputs == nullptr ? nullptr
                               : PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(state, kCallWithOut), implementation,
                                                              key, inputs, out, nullptr);
    Py_XDECREF(inputs);
    // call_with_out has checked out against the decision's result: calls with the same facts may skip that check.
    if (result != nullptr && memo_keyed) access->memo->insert(memo_key, implementation, memo_epoch);
  }
  if (result == nullptr) kernel_failed(state, args, key);
  Py_DECREF(implementation);
  Py_DECREF(key);
  return result;
}

py::object make_two_input_front(const std::string& name, const std::string& doc, const std::string& module,
                                const py::dict& entries, const py::object& scope_var, const py::object& miss,
                                const py::object& call_with_out, const py::object& kernel_failed,
                                const py::object& memo, const std::vector<py::type>& tensor_types) {
  if (!PyContextVar_CheckExact(scope_var.ptr())) throw py::type_error("scope_var must be a contextvars.ContextVar");
  auto access = std::make_unique<MemoAccess>();
  access->memo = memo.cast<DecisionMemo*>();
  access->op = find_op(name);
  for (const py::type& type : tensor_types) {
    auto* type_object = reinterpret_cast<PyTypeObject*>(type.ptr());
    // A type without the exchange API (an older torch) simply never reaches the memo.
    if (const DLPackExchangeAPI* api = exchange_api_of(type_object)) access->tensor_types.emplace_back(type_object, api);
  }
  auto access_capsule = py::reinterpret_steal<py::object>(
      PyCapsule_New(access.get(), kMemoAccessName, [](PyObject* capsule) {
        delete static_cast<MemoAccess*>(PyCapsule_GetPointer(capsule, kMemoAccessName));
      }));
  if (!access_capsule) throw py::error_already_set();
  access.release();
  // The method definition must outlive the function object; fronts are made once per op, so it is kept forever.
  auto* definition = new PyMethodDef{};
  definition->ml_name = (new std::string(name))->c_str();
  definition->ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&two_input_front));
  definition->ml_flags = METH_FASTCALL | METH_KEYWORDS;
  definition->ml_doc = (new std::string(doc))->c_str();
  PyTypeObject* state_type = front_state_type();
  if (state_type == nullptr) throw py::error_already_set();
  auto state = py::reinterpret_steal<py::object>(PyStructSequence_New(state_type));
  if (!state) throw py::error_already_set();
  const py::handle slots[kSlotCount] = {entries, scope_var, miss, call_with_out, kernel_failed, memo, access_capsule};
  for (int i = 0; i < kSlotCount; ++i) PyStructSequence_SetItem(state.ptr(), i, slots[i].inc_ref().ptr());
  py::str module_name(module);
  PyObject* function = PyCFunction_NewEx(definition, state.ptr(), module_name.ptr());
  if (function == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

}  // namespace

void bind_front(py::module_& m) {
  py::class_<DecisionMemo>(m, "DecisionMemo",
                           "The C table in front of an op's decision cache (see csrc/python/decision_memo.hpp).")
      .def(py::init<>())
      .def("clear", &DecisionMemo::clear, "Forget every entry (after the decision cache's dict is cleared).")
      .def_property("generation", &DecisionMemo::generation, &DecisionMemo::set_generation,
                    "The op generation (kabi_op_generation) of the op's decisions; hits under another generation "
                    "become misses.")
      .def("__len__", &DecisionMemo::size)
      .def_property_readonly("hits", &DecisionMemo::hits, "Calls answered from the op's decisions.")
      .def_property_readonly("misses", &DecisionMemo::misses, "Calls that went to the miss path.")
      .def("count_hit", &DecisionMemo::count_hit, "Count a hit of a front whose hit path is in Python.")
      .def("count_miss", &DecisionMemo::count_miss, "Count a miss of a front whose hit path is in Python.")
      .def("reset_counts", &DecisionMemo::reset_counts, "Zero hits and misses (kabi.ops._stats.reset_stats).");
  m.def("make_two_input_front", &make_two_input_front, py::arg("name"), py::arg("doc"), py::arg("module"),
        py::arg("entries"), py::arg("scope_var"), py::arg("miss"), py::arg("call_with_out"),
        py::arg("kernel_failed"), py::arg("memo"),
        py::arg("tensor_types"),
        "The public function of a two-input op: the decision-cache hit path in C, misses and out= in Python; "
        "kernel_failed(key, error) words the error of a cached kernel that raised a foreign exception. "
        "Calls with two tensors of exactly one of tensor_types (and no out) consult memo first.");
}

}  // namespace kabi::python
