// The allocator behind workspaces and kabi_memory_allocate: the one installed with kabi_allocator_set, or libkabi's
// default (aligned malloc for the CPU, the CUDA driver's stream-ordered allocator for CUDA); and each thread's
// workspace buffers.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kabi/kabi.h"

namespace kabi::core {

// Workspaces and the default allocator's CPU memory are aligned to this many bytes (kabi_args.workspace).
constexpr size_t kWorkspaceAlignment = 256;

// Installs a copy of *allocator (NULL: back to the default). Throws INVALID_ARGUMENT for a bad struct.
void set_allocator(const kabi_allocator* allocator);

// Through the allocator in use; throws the allocator's status with a message naming the device and the size.
void* allocate_memory(int32_t device_type, int32_t device_index, size_t bytes, void* stream);
void release_memory(int32_t device_type, int32_t device_index, void* pointer, size_t bytes, void* stream) noexcept;

// At least `bytes` (> 0) of workspace on the device, usable in stream order on `stream`, aligned to
// kWorkspaceAlignment: the calling thread's buffer for (device, stream), which grows to the largest need and is
// replaced when another allocator is installed (the old buffer goes back to the allocator that gave it). So after the
// first call of a problem on a thread and stream, no allocation happens. Buffers are released when the thread exits.
void* thread_workspace(int32_t device_type, int32_t device_index, void* stream, size_t bytes);

}  // namespace kabi::core
