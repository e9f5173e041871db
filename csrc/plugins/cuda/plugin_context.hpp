// What every kernel of the CUDA plugin shares: the host's error channel, the devices it saw at init, and a guard
// that makes the call's device current for CUDA runtime and cuBLASLt calls.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::cuda {

struct PluginContext {
  void (*set_error)(const char* message) = nullptr;
  // Per CUDA device index: compute capability (major * 10 + minor) and multiprocessors.
  std::vector<int32_t> archs;
  std::vector<int32_t> multiprocessors;
  // Where libkabi_cuda.so lies (to find cuBLASLt beside kabi).
  std::string plugin_directory;

  kabi_status fail(kabi_status status, const std::string& message) const {
    set_error(message.c_str());
    return status;
  }
  int32_t multiprocessors_of(int32_t device_index) const {
    return device_index >= 0 && static_cast<size_t>(device_index) < multiprocessors.size()
               ? multiprocessors[static_cast<size_t>(device_index)]
               : 0;
  }
};

PluginContext& plugin_context();

// Makes a device current for the scope and restores the caller's afterwards (a caller's current device is its
// own business); ok() is false, with error() saying why, when the device cannot be made current.
class DeviceGuard {
 public:
  explicit DeviceGuard(int32_t device_index) {
    cudaError_t status = cudaGetDevice(&previous_);
    if (status == cudaSuccess && previous_ != device_index) {
      status = cudaSetDevice(device_index);
      switched_ = status == cudaSuccess;
    }
    if (status != cudaSuccess) error_ = cudaGetErrorString(status);
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  int previous_ = 0;
  bool switched_ = false;
  std::string error_;
};

// Registration of each kernel family (cutlass_registration.cpp, cutlass_grouped_registration.cpp, cublaslt_kernels.cpp, ...): kernels only for the
// devices present, every one through the host table.
kabi_status register_cutlass_kernels(const kabi_host_api* host, PluginContext& context);
kabi_status register_cutlass_grouped_kernels(const kabi_host_api* host, PluginContext& context);
kabi_status register_cublaslt_kernels(const kabi_host_api* host, PluginContext& context);
kabi_status register_split_k_gemv_kernels(const kabi_host_api* host, PluginContext& context);
kabi_status register_decode_mma_kernels(const kabi_host_api* host, PluginContext& context);

}  // namespace kabi::cuda
