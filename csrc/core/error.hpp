// Errors inside libkabi and their conversion at the C boundary.
//
// Every failure inside the core is a kabi::core::Error carrying the kabi_status the C caller will see. Each
// extern "C" function runs its body through c_boundary(), the only place exceptions stop: it stores the message in
// the calling thread's last-error slot and returns the status, so no exception ever crosses the ABI.
#pragma once

#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#include "kabi/kabi.h"

namespace kabi::core {

class Error : public std::runtime_error {
 public:
  Error(kabi_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
  kabi_status status() const noexcept { return status_; }

 private:
  kabi_status status_;
};

// The calling thread's message of the last failed call ("" if none).
const char* last_error() noexcept;
void set_last_error(const char* message) noexcept;
void set_last_error(const std::string& message) noexcept;

// A static name for a status; "KABI_STATUS_<unknown>" for values outside the enum.
const char* status_name(kabi_status status) noexcept;

// Throws Error(status, message) unless condition holds.
inline void require(bool condition, kabi_status status, const std::string& message) {
  if (!condition) throw Error(status, message);
}

// Runs body (returning void) and converts whatever it throws into a status plus the thread's message.
template <class Body>
kabi_status c_boundary(Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    return KABI_STATUS_OK;
  } catch (const Error& error) {
    set_last_error(error.what());
    return error.status();
  } catch (const std::bad_alloc&) {
    set_last_error("kabi: out of memory");
    return KABI_STATUS_INTERNAL;
  } catch (const std::exception& error) {
    set_last_error(std::string("kabi: internal error: ") + error.what());
    return KABI_STATUS_INTERNAL;
  } catch (...) {
    set_last_error("kabi: internal error: unknown exception");
    return KABI_STATUS_INTERNAL;
  }
}

// For C functions that return a value rather than a status: a failure returns `fallback`, with the message kept.
template <class Value, class Body>
Value value_boundary(Value fallback, Body&& body) noexcept {
  Value value = fallback;
  c_boundary([&] { value = std::forward<Body>(body)(); });
  return value;
}

}  // namespace kabi::core
