#include "cuda_device.hpp"

#include <dlfcn.h>

#include <initializer_list>
#include <string>

namespace {

// The driver API types and values this file uses, declared here (values as in cuda.h) so that no CUDA header is
// needed to build the app.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_EVENT_DEFAULT = 0;

// Entry points of libcuda.so.1. Where cuda.h maps a name to a versioned symbol (cuMemAlloc -> cuMemAlloc_v2), the
// versioned one is resolved: that is the symbol a program compiled against cuda.h calls.
struct Driver {
  CUresult (*cuInit)(unsigned flags);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);
  CUresult (*cuCtxSetCurrent)(CUcontext context);
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);
  CUresult (*cuStreamDestroy)(CUstream stream);
  CUresult (*cuStreamSynchronize)(CUstream stream);
  CUresult (*cuMemAlloc)(CUdeviceptr* address, size_t bytes);
  CUresult (*cuMemFree)(CUdeviceptr address);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr destination, const void* source, size_t bytes, CUstream stream);
  CUresult (*cuMemcpyDtoHAsync)(void* destination, CUdeviceptr source, size_t bytes, CUstream stream);
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);
  CUresult (*cuEventDestroy)(CUevent event);
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);
  CUresult (*cuEventSynchronize)(CUevent event);
  CUresult (*cuEventElapsedTime)(float* milliseconds, CUevent start, CUevent end);
};

// The first of `names` that the library exports, else CudaUnavailable naming the first.
template <class Function>
void resolve(void* library, std::initializer_list<const char*> names, Function& function) {
  for (const char* name : names) {
    function = reinterpret_cast<Function>(::dlsym(library, name));
    if (function != nullptr) return;
  }
  throw CudaUnavailable(std::string("no CUDA driver: libcuda.so.1 lacks ") + *names.begin() +
                        " (a driver older than this app supports)");
}

Driver open_driver() {
  // Never closed: libkabi and the driver's own threads use the library until the process ends.
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) throw CudaUnavailable(std::string("no CUDA driver: ") + ::dlerror());
  Driver driver{};
  resolve(library, {"cuInit"}, driver.cuInit);
  resolve(library, {"cuGetErrorName"}, driver.cuGetErrorName);
  resolve(library, {"cuDeviceGetCount"}, driver.cuDeviceGetCount);
  resolve(library, {"cuDeviceGet"}, driver.cuDeviceGet);
  resolve(library, {"cuDevicePrimaryCtxRetain"}, driver.cuDevicePrimaryCtxRetain);
  resolve(library, {"cuDevicePrimaryCtxRelease_v2"}, driver.cuDevicePrimaryCtxRelease);
  resolve(library, {"cuCtxSetCurrent"}, driver.cuCtxSetCurrent);
  resolve(library, {"cuStreamCreate"}, driver.cuStreamCreate);
  resolve(library, {"cuStreamDestroy_v2"}, driver.cuStreamDestroy);
  resolve(library, {"cuStreamSynchronize"}, driver.cuStreamSynchronize);
  resolve(library, {"cuMemAlloc_v2"}, driver.cuMemAlloc);
  resolve(library, {"cuMemFree_v2"}, driver.cuMemFree);
  resolve(library, {"cuMemcpyHtoDAsync_v2"}, driver.cuMemcpyHtoDAsync);
  resolve(library, {"cuMemcpyDtoHAsync_v2"}, driver.cuMemcpyDtoHAsync);
  resolve(library, {"cuEventCreate"}, driver.cuEventCreate);
  resolve(library, {"cuEventDestroy_v2"}, driver.cuEventDestroy);
  resolve(library, {"cuEventRecord"}, driver.cuEventRecord);
  resolve(library, {"cuEventSynchronize"}, driver.cuEventSynchronize);
  // cuda.h 12.8+ maps cuEventElapsedTime to _v2; older drivers export only the original, same signature.
  resolve(library, {"cuEventElapsedTime_v2", "cuEventElapsedTime"}, driver.cuEventElapsedTime);
  return driver;
}

std::string error_name(const Driver& driver, CUresult result) {
  const char* name = nullptr;
  return driver.cuGetErrorName(result, &name) == CUDA_SUCCESS && name != nullptr
             ? name
             : "CUDA error " + std::to_string(result);
}

void check(const Driver& driver, CUresult result, const char* call) {
  if (result != CUDA_SUCCESS) throw CudaError(std::string(call) + " failed: " + error_name(driver, result));
}

// The driver, opened and initialized once; throws CudaUnavailable while there is none (each call retries).
const Driver& driver() {
  static const Driver opened = [] {
    const Driver loaded = open_driver();
    const CUresult initialized = loaded.cuInit(0);
    if (initialized == CUDA_ERROR_NO_DEVICE) throw CudaUnavailable("no CUDA device");
    if (initialized != CUDA_SUCCESS) {
      throw CudaUnavailable("no CUDA driver: cuInit failed: " + error_name(loaded, initialized));
    }
    return loaded;
  }();
  return opened;
}

// An event destroyed with its scope, so that a launch that throws between two records leaks nothing.
class Event {
 public:
  Event() { check(driver(), driver().cuEventCreate(&event_, CU_EVENT_DEFAULT), "cuEventCreate"); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { driver().cuEventDestroy(event_); }
  CUevent get() const { return event_; }

 private:
  CUevent event_ = nullptr;
};

}  // namespace

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  check(driver(), driver().cuMemAlloc(&address_, bytes), "cuMemAlloc");
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : address_(other.address_), bytes_(other.bytes_) {
  other.address_ = 0;
  other.bytes_ = 0;
}

DeviceBuffer::~DeviceBuffer() {
  if (address_ != 0) driver().cuMemFree(address_);
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  const Driver& api = driver();
  int count = 0;
  check(api, api.cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (count == 0) throw CudaUnavailable("no CUDA device");
  if (ordinal < 0 || ordinal >= count) {
    throw CudaUnavailable("no CUDA device " + std::to_string(ordinal) + " (this machine has " +
                          std::to_string(count) + ")");
  }
  check(api, api.cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  // The primary context is the one the CUDA runtime, torch and Triton use: buffers made here can be shared with them.
  CUcontext context = nullptr;
  check(api, api.cuDevicePrimaryCtxRetain(&context, device_), "cuDevicePrimaryCtxRetain");
  try {
    check(api, api.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    check(api, api.cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  } catch (const CudaError&) {
    api.cuDevicePrimaryCtxRelease(device_);
    throw;
  }
}

CudaDevice::~CudaDevice() {
  driver().cuStreamDestroy(stream_);
  driver().cuCtxSetCurrent(nullptr);
  driver().cuDevicePrimaryCtxRelease(device_);
}

void CudaDevice::copy_to_device(DeviceBuffer& destination, const void* source, size_t bytes) {
  const CUdeviceptr address = reinterpret_cast<uintptr_t>(destination.data());
  check(driver(), driver().cuMemcpyHtoDAsync(address, source, bytes, stream_), "cuMemcpyHtoDAsync");
  synchronize();
}

void CudaDevice::copy_to_host(void* destination, const DeviceBuffer& source, size_t bytes) {
  const CUdeviceptr address = reinterpret_cast<uintptr_t>(source.data());
  check(driver(), driver().cuMemcpyDtoHAsync(destination, address, bytes, stream_), "cuMemcpyDtoHAsync");
  synchronize();
}

void CudaDevice::synchronize() { check(driver(), driver().cuStreamSynchronize(stream_), "cuStreamSynchronize"); }

double CudaDevice::time_on_stream_ms(const std::function<void()>& enqueue) {
  const Event start, end;
  check(driver(), driver().cuEventRecord(start.get(), stream_), "cuEventRecord");
  enqueue();
  check(driver(), driver().cuEventRecord(end.get(), stream_), "cuEventRecord");
  check(driver(), driver().cuEventSynchronize(end.get()), "cuEventSynchronize");
  float milliseconds = 0.0f;
  check(driver(), driver().cuEventElapsedTime(&milliseconds, start.get(), end.get()), "cuEventElapsedTime");
  return milliseconds;
}
