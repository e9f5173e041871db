// Device probing without a CUDA driver (ctest points KABI_LIBCUDA_PATH at a missing library): zero CUDA devices and
// no error, the CPU still listed, and asking for a CUDA device says why there is none.
#include <cstdlib>
#include <cstring>
#include <string>

#include "check.hpp"
#include "kabi/kabi.h"

int main() {
  const char* driver_path = std::getenv("KABI_LIBCUDA_PATH");
  KABI_CHECK(driver_path != nullptr);

  int32_t count = -1;
  KABI_CHECK_EQ(kabi_device_count(kDLCUDA, &count), KABI_STATUS_OK);
  KABI_CHECK_EQ(count, 0);
  KABI_CHECK_EQ(std::string(kabi_last_error()), std::string(""));

  int32_t cpu_count = 0;
  KABI_CHECK_EQ(kabi_device_count(kDLCPU, &cpu_count), KABI_STATUS_OK);
  KABI_CHECK_EQ(cpu_count, 1);

  kabi_device_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  KABI_CHECK(kabi_device_info_get(kDLCUDA, 0, &info) != KABI_STATUS_OK);
  const std::string message = kabi_last_error();
  KABI_CHECK(message.find("no CUDA driver") != std::string::npos);
  if (driver_path != nullptr) KABI_CHECK(message.find(driver_path) != std::string::npos);

  return kabi_test::finish("test_cuda_probe");
}
