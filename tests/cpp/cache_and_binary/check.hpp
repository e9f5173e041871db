// A minimal assertion layer for the cache-and-binary test programs: each failed check prints where and why, the
// program runs on, and finish() turns any failure into a failing exit status.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace kabi_test

#define KABI_CHECK(condition)                                                    \
  do {                                                                           \
    if (!(condition)) kabi_test::report_failure(__FILE__, __LINE__, #condition); \
  } while (0)

#define KABI_CHECK_EQ(actual, expected)                                                                   \
  do {                                                                                                    \
    const auto& kabi_actual_value = (actual);                                                             \
    const auto& kabi_expected_value = (expected);                                                         \
    if (!(kabi_actual_value == kabi_expected_value)) {                                                    \
      kabi_test::report_failure(                                                                          \
          __FILE__, __LINE__,                                                                             \
          std::string(#actual " == " #expected " (got ") + kabi_test::describe(kabi_actual_value) + ")"); \
    }                                                                                                     \
  } while (0)

namespace kabi_test {
inline std::string describe(const std::string& value) { return "\"" + value + "\""; }
inline std::string describe(const char* value) { return value == nullptr ? "NULL" : "\"" + std::string(value) + "\""; }
template <class Number>
std::string describe(const Number& value) {
  return std::to_string(value);
}
}  // namespace kabi_test
