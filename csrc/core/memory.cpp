#include "memory.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_driver.hpp"
#include "error.hpp"
#include "names.hpp"
#include "struct_io.hpp"

namespace kabi::core {
namespace {

// An installed allocator; the buffers it gave hold it, so it outlives its replacement until they are released.
struct Allocator {
  kabi_allocator table{};
};
using AllocatorPtr = std::shared_ptr<const Allocator>;  // null: libkabi's default

std::mutex allocator_mutex;
AllocatorPtr installed_allocator;
// Moves with every kabi_allocator_set, so a thread sees a replacement without taking the lock on every launch.
std::atomic<uint64_t> allocator_generation{0};

std::string describe_request(int32_t device_type, int32_t device_index, size_t bytes) {
  return std::to_string(bytes) + " bytes on " +
         describe_device(DLDevice{static_cast<DLDeviceType>(device_type), device_index});
}

void* default_allocate(int32_t device_type, int32_t device_index, size_t bytes, void* stream) {
  if (device_type == kDLCPU) {
    const size_t rounded = (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment;
    void* pointer = std::aligned_alloc(kWorkspaceAlignment, rounded);
    if (pointer == nullptr) {
      throw Error(KABI_STATUS_INTERNAL, "out of memory allocating " + describe_request(device_type, device_index, bytes));
    }
    return pointer;
  }
  if (device_type == kDLCUDA) {
    const CudaDriver& driver = cuda_driver();
    if (driver.cuMemAllocAsync == nullptr) {
      throw Error(KABI_STATUS_UNAVAILABLE, "allocating " + describe_request(device_type, device_index, bytes) +
                                               " needs the stream-ordered allocator (CUDA 11.2+ driver)");
    }
    const std::string what = "allocating " + describe_request(device_type, device_index, bytes);
    CudaContextScope context(driver, device_index, what);
    cuda::CUdeviceptr pointer = 0;
    check_cuda(driver.cuMemAllocAsync(&pointer, bytes, static_cast<cuda::CUstream>(stream)), what);
    return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
  }
  throw Error(KABI_STATUS_UNAVAILABLE, "libkabi's default allocator has no memory for " +
                                           device_type_name(device_type) + "; install one with kabi_allocator_set");
}

void default_release(int32_t device_type, int32_t device_index, void* pointer, void* stream) noexcept {
  if (device_type == kDLCPU) {
    std::free(pointer);
    return;
  }
  if (device_type == kDLCUDA && cuda_available()) {
    // Nothing to report to: a failure here (a destroyed stream at thread exit) leaves the memory to the driver.
    try {
      const CudaDriver& driver = cuda_driver();
      CudaContextScope context(driver, device_index, "releasing workspace memory");
      driver.cuMemFreeAsync(static_cast<cuda::CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer)),
                            static_cast<cuda::CUstream>(stream));
    } catch (const Error&) {
    }
  }
}

// Whether an installed allocator serves a device type; libkabi's default serves the ones it does not.
bool serves(const Allocator* allocator, int32_t device_type) {
  if (allocator == nullptr) return false;
  const uint64_t served = allocator->table.device_types;
  return served == 0 || (device_type >= 0 && device_type < 64 && (served & KABI_DEVICE_TYPE_BIT(device_type)) != 0);
}

void* allocate_with(const Allocator* allocator, int32_t device_type, int32_t device_index, size_t bytes,
                    void* stream) {
  if (bytes == 0) throw Error(KABI_STATUS_INVALID_ARGUMENT, "cannot allocate 0 bytes");
  if (!serves(allocator, device_type)) return default_allocate(device_type, device_index, bytes, stream);
  void* pointer = nullptr;
  set_last_error("");
  const kabi_status status =
      allocator->table.allocate(allocator->table.context, device_type, device_index, bytes, stream, &pointer);
  if (status != KABI_STATUS_OK || pointer == nullptr) {
    const std::string message = last_error();
    throw Error(status != KABI_STATUS_OK ? status : KABI_STATUS_INTERNAL,
                "the installed allocator failed to allocate " + describe_request(device_type, device_index, bytes) +
                    (message.empty() ? std::string() : ": " + message));
  }
  return pointer;
}

void release_with(const Allocator* allocator, int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                  void* stream) noexcept {
  if (!serves(allocator, device_type)) {
    default_release(device_type, device_index, pointer, stream);
  } else {
    allocator->table.release(allocator->table.context, device_type, device_index, pointer, bytes, stream);
  }
}

AllocatorPtr current_allocator() {
  std::lock_guard<std::mutex> lock(allocator_mutex);
  return installed_allocator;
}

struct WorkspaceBuffer {
  int32_t device_type = 0;
  int32_t device_index = 0;
  void* stream = nullptr;
  void* pointer = nullptr;
  size_t bytes = 0;
  AllocatorPtr allocator;
  uint64_t generation = 0;

  void release() noexcept {
    if (pointer != nullptr) release_with(allocator.get(), device_type, device_index, pointer, bytes, stream);
    pointer = nullptr;
    bytes = 0;
  }
};

// One thread's buffers: a few, one per (device, stream) it launched kernels with workspaces on, and the smaller ones
// they outgrew. A CUDA graph captured with a workspace replays that address at any later time, so an outgrown buffer
// is kept, not released, until the thread exits or the allocator is replaced; each new buffer at least doubles the
// one it replaces, so the kept ones add up to less than the one in use.
class ThreadWorkspaces {
 public:
  ThreadWorkspaces() = default;
  ThreadWorkspaces(const ThreadWorkspaces&) = delete;
  ThreadWorkspaces& operator=(const ThreadWorkspaces&) = delete;
  ~ThreadWorkspaces() {
    for (WorkspaceBuffer& buffer : buffers_) buffer.release();
    for (WorkspaceBuffer& buffer : outgrown_) buffer.release();
  }

  void* get(int32_t device_type, int32_t device_index, void* stream, size_t bytes) {
    const uint64_t generation = allocator_generation.load(std::memory_order_acquire);
    WorkspaceBuffer& buffer = find(device_type, device_index, stream);
    if (buffer.pointer != nullptr && buffer.generation == generation && buffer.bytes >= bytes) return buffer.pointer;
    if (buffer.pointer != nullptr && buffer.generation == generation) {
      bytes = std::max(bytes, 2 * buffer.bytes);
      outgrown_.push_back(buffer);
      buffer.pointer = nullptr;
      buffer.bytes = 0;
    } else {
      buffer.release();
      release_outgrown_before(generation);
    }
    buffer.generation = generation;
    buffer.allocator = current_allocator();
    void* pointer = allocate_with(buffer.allocator.get(), device_type, device_index, bytes, stream);
    if (reinterpret_cast<uintptr_t>(pointer) % kWorkspaceAlignment != 0) {
      release_with(buffer.allocator.get(), device_type, device_index, pointer, bytes, stream);
      throw Error(KABI_STATUS_INTERNAL, "the installed allocator returned memory not aligned to " +
                                            std::to_string(kWorkspaceAlignment) + " bytes for a workspace");
    }
    buffer.pointer = pointer;
    buffer.bytes = bytes;
    return pointer;
  }

 private:
  // The outgrown buffers of a replaced allocator go back to it.
  void release_outgrown_before(uint64_t generation) {
    for (WorkspaceBuffer& buffer : outgrown_) {
      if (buffer.generation != generation) buffer.release();
    }
    outgrown_.erase(std::remove_if(outgrown_.begin(), outgrown_.end(),
                                   [](const WorkspaceBuffer& buffer) { return buffer.pointer == nullptr; }),
                    outgrown_.end());
  }

  WorkspaceBuffer& find(int32_t device_type, int32_t device_index, void* stream) {
    for (WorkspaceBuffer& buffer : buffers_) {
      if (buffer.device_type == device_type && buffer.device_index == device_index && buffer.stream == stream) {
        return buffer;
      }
    }
    WorkspaceBuffer& buffer = buffers_.emplace_back();
    buffer.device_type = device_type;
    buffer.device_index = device_index;
    buffer.stream = stream;
    return buffer;
  }

  std::vector<WorkspaceBuffer> buffers_;
  std::vector<WorkspaceBuffer> outgrown_;
};

}  // namespace

void set_allocator(const kabi_allocator* caller) {
  AllocatorPtr replacement;
  if (caller != nullptr) {
    auto allocator = std::make_shared<Allocator>();
    allocator->table =
        read_input_struct(caller, "kabi_allocator_set: allocator", KABI_STRUCT_SIZE_THROUGH(kabi_allocator, release));
    walk_extensions(allocator->table.extensions, "kabi_allocator_set: allocator");
    if (allocator->table.allocate == nullptr || allocator->table.release == nullptr) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_allocator_set: allocate and release must both be set");
    }
    replacement = std::move(allocator);
  }
  std::lock_guard<std::mutex> lock(allocator_mutex);
  installed_allocator = std::move(replacement);
  allocator_generation.fetch_add(1, std::memory_order_acq_rel);
}

void* allocate_memory(int32_t device_type, int32_t device_index, size_t bytes, void* stream) {
  return allocate_with(current_allocator().get(), device_type, device_index, bytes, stream);
}

void release_memory(int32_t device_type, int32_t device_index, void* pointer, size_t bytes, void* stream) noexcept {
  if (pointer != nullptr) release_with(current_allocator().get(), device_type, device_index, pointer, bytes, stream);
}

void* thread_workspace(int32_t device_type, int32_t device_index, void* stream, size_t bytes) {
  thread_local ThreadWorkspaces workspaces;
  return workspaces.get(device_type, device_index, stream, bytes);
}

}  // namespace kabi::core
