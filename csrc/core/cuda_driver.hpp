// The CUDA driver API, opened at run time (libcuda.so.1), so libkabi has no link-time dependency on CUDA.
// Owned by cuda_driver.cpp. No driver is a normal state: available() is false and devices() is empty.
#pragma once

#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::core {

// Probed once, thread-safely: every CUDA device with its name, compute capability, SM count, memory, driver
// version and KABI_FEATURE_* bits (tensor cores, bf16 mma, fp8, tma, wgmma by compute capability).
const std::vector<kabi_device_info>& cuda_devices();

// Whether libcuda loaded and cuInit succeeded; when not, why ("no CUDA driver: libcuda.so.1 not found").
bool cuda_available();
std::string cuda_unavailable_reason();

}  // namespace kabi::core
