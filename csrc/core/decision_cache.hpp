// kabi_call's per-op memory of selections: exact problem (dims, batch shape, layouts, type bindings, given inputs,
// attributes, device, data alignment, the powers of two dividing the inputs' strides) and forcing -> kernel, valid
// while the op's generation is unchanged. Keys are plain values, so a hit costs a hash and a compare, no allocation.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kabi/kabi.h"

namespace kabi::core {

struct Kernel;

// Per input, its rank and how many times 2 divides the stride of each of its last KABI_MAX_DIMS dimensions (64 for a
// stride of 0): a device binary may assume a stride is a multiple of a power of two (kabi_launch_param.divisible_by),
// and two calls that agree here pass or fail every such assumption alike.
struct StrideTwos {
  std::array<uint8_t, KABI_MAX_TENSORS> ranks{};
  std::array<std::array<uint8_t, KABI_MAX_DIMS>, KABI_MAX_TENSORS> twos{};

  explicit StrideTwos(const kabi_args& args) {
    for (int32_t i = 0; i < args.num_inputs && i < KABI_MAX_TENSORS; ++i) {
      const DLTensor& tensor = args.inputs[i];
      if (tensor.dtype.bits == 0 || tensor.ndim < 0) continue;  // absent
      ranks[static_cast<size_t>(i)] = static_cast<uint8_t>(tensor.ndim);
      int64_t contiguous_stride = 1;
      for (int32_t from_last = 0; from_last < tensor.ndim && from_last < KABI_MAX_DIMS; ++from_last) {
        const int32_t axis = tensor.ndim - 1 - from_last;
        const int64_t stride = tensor.strides != nullptr ? tensor.strides[axis] : contiguous_stride;
        contiguous_stride *= tensor.shape[axis];
        twos[static_cast<size_t>(i)][static_cast<size_t>(from_last)] =
            static_cast<uint8_t>(stride == 0 ? 64 : __builtin_ctzll(static_cast<uint64_t>(stride)));
      }
    }
  }

  bool operator==(const StrideTwos& other) const { return ranks == other.ranks && twos == other.twos; }
};

struct DecisionKey {
  std::array<int64_t, KABI_MAX_DIMS> dims{};
  std::array<int64_t, KABI_MAX_BATCH_RANK> batch_shape{};
  std::array<uint32_t, KABI_MAX_TENSORS> layouts{};
  std::array<uint32_t, KABI_MAX_TYPE_VARIABLES> type_bindings{};
  // Every attribute, not only those of the tuning key: a supports predicate may tell their values apart.
  std::array<kabi_attribute_value, KABI_MAX_ATTRIBUTES> attributes{};
  int32_t num_attributes = 0;
  uint32_t inputs_present = 0;
  int32_t device_type = 0;
  int32_t device_index = 0;
  int32_t batch_rank = 0;
  int32_t batch_mode = 0;
  uint32_t alignment = 0;
  StrideTwos stride_twos;
  bool use_tuning_cache = true;
  bool allow_unverified = false;
  bool allow_failed_gate = false;
  kabi_execution_mode execution_mode = KABI_EXECUTION_EAGER;
  std::string force;

  DecisionKey(const kabi_problem& problem, const kabi_args& args, uint32_t data_alignment, bool use_tuning,
              const std::string& forced, bool unverified_allowed, bool failed_gate_allowed, kabi_execution_mode mode)
      : num_attributes(problem.num_attributes),
        inputs_present(problem.inputs_present),
        device_type(problem.device_type),
        device_index(problem.device_index),
        batch_rank(problem.batch_rank),
        batch_mode(problem.batch_mode),
        alignment(data_alignment),
        stride_twos(args),
        use_tuning_cache(use_tuning),
        allow_unverified(unverified_allowed),
        allow_failed_gate(failed_gate_allowed),
        execution_mode(mode),
        force(forced) {
    std::memcpy(dims.data(), problem.dims, sizeof(int64_t) * static_cast<size_t>(problem.num_dims));
    std::memcpy(batch_shape.data(), problem.batch_shape, sizeof(int64_t) * static_cast<size_t>(problem.batch_rank));
    std::memcpy(layouts.data(), problem.input_layouts, sizeof layouts);
    std::memcpy(type_bindings.data(), problem.type_bindings, sizeof type_bindings);
    std::memcpy(attributes.data(), problem.attributes,
                sizeof(kabi_attribute_value) * static_cast<size_t>(problem.num_attributes));
  }

  bool operator==(const DecisionKey& other) const {
    const auto same_attributes = [&] {
      for (int32_t i = 0; i < num_attributes; ++i) {
        const auto index = static_cast<size_t>(i);
        if (attributes[index].integer != other.attributes[index].integer ||
            std::memcmp(&attributes[index].real, &other.attributes[index].real, sizeof(double)) != 0) {
          return false;
        }
      }
      return true;
    };
    return dims == other.dims && batch_shape == other.batch_shape && layouts == other.layouts &&
           type_bindings == other.type_bindings && num_attributes == other.num_attributes && same_attributes() &&
           inputs_present == other.inputs_present && device_type == other.device_type &&
           device_index == other.device_index && batch_rank == other.batch_rank && batch_mode == other.batch_mode &&
           alignment == other.alignment && stride_twos == other.stride_twos &&
           use_tuning_cache == other.use_tuning_cache &&
           allow_unverified == other.allow_unverified && allow_failed_gate == other.allow_failed_gate &&
           execution_mode == other.execution_mode &&
           force == other.force;
  }
};

struct DecisionKeyHash {
  size_t operator()(const DecisionKey& key) const noexcept {
    uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a over the fields that vary most
    auto mix = [&hash](uint64_t value) {
      hash ^= value;
      hash *= 0x100000001b3ull;
    };
    for (int64_t dim : key.dims) mix(static_cast<uint64_t>(dim));
    for (int32_t d = 0; d < key.batch_rank; ++d) mix(static_cast<uint64_t>(key.batch_shape[static_cast<size_t>(d)]));
    for (uint32_t layout : key.layouts) mix(layout);
    for (uint32_t binding : key.type_bindings) mix(binding);
    for (int32_t i = 0; i < key.num_attributes; ++i) mix(static_cast<uint64_t>(key.attributes[static_cast<size_t>(i)].integer));
    mix((static_cast<uint64_t>(static_cast<uint32_t>(key.device_type)) << 32) | key.inputs_present);
    mix((static_cast<uint64_t>(key.alignment) << 32) | static_cast<uint32_t>(key.device_index));
    return static_cast<size_t>(hash ^ std::hash<std::string>()(key.force));
  }
};

class DecisionCache {
 public:
  // The remembered kernel, if it was decided at this generation and is still registered.
  std::shared_ptr<Kernel> find(const DecisionKey& key, uint64_t generation) {
    std::lock_guard lock(mutex_);
    auto found = decisions_.find(key);
    if (found == decisions_.end() || found->second.generation != generation) return nullptr;
    return found->second.kernel.lock();
  }

  void remember(const DecisionKey& key, uint64_t generation, const std::shared_ptr<Kernel>& kernel) {
    std::lock_guard lock(mutex_);
    // A stream of distinct shapes must not grow the cache without bound: start over past a limit.
    if (decisions_.size() >= kMaxDecisions) decisions_.clear();
    decisions_.insert_or_assign(key, Decision{generation, kernel});
  }

 private:
  static constexpr size_t kMaxDecisions = 4096;
  struct Decision {
    uint64_t generation = 0;
    std::weak_ptr<Kernel> kernel;  // weak: a remembered decision must not keep an unregistered kernel alive
  };
  std::mutex mutex_;
  std::unordered_map<DecisionKey, Decision, DecisionKeyHash> decisions_;
};

}  // namespace kabi::core
