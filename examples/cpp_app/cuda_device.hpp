// The app's own CUDA work: a context, a stream, device buffers, copies and event timing, through the CUDA driver
// API opened at run time (dlopen "libcuda.so.1"). Nothing here needs CUDA headers or links against CUDA, so the app
// builds anywhere and its CPU path runs on machines with no CUDA at all. libkabi opens the driver by itself for the
// launches; the app only owns the memory and the stream it passes in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

// This machine cannot run the CUDA path; what() is the line to print ("no CUDA driver: ...", "no CUDA device").
class CudaUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A driver call failed on a machine that has CUDA; what() names the call and the driver's error.
class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Device memory, freed when destroyed. Move-only.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes);
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) = delete;
  ~DeviceBuffer();

  void* data() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(address_)); }
  size_t size() const { return bytes_; }

 private:
  unsigned long long address_ = 0;  // a CUdeviceptr
  size_t bytes_ = 0;
};

// One device's primary context, current on the calling thread for the object's lifetime, and a stream on it.
// Construct it before any DeviceBuffer and destroy it after them.
class CudaDevice {
 public:
  // Throws CudaUnavailable when the driver cannot be opened or has no device `ordinal`, CudaError otherwise.
  explicit CudaDevice(int ordinal);
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;
  ~CudaDevice();

  int ordinal() const { return ordinal_; }
  // The CUstream for kabi_args.stream.
  void* stream() const { return stream_; }

  // Copies enqueued on the stream; both wait for the copy to finish, so host memory may be pageable and reused.
  void copy_to_device(DeviceBuffer& destination, const void* source, size_t bytes);
  void copy_to_host(void* destination, const DeviceBuffer& source, size_t bytes);
  void synchronize();

  // Milliseconds the GPU took for the work `enqueue` puts on the stream, between two events recorded around it.
  double time_on_stream_ms(const std::function<void()>& enqueue);

 private:
  int ordinal_;
  int device_ = 0;  // a CUdevice
  void* stream_ = nullptr;
};
