/* Checks shared by the C test programs: each failed check is printed with its location and counted in `failures`
 * (one counter per program); a program exits non-zero when any check failed. C99. */
#ifndef KABI_TEST_CHECK_H_
#define KABI_TEST_CHECK_H_

#include <stdio.h>
#include <string.h>

#include "kabi/kabi.h"

static int failures = 0;

#define CHECK(condition)                                                            \
  do {                                                                              \
    if (!(condition)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

/* The call returns `expected` and the thread's message contains `fragment`. */
#define CHECK_STATUS(call, expected, fragment)                                                                \
  do {                                                                                                        \
    kabi_status status_ = (call);                                                                             \
    if (status_ != (expected) || strstr(kabi_last_error(), (fragment)) == NULL) {                             \
      fprintf(stderr, "%s:%d: %s returned %s (\"%s\"); expected %s with \"%s\"\n", __FILE__, __LINE__, #call, \
              kabi_status_name(status_), kabi_last_error(), kabi_status_name(expected), fragment);            \
      ++failures;                                                                                             \
    }                                                                                                         \
  } while (0)

#endif /* KABI_TEST_CHECK_H_ */
