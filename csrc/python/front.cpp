// The hit path of every op front, in C: bind the call's arguments, key it, find the decision in the op's table
// (decision_table.hpp), call the remembered implementation. Everything else stays in Python (kabi/ops/_front.py),
// which this function calls back:
//   - a call whose arguments Python must bind (an unexpected keyword, a missing input, a value given twice) goes to
//     `bind_call(*args, **kwargs)`, which raises Python's own error for it or takes the miss path;
//   - a call whose decision is not remembered (or cannot be keyed) goes to `miss(inputs, out, attributes)`;
//   - a call whose `out` the table cannot accept in C goes to `call_with_out(implementation, outputs, inputs, out)`,
//     which checks it against the decision's output descriptors and says what is wrong.
// The function follows kabi.ops' one convention: required inputs positional, optional inputs positional or by
// keyword (None when left out), attributes keyword-only with their defaults, then `out`.
// An op whose inputs carry values the core checks (grouped_mm's offsets) has a `host_value_check(inputs)`, which a
// hit calls first: one decision serves every call of its shapes, whatever their values. Other ops have none and pay
// nothing for it.
// A remembered implementation that raises a foreign exception surfaces as the KernelFailedError that
// `kernel_failed(kernel_name, error)` words, chained to the original; only the error path pays for that.
// A decision whose implementation is a plain native launch runs here, with no Python frame: the data pointers come
// from the views read while keying the call, the output from the decision's allocator or the caller's `out`, the
// stream from the tensors' framework. Whatever that launch cannot take (an `out` of other strides, a launch refused
// for this call's pointers, a decision gone stale) runs the Python implementation, which handles it.
// A decision whose pick differs for calls being captured in a CUDA graph keeps that pick too (Decision's
// when_capturing): such a hit asks the core whether the current stream is being captured and runs the pick of its
// mode, by the same path.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "../core/byte_span.hpp"
#include "bindings.hpp"
#include "decision_table.hpp"
#include "errors.hpp"
#include "prepared_launch.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

constexpr int kMaxParameters = 64;

// What one op's function knows, reached through its `self` (a FrontObject) without any Python lookup.
struct FrontState {
  DecisionTable* table = nullptr;
  py::object table_object;  // keeps the table alive
  int32_t required_inputs = 0;
  int32_t inputs = 0;
  int32_t attribute_count = 0;  // attribute_defaults.size(), kept as an int for the hit path
  bool attribute_required = false;  // some attribute has no default: a call must name it
  // Inputs, then attributes, in schema order; interned. A keyword matches by identity first.
  std::vector<py::object> parameter_names;
  std::vector<py::object> attribute_defaults;  // None as a py::object() (null) where the attribute is required
  py::object out_name;
  py::object out_keyword;  // ("out",): the kwnames of a hit that passes out on
  py::object scope_var, miss, call_with_out, kernel_failed, bind_call;
  py::object host_value_check;  // null for an op without value-checked inputs
};

// The `self` of an op's function: a plain object owning its FrontState, which the function reads with one load (a
// capsule's pointer is read through PyCapsule_GetPointer, which compares the capsule's name on every call).
struct FrontObject {
  PyObject_HEAD
  FrontState* state;
};

void front_object_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  delete reinterpret_cast<FrontObject*>(self)->state;
  type->tp_free(self);
  Py_DECREF(reinterpret_cast<PyObject*>(type));  // instances of a heap type own a reference to it
}

// The type of FrontObject, made once; nullptr with a Python error set if it cannot be made.
PyTypeObject* front_object_type() {
  static PyTypeObject* const type = [] {
    static PyType_Slot slots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(&front_object_dealloc)}, {0, nullptr}};
    static PyType_Spec spec = {"kabi._core.FrontState", static_cast<int>(sizeof(FrontObject)), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION,
                               slots};
    return reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&spec));  // lives as long as the process
  }();
  return type;
}

struct BoundCall {
  // Borrowed: inputs (None when absent), then attribute values; bind() sets all the front reads, so the rest is
  // left unwritten (zeroing it would cost every call).
  PyObject* values[kMaxParameters];
  PyObject* out = nullptr;
};

constexpr int32_t kNotFound = -1;
constexpr int32_t kOutIndex = -2;

// The index of keyword among the parameters a keyword may name (optional inputs and attributes), or kNotFound: by
// identity, then by value.
int32_t keyword_index_by_identity(const FrontState& state, PyObject* keyword) {
  const auto count = static_cast<int32_t>(state.parameter_names.size());
  for (int32_t i = state.required_inputs; i < count; ++i) {
    if (state.parameter_names[static_cast<std::size_t>(i)].ptr() == keyword) return i;
  }
  return kNotFound;
}

int32_t keyword_index_by_value(const FrontState& state, PyObject* keyword) {
  const auto count = static_cast<int32_t>(state.parameter_names.size());
  for (int32_t i = state.required_inputs; i < count; ++i) {
    if (PyUnicode_Compare(state.parameter_names[static_cast<std::size_t>(i)].ptr(), keyword) == 0) return i;
  }
  return kNotFound;
}

// Binds the call as the op function's signature does; false (no Python error set) for anything Python should
// bind and, where it is wrong, explain.
bool bind(const FrontState& state, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, BoundCall& call) {
  const int32_t inputs = state.inputs;
  const int32_t attributes = state.attribute_count;
  if (nargs > inputs) return false;
  const auto given = static_cast<int32_t>(nargs);
  for (int32_t i = 0; i < given; ++i) call.values[i] = args[i];
  for (int32_t i = given; i < inputs; ++i) call.values[i] = i < state.required_inputs ? nullptr : Py_None;
  for (int32_t i = 0; i < attributes; ++i) call.values[inputs + i] = state.attribute_defaults[static_cast<std::size_t>(i)].ptr();
  if (kwnames != nullptr) {
    const Py_ssize_t keywords = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < keywords; ++k) {
      PyObject* keyword = PyTuple_GET_ITEM(kwnames, k);
      // Keywords are interned by the compiler, so identity finds them; equal strings made at run time are
      // compared only when identity finds nothing.
      int32_t index = keyword == state.out_name.ptr() ? kOutIndex : keyword_index_by_identity(state, keyword);
      if (index == kNotFound) {
        index = PyUnicode_Compare(keyword, state.out_name.ptr()) == 0 ? kOutIndex
                                                                       : keyword_index_by_value(state, keyword);
      }
      if (index == kOutIndex) {
        call.out = args[nargs + k] == Py_None ? nullptr : args[nargs + k];
        continue;
      }
      if (index < 0 || index < nargs) return false;
      call.values[index] = args[nargs + k];
    }
  }
  // Keywords only set values: with every required input given by position and every attribute defaulted, none is
  // left unset, and only a call that names some of them needs the check.
  if (given >= state.required_inputs && !state.attribute_required) return true;
  for (int32_t i = 0; i < inputs + attributes; ++i) {
    if (call.values[i] == nullptr) return false;
  }
  return true;
}

PyObject* tuple_of(PyObject* const* items, int32_t count) {
  PyObject* tuple = PyTuple_New(count);
  if (tuple == nullptr) return nullptr;
  for (int32_t i = 0; i < count; ++i) PyTuple_SET_ITEM(tuple, i, Py_NewRef(items[i]));
  return tuple;
}

PyObject* call_miss(FrontState& state, const BoundCall& call) {
  state.table->count_miss();
  PyObject* inputs = tuple_of(call.values, state.inputs);
  PyObject* attributes = inputs != nullptr ? tuple_of(call.values + state.inputs, state.attribute_count) : nullptr;
  PyObject* result = attributes == nullptr ? nullptr
                                           : PyObject_CallFunctionObjArgs(state.miss.ptr(), inputs,
                                                                          call.out != nullptr ? call.out : Py_None,
                                                                          attributes, nullptr);
  Py_XDECREF(inputs);
  Py_XDECREF(attributes);
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

// Called when a remembered implementation returned nullptr: a foreign Exception becomes the KernelFailedError that
// the front's kernel_failed words for `kernel`, with the original as its __cause__ and __context__, like
// `raise ... from error`. kabi's own errors pass through unchanged, and so do BaseExceptions that are no failure of
// the kernel (KeyboardInterrupt, SystemExit). Returns nullptr, with the exception to raise set.
PyObject* kernel_failed(const FrontState& state, PyObject* kernel) {
  PyObject* kabi_error = kabi_error_class();
  if (!PyErr_ExceptionMatches(PyExc_Exception) || kabi_error == nullptr || PyErr_ExceptionMatches(kabi_error)) {
    return nullptr;
  }
  PyObject* error = take_raised_exception();
  PyObject* replacement = PyObject_CallFunctionObjArgs(state.kernel_failed.ptr(), kernel, error, nullptr);
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

// implementation(*inputs), or (*inputs, out=out) when the call gives out; a partial of keywords as its function, the
// keywords after the inputs (BoundKeywords). The references the call needs are taken first, since it may clear the
// table.
PyObject* call_implementation(const FrontState& state, const BoundKeywords& bound, PyObject* implementation,
                              const BoundCall& call) {
  const auto inputs = static_cast<std::size_t>(state.inputs);
  if (bound.function == nullptr && call.out == nullptr) {
    return PyObject_Vectorcall(implementation, call.values, inputs, nullptr);
  }
  // The inputs, the bound keywords' values, out: at most kMaxParameters + 1 (DecisionTable::store).
  PyObject* arguments[kMaxParameters + 1];
  std::memcpy(arguments, call.values, sizeof(PyObject*) * inputs);
  if (bound.function == nullptr) {
    arguments[inputs] = call.out;
    return PyObject_Vectorcall(implementation, arguments, inputs, state.out_keyword.ptr());
  }
  PyObject* function = Py_NewRef(bound.function);
  PyObject* values = Py_NewRef(bound.values);
  PyObject* names = Py_NewRef(call.out == nullptr ? bound.names : bound.names_and_out);
  const Py_ssize_t count = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < count; ++i) arguments[inputs + static_cast<std::size_t>(i)] = PyTuple_GET_ITEM(values, i);
  arguments[inputs + static_cast<std::size_t>(count)] = call.out;  // passed only under names_and_out
  PyObject* result = PyObject_Vectorcall(function, arguments, inputs, names);
  Py_DECREF(names);
  Py_DECREF(values);
  Py_DECREF(function);
  return result;
}

// Runs a found decision; its references are taken first, since the call may store into or clear the table.
PyObject* run_decision(FrontState& state, const Decision& decision, const BoundCall& call) {
  PyObject* implementation = Py_NewRef(decision.implementation);
  PyObject* kernel = Py_NewRef(decision.kernel);
  PyObject* result = nullptr;
  if (call.out == nullptr || state.table->out_matches(decision, call.out)) {
    result = call_implementation(state, decision.bound_keywords, implementation, call);
  } else {
    PyObject* outputs = Py_NewRef(decision.outputs);
    PyObject* inputs = tuple_of(call.values, state.inputs);
    result = inputs == nullptr ? nullptr
                               : PyObject_CallFunctionObjArgs(state.call_with_out.ptr(), implementation, outputs,
                                                              inputs, call.out, nullptr);
    Py_XDECREF(inputs);
    Py_DECREF(outputs);
  }
  if (result == nullptr) kernel_failed(state, kernel);
  Py_DECREF(kernel);
  Py_DECREF(implementation);
  return result;
}

enum class NativeRun { kDone, kFallBack, kFailed };

// Whether a view has exactly the strides of the prepared tensor (same rank, as out_matches has checked).
bool same_strides(const DLTensor& view, const DLTensor& prepared) {
  if (view.ndim != prepared.ndim) return false;
  if (view.ndim == 0) return true;
  if (view.strides == nullptr || prepared.strides == nullptr) return false;
  return std::memcmp(view.strides, prepared.strides, sizeof(int64_t) * static_cast<std::size_t>(view.ndim)) == 0;
}

// The address a launch takes for a view: its first element's. An absent input's view is empty (no data, no offset),
// so it gives nullptr.
void* first_element(const DLTensor& view) { return static_cast<char*>(view.data) + view.byte_offset; }

// Runs a decision's native launch (see the top of this file). kDone sets *result; kFailed leaves an exception set;
// kFallBack leaves none, and the caller runs the Python implementation. Python code may run here (the output's
// allocation), so the decision's references are taken first and the decision is not read after it.
NativeRun run_native(const DecisionTable& table, const Decision& decision, const BoundCall& call, int32_t inputs,
                     const InputData& data, PyObject** result) {
  if (call.out == nullptr && decision.allocate_output == nullptr) return NativeRun::kFallBack;
  const py::object owner = py::reinterpret_borrow<py::object>(decision.native_owner);
  const PreparedLaunch& launch = *decision.native;
  void* pointers[InputData::kMaxInputs + 1];
  for (int32_t i = 0; i < inputs; ++i) pointers[i] = first_element(data.views[i]);
  DLTensor view{};
  py::object output;
  if (call.out != nullptr) {
    if (!table.out_matches(decision, call.out, &view)) return NativeRun::kFallBack;
    output = py::reinterpret_borrow<py::object>(call.out);
  } else {
    const py::object allocate = py::reinterpret_borrow<py::object>(decision.allocate_output);
    output = py::reinterpret_steal<py::object>(PyObject_CallNoArgs(allocate.ptr()));
    if (!output) return NativeRun::kFailed;
  }
  // out_matches read the caller's out already; a new output is read here.
  const FastTensorType* output_type = table.fast_type(output.ptr());
  if (output_type == nullptr || (call.out == nullptr && !output_type->view(output.ptr(), view)) ||
      !same_strides(view, launch.output(0))) {
    return NativeRun::kFallBack;
  }
  pointers[inputs] = first_element(view);
  void* stream = nullptr;
  const DLDevice device = launch.device();
  // The current stream of the tensors' framework for the device (torch's: a side stream, a capture stream).
  if (device.device_type != kDLCPU &&
      output_type->api()->current_work_stream(device.device_type, device.device_id, &stream) != 0) {
    return NativeRun::kFailed;
  }
  const PreparedLaunch::Outcome outcome = launch.launch_with(stream, pointers);
  if (outcome.stale || outcome.status == KABI_STATUS_CONSTRAINT_VIOLATED) return NativeRun::kFallBack;
  if (outcome.status != KABI_STATUS_OK) {
    try {
      raise_status(outcome.status);
    } catch (py::error_already_set& error) {
      error.restore();
    }
    return NativeRun::kFailed;
  }
  *result = output.release().ptr();
  return NativeRun::kDone;
}

// Whether the call's out may overlap the memory of one of its inputs (core::aliased_input, over the inputs' views
// read while keying the call), or the tensors cannot be read here to tell: such a call takes the miss path, which
// refuses an aliasing out by name.
bool out_may_alias_an_input(const DecisionTable& table, const BoundCall& call, const InputData& data,
                            int32_t input_count) {
  if (!data.complete) return true;
  const auto may_alias = [&](PyObject* output) {
    DLTensor view{};
    const FastTensorType* type = table.fast_type(output);
    return type == nullptr || !type->view(output, view) || core::aliased_input(view, data.views, input_count) >= 0;
  };
  if (!PyTuple_Check(call.out)) return may_alias(call.out);
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(call.out); ++i) {
    if (may_alias(PyTuple_GET_ITEM(call.out, i))) return true;
  }
  return false;
}

PyObject* op_front(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  FrontState* state = reinterpret_cast<FrontObject*>(self)->state;
  DecisionTable& table = *state->table;
  BoundCall call;
  if (!bind(*state, args, nargs, kwnames, call)) {
    table.count_miss();
    return PyObject_Vectorcall(state->bind_call.ptr(), args, static_cast<size_t>(nargs), kwnames);
  }
  // The op's kernels or tuning records changed since these decisions were made: the miss path drops them.
  if (kabi_op_generation(table.op()) != table.generation()) return call_miss(*state, call);
  PyObject* scope = nullptr;
  if (PyContextVar_Get(state->scope_var.ptr(), Py_None, &scope) != 0) return nullptr;
  KeyWords key;
  InputData data;
  // The scope keys by identity; the context variable keeps it alive meanwhile, and the table once it stores it.
  const bool keyed = table.make_key(call.values, state->inputs, call.values + state->inputs, state->attribute_count,
                                    scope, key, &data);
  Py_DECREF(scope);
  const Decision* decision = keyed ? table.find(key) : nullptr;
  if (decision == nullptr) return call_miss(*state, call);
  if (call.out != nullptr && out_may_alias_an_input(table, call, data, state->inputs)) return call_miss(*state, call);
  table.count_hit();
  // Whether the call is being captured in a CUDA graph: asked once per call (kNotAsked until then), and only of a
  // decision whose pick differs for captured calls; -1 when it could not be told (a Python error is set).
  constexpr int kNotAsked = -2;
  int capturing = kNotAsked;
  // The pick of the found decision for this call's mode; nullptr when nothing was found, or the mode could not be
  // told.
  const auto for_mode = [&](const Decision* found) -> const Decision* {
    if (found == nullptr || found->when_capturing == nullptr) return found;
    if (capturing == kNotAsked) capturing = table.capturing(found->device);
    if (capturing < 0) return nullptr;
    return capturing == 1 ? found->when_capturing.get() : found;
  };
  // A decision found again after Python code ran (which may have changed the table), or the miss path.
  const auto missed_or_failed = [&]() { return capturing == -1 ? nullptr : call_miss(*state, call); };
  decision = for_mode(decision);
  if (decision == nullptr) return nullptr;
  if (state->host_value_check) {
    PyObject* inputs = tuple_of(call.values, state->inputs);
    PyObject* checked =
        inputs == nullptr ? nullptr : PyObject_CallFunctionObjArgs(state->host_value_check.ptr(), inputs, nullptr);
    Py_XDECREF(inputs);
    if (checked == nullptr) return nullptr;
    Py_DECREF(checked);
    decision = for_mode(table.find(key));
    if (decision == nullptr) return missed_or_failed();
  }
  if (decision->native != nullptr && data.complete) {
    PyObject* result = nullptr;
    switch (run_native(table, *decision, call, state->inputs, data, &result)) {
      case NativeRun::kDone:
        return result;
      case NativeRun::kFailed:
        return nullptr;
      case NativeRun::kFallBack:
        decision = for_mode(table.find(key));
        if (decision == nullptr) return missed_or_failed();
        break;
    }
  }
  return run_decision(*state, *decision, call);
}

py::object make_op_front(const std::string& name, const std::string& doc, const std::string& module,
                         const py::object& table_object, int32_t required_inputs,
                         const std::vector<std::string>& input_names, const std::vector<std::string>& attribute_names,
                         const std::vector<py::object>& attribute_defaults, const py::object& scope_var,
                         const py::object& miss, const py::object& call_with_out, const py::object& kernel_failed,
                         const py::object& bind_call, const py::object& host_value_check) {
  if (!PyContextVar_CheckExact(scope_var.ptr())) throw py::type_error("scope_var must be a contextvars.ContextVar");
  if (input_names.size() + attribute_names.size() > kMaxParameters) {
    throw py::value_error(name + ": an op function takes at most " + std::to_string(kMaxParameters) +
                          " inputs and attributes");
  }
  if (attribute_defaults.size() != attribute_names.size() || required_inputs < 0 ||
      required_inputs > static_cast<int32_t>(input_names.size())) {
    throw py::value_error(name + ": inconsistent op front description");
  }
  auto state = std::make_unique<FrontState>();
  state->table = table_object.cast<DecisionTable*>();
  state->table_object = table_object;
  state->required_inputs = required_inputs;
  state->inputs = static_cast<int32_t>(input_names.size());
  const auto interned = [](const std::string& text) {
    return py::reinterpret_steal<py::object>(PyUnicode_InternFromString(text.c_str()));
  };
  for (const std::string& input : input_names) state->parameter_names.push_back(interned(input));
  for (const std::string& attribute : attribute_names) state->parameter_names.push_back(interned(attribute));
  state->attribute_count = static_cast<int32_t>(attribute_defaults.size());
  for (const py::object& value : attribute_defaults) {
    // An enum attribute's value is keyed by identity with its interned values first (decision_table.cpp), so a
    // default string is interned too: a call that leaves it out then never compares strings.
    PyObject* default_value = value.is_none() ? nullptr : Py_NewRef(value.ptr());
    if (default_value != nullptr && PyUnicode_CheckExact(default_value)) PyUnicode_InternInPlace(&default_value);
    state->attribute_required = state->attribute_required || default_value == nullptr;
    state->attribute_defaults.push_back(py::reinterpret_steal<py::object>(default_value));
  }
  state->out_name = interned("out");
  state->out_keyword = py::make_tuple(state->out_name);
  state->scope_var = scope_var;
  state->miss = miss;
  state->call_with_out = call_with_out;
  state->kernel_failed = kernel_failed;
  state->bind_call = bind_call;
  if (!host_value_check.is_none()) state->host_value_check = host_value_check;
  PyTypeObject* type = front_object_type();
  if (type == nullptr) throw py::error_already_set();
  auto owner = py::reinterpret_steal<py::object>(type->tp_alloc(type, 0));
  if (!owner) throw py::error_already_set();
  reinterpret_cast<FrontObject*>(owner.ptr())->state = state.release();
  // The method definition must outlive the function object; fronts are made once per op, so it is kept forever.
  auto* definition = new PyMethodDef{};
  definition->ml_name = (new std::string(name))->c_str();
  definition->ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&op_front));
  definition->ml_flags = METH_FASTCALL | METH_KEYWORDS;
  definition->ml_doc = (new std::string(doc))->c_str();
  py::str module_name(module);
  PyObject* function = PyCFunction_NewEx(definition, owner.ptr(), module_name.ptr());
  if (function == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

AttributeKind attribute_kind(const std::string& kind) {
  if (kind == "int") return AttributeKind::kInt;
  if (kind == "float") return AttributeKind::kFloat;
  if (kind == "bool") return AttributeKind::kBool;
  if (kind == "enum") return AttributeKind::kEnum;
  throw py::value_error("unknown attribute kind '" + kind + "' (expected int, float, bool or enum)");
}

std::unique_ptr<DecisionTable> make_table(const std::string& op, const std::vector<py::tuple>& attributes,
                                          const std::vector<py::type>& tensor_types, const py::object& facts) {
  std::vector<AttributeSpec> specs;
  for (const py::tuple& attribute : attributes) {
    AttributeSpec spec{attribute_kind(attribute[0].cast<std::string>()), {}, {}};
    const auto values = attribute[1].cast<std::vector<std::string>>();
    std::vector<py::object> aliases;
    if (attribute.size() > 2) aliases = attribute[2].cast<std::vector<py::object>>();
    if (attribute.size() > 2 && aliases.size() != values.size()) {
      throw py::value_error("enum aliases: " + std::to_string(aliases.size()) + " given for " +
                            std::to_string(values.size()) + " enum values (one each, None for none)");
    }
    for (const std::string& value : values) spec.enum_values.push_back(PyUnicode_InternFromString(value.c_str()));
    for (const py::object& alias : aliases) {
      spec.enum_aliases.push_back(alias.is_none() ? nullptr : Py_NewRef(alias.ptr()));
    }
    specs.push_back(std::move(spec));
  }
  FastTensorTypes fast_types;
  for (const py::type& type : tensor_types) {
    // A type without the exchange API (an older torch) is read through facts.
    if (auto fast = FastTensorType::of(reinterpret_cast<PyTypeObject*>(type.ptr()))) {
      fast_types.push_back(std::move(fast));
    }
  }
  return std::make_unique<DecisionTable>(op, std::move(specs), std::move(fast_types), facts.ptr());
}

// The key of a call made from Python (store, find): inputs, attributes and scope as the front reads them.
KeyWords key_of(const DecisionTable& table, const py::tuple& inputs, const py::tuple& attributes,
                const py::object& scope, bool& keyed) {
  KeyWords key;
  std::vector<PyObject*> values;
  for (const py::handle item : inputs) values.push_back(item.ptr());
  for (const py::handle item : attributes) values.push_back(item.ptr());
  keyed = table.make_key(values.data(), static_cast<int32_t>(inputs.size()), values.data() + inputs.size(),
                         static_cast<int32_t>(attributes.size()), scope.ptr(), key);
  return key;
}

}  // namespace

void bind_front(py::module_& m) {
  py::class_<DecisionTable>(m, "DecisionTable",
                            "An op's decisions: the one table its front's hit path reads (csrc/python/decision_table.hpp).")
      .def(py::init(&make_table), py::arg("op"), py::arg("attributes"), py::arg("tensor_types"), py::arg("facts"),
           "attributes: (kind, enum values[, enum aliases]) per attribute, in schema order, an alias being an object "
           "matched by identity that names the enum value of its index (or None); tensor_types: the types read through "
           "DLPack's C exchange API; facts(tensor) -> (shape, strides, dtype code, dtype bits, device type, device "
           "index, requires_grad) for any other value, raising for one that is not a tensor.")
      .def(
          "store",
          [](DecisionTable& table, const py::tuple& inputs, const py::tuple& attributes, const py::object& scope,
             const py::object& implementation, const py::tuple& outputs, const py::str& kernel, uint64_t generation,
             const py::object& native, const py::object& allocate_output, const py::object& when_capturing) {
            bool keyed = false;
            const KeyWords key = key_of(table, inputs, attributes, scope, keyed);
            const auto pick_of = [](const py::object& pick_implementation, const py::object& pick_kernel,
                                    const py::object& launch, const py::object& allocate) {
              return Pick{pick_implementation.ptr(), pick_kernel.ptr(),
                          launch.is_none() ? nullptr : launch.cast<const PreparedLaunch*>(), launch.ptr(),
                          allocate.ptr()};
            };
            const Pick pick = pick_of(implementation, kernel, native, allocate_output);
            if (when_capturing.is_none()) return keyed && table.store(key, scope.ptr(), outputs.ptr(), generation, pick);
            const auto parts = when_capturing.cast<py::tuple>();
            if (parts.size() != 4 || !py::isinstance<py::str>(parts[1])) {
              throw py::value_error("when_capturing must be (implementation, kernel, native, allocate_output)");
            }
            const Pick capturing_pick = pick_of(parts[0], parts[1], parts[2], parts[3]);
            return keyed && table.store(key, scope.ptr(), outputs.ptr(), generation, pick, &capturing_pick);
          },
          py::arg("inputs"), py::arg("attributes"), py::arg("scope"), py::arg("implementation"), py::arg("outputs"),
          py::arg("kernel"), py::arg("generation"), py::arg("native") = py::none(),
          py::arg("allocate_output") = py::none(), py::arg("when_capturing") = py::none(),
          "Remember a decision made at generation (from begin_miss) unless the op changed since; outputs: one "
          "binding descriptor per output. native: the PreparedLaunch that implementation runs and nothing more, "
          "which the hit path then launches itself; allocate_output() -> the output of a one-output op for it. "
          "when_capturing: (implementation, kernel, native, allocate_output) of another pick, which calls run while "
          "the current stream of the outputs' device is being captured into a CUDA graph (stored only by a table "
          "that reads tensors through DLPack's exchange API, which says what that stream is). "
          "Returns whether it was stored (a call that cannot be keyed is not).")
      .def(
          "find",
          [](const DecisionTable& table, const py::tuple& inputs, const py::tuple& attributes,
             const py::object& scope, bool capturing) -> py::object {
            bool keyed = false;
            const KeyWords key = key_of(table, inputs, attributes, scope, keyed);
            const Decision* decision = keyed ? table.find(key) : nullptr;
            if (decision == nullptr) return py::none();
            if (capturing && decision->when_capturing != nullptr) decision = decision->when_capturing.get();
            return py::make_tuple(py::reinterpret_borrow<py::object>(decision->implementation),
                                  py::reinterpret_borrow<py::object>(decision->outputs),
                                  py::reinterpret_borrow<py::object>(decision->kernel));
          },
          py::arg("inputs"), py::arg("attributes"), py::arg("scope"), py::arg("capturing") = false,
          "(implementation, outputs, kernel) of the decision the front would find for this call (capturing: for a "
          "call being captured into a CUDA graph), or None.")
      .def("begin_miss", &DecisionTable::begin_miss,
           "The generation to select and store against; a table of an older generation is emptied first.")
      .def("clear", &DecisionTable::clear, "Forget every decision and adopt the op's current generation.")
      .def_property_readonly("generation", &DecisionTable::generation)
      .def_property_readonly_static("max_entries", [](const py::object&) { return DecisionTable::kMaxEntries; })
      .def("__len__", &DecisionTable::size)
      .def_property_readonly("hits", &DecisionTable::hits, "Calls answered from the table.")
      .def_property_readonly("misses", &DecisionTable::misses, "Calls that went to the miss path.")
      .def("reset_counts", &DecisionTable::reset_counts, "Zero hits and misses.");
  m.def("make_op_front", &make_op_front, py::arg("name"), py::arg("doc"), py::arg("module"), py::arg("table"),
        py::arg("required_inputs"), py::arg("input_names"), py::arg("attribute_names"),
        py::arg("attribute_defaults"), py::arg("scope_var"), py::arg("miss"), py::arg("call_with_out"),
        py::arg("kernel_failed"), py::arg("bind_call"), py::arg("host_value_check") = py::none(),
        "The public function of an op: the hit path in C over table; misses, out= checks and argument errors in "
        "Python. attribute_defaults holds None for an attribute without a default (a None default is not "
        "supported). host_value_check(inputs), when given, runs on every hit before the decision.");
}

}  // namespace kabi::python
