// An op front's decision table: the one place a Python process remembers which implementation serves a call.
//
// A decision is keyed by the raw facts that select it, packed into 64-bit words: the identity of the active
// kabi.use scope; per input, absent, or its DLPack dtype, rank, requires_grad, device, shape and strides; per
// attribute, its value (an enum by its index). Tensors of the types named at construction (torch.Tensor and
// nn.Parameter) are read through DLPack's C exchange API without creating Python objects, and their requires_grad
// through the type's own getter (FastTensorType); any other value is read through the `facts` function given at
// construction (a tensor subclass may define its shape, strides or device in Python), and one that is not a tensor
// cannot be keyed: such calls always take the miss path, which explains them.
//
// Each decision keeps the implementation (a ready-to-call Python callable, the call's attributes bound), the
// output facts of its problem (as binding descriptors, for the check of a caller's `out`; also packed, so a
// matching `out` is accepted in C), and its kernel's name (for the error of a kernel that fails on a hit). A
// decision whose implementation is a plain native launch also keeps that launch (prepared_launch.hpp) and, for an
// op of one output, a callable that allocates the output, so the hit path can launch it with no Python frame; one
// whose implementation is a partial binding keywords keeps its function and keywords (BoundKeywords), so the hit
// path calls the function itself. A decision whose pick differs for calls being captured in a CUDA graph keeps that
// pick as a decision of its own (when_capturing), which the hit path runs while the call's stream is being captured.
//
// The table is bounded: a process that sees endlessly many problems starts over past kMaxEntries. It belongs to
// one op and knows that op's generation (kabi_op_generation): a decision made under another generation is never
// stored, and a front whose table is of an older generation treats every call as a miss, whose begin_miss() then
// empties it. Every method is called with the GIL held.
#pragma once

#include <Python.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dlpack/dlpack.h"
#include "kabi/kabi.h"
#include "prepared_launch.hpp"

namespace kabi::python {

// The words of one key, built on the stack: no allocation on a hit.
class KeyWords {
 public:
  static constexpr int kMaxWords = 512;
  bool push(int64_t word) {
    if (length_ == kMaxWords) return false;
    words_[length_++] = word;
    return true;
  }
  // Room for count more words, which the caller then writes through extend(): one bounds check per tensor.
  int64_t* extend(int32_t count) {
    if (count > kMaxWords - length_) return nullptr;
    int64_t* words = words_ + length_;
    length_ += count;
    return words;
  }
  const int64_t* data() const { return words_; }
  int32_t size() const { return length_; }
  uint64_t hash() const;

 private:
  int64_t words_[kMaxWords];
  int32_t length_ = 0;
};

enum class AttributeKind { kInt, kFloat, kBool, kEnum };

struct AttributeSpec {
  AttributeKind kind;
  std::vector<PyObject*> enum_values;  // strong references, interned
  // Strong references or null, one per enum value: an object that names the value too, matched by identity (the
  // torch.dtype of a dtype name, for an attribute typed by a type variable), so such a call hits as its name does.
  std::vector<PyObject*> enum_aliases;
};

// An implementation that is a functools.partial binding keywords only (a Python kernel with the call's attributes
// bound, kabi.ops._front), taken apart when stored: the hit path calls its function with the keywords after the
// inputs, as the partial would. The partial's own call, given keywords, builds an argument tuple and two dicts every
// time (about 2,900 instructions a call of torch-native linear with its one attribute). function is null for any
// other implementation. References are owned by the table.
struct BoundKeywords {
  PyObject* function = nullptr;
  PyObject* values = nullptr;         // a tuple, in the order of names
  PyObject* names = nullptr;          // a tuple of the keywords' names, interned: the kwnames of a call without out
  PyObject* names_and_out = nullptr;  // names, then "out"
};

// A remembered decision, as the hit path reads it. References are owned by the table: a caller that runs Python
// code (which may store or clear) takes its own first.
struct Decision {
  PyObject* implementation = nullptr;
  PyObject* outputs = nullptr;  // a tuple of one binding descriptor per output
  PyObject* kernel = nullptr;   // str
  std::vector<int64_t> output_words;  // the outputs' dtype, rank, device and shape, packed as keys are
  // The native launch the implementation runs, or nullptr; native_owner is its Python object (kept alive).
  const PreparedLaunch* native = nullptr;
  PyObject* native_owner = nullptr;
  PyObject* allocate_output = nullptr;  // () -> the output tensor, or nullptr: then only a caller's out is written
  BoundKeywords bound_keywords;  // of the implementation, when it is a partial of keywords
  // Where calls captured in a CUDA graph have another pick than this one (a graph-mode pick timed under replay, or
  // the eager pick of a decision made during a capture): that pick, a decision of its own with the same outputs,
  // which the hit path runs while the current stream of `device` is being captured. Null for most decisions, which
  // then pay nothing for it.
  std::unique_ptr<Decision> when_capturing;
  DLDevice device{kDLCPU, 0};  // of the outputs
};

// What DecisionTable::store takes for one pick (see Decision; references are borrowed).
struct Pick {
  PyObject* implementation = nullptr;
  PyObject* kernel = nullptr;
  const PreparedLaunch* native = nullptr;
  PyObject* native_owner = nullptr;
  PyObject* allocate_output = nullptr;
};

// The DLPack views of a call's inputs, read while keying it (no data for an absent one): the hit path takes their data
// pointers, and their memory for the check of a caller's out. complete is false when some input was read through
// `facts` (a tensor subclass), whose memory the table does not know. A view's shape and strides belong to its tensor,
// which the call keeps alive.
struct InputData {
  static constexpr int kMaxInputs = 64;
  DLTensor views[kMaxInputs];
  bool complete = true;
};

// A tensor type whose instances are read in C: through its DLPack exchange API, and requires_grad through the
// type's own getter, called directly (no attribute lookup, ~10 ns less per tensor) while the type's attributes are
// those it was looked up under: CPython's type version tag changes when an attribute of the type or a base is set,
// and the getter is then looked up again.
class FastTensorType {
 public:
  // nullptr when type offers no usable exchange API.
  static std::unique_ptr<FastTensorType> of(PyTypeObject* type);
  FastTensorType(const FastTensorType&) = delete;
  FastTensorType& operator=(const FastTensorType&) = delete;
  ~FastTensorType();

  PyTypeObject* type() const { return type_; }
  const DLPackExchangeAPI* api() const { return api_; }
  // The DLTensor view of an instance; false (no Python error set) when DLPack cannot describe it.
  bool view(PyObject* tensor, DLTensor& view) const {
    if (api_->dltensor_from_py_object_no_sync(tensor, &view) == 0) return true;
    PyErr_Clear();
    return false;
  }
  // requires_grad of an instance: 1, 0, or -1 (no Python error set) when it cannot be read. Inline: the getter
  // found under the type's current attributes is called directly (a getter is only kept under a valid tag).
  int requires_grad(PyObject* tensor) const {
    if (requires_grad_getter_ != nullptr && type_->tp_version_tag == version_tag_) {
      return truth_of(requires_grad_getter_(tensor, requires_grad_closure_));
    }
    return requires_grad_after_lookup(tensor);
  }

 private:
  FastTensorType(PyTypeObject* type, const DLPackExchangeAPI* api);
  // Looks the requires_grad getter up under the type's current attributes.
  void find_requires_grad_getter() const;
  // requires_grad when no getter is known for the type's current attributes: looked up again, or read by attribute.
  int requires_grad_after_lookup(PyObject* tensor) const;
  // A requires_grad value (a new reference, or nullptr with an error set) as 1 or 0; -1 (no Python error set) when
  // it is missing or not a bool.
  static int truth_of(PyObject* value) {
    if (value == nullptr) {
      PyErr_Clear();
      return -1;
    }
    const int truth = value == Py_True ? 1 : value == Py_False ? 0 : -1;
    Py_DECREF(value);
    return truth;
  }

  PyTypeObject* type_;
  const DLPackExchangeAPI* api_;
  // The getter's owner (a getset descriptor, kept alive), or nullptr: requires_grad is then read by attribute lookup.
  mutable PyObject* requires_grad_descriptor_ = nullptr;
  mutable getter requires_grad_getter_ = nullptr;
  mutable void* requires_grad_closure_ = nullptr;
  mutable unsigned int version_tag_ = 0;  // the type's version tag at the lookup; 0: none valid
};

using FastTensorTypes = std::vector<std::unique_ptr<FastTensorType>>;

class DecisionTable {
 public:
  DecisionTable(std::string op, std::vector<AttributeSpec> attributes, FastTensorTypes fast_types, PyObject* facts);
  DecisionTable(const DecisionTable&) = delete;
  DecisionTable& operator=(const DecisionTable&) = delete;
  ~DecisionTable();

  // The key of a call: inputs (None for an absent optional one), attribute values in schema order, the scope.
  // False, with no Python error set, when a value cannot be keyed (the call then takes the miss path). With
  // `data`, also the inputs' views.
  bool make_key(PyObject* const* inputs, int32_t input_count, PyObject* const* attributes, int32_t attribute_count,
                PyObject* scope, KeyWords& key, InputData* data = nullptr) const;

  // The decision for key, or nullptr.
  const Decision* find(const KeyWords& key) const;

  // Remembers a decision made at `generation` unless the op's kernels or tuning records have changed since.
  // outputs is a tuple of the outputs' binding descriptors; pick the implementation, its kernel's name and, when it
  // is a plain native launch, that launch (with its Python object) and what allocates its one output;
  // when_capturing, if given, the pick for calls being captured in a CUDA graph, where that is another one (only a
  // table with a fast tensor type, which can ask for the current stream, stores such a decision). Returns whether
  // it was stored.
  bool store(const KeyWords& key, PyObject* scope, PyObject* outputs, uint64_t generation, const Pick& pick,
             const Pick* when_capturing = nullptr);

  // Whether the current stream of `device` (asked through the first fast type's exchange API) is being captured
  // into a CUDA graph: 1 or 0; -1 with a Python error set when it cannot be told.
  int capturing(DLDevice device) const;

  // Whether `out` (one tensor, or a tuple of one per output) has exactly the decision's output facts, read in C.
  // False also when it cannot be read here; the Python path then checks it and says what is wrong. With `view`
  // and one output, also the view it read.
  bool out_matches(const Decision& decision, PyObject* out, DLTensor* view = nullptr) const;

  // The fast type of value, or nullptr.
  const FastTensorType* fast_type(PyObject* value) const;

  // The generation to select and store against: a table of an older generation is emptied first.
  uint64_t begin_miss();
  // Forgets every decision and adopts the op's current generation. References are released after the table is
  // empty, since releasing one may run Python code.
  void clear();

  kabi_op op() const { return op_; }
  uint64_t generation() const { return generation_; }
  std::size_t size() const { return entries_.size(); }
  const std::string& op_name() const { return op_name_; }

  void count_hit() { ++hits_; }
  void count_miss() { ++misses_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  void reset_counts() { hits_ = misses_ = 0; }

  static constexpr std::size_t kMaxEntries = 4096;

 private:
  struct Entry {
    std::vector<int64_t> words;
    uint64_t hash = 0;
    Decision decision;
    PyObject* scope = nullptr;
  };

  Decision decision_of(const Pick& pick, PyObject* outputs, const std::vector<int64_t>& output_words,
                       DLDevice device) const;
  // A value of no fast type, read through facts_.
  bool push_facts(PyObject* value, KeyWords& key) const;
  bool push_attribute(const AttributeSpec& spec, PyObject* value, KeyWords& key) const;
  int64_t slot_of(const int64_t* words, int32_t length, uint64_t hash) const;
  void grow_slots();

  std::string op_name_;
  kabi_op op_ = nullptr;
  std::vector<AttributeSpec> attributes_;
  FastTensorTypes fast_types_;
  PyObject* facts_ = nullptr;
  std::vector<Entry> entries_;
  // Open addressing over entries_ (index + 1; 0 is empty): no deletions but a whole clear, so linear probing.
  std::vector<uint32_t> slots_;
  uint64_t generation_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

// The fast type of value (its exact type among fast_types), or nullptr.
inline const FastTensorType* fast_type_of(const FastTensorTypes& fast_types, PyObject* value) {
  for (const auto& fast : fast_types) {
    if (fast->type() == Py_TYPE(value)) return fast.get();
  }
  return nullptr;
}

}  // namespace kabi::python
