#include "error.hpp"

namespace kabi::core {
namespace {

// Per thread so that concurrent callers never read each other's messages.
thread_local std::string thread_last_error;

}  // namespace

const char* last_error() noexcept {
  return thread_last_error.c_str();
}

void set_last_error(const char* message) noexcept {
  try {
    thread_last_error = message != nullptr ? message : "";
  } catch (...) {
    thread_last_error.clear();
  }
}

void set_last_error(const std::string& message) noexcept {
  set_last_error(message.c_str());
}

const char* status_name(kabi_status status) noexcept {
  switch (status) {
    case KABI_STATUS_OK: return "KABI_STATUS_OK";
    case KABI_STATUS_INVALID_ARGUMENT: return "KABI_STATUS_INVALID_ARGUMENT";
    case KABI_STATUS_UNSUPPORTED_DTYPE: return "KABI_STATUS_UNSUPPORTED_DTYPE";
    case KABI_STATUS_NOT_FOUND: return "KABI_STATUS_NOT_FOUND";
    case KABI_STATUS_NO_ELIGIBLE_KERNEL: return "KABI_STATUS_NO_ELIGIBLE_KERNEL";
    case KABI_STATUS_ALREADY_EXISTS: return "KABI_STATUS_ALREADY_EXISTS";
    case KABI_STATUS_KERNEL_FAILED: return "KABI_STATUS_KERNEL_FAILED";
    case KABI_STATUS_ABI_MISMATCH: return "KABI_STATUS_ABI_MISMATCH";
    case KABI_STATUS_UNAVAILABLE: return "KABI_STATUS_UNAVAILABLE";
    case KABI_STATUS_CONSTRAINT_VIOLATED: return "KABI_STATUS_CONSTRAINT_VIOLATED";
    case KABI_STATUS_IO_ERROR: return "KABI_STATUS_IO_ERROR";
    case KABI_STATUS_INTERNAL: return "KABI_STATUS_INTERNAL";
  }
  return "KABI_STATUS_<unknown>";
}

}  // namespace kabi::core
