// A minimal assertion layer for the cache-and-binary test programs: each failed check prints where and why, and
// the program's exit status is the number of failures (ctest reports any non-zero status).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "error.hpp"

namespace kabi_test {

inline int& failures() {
  static int count = 0;
  return count;
}

inline void report_failure(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "%s:%d: FAILED: %s\n", file, line, message.c_str());
  ++failures();
}

inline int finish(const char* program) {
  if (failures() == 0) std::printf("%s: all checks passed\n", program);
  return failures() == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

// Runs body and checks that it throws kabi::core::Error with the status and a message containing `fragment`.
template <class Body>
void expect_error(const char* file, int line, Body&& body, kabi_status status, const std::string& fragment) {
  try {
    body();
  } catch (const kabi::core::Error& error) {
    const std::string message = error.what();
    if (error.status() != status) {
      report_failure(file, line, "status " + std::string(kabi::core::status_name(error.status())) + " (" + message +
                                     "); expected " + kabi::core::status_name(status));
    } else if (message.find(fragment) == std::string::npos) {
      report_failure(file, line, "message \"" + message + "\" does not contain \"" + fragment + "\"");
    }
    return;
  }
  report_failure(file, line, "no error thrown; expected " + std::string(kabi::core::status_name(status)));
}

}  // namespace kabi_test

#define KABI_CHECK(condition)                                                             \
  do {                                                                                    \
    if (!(condition)) kabi_test::report_failure(__FILE__, __LINE__, #condition);          \
  } while (0)

#define KABI_CHECK_EQ(actual, expected)                                                                    \
  do {                                                                                                     \
    const auto& kabi_actual_value = (actual);                                                              \
    const auto& kabi_expected_value = (expected);                                                          \
    if (!(kabi_actual_value == kabi_expected_value)) {                                                     \
      kabi_test::report_failure(__FILE__, __LINE__, std::string(#actual " == " #expected " (got ") +     \
                                                        kabi_test::describe(kabi_actual_value) + ")");     \
    }                                                                                                      \
  } while (0)

#define KABI_EXPECT_ERROR(body, status, fragment) \
  kabi_test::expect_error(__FILE__, __LINE__, [&] { body; }, status, fragment)

namespace kabi_test {
inline std::string describe(const std::string& value) { return "\"" + value + "\""; }
inline std::string describe(const char* value) { return value == nullptr ? "NULL" : "\"" + std::string(value) + "\""; }
template <class Number>
std::string describe(const Number& value) {
  return std::to_string(value);
}
}  // namespace kabi_test
