#include "registry.hpp"

#include <algorithm>

#include "builtin_ops.hpp"
#include "error.hpp"
#include "names.hpp"

namespace kabi::core {
namespace {

// The staging area of the plugin init running on this thread, if any.
thread_local Staging* thread_staging = nullptr;

std::string kernel_label(const Kernel& kernel) {
  return kernel.op->name + "/" + kernel.name;
}

}  // namespace

Registry& Registry::instance() {
  // Never destroyed: at process exit plugin libraries and interpreters that own kernels' user_data may already be
  // gone, so running their user_data_free then would crash.
  static Registry* registry = new Registry();
  return *registry;
}

Registry::Registry() {
  for (size_t i = 0; i < kBuiltinOpCount; ++i) {
    const BuiltinOp& builtin = kBuiltinOps[i];
    kabi_op_desc desc{};
    desc.struct_size = sizeof desc;
    desc.name = builtin.name;
    desc.schema = builtin.schema;
    desc.type_variables = builtin.type_variables;
    desc.tuning_key = builtin.tuning_key;
    std::unique_ptr<Op> op = make_op(&desc);
    ops_by_name_[op->name] = op.get();
    ops_.push_back(std::move(op));
  }
}

Op* Registry::find_op_locked(const std::string& name) const {
  auto found = ops_by_name_.find(name);
  return found == ops_by_name_.end() ? nullptr : found->second;
}

Op* Registry::register_op(std::unique_ptr<Op> op) {
  if (thread_staging != nullptr) {
    for (const auto& staged : thread_staging->ops) {
      if (staged->name == op->name) {
        throw Error(KABI_STATUS_ALREADY_EXISTS, "op " + op->name + " is already registered by this plugin");
      }
    }
    if (find_op(op->name) != nullptr) {
      throw Error(KABI_STATUS_ALREADY_EXISTS, "op " + op->name + " is already registered");
    }
    thread_staging->ops.push_back(std::move(op));
    return thread_staging->ops.back().get();
  }
  std::unique_lock lock(mutex_);
  if (find_op_locked(op->name) != nullptr) {
    throw Error(KABI_STATUS_ALREADY_EXISTS, "op " + op->name + " is already registered");
  }
  Op* raw = op.get();
  ops_by_name_[raw->name] = raw;
  ops_.push_back(std::move(op));
  bump_generation({raw});
  return raw;
}

Op* Registry::find_op(const std::string& name) const {
  std::shared_lock lock(mutex_);
  return find_op_locked(name);
}

Op& Registry::get_op(const std::string& name) const {
  if (Op* op = find_op_including_staged(name)) return *op;
  throw Error(KABI_STATUS_NOT_FOUND, "no op named \"" + name + "\" is registered");
}

Op* Registry::find_op_including_staged(const std::string& name) const {
  if (Op* op = find_op(name)) return op;
  if (thread_staging != nullptr) {
    for (const auto& staged : thread_staging->ops) {
      if (staged->name == name) return staged.get();
    }
  }
  return nullptr;
}

int32_t Registry::op_count() const {
  std::shared_lock lock(mutex_);
  return static_cast<int32_t>(ops_.size());
}

Op* Registry::op_at(int32_t index) const {
  std::shared_lock lock(mutex_);
  if (index < 0 || static_cast<size_t>(index) >= ops_.size()) {
    throw Error(KABI_STATUS_NOT_FOUND,
                "op index " + std::to_string(index) + " is outside [0, " + std::to_string(ops_.size()) + ")");
  }
  return ops_[static_cast<size_t>(index)].get();
}

void Registry::insert_kernel_locked(const KernelPtr& kernel) {
  kernel->serial = next_serial_++;
  kernel->op->kernels.push_back(kernel);
  kernel->op->kernels_by_device[kernel->device_type].push_back(kernel);
  kernels_.push_back(kernel);
  live_[kernel.get()] = kernel;
}

void Registry::check_kernel_name_free_locked(const Kernel& kernel) const {
  for (const KernelPtr& existing : kernel.op->kernels) {
    if (existing->name == kernel.name) {
      throw Error(KABI_STATUS_ALREADY_EXISTS,
                  "op " + kernel.op->name + " already has a kernel named \"" + kernel.name + "\" (backend " +
                      existing->backend + (existing->plugin.empty() ? "" : ", plugin " + existing->plugin) + ")");
    }
  }
}

Kernel* Registry::register_kernel(KernelPtr kernel) {
  try {
    if (thread_staging != nullptr) {
      for (const KernelPtr& staged : thread_staging->kernels) {
        if (staged->op == kernel->op && staged->name == kernel->name) {
          throw Error(KABI_STATUS_ALREADY_EXISTS, "kernel " + kernel_label(*kernel) + " is registered twice");
        }
      }
      {
        std::shared_lock lock(mutex_);
        check_kernel_name_free_locked(*kernel);
      }
      thread_staging->kernels.push_back(kernel);
      return kernel.get();
    }
    std::unique_lock lock(mutex_);
    check_kernel_name_free_locked(*kernel);
    insert_kernel_locked(kernel);
    bump_generation({kernel->op});
    return kernel.get();
  } catch (...) {
    // A refused registration leaves user_data with the caller.
    kernel->user_data_free = nullptr;
    throw;
  }
}

void Registry::unregister_kernel(const std::string& op_name, const std::string& name) {
  KernelPtr removed;
  {
    std::unique_lock lock(mutex_);
    Op* op = find_op_locked(op_name);
    if (op == nullptr) throw Error(KABI_STATUS_NOT_FOUND, "no op named \"" + op_name + "\" is registered");
    auto same = [&](const KernelPtr& kernel) { return kernel->name == name; };
    auto found = std::find_if(op->kernels.begin(), op->kernels.end(), same);
    if (found == op->kernels.end()) {
      throw Error(KABI_STATUS_NOT_FOUND, "op " + op_name + " has no kernel named \"" + name + "\"");
    }
    removed = *found;
    op->kernels.erase(found);
    auto& device_list = op->kernels_by_device[removed->device_type];
    device_list.erase(std::find(device_list.begin(), device_list.end(), removed));
    kernels_.erase(std::find(kernels_.begin(), kernels_.end(), removed));
    live_.erase(removed.get());
    bump_generation({op});
  }
  // `removed` drops here, outside the lock: user_data_free may call back into kabi.
}

KernelPtr Registry::find_kernel(const std::string& op_name, const std::string& name) const {
  std::shared_lock lock(mutex_);
  Op* op = find_op_locked(op_name);
  if (op == nullptr) throw Error(KABI_STATUS_NOT_FOUND, "no op named \"" + op_name + "\" is registered");
  for (const KernelPtr& kernel : op->kernels) {
    if (kernel->name == name) return kernel;
  }
  return nullptr;
}

KernelPtr Registry::acquire(kabi_kernel handle) const {
  if (handle == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kernel handle is NULL");
  std::shared_lock lock(mutex_);
  auto found = live_.find(static_cast<const Kernel*>(handle));
  if (found == live_.end()) {
    throw Error(KABI_STATUS_NOT_FOUND,
                "kernel handle does not name a registered kernel (unregistered, or not from "
                "this process)");
  }
  return found->second;
}

int32_t Registry::kernel_count(const char* op_name) const {
  std::shared_lock lock(mutex_);
  if (op_name == nullptr) return static_cast<int32_t>(kernels_.size());
  Op* op = find_op_locked(op_name);
  return op == nullptr ? 0 : static_cast<int32_t>(op->kernels.size());
}

KernelPtr Registry::kernel_at(const char* op_name, int32_t index) const {
  std::shared_lock lock(mutex_);
  const std::vector<KernelPtr>* list = &kernels_;
  if (op_name != nullptr) {
    Op* op = find_op_locked(op_name);
    if (op == nullptr) throw Error(KABI_STATUS_NOT_FOUND, std::string("no op named \"") + op_name + "\" is registered");
    list = &op->kernels;
  }
  if (index < 0 || static_cast<size_t>(index) >= list->size()) {
    throw Error(KABI_STATUS_NOT_FOUND,
                "kernel index " + std::to_string(index) + " is outside [0, " + std::to_string(list->size()) + ")");
  }
  return (*list)[static_cast<size_t>(index)];
}

std::vector<KernelPtr> Registry::candidates(const Op& op, int32_t device_type) const {
  std::shared_lock lock(mutex_);
  auto found = op.kernels_by_device.find(device_type);
  if (found == op.kernels_by_device.end()) return {};
  return found->second;
}

void Registry::begin_staging(Staging* staging) {
  thread_staging = staging;
}

void Registry::end_staging() {
  thread_staging = nullptr;
}

void Registry::commit(Staging& staging, const std::string& plugin_name) {
  std::unique_lock lock(mutex_);
  for (const auto& op : staging.ops) {
    if (find_op_locked(op->name) != nullptr) {
      throw Error(KABI_STATUS_ALREADY_EXISTS, "op " + op->name + " was registered meanwhile by someone else");
    }
  }
  for (const KernelPtr& kernel : staging.kernels) check_kernel_name_free_locked(*kernel);
  std::vector<Op*> touched;
  for (auto& op : staging.ops) {
    ops_by_name_[op->name] = op.get();
    touched.push_back(op.get());
    ops_.push_back(std::move(op));
  }
  staging.ops.clear();
  for (const KernelPtr& kernel : staging.kernels) {
    kernel->plugin = plugin_name;
    insert_kernel_locked(kernel);
    if (std::find(touched.begin(), touched.end(), kernel->op) == touched.end()) touched.push_back(kernel->op);
  }
  bump_generation(touched);
}

void Registry::bump_generation(const std::vector<Op*>& ops) {
  const uint64_t generation = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  for (Op* op : ops) op->generation.store(generation, std::memory_order_release);
}

void Registry::bump_all_generations() {
  std::shared_lock lock(mutex_);
  std::vector<Op*> ops;
  for (const auto& op : ops_) ops.push_back(op.get());
  bump_generation(ops);
}

}  // namespace kabi::core
