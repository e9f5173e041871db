// The devices kabi knows: the CPU (probed with cpuid / getauxval) and CUDA devices (cuda_driver.hpp).
#pragma once

#include <cstdint>
#include <string>

#include "kabi/kabi.h"

namespace kabi::core {

// The host CPU, probed once.
const kabi_device_info& cpu_device_info();

// Number of devices of a DLDeviceType (0 for types kabi cannot probe, and for CUDA without a driver).
int32_t device_count(int32_t device_type);

// The device, or nullptr if kabi has no description of it.
const kabi_device_info* find_device(int32_t device_type, int32_t device_index);

// Like find_device, but a missing device is Error(KABI_STATUS_NOT_FOUND) saying what exists.
const kabi_device_info& get_device(int32_t device_type, int32_t device_index);

// "cpu|<brand>|x86-64-v3|avx,avx2,fma|abi2" or "cuda|NVIDIA H200|sm90|drv13000|abi2"; for a device kabi cannot
// describe, "<type>:<index>|unknown|abi2" so its tuning entries still stay apart from other devices'.
const std::string& device_signature(int32_t device_type, int32_t device_index);

}  // namespace kabi::core
