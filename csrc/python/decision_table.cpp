#include "decision_table.hpp"

#include <cstring>

#include "bindings.hpp"
#include "dlpack_exchange.hpp"
#include "errors.hpp"

namespace kabi::python {
namespace {

constexpr int kMaxRank = 16;
// The word of an absent optional input: no present tensor's first word has these bits (see tensor_word).
constexpr int64_t kAbsent = int64_t{1} << 62;

// The DLPack codes torch maps its dtypes to one-to-one, as a mask of 1 << code; any other code (or vector lanes) is
// not keyed.
constexpr uint32_t kPlainDtypeCodes = 1u << kDLInt | 1u << kDLUInt | 1u << kDLFloat | 1u << kDLBfloat |
                                      1u << kDLComplex | 1u << kDLBool | 1u << kDLFloat8_e4m3fn |
                                      1u << kDLFloat8_e5m2;

bool is_plain_dtype(DLDataType dtype) {
  return dtype.lanes == 1 && dtype.code < 32 && (kPlainDtypeCodes >> dtype.code & 1u) != 0;
}

int64_t tensor_word(int64_t dtype_code, int64_t dtype_bits, int64_t rank, bool requires_grad) {
  return dtype_code | dtype_bits << 8 | rank << 24 | static_cast<int64_t>(requires_grad) << 40;
}

int64_t device_word(int64_t device_type, int64_t device_index) {
  return device_type << 32 | static_cast<uint32_t>(device_index);
}

DLDevice device_of_word(int64_t word) {
  return DLDevice{static_cast<DLDeviceType>(word >> 32), static_cast<int32_t>(static_cast<uint32_t>(word))};
}

bool push_view(const DLTensor& view, bool requires_grad, KeyWords& key) {
  if (view.ndim < 0 || view.ndim > kMaxRank || !is_plain_dtype(view.dtype)) return false;
  if (view.ndim > 0 && (view.shape == nullptr || view.strides == nullptr)) return false;
  int64_t* words = key.extend(2 + 2 * view.ndim);
  if (words == nullptr) return false;
  words[0] = tensor_word(view.dtype.code, view.dtype.bits, view.ndim, requires_grad);
  words[1] = device_word(view.device.device_type, view.device.device_id);
  // One loop, not two memcpy calls: a few words each, where a library call costs more than the copy.
  const int32_t dims = view.ndim;
  for (int32_t d = 0; d < dims; ++d) {
    words[2 + d] = view.shape[d];
    words[2 + dims + d] = view.strides[d];
  }
  return true;
}

PyObject* requires_grad_name() {
  static PyObject* const name = PyUnicode_InternFromString("requires_grad");  // lives as long as the process
  return name;
}

// The items of a tuple of ints, pushed; false if it is not one.
bool push_ints(PyObject* sequence, Py_ssize_t expected, KeyWords& key) {
  if (!PyTuple_Check(sequence) || PyTuple_GET_SIZE(sequence) != expected) return false;
  for (Py_ssize_t i = 0; i < expected; ++i) {
    const long long value = PyLong_AsLongLong(PyTuple_GET_ITEM(sequence, i));
    if (value == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    if (!key.push(value)) return false;
  }
  return true;
}

// The descriptor (data, shape, strides, dtype code, dtype bits, device type, device index) of the binding, as words:
// the packing of push_view without requires_grad.
bool descriptor_words(PyObject* descriptor, std::vector<int64_t>& words) {
  if (!PyTuple_Check(descriptor) || PyTuple_GET_SIZE(descriptor) != 7) return false;
  PyObject* shape = PyTuple_GET_ITEM(descriptor, 1);
  if (!PyTuple_Check(shape) || PyTuple_GET_SIZE(shape) > kMaxRank) return false;
  long long scalars[4];
  for (int i = 0; i < 4; ++i) {
    scalars[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(descriptor, 3 + i));
    if (scalars[i] == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
  }
  const Py_ssize_t rank = PyTuple_GET_SIZE(shape);
  words.push_back(tensor_word(scalars[0], scalars[1], rank, false));
  words.push_back(device_word(scalars[2], scalars[3]));
  for (Py_ssize_t i = 0; i < rank; ++i) {
    const long long size = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
    if (size == -1 && PyErr_Occurred()) {
      PyErr_Clear();
      return false;
    }
    words.push_back(size);
  }
  return true;
}

// Whether a tensor view has the facts `words` hold from `position` on (dtype, rank, device, shape), advancing it.
bool view_has(const DLTensor& view, const std::vector<int64_t>& words, std::size_t& position) {
  if (position + 2 + static_cast<std::size_t>(view.ndim) > words.size()) return false;
  if (view.dtype.lanes != 1 || words[position] != tensor_word(view.dtype.code, view.dtype.bits, view.ndim, false) ||
      words[position + 1] != device_word(view.device.device_type, view.device.device_id)) {
    return false;
  }
  position += 2;
  for (int32_t i = 0; i < view.ndim; ++i) {
    if (view.shape[i] != words[position++]) return false;
  }
  return true;
}

PyObject* out_name() {
  static PyObject* const name = PyUnicode_InternFromString("out");  // lives as long as the process
  return name;
}

// functools.partial, or nullptr (no Python error set) if it cannot be imported.
PyObject* partial_type() {
  static PyObject* const type = [] {
    PyObject* functools = PyImport_ImportModule("functools");
    PyObject* partial = functools != nullptr ? PyObject_GetAttrString(functools, "partial") : nullptr;
    Py_XDECREF(functools);
    if (partial == nullptr) PyErr_Clear();
    return partial;  // lives as long as the process
  }();
  return type;
}

void release(BoundKeywords& bound) {
  Py_XDECREF(bound.function);
  Py_XDECREF(bound.values);
  Py_XDECREF(bound.names);
  Py_XDECREF(bound.names_and_out);
  bound = BoundKeywords{};
}

// Releases a decision's references, those of its pick for captured calls included.
void release(Decision& decision) {
  Py_DECREF(decision.implementation);
  Py_DECREF(decision.outputs);
  Py_DECREF(decision.kernel);
  Py_XDECREF(decision.native_owner);
  Py_XDECREF(decision.allocate_output);
  release(decision.bound_keywords);
  if (decision.when_capturing != nullptr) release(*decision.when_capturing);
}

// The function and keywords of an exact functools.partial that binds at most max_keywords keywords (str, none of them
// "out") and no positional argument; otherwise none (function null, no Python error set). A subclass, which may
// define its own call, is called as it is.
BoundKeywords bound_keywords_of(PyObject* implementation, std::size_t max_keywords) {
  BoundKeywords bound;
  PyObject* partial = partial_type();
  if (partial == nullptr || reinterpret_cast<PyObject*>(Py_TYPE(implementation)) != partial) return bound;
  PyObject* function = PyObject_GetAttrString(implementation, "func");
  PyObject* arguments = PyObject_GetAttrString(implementation, "args");
  PyObject* keywords = PyObject_GetAttrString(implementation, "keywords");
  const bool usable = function != nullptr && arguments != nullptr && keywords != nullptr && PyTuple_Check(arguments) &&
                      PyTuple_GET_SIZE(arguments) == 0 && PyDict_Check(keywords) && PyDict_GET_SIZE(keywords) > 0 &&
                      static_cast<std::size_t>(PyDict_GET_SIZE(keywords)) <= max_keywords;
  if (usable) {
    const Py_ssize_t count = PyDict_GET_SIZE(keywords);
    bound.values = PyTuple_New(count);
    bound.names = PyTuple_New(count);
    bound.names_and_out = PyTuple_New(count + 1);
    Py_ssize_t position = 0, index = 0;
    PyObject *name = nullptr, *value = nullptr;
    bool complete = bound.values != nullptr && bound.names != nullptr && bound.names_and_out != nullptr;
    while (complete && PyDict_Next(keywords, &position, &name, &value)) {
      complete = PyUnicode_CheckExact(name) && PyUnicode_Compare(name, out_name()) != 0;
      if (!complete) break;
      PyObject* interned = Py_NewRef(name);
      PyUnicode_InternInPlace(&interned);
      PyTuple_SET_ITEM(bound.names, index, interned);
      PyTuple_SET_ITEM(bound.names_and_out, index, Py_NewRef(interned));
      PyTuple_SET_ITEM(bound.values, index, Py_NewRef(value));
      ++index;
    }
    if (complete) {
      PyTuple_SET_ITEM(bound.names_and_out, count, Py_NewRef(out_name()));
      bound.function = Py_NewRef(function);
    } else {
      release(bound);
    }
  }
  Py_XDECREF(function);
  Py_XDECREF(arguments);
  Py_XDECREF(keywords);
  PyErr_Clear();
  return bound;
}

}  // namespace

uint64_t KeyWords::hash() const {
  // FNV-1a over whole words (two operations a word on the hit path), in two lanes of alternate words, so that two
  // chains of multiplications run side by side, four words a turn of the loop. A product carries low bits upward
  // only, so the high half is folded down for the table's slot, which takes the low bits.
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t even = 0xcbf29ce484222325ull ^ static_cast<uint64_t>(length_);
  uint64_t odd = 0x84222325cbf29ce4ull;
  int32_t i = 0;
  for (; i + 3 < length_; i += 4) {
    even = (even ^ static_cast<uint64_t>(words_[i])) * kPrime;
    odd = (odd ^ static_cast<uint64_t>(words_[i + 1])) * kPrime;
    even = (even ^ static_cast<uint64_t>(words_[i + 2])) * kPrime;
    odd = (odd ^ static_cast<uint64_t>(words_[i + 3])) * kPrime;
  }
  for (; i < length_; ++i) even = (even ^ static_cast<uint64_t>(words_[i])) * kPrime;
  const uint64_t hash = (even ^ (odd >> 32 | odd << 32)) * kPrime;
  return hash ^ (hash >> 29);
}

std::unique_ptr<FastTensorType> FastTensorType::of(PyTypeObject* type) {
  const DLPackExchangeAPI* api = cached_exchange_api_of(type);
  if (api == nullptr) return nullptr;
  return std::unique_ptr<FastTensorType>(new FastTensorType(type, api));
}

FastTensorType::FastTensorType(PyTypeObject* type, const DLPackExchangeAPI* api)
    : type_(reinterpret_cast<PyTypeObject*>(Py_NewRef(reinterpret_cast<PyObject*>(type)))), api_(api) {
  find_requires_grad_getter();
}

FastTensorType::~FastTensorType() {
  if (!Py_IsInitialized()) return;
  Py_XDECREF(requires_grad_descriptor_);
  Py_DECREF(reinterpret_cast<PyObject*>(type_));
}

void FastTensorType::find_requires_grad_getter() const {
  Py_CLEAR(requires_grad_descriptor_);
  requires_grad_getter_ = nullptr;
  requires_grad_closure_ = nullptr;
  // The lookup also gives the type a valid version tag, which any later change to its attributes resets.
  PyObject* descriptor = PyObject_GetAttr(reinterpret_cast<PyObject*>(type_), requires_grad_name());
  version_tag_ = type_->tp_version_tag;
  if (descriptor == nullptr) {
    PyErr_Clear();
    return;
  }
  const bool plain_getter = Py_IS_TYPE(descriptor, &PyGetSetDescr_Type) &&
                            reinterpret_cast<PyGetSetDescrObject*>(descriptor)->d_getset->get != nullptr;
  if (!plain_getter || version_tag_ == 0) {
    Py_DECREF(descriptor);
    return;
  }
  const PyGetSetDef* definition = reinterpret_cast<PyGetSetDescrObject*>(descriptor)->d_getset;
  requires_grad_descriptor_ = descriptor;
  requires_grad_getter_ = definition->get;
  requires_grad_closure_ = definition->closure;
}

int FastTensorType::requires_grad_after_lookup(PyObject* tensor) const {
  if (type_->tp_version_tag != version_tag_) find_requires_grad_getter();
  if (requires_grad_getter_ != nullptr && type_->tp_version_tag == version_tag_) {
    return truth_of(requires_grad_getter_(tensor, requires_grad_closure_));
  }
  return truth_of(PyObject_GetAttr(tensor, requires_grad_name()));
}

DecisionTable::DecisionTable(std::string op, std::vector<AttributeSpec> attributes, FastTensorTypes fast_types,
                             PyObject* facts)
    : op_name_(std::move(op)),
      op_(find_op(op_name_)),
      attributes_(std::move(attributes)),
      fast_types_(std::move(fast_types)),
      facts_(Py_NewRef(facts)),
      generation_(kabi_op_generation(op_)) {
  partial_type();  // imported here, so that store() runs no Python code of an import
}

DecisionTable::~DecisionTable() {
  // Tables of ops live as long as the interpreter; at its exit the references are simply abandoned.
  if (!Py_IsInitialized()) return;
  clear();
  for (AttributeSpec& spec : attributes_) {
    for (PyObject* name : spec.enum_values) Py_DECREF(name);
    for (PyObject* alias : spec.enum_aliases) Py_XDECREF(alias);
  }
  Py_DECREF(facts_);
}

bool DecisionTable::push_facts(PyObject* value, KeyWords& key) const {
  // (shape, strides, dtype code, dtype bits, device type, device index, requires_grad), or an exception: not a
  // tensor kabi can describe.
  PyObject* facts = PyObject_CallOneArg(facts_, value);
  if (facts == nullptr) {
    PyErr_Clear();
    return false;
  }
  bool pushed = PyTuple_Check(facts) && PyTuple_GET_SIZE(facts) == 7 && PyTuple_Check(PyTuple_GET_ITEM(facts, 0));
  if (pushed) {
    const Py_ssize_t rank = PyTuple_GET_SIZE(PyTuple_GET_ITEM(facts, 0));
    long long scalars[4];
    for (int i = 0; i < 4 && pushed; ++i) {
      scalars[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(facts, 2 + i));
      pushed = !(scalars[i] == -1 && PyErr_Occurred());
    }
    pushed = pushed && rank <= kMaxRank &&
             key.push(tensor_word(scalars[0], scalars[1], rank, PyTuple_GET_ITEM(facts, 6) == Py_True)) &&
             key.push(device_word(scalars[2], scalars[3])) && push_ints(PyTuple_GET_ITEM(facts, 0), rank, key) &&
             push_ints(PyTuple_GET_ITEM(facts, 1), rank, key);
  }
  Py_DECREF(facts);
  PyErr_Clear();
  return pushed;
}

bool DecisionTable::push_attribute(const AttributeSpec& spec, PyObject* value, KeyWords& key) const {
  switch (spec.kind) {
    case AttributeKind::kBool:
      return PyBool_Check(value) && key.push(value == Py_True);
    case AttributeKind::kInt: {
      if (!PyLong_Check(value) || PyBool_Check(value)) return false;
      int overflow = 0;
      const long long integer = PyLong_AsLongLongAndOverflow(value, &overflow);
      if (overflow != 0 || (integer == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return false;
      }
      return key.push(integer);
    }
    case AttributeKind::kFloat: {
      // An int is a float attribute's value too (the Python check accepts it): keyed by the float it stands for.
      if (PyBool_Check(value) || !(PyFloat_Check(value) || PyLong_Check(value))) return false;
      const double real = PyFloat_AsDouble(value);
      if (real == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return false;
      }
      int64_t bits = 0;
      std::memcpy(&bits, &real, sizeof bits);
      return key.push(bits);
    }
    case AttributeKind::kEnum: {
      const auto count = static_cast<int64_t>(spec.enum_values.size());
      if (!PyUnicode_Check(value)) {
        for (int64_t index = 0; index < static_cast<int64_t>(spec.enum_aliases.size()); ++index) {
          if (spec.enum_aliases[static_cast<std::size_t>(index)] == value) return key.push(index);
        }
        return false;
      }
      for (int64_t index = 0; index < count; ++index) {
        if (spec.enum_values[static_cast<std::size_t>(index)] == value) return key.push(index);
      }
      for (int64_t index = 0; index < count; ++index) {
        if (PyUnicode_Compare(spec.enum_values[static_cast<std::size_t>(index)], value) == 0) return key.push(index);
      }
      PyErr_Clear();
      return false;
    }
  }
  return false;
}

bool DecisionTable::make_key(PyObject* const* inputs, int32_t input_count, PyObject* const* attributes,
                             int32_t attribute_count, PyObject* scope, KeyWords& key, InputData* data) const {
  if (attribute_count != static_cast<int32_t>(attributes_.size())) return false;
  if (input_count > InputData::kMaxInputs) return false;
  if (!key.push(static_cast<int64_t>(reinterpret_cast<uintptr_t>(scope)))) return false;
  InputData unused;
  InputData& read = data != nullptr ? *data : unused;
  for (int32_t i = 0; i < input_count; ++i) {
    PyObject* value = inputs[i];
    DLTensor& view = read.views[i];
    view = DLTensor{};
    if (value == Py_None) {
      if (!key.push(kAbsent)) return false;
    } else if (const FastTensorType* fast = fast_type_of(fast_types_, value)) {
      // A tensor DLPack cannot describe (e.g. its dtype) takes the miss path, which handles it.
      if (!fast->view(value, view)) return false;
      const int requires_grad = fast->requires_grad(value);
      if (requires_grad < 0 || !push_view(view, requires_grad == 1, key)) return false;
    } else {
      read.complete = false;
      if (!push_facts(value, key)) return false;
    }
  }
  for (int32_t i = 0; i < attribute_count; ++i) {
    if (!push_attribute(attributes_[static_cast<std::size_t>(i)], attributes[i], key)) return false;
  }
  return true;
}

int64_t DecisionTable::slot_of(const int64_t* words, int32_t length, uint64_t hash) const {
  if (slots_.empty()) return -1;
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t slot = hash & mask;; slot = (slot + 1) & mask) {
    const uint32_t index = slots_[slot];
    if (index == 0) return -static_cast<int64_t>(slot) - 2;
    const Entry& entry = entries_[index - 1];
    if (entry.hash == hash && entry.words.size() == static_cast<std::size_t>(length) &&
        std::memcmp(entry.words.data(), words, sizeof(int64_t) * static_cast<std::size_t>(length)) == 0) {
      return static_cast<int64_t>(slot);
    }
  }
}

const Decision* DecisionTable::find(const KeyWords& key) const {
  const int64_t slot = slot_of(key.data(), key.size(), key.hash());
  return slot >= 0 ? &entries_[slots_[static_cast<std::size_t>(slot)] - 1].decision : nullptr;
}

void DecisionTable::grow_slots() {
  // Kept at most half full, so a probe ends soon.
  const std::size_t capacity = slots_.empty() ? 64 : slots_.size() * 2;
  slots_.assign(capacity, 0);
  const std::size_t mask = capacity - 1;
  for (std::size_t index = 0; index < entries_.size(); ++index) {
    std::size_t slot = entries_[index].hash & mask;
    while (slots_[slot] != 0) slot = (slot + 1) & mask;
    slots_[slot] = static_cast<uint32_t>(index + 1);
  }
}

// The decision of one pick (references taken). The hit path launches ops of one output natively (and a launch
// prepared for it, one input more than the call's keyed inputs would not be).
Decision DecisionTable::decision_of(const Pick& pick, PyObject* outputs, const std::vector<int64_t>& output_words,
                                    DLDevice device) const {
  Decision decision{Py_NewRef(pick.implementation), Py_NewRef(outputs), Py_NewRef(pick.kernel), output_words};
  decision.device = device;
  const PreparedLaunch* native = pick.native;
  if (PyTuple_GET_SIZE(outputs) == 1 && native != nullptr && pick.native_owner != nullptr &&
      native->tensor_count() == native->input_count() + 1) {
    decision.native = native;
    decision.native_owner = Py_NewRef(pick.native_owner);
    decision.allocate_output = pick.allocate_output != nullptr && pick.allocate_output != Py_None
                                   ? Py_NewRef(pick.allocate_output)
                                   : nullptr;
  }
  // The front's argument array holds the inputs, the op's attributes and out: a partial binds as many keywords at most.
  decision.bound_keywords = bound_keywords_of(pick.implementation, attributes_.size());
  return decision;
}

bool DecisionTable::store(const KeyWords& key, PyObject* scope, PyObject* outputs, uint64_t generation,
                          const Pick& pick, const Pick* when_capturing) {
  if (kabi_op_generation(op_) != generation || generation != generation_) return false;
  // Without a fast type the hit path cannot tell whether a call is being captured.
  if (when_capturing != nullptr && fast_types_.empty()) return false;
  std::vector<int64_t> output_words;
  if (!PyTuple_Check(outputs) || PyTuple_GET_SIZE(outputs) == 0) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(outputs); ++i) {
    if (!descriptor_words(PyTuple_GET_ITEM(outputs, i), output_words)) return false;
  }
  // descriptor_words read the device of the first output as its second word.
  const DLDevice device = device_of_word(output_words[1]);
  const uint64_t hash = key.hash();
  if (slot_of(key.data(), key.size(), hash) >= 0) return true;  // another call stored the same decision first
  if (entries_.size() >= kMaxEntries) clear();
  if ((entries_.size() + 1) * 2 > slots_.size()) grow_slots();
  Entry entry;
  entry.words.assign(key.data(), key.data() + key.size());
  entry.hash = hash;
  entry.decision = decision_of(pick, outputs, output_words, device);
  if (when_capturing != nullptr) {
    entry.decision.when_capturing =
        std::make_unique<Decision>(decision_of(*when_capturing, outputs, output_words, device));
  }
  entry.scope = Py_XNewRef(scope);
  entries_.push_back(std::move(entry));
  const int64_t slot = slot_of(key.data(), key.size(), hash);
  slots_[static_cast<std::size_t>(-slot - 2)] = static_cast<uint32_t>(entries_.size());
  return true;
}

int DecisionTable::capturing(DLDevice device) const {
  if (device.device_type == kDLCPU || fast_types_.empty()) return 0;
  void* stream = nullptr;
  if (fast_types_.front()->api()->current_work_stream(device.device_type, device.device_id, &stream) != 0) return -1;
  int32_t mode = KABI_EXECUTION_EAGER;
  const kabi_status status = kabi_stream_execution_mode(device, stream, &mode);
  if (status != KABI_STATUS_OK) {
    try {
      raise_status(status);
    } catch (pybind11::error_already_set& error) {
      error.restore();
    }
    return -1;
  }
  return mode == KABI_EXECUTION_GRAPH ? 1 : 0;
}

bool DecisionTable::out_matches(const Decision& decision, PyObject* out, DLTensor* view) const {
  const std::vector<int64_t>& words = decision.output_words;
  const Py_ssize_t output_count = PyTuple_GET_SIZE(decision.outputs);
  std::size_t position = 0;
  DLTensor unused{};
  const auto matches = [&](PyObject* tensor, DLTensor& read) {
    const FastTensorType* fast = fast_type_of(fast_types_, tensor);
    return fast != nullptr && fast->view(tensor, read) && view_has(read, words, position);
  };
  if (output_count == 1) return matches(out, view != nullptr ? *view : unused);
  if (!PyTuple_Check(out) || PyTuple_GET_SIZE(out) != output_count) return false;
  for (Py_ssize_t i = 0; i < output_count; ++i) {
    if (!matches(PyTuple_GET_ITEM(out, i), unused)) return false;
  }
  return true;
}

const FastTensorType* DecisionTable::fast_type(PyObject* value) const { return fast_type_of(fast_types_, value); }

uint64_t DecisionTable::begin_miss() {
  if (kabi_op_generation(op_) != generation_) clear();
  return generation_;
}

void DecisionTable::clear() {
  std::vector<Entry> released;
  released.swap(entries_);
  slots_.clear();
  generation_ = kabi_op_generation(op_);
  for (Entry& entry : released) {
    release(entry.decision);
    Py_XDECREF(entry.scope);
  }
}

}  // namespace kabi::python
