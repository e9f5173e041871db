// Checks that internal code throws kabi::core::Error with the expected status and message (tests that compile
// libkabi's sources directly).
#pragma once

#include <string>

#include "check.hpp"
#include "error.hpp"

namespace kabi_test {

// Runs body and checks that it throws kabi::core::Error with the status and a message containing `fragment`.
template <class Body>
void expect_error(const char* file, int line, Body&& body, kabi_status status, const std::string& fragment) {
  try {
    body();
  } catch (const kabi::core::Error& error) {
    const std::string message = error.what();
    if (error.status() != status) {
      report_failure(file, line,
                     "status " + std::string(kabi::core::status_name(error.status())) + " (" + message +
                         "); expected " + kabi::core::status_name(status));
    } else if (message.find(fragment) == std::string::npos) {
      report_failure(file, line, "message \"" + message + "\" does not contain \"" + fragment + "\"");
    }
    return;
  }
  report_failure(file, line, "no error thrown; expected " + std::string(kabi::core::status_name(status)));
}

}  // namespace kabi_test

#define KABI_EXPECT_ERROR(body, status, fragment) \
  kabi_test::expect_error(__FILE__, __LINE__, [&] { body; }, status, fragment)
