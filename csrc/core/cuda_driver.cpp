// The CUDA driver, opened at run time. KABI_LIBCUDA_PATH names another library to open instead of libcuda.so.1
// (a driver outside the loader's path; tests use a missing path to see the no-driver state on any machine).
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "error.hpp"

namespace kabi::core {
namespace {

struct DriverState {
  bool available = false;
  std::string unavailable_reason;
  CudaDriver driver{};
  std::vector<kabi_device_info> devices;
};

std::string describe_result(const CudaDriver& driver, cuda::CUresult result) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (driver.cuGetErrorName == nullptr || driver.cuGetErrorName(result, &name) != cuda::CUDA_SUCCESS) name = nullptr;
  if (driver.cuGetErrorString == nullptr || driver.cuGetErrorString(result, &text) != cuda::CUDA_SUCCESS) {
    text = nullptr;
  }
  std::string description = name != nullptr ? name : "CUDA error " + std::to_string(result);
  if (text != nullptr) description += std::string(" (") + text + ")";
  return description;
}

template <class Function>
bool resolve(void* library, const char* symbol, Function& function, std::string& missing) {
  function = reinterpret_cast<Function>(::dlsym(library, symbol));
  if (function == nullptr && missing.empty()) missing = symbol;
  return function != nullptr;
}

// Returns "" when every required entry point resolved, else the first missing symbol.
std::string resolve_entry_points(void* library, CudaDriver& driver) {
  std::string missing;
  resolve(library, "cuInit", driver.cuInit, missing);
  resolve(library, "cuDriverGetVersion", driver.cuDriverGetVersion, missing);
  resolve(library, "cuDeviceGetCount", driver.cuDeviceGetCount, missing);
  resolve(library, "cuDeviceGet", driver.cuDeviceGet, missing);
  resolve(library, "cuDeviceGetName", driver.cuDeviceGetName, missing);
  resolve(library, "cuDeviceGetAttribute", driver.cuDeviceGetAttribute, missing);
  resolve(library, "cuDeviceTotalMem_v2", driver.cuDeviceTotalMem, missing);
  resolve(library, "cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain, missing);
  resolve(library, "cuCtxGetCurrent", driver.cuCtxGetCurrent, missing);
  resolve(library, "cuCtxSetCurrent", driver.cuCtxSetCurrent, missing);
  resolve(library, "cuCtxGetDevice", driver.cuCtxGetDevice, missing);
  resolve(library, "cuModuleLoadData", driver.cuModuleLoadData, missing);
  resolve(library, "cuModuleUnload", driver.cuModuleUnload, missing);
  resolve(library, "cuModuleGetFunction", driver.cuModuleGetFunction, missing);
  resolve(library, "cuFuncSetAttribute", driver.cuFuncSetAttribute, missing);
  resolve(library, "cuLaunchKernel", driver.cuLaunchKernel, missing);
  resolve(library, "cuMemAlloc_v2", driver.cuMemAlloc, missing);
  resolve(library, "cuMemFree_v2", driver.cuMemFree, missing);
  resolve(library, "cuMemsetD8Async", driver.cuMemsetD8Async, missing);
  resolve(library, "cuGetErrorName", driver.cuGetErrorName, missing);
  resolve(library, "cuGetErrorString", driver.cuGetErrorString, missing);
  std::string optional_missing;
  resolve(library, "cuLaunchKernelEx", driver.cuLaunchKernelEx, optional_missing);
  resolve(library, "cuStreamIsCapturing", driver.cuStreamIsCapturing, optional_missing);
  resolve(library, "cuMemAllocAsync", driver.cuMemAllocAsync, optional_missing);
  resolve(library, "cuMemFreeAsync", driver.cuMemFreeAsync, optional_missing);
  return missing;
}

uint64_t features_for_arch(int32_t arch) {
  uint64_t features = 0;
  if (arch >= 70) features |= KABI_FEATURE_TENSOR_CORES;
  if (arch >= 80) features |= KABI_FEATURE_BF16_MMA;
  if (arch >= 89) features |= KABI_FEATURE_FP8_MMA;
  if (arch >= 90) features |= KABI_FEATURE_TMA;
  if (arch == 90) features |= KABI_FEATURE_WGMMA;
  return features;
}

// Fills info for one device; returns "" or what failed.
std::string probe_device(const CudaDriver& driver, int ordinal, int driver_version, kabi_device_info& info) {
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  info.device_type = kDLCUDA;
  info.device_index = ordinal;
  info.driver_version = driver_version;
  std::strncpy(info.vendor, "NVIDIA", sizeof(info.vendor) - 1);
  cuda::CUdevice device = 0;
  cuda::CUresult result = driver.cuDeviceGet(&device, ordinal);
  if (result != cuda::CUDA_SUCCESS)
    return "cuDeviceGet(" + std::to_string(ordinal) + "): " + describe_result(driver, result);
  int major = 0;
  int minor = 0;
  int multiprocessors = 0;
  size_t memory = 0;
  if ((result = driver.cuDeviceGetName(info.name, sizeof(info.name) - 1, device)) != cuda::CUDA_SUCCESS ||
      (result = driver.cuDeviceGetAttribute(&major, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)) !=
          cuda::CUDA_SUCCESS ||
      (result = driver.cuDeviceGetAttribute(&minor, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)) !=
          cuda::CUDA_SUCCESS ||
      (result = driver.cuDeviceGetAttribute(&multiprocessors, cuda::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
                                            device)) != cuda::CUDA_SUCCESS ||
      (result = driver.cuDeviceTotalMem(&memory, device)) != cuda::CUDA_SUCCESS) {
    return "querying CUDA device " + std::to_string(ordinal) + ": " + describe_result(driver, result);
  }
  info.arch = major * 10 + minor;
  info.compute_units = multiprocessors;
  info.total_memory_bytes = memory;
  info.features = features_for_arch(info.arch);
  return {};
}

DriverState probe() {
  DriverState state;
  const char* override_path = std::getenv("KABI_LIBCUDA_PATH");
  const std::string path = override_path != nullptr && *override_path != '\0' ? override_path : "libcuda.so.1";
  // Never closed: modules and contexts created through it live until the process ends.
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = ::dlerror();
    state.unavailable_reason =
        "no CUDA driver: " + path + " could not be loaded (" + (reason != nullptr ? reason : "unknown reason") + ")";
    return state;
  }
  const std::string missing = resolve_entry_points(library, state.driver);
  if (!missing.empty()) {
    state.unavailable_reason = "CUDA driver " + path + " is too old: it lacks " + missing;
    return state;
  }
  CudaDriver& driver = state.driver;
  cuda::CUresult result = driver.cuInit(0);
  if (result != cuda::CUDA_SUCCESS) {
    state.unavailable_reason = "CUDA driver present but cuInit failed: " + describe_result(driver, result);
    return state;
  }
  int driver_version = 0;
  int count = 0;
  if ((result = driver.cuDriverGetVersion(&driver_version)) != cuda::CUDA_SUCCESS ||
      (result = driver.cuDeviceGetCount(&count)) != cuda::CUDA_SUCCESS) {
    state.unavailable_reason = "CUDA driver present but not usable: " + describe_result(driver, result);
    return state;
  }
  std::vector<kabi_device_info> devices(static_cast<size_t>(count));
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    const std::string failure = probe_device(driver, ordinal, driver_version, devices[static_cast<size_t>(ordinal)]);
    if (!failure.empty()) {
      state.unavailable_reason = "CUDA driver present but " + failure;
      return state;
    }
  }
  if (count == 0) {
    state.unavailable_reason = "CUDA driver present but it reports no devices";
    return state;
  }
  state.devices = std::move(devices);
  state.available = true;
  return state;
}

const DriverState& driver_state() {
  static const DriverState state = probe();  // initialized once, thread-safely (C++11 magic statics)
  return state;
}

}  // namespace

const std::vector<kabi_device_info>& cuda_devices() { return driver_state().devices; }

bool cuda_available() { return driver_state().available; }

std::string cuda_unavailable_reason() { return driver_state().unavailable_reason; }

const CudaDriver& cuda_driver() {
  const DriverState& state = driver_state();
  if (!state.available) throw Error(KABI_STATUS_UNAVAILABLE, state.unavailable_reason);
  return state.driver;
}

void check_cuda(cuda::CUresult result, const std::string& what) {
  if (result == cuda::CUDA_SUCCESS) return;
  throw Error(KABI_STATUS_KERNEL_FAILED, what + ": " + describe_result(driver_state().driver, result));
}

bool stream_is_capturing(const CudaDriver& driver, cuda::CUstream stream) {
  if (stream == nullptr || driver.cuStreamIsCapturing == nullptr) return false;
  int status = cuda::CU_STREAM_CAPTURE_STATUS_NONE;
  check_cuda(driver.cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
  return status != cuda::CU_STREAM_CAPTURE_STATUS_NONE;
}

CudaContextScope::CudaContextScope(const CudaDriver& driver, int32_t device_index, const std::string& what)
    : driver_(driver) {
  check_cuda(driver.cuCtxGetCurrent(&previous_), "cuCtxGetCurrent for ", what);
  cuda::CUdevice current_device = -1;
  if (previous_ != nullptr && driver.cuCtxGetDevice(&current_device) == cuda::CUDA_SUCCESS &&
      current_device == device_index) {
    return;
  }
  cuda::CUdevice device = 0;
  cuda::CUcontext primary = nullptr;
  check_cuda(driver.cuDeviceGet(&device, device_index), "cuDeviceGet for ", what);
  // Retained once per device and never released: the primary context then outlives every module loaded into it.
  static std::mutex retain_mutex;
  static std::map<int32_t, cuda::CUcontext> retained;
  {
    std::lock_guard<std::mutex> lock(retain_mutex);
    auto found = retained.find(device_index);
    if (found == retained.end()) {
      check_cuda(driver.cuDevicePrimaryCtxRetain(&primary, device), "cuDevicePrimaryCtxRetain for " + what);
      found = retained.emplace(device_index, primary).first;
    }
    primary = found->second;
  }
  check_cuda(driver.cuCtxSetCurrent(primary), "cuCtxSetCurrent for ", what);
  switched_ = true;
}

CudaContextScope::~CudaContextScope() {
  if (switched_) driver_.cuCtxSetCurrent(previous_);
}

}  // namespace kabi::core
