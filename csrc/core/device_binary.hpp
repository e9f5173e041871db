// Device-binary kernels: a cubin/PTX image plus a launch spec, launched through the CUDA driver API.
// Owned by device_binary.cpp (launch) and manifest.cpp (reading NAME.kabi-manifest files).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kabi/kabi.h"

namespace kabi::core {

class DeviceBinary;  // the copied image and spec; loads a module per device lazily and thread-safely

// Validate and deep-copy a kabi_device_binary (reads only what desc->struct_size covers). Throws
// kabi::core::Error(KABI_STATUS_INVALID_ARGUMENT, ...) naming the bad field.
std::shared_ptr<DeviceBinary> make_device_binary(const kabi_device_binary* desc);

// A stable hash of the image and the launch spec (for default fingerprints).
std::string device_binary_fingerprint(const DeviceBinary& binary);

// Launch on args->stream: evaluate the grid rule over the problem's dims, marshal the parameters, cuLaunchKernel
// (or cuLaunchKernelEx for clusters). Errors become kabi::core::Error(KABI_STATUS_KERNEL_FAILED or UNAVAILABLE).
void launch_device_binary(DeviceBinary& binary, const kabi_problem& problem, const kabi_args& args);

// Evaluate a grid expression ("cdiv(M, 128) * cdiv(N, 64)") over the problem's dims and "batch". Throws
// Error(KABI_STATUS_INVALID_ARGUMENT) on a syntax error or unknown name. Exposed for tests.
int64_t evaluate_grid_expression(const std::string& expression, const kabi_problem& problem);

}  // namespace kabi::core
