// The CUDA driver API, opened at run time (libcuda.so.1), so libkabi has no link-time dependency on CUDA.
// Owned by cuda_driver.cpp. No driver is a normal state: available() is false and devices() is empty.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::core {

// The few driver API types and constants libkabi uses, declared here (with the values of cuda.h) so that building
// libkabi needs no CUDA headers.
namespace cuda {
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
constexpr int CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14;
constexpr int CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4;
constexpr int CU_STREAM_CAPTURE_STATUS_NONE = 0;

struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char pad[64];
    struct {
      unsigned int x, y, z;
    } clusterDim;
  } value;
};

struct CUlaunchConfig {
  unsigned int gridDimX, gridDimY, gridDimZ;
  unsigned int blockDimX, blockDimY, blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
};
}  // namespace cuda

// Entry points of libcuda.so.1, resolved once. The optional ones (cuLaunchKernelEx for clusters, the stream-ordered
// allocator for scratch inside CUDA-graph capture) are null on drivers that lack them.
struct CudaDriver {
  using CUresult = cuda::CUresult;
  CUresult (*cuInit)(unsigned int flags);
  CUresult (*cuDriverGetVersion)(int* version);
  CUresult (*cuDeviceGetCount)(int* count);
  CUresult (*cuDeviceGet)(cuda::CUdevice* device, int ordinal);
  CUresult (*cuDeviceGetName)(char* name, int length, cuda::CUdevice device);
  CUresult (*cuDeviceGetAttribute)(int* value, int attribute, cuda::CUdevice device);
  CUresult (*cuDeviceTotalMem)(size_t* bytes, cuda::CUdevice device);
  CUresult (*cuDevicePrimaryCtxRetain)(cuda::CUcontext* context, cuda::CUdevice device);
  CUresult (*cuCtxGetCurrent)(cuda::CUcontext* context);
  CUresult (*cuCtxSetCurrent)(cuda::CUcontext context);
  CUresult (*cuCtxGetDevice)(cuda::CUdevice* device);
  CUresult (*cuModuleLoadData)(cuda::CUmodule* module, const void* image);
  CUresult (*cuModuleUnload)(cuda::CUmodule module);
  CUresult (*cuModuleGetFunction)(cuda::CUfunction* function, cuda::CUmodule module, const char* name);
  CUresult (*cuFuncSetAttribute)(cuda::CUfunction function, int attribute, int value);
  CUresult (*cuLaunchKernel)(cuda::CUfunction function, unsigned int grid_x, unsigned int grid_y, unsigned int grid_z,
                             unsigned int block_x, unsigned int block_y, unsigned int block_z,
                             unsigned int shared_memory_bytes, cuda::CUstream stream, void** params, void** extra);
  CUresult (*cuLaunchKernelEx)(const cuda::CUlaunchConfig* config, cuda::CUfunction function, void** params,
                               void** extra);
  CUresult (*cuMemAlloc)(cuda::CUdeviceptr* pointer, size_t bytes);
  CUresult (*cuMemFree)(cuda::CUdeviceptr pointer);
  CUresult (*cuMemsetD8Async)(cuda::CUdeviceptr pointer, unsigned char value, size_t count, cuda::CUstream stream);
  CUresult (*cuStreamIsCapturing)(cuda::CUstream stream, int* status);
  CUresult (*cuMemAllocAsync)(cuda::CUdeviceptr* pointer, size_t bytes, cuda::CUstream stream);
  CUresult (*cuMemFreeAsync)(cuda::CUdeviceptr pointer, cuda::CUstream stream);
  CUresult (*cuGetErrorName)(CUresult error, const char** name);
  CUresult (*cuGetErrorString)(CUresult error, const char** text);
};

// The loaded driver; throws Error(KABI_STATUS_UNAVAILABLE, cuda_unavailable_reason()) when there is none.
const CudaDriver& cuda_driver();

// Throws Error(KABI_STATUS_KERNEL_FAILED, "<what>: CUDA_ERROR_... (<the driver's description>)") unless result is
// CUDA_SUCCESS.
void check_cuda(cuda::CUresult result, const std::string& what);
// The same with what = operation + subject, built only on failure (for the launch path, which must not allocate).
inline void check_cuda(cuda::CUresult result, const char* operation, const std::string& subject) {
  if (result != cuda::CUDA_SUCCESS) check_cuda(result, operation + subject);
}

// Whether stream is being captured into a CUDA graph. The legacy stream (nullptr) never is, nor is any stream of a
// driver without stream capture. Call it with the stream's context current (CudaContextScope).
bool stream_is_capturing(const CudaDriver& driver, cuda::CUstream stream);

// Makes a device's context current for a launch or an allocation (the calling thread's current context when it
// belongs to the device, else the device's primary context), restoring the previous context afterwards. `what` names
// the work in errors.
class CudaContextScope {
 public:
  CudaContextScope(const CudaDriver& driver, int32_t device_index, const std::string& what);
  ~CudaContextScope();
  CudaContextScope(const CudaContextScope&) = delete;
  CudaContextScope& operator=(const CudaContextScope&) = delete;

 private:
  const CudaDriver& driver_;
  cuda::CUcontext previous_ = nullptr;
  bool switched_ = false;
};

// Probed once, thread-safely: every CUDA device with its name, compute capability, SM count, memory, driver
// version and KABI_FEATURE_* bits (tensor cores, bf16 mma, fp8, tma, wgmma by compute capability).
const std::vector<kabi_device_info>& cuda_devices();

// Whether libcuda loaded and cuInit succeeded; when not, why ("no CUDA driver: libcuda.so.1 not found").
bool cuda_available();
std::string cuda_unavailable_reason();

}  // namespace kabi::core
