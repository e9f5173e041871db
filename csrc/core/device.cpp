#include "device.hpp"

#include <map>
#include <mutex>
#include <utility>

#include "cuda_driver.hpp"
#include "error.hpp"
#include "names.hpp"

namespace kabi::core {
namespace {

std::string compose_signature(int32_t device_type, int32_t device_index) {
  const std::string abi = "abi" + std::to_string(KABI_ABI_VERSION_MAJOR);
  const kabi_device_info* info = find_device(device_type, device_index);
  if (info == nullptr) return device_type_name(device_type) + ":" + std::to_string(device_index) + "|unknown|" + abi;
  if (device_type == kDLCUDA) {
    return std::string("cuda|") + info->name + "|sm" + std::to_string(info->arch) + "|drv" +
           std::to_string(info->driver_version) + "|" + abi;
  }
  const std::string level = info->arch > 0 ? "x86-64-v" + std::to_string(info->arch) : "arch0";
  return device_type_name(device_type) + "|" + info->name + "|" + level + "|" +
         join(feature_names(info->features), ",") + "|" + abi;
}

}  // namespace

int32_t device_count(int32_t device_type) {
  switch (device_type) {
    case kDLCPU: return 1;
    case kDLCUDA: return static_cast<int32_t>(cuda_devices().size());
    default: return 0;
  }
}

const kabi_device_info* find_device(int32_t device_type, int32_t device_index) {
  if (device_index < 0) return nullptr;
  if (device_type == kDLCPU) return device_index == 0 ? &cpu_device_info() : nullptr;
  if (device_type == kDLCUDA) {
    const auto& devices = cuda_devices();
    return static_cast<size_t>(device_index) < devices.size() ? &devices[static_cast<size_t>(device_index)] : nullptr;
  }
  return nullptr;
}

const kabi_device_info& get_device(int32_t device_type, int32_t device_index) {
  if (const kabi_device_info* info = find_device(device_type, device_index)) return *info;
  std::string message = "no device " + device_type_name(device_type) + ":" + std::to_string(device_index) +
                        " (kabi sees " + std::to_string(device_count(device_type)) + " " +
                        device_type_name(device_type) + " devices";
  if (device_type == kDLCUDA && !cuda_available()) message += "; " + cuda_unavailable_reason();
  throw Error(KABI_STATUS_NOT_FOUND, message + ")");
}

const std::string& device_signature(int32_t device_type, int32_t device_index) {
  // Signatures key every tuning lookup, so each is composed once; entries are never erased, so references stay valid.
  static std::mutex mutex;
  static std::map<std::pair<int32_t, int32_t>, std::string> signatures;
  std::lock_guard lock(mutex);
  auto key = std::make_pair(device_type, device_index);
  auto found = signatures.find(key);
  if (found == signatures.end()) found = signatures.emplace(key, compose_signature(device_type, device_index)).first;
  return found->second;
}

}  // namespace kabi::core
