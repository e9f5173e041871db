#include "decision_memo.hpp"

#include <utility>
#include <vector>

namespace kabi::python {
namespace {

// The DLPack codes torch maps its dtypes to one-to-one; any other code (or vector lanes) is keyed by the tuple.
bool is_plain_dtype(DLDataType dtype) {
  if (dtype.lanes != 1) return false;
  switch (dtype.code) {
    case kDLInt:
    case kDLUInt:
    case kDLFloat:
    case kDLBfloat:
    case kDLComplex:
    case kDLBool:
      return true;
    default:
      return false;
  }
}

int64_t pack_dtype(DLDataType dtype) {
  return static_cast<int64_t>(dtype.code) | static_cast<int64_t>(dtype.bits) << 8 |
         static_cast<int64_t>(dtype.lanes) << 16;
}

int64_t pack_device(DLDevice device) {
  return static_cast<int64_t>(device.device_type) << 32 | static_cast<uint32_t>(device.device_id);
}

std::size_t mix(std::size_t hash, int64_t word) {
  hash ^= static_cast<std::size_t>(word) + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
  return hash;
}

}  // namespace

bool MemoKey::assign(const DLTensor* tensors, const bool* requires_grad, int count, PyObject* scope) {
  if (count < 1 || count > kMaxTensors) return false;
  int32_t position = 0;
  words_[position++] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(scope));
  for (int t = 0; t < count; ++t) {
    const DLTensor& tensor = tensors[t];
    if (tensor.ndim < 0 || tensor.ndim > kMaxRank || !is_plain_dtype(tensor.dtype)) return false;
    if (tensor.ndim > 0 && (tensor.shape == nullptr || tensor.strides == nullptr)) return false;
    words_[position++] = pack_dtype(tensor.dtype) | static_cast<int64_t>(tensor.ndim) << 32 |
                         static_cast<int64_t>(requires_grad[t]) << 40;
    words_[position++] = pack_device(tensor.device);
    for (int32_t i = 0; i < tensor.ndim; ++i) words_[position++] = tensor.shape[i];
    for (int32_t i = 0; i < tensor.ndim; ++i) words_[position++] = tensor.strides[i];
  }
  length_ = position;
  std::size_t hash = static_cast<std::size_t>(length_);
  for (int32_t i = 0; i < length_; ++i) hash = mix(hash, words_[i]);
  hash_ = hash;
  return true;
}

bool MemoKey::operator==(const MemoKey& other) const {
  if (hash_ != other.hash_ || length_ != other.length_) return false;
  for (int32_t i = 0; i < length_; ++i) {
    if (words_[i] != other.words_[i]) return false;
  }
  return true;
}

DecisionMemo::~DecisionMemo() {
  // Fronts live as long as the interpreter; at its exit the references are simply abandoned.
  if (!Py_IsInitialized()) return;
  clear();
}

PyObject* DecisionMemo::find(const MemoKey& key) const {
  const auto found = entries_.find(key);
  return found == entries_.end() ? nullptr : found->second;
}

void DecisionMemo::insert(const MemoKey& key, PyObject* implementation, uint64_t epoch) {
  if (epoch != epoch_) return;
  if (entries_.size() >= kMaxEntries) clear();
  const auto inserted = entries_.emplace(key, implementation);
  if (!inserted.second) return;
  Py_INCREF(implementation);
  Py_XINCREF(key.scope());
}

void DecisionMemo::clear() {
  ++epoch_;
  std::vector<std::pair<PyObject*, PyObject*>> released;
  released.reserve(entries_.size());
  for (const auto& [key, implementation] : entries_) released.emplace_back(implementation, key.scope());
  entries_.clear();
  for (const auto& [implementation, scope] : released) {
    Py_DECREF(implementation);
    Py_XDECREF(scope);
  }
}

}  // namespace kabi::python
