// The decision memo: the first table a two-input op front consults, keyed by raw tensor metadata read in C.
//
// The op's decision cache (a Python dict, kabi/_base/decision_cache.py) is keyed by a tuple of Python objects;
// building, hashing and comparing that tuple costs most of a microsecond per call. The memo keys the same decisions by what
// the tuple is made of, read without creating Python objects: each input's DLPack dtype, device, shape and strides
// (through the tensor type's DLPack C exchange API, `__dlpack_c_exchange_api__`), its requires_grad, and the
// identity of the active kabi.use scope. A memo entry is only ever copied from a dict hit, so the memo is a subset
// of the dict; whoever clears the dict clears the memo after it (DecisionCache does). A call with `out` keys out's
// facts too, and is remembered only after the Python path has accepted that `out` for the decision.
//
// Only exact tensor types named by the front take this path: a subclass may override shape, strides or device in
// Python, and those still go through the tuple key.
#pragma once

#include <Python.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <unordered_map>

#include "dlpack/dlpack.h"

namespace kabi::python {

// The raw facts that decide a two-input op's dispatch, packed as 64-bit words: the scope, then for each tensor (the
// inputs, and `out` when given) its dtype, device, requires_grad, rank, shape and strides.
class MemoKey {
 public:
  static constexpr int kMaxTensors = 3;
  static constexpr int kMaxRank = 8;
  static constexpr int kMaxWords = 1 + kMaxTensors * (3 + 2 * kMaxRank);

  // False when a tensor cannot be keyed here (rank above kMaxRank, no strides, an unusual dtype): use the tuple.
  bool assign(const DLTensor* tensors, const bool* requires_grad, int count, PyObject* scope);

  bool operator==(const MemoKey& other) const;
  std::size_t hash() const { return hash_; }
  PyObject* scope() const { return reinterpret_cast<PyObject*>(static_cast<uintptr_t>(words_[0])); }

 private:
  std::array<int64_t, kMaxWords> words_{};
  int32_t length_ = 0;
  std::size_t hash_ = 0;
};

struct MemoKeyHash {
  std::size_t operator()(const MemoKey& key) const { return key.hash(); }
};

class DecisionMemo {
 public:
  DecisionMemo() = default;
  DecisionMemo(const DecisionMemo&) = delete;
  DecisionMemo& operator=(const DecisionMemo&) = delete;
  ~DecisionMemo();

  // A borrowed reference to the implementation remembered for key, or nullptr.
  PyObject* find(const MemoKey& key) const;
  // Remembers implementation for key unless the memo was cleared since `epoch` was read (an invalidation raced the
  // dict lookup that found it). Holds references to the implementation and to the key's scope.
  void insert(const MemoKey& key, PyObject* implementation, uint64_t epoch);
  // Forgets everything; references are released after the table is empty, since releasing one may run Python code.
  void clear();

  uint64_t epoch() const { return epoch_; }
  std::size_t size() const { return entries_.size(); }

  // The kabi_op_generation the op's decisions were made under (DecisionCache keeps it current). A hit path that
  // sees another generation treats the call as a miss, so a kernel registered behind Python's back (by C++ code in
  // the same process) reaches every decision, while tuning another op leaves these standing.
  uint64_t generation() const { return generation_; }
  void set_generation(uint64_t generation) { generation_ = generation; }

  // Calls of the op's front answered from its decisions (this memo or the dict) and calls that went to the miss
  // path, for kabi.stats(). Plain counters: every caller holds the GIL. Clearing the memo keeps them.
  void count_hit() { ++hits_; }
  void count_miss() { ++misses_; }
  uint64_t hits() const { return hits_; }
  uint64_t misses() const { return misses_; }
  void reset_counts() { hits_ = misses_ = 0; }

 private:
  // A bound on memory for processes that see endlessly many shapes: past it the memo starts over (the dict keeps
  // every decision, so a forgotten entry costs one tuple-keyed lookup).
  static constexpr std::size_t kMaxEntries = 4096;
  std::unordered_map<MemoKey, PyObject*, MemoKeyHash> entries_;
  uint64_t epoch_ = 0;
  uint64_t generation_ = 0;
  uint64_t hits_ = 0;
  uint64_t misses_ = 0;
};

}  // namespace kabi::python
