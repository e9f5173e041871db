#include "cuda_driver.hpp"

namespace kabi::core {

const std::vector<kabi_device_info>& cuda_devices() {
  static const std::vector<kabi_device_info> none;
  return none;
}

bool cuda_available() { return false; }

std::string cuda_unavailable_reason() { return "CUDA driver probing is not built yet"; }

}  // namespace kabi::core
