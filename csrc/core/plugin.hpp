// Loading plugin shared libraries: ABI version check, init with the host function table, staged registration
// (kept only if init succeeds), and a record of every load, loaded or refused. Directories of device binaries named
// by KABI_BINARY_PATH are recorded in the same list.
#pragma once

#include <cstdint>
#include <string>

#include "kabi/kabi.h"

namespace kabi::core {

// Loads one plugin. A refusal is recorded and thrown as Error (NOT_FOUND, ABI_MISMATCH, KERNEL_FAILED,
// ALREADY_EXISTS) with a message naming the plugin and why. The same file twice is a no-op that repeats the
// first outcome.
void load_plugin(const std::string& path);

// Every entry of KABI_PLUGIN_PATH, then every directory of KABI_BINARY_PATH (device-binary manifests, after the
// plugins whose ops they may name). Each is recorded, loaded or refused with why; refusals are not thrown, and an
// entry already recorded is not loaded again.
void load_plugins_from_environment();

// The plugins shipped next to libkabi (libkabi_cpu.so always; libkabi_cuda.so where built). Idempotent.
void load_builtin_plugins();
// The built-in plugin serving one device type (none for a type without one).
void load_builtin_plugin(int32_t device_type);

int32_t plugin_count();
// Fills *out_record (checked by the caller) for the load at index; throws NOT_FOUND outside the range.
kabi_plugin_record plugin_record(int32_t index);

// The table handed to every plugin's init.
const kabi_host_api& host_api();

}  // namespace kabi::core
