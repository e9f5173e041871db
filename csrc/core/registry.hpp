// The dispatch table: ops, and for each op its kernels per device type.
//
// Readers (selection, lookups) take a shared lock and never block each other; registration takes the exclusive
// lock. Ops live as long as the process. Kernels are shared_ptr-owned: an unregistered kernel leaves the table at
// once, and its user_data_free runs when the last in-flight launch holding it returns.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "decision_cache.hpp"
#include "device_binary.hpp"
#include "kabi/kabi.h"
#include "schema.hpp"

struct kabi_op_s {};
struct kabi_kernel_s {};

namespace kabi::core {

struct Kernel;

struct Op : kabi_op_s {
  std::string name;
  std::string schema_text;
  std::string type_variables_text;
  std::string tuning_key_text;
  Schema schema;
  std::vector<TuningKeyItem> tuning_key;
  std::vector<const char*> dim_name_pointers;  // into schema.dim_names, for kabi_problem.dim_names
  // Per attribute, pointers into its enum_values, for kabi_attribute_decl.enum_values.
  std::vector<std::vector<const char*>> enum_value_pointers;

  // Guarded by the registry's lock: the op's kernels in registration order, and per device type.
  std::vector<std::shared_ptr<Kernel>> kernels;
  std::unordered_map<int32_t, std::vector<std::shared_ptr<Kernel>>> kernels_by_device;

  DecisionCache decisions;  // kabi_call's

  // Changes with everything that can alter a selection of this op: its kernels (registered, unregistered, loaded
  // by a plugin), a tuning store for it, the tuning cache as a whole. Values are drawn from the registry's
  // generation, so they never repeat, and a change to one op leaves every other op's decisions standing.
  std::atomic<uint64_t> generation{0};
};

struct Kernel : kabi_kernel_s {
  Op* op = nullptr;
  std::string name;
  std::string backend;
  std::string plugin;
  std::string fingerprint;
  int32_t device_type = 0;
  int32_t arch_min = 0;
  int32_t arch_max = 0;
  std::vector<int32_t> archs;
  int32_t priority = 0;
  uint64_t required_features = 0;
  uint32_t dtypes = 0;
  std::string type_constraints;  // as declared
  // The dtypes it accepts for each of the op's type variables: type_constraints' set where it names the variable,
  // else `dtypes`.
  std::vector<uint32_t> accepted_dtypes;
  uint32_t layouts = 0;
  // The classes the first inputs take, as declared in kabi_kernel_desc.input_layouts with a 0 resolved to `layouts`;
  // inputs past them take `layouts`.
  std::vector<uint32_t> input_layouts;
  uint32_t alignment = 0;
  int32_t batch_mode = KABI_BATCH_NONE;
  kabi_kernel_kind kind = KABI_KERNEL_FUNCTION;
  kabi_kernel_fn function = nullptr;
  std::shared_ptr<DeviceBinary> binary;
  kabi_supports_fn supports = nullptr;
  kabi_workspace_fn workspace = nullptr;
  kabi_variant_fn variant = nullptr;  // from its kabi_kernel_variant_extension; null: no variants
  void* user_data = nullptr;
  void (*user_data_free)(void*) = nullptr;
  uint64_t serial = 0;  // registration order across all ops; earlier wins heuristic ties

  uint32_t layouts_of_input(size_t input) const {
    return input < input_layouts.size() ? input_layouts[input] : layouts;
  }

  Kernel() = default;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;
  ~Kernel();
};

using KernelPtr = std::shared_ptr<Kernel>;

// Validates a kernel declaration and deep-copies it (reads only what desc->struct_size covers). A device binary
// whose image stays on disk until its first launch (a manifest's) names it with image_file; desc's image is then
// ignored.
KernelPtr make_kernel(const kabi_kernel_desc* desc, Op& op, const ImageFile* image_file = nullptr);

// Validates an op declaration and parses its schema and tuning key.
std::unique_ptr<Op> make_op(const kabi_op_desc* desc);

// Kernels and ops registered while a plugin's init runs; committed to the table only if init succeeds.
struct Staging {
  std::vector<std::unique_ptr<Op>> ops;
  std::vector<KernelPtr> kernels;
};

class Registry {
 public:
  // The process-wide table, with the built-in ops registered.
  static Registry& instance();

  Op* register_op(std::unique_ptr<Op> op);
  Op* find_op(const std::string& name) const;  // nullptr if none
  Op& get_op(const std::string& name) const;   // throws NOT_FOUND
  int32_t op_count() const;
  Op* op_at(int32_t index) const;

  Kernel* register_kernel(KernelPtr kernel);
  void unregister_kernel(const std::string& op, const std::string& name);
  KernelPtr find_kernel(const std::string& op, const std::string& name) const;  // null if none
  // The live kernel behind a handle; throws NOT_FOUND for a stale or foreign handle.
  KernelPtr acquire(kabi_kernel handle) const;
  int32_t kernel_count(const char* op) const;
  KernelPtr kernel_at(const char* op, int32_t index) const;
  // The op's kernels for one device type, in registration order.
  std::vector<KernelPtr> candidates(const Op& op, int32_t device_type) const;

  // While a staging area is active on this thread, register_op/register_kernel go there instead.
  void begin_staging(Staging* staging);
  void end_staging();
  // Moves staged ops and kernels into the table, all or nothing (throws ALREADY_EXISTS on a name clash).
  void commit(Staging& staging, const std::string& plugin_name);

  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // A change that can alter selections of these ops only: moves the registry's generation and theirs.
  void bump_generation(const std::vector<Op*>& ops);
  // A change that can alter every op's selections (the tuning cache replaced, reloaded or cleared).
  void bump_all_generations();

 private:
  Registry();
  Op* find_op_locked(const std::string& name) const;
  Op* find_op_including_staged(const std::string& name) const;
  void check_kernel_name_free_locked(const Kernel& kernel) const;
  // Adds a checked kernel to every index of the table (serial, op lists, live set); the caller holds the lock.
  void insert_kernel_locked(const KernelPtr& kernel);

  mutable std::shared_mutex mutex_;
  std::vector<std::unique_ptr<Op>> ops_;
  std::vector<KernelPtr> kernels_;  // registration order, all ops
  std::unordered_map<std::string, Op*> ops_by_name_;
  std::unordered_map<const Kernel*, KernelPtr> live_;
  std::atomic<uint64_t> generation_{1};
  std::atomic<uint64_t> next_serial_{1};
};

}  // namespace kabi::core
