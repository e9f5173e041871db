#include "device_binary.hpp"

extern "C" KABI_EXPORT kabi_status kabi_binaries_load(const char*, int32_t* out_registered) {
  if (out_registered != nullptr) *out_registered = 0;
  return KABI_STATUS_UNAVAILABLE;
}
