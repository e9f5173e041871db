/* Shared by the C callers of built-in ops through kabi_call (test_linear_call.c, test_grouped_mm_call.c,
 * test_scaled_mm_call.c): a program runs with strict selection in a tuning cache of its own, stores the verdict
 * `kabi verify <op>` would record before a kernel may serve a problem, and reports its checks at the end.
 * Include after test_check.h: these count in its `failures`. Needs _POSIX_C_SOURCE >= 200809L (mkdtemp, unsetenv).
 * C99. */
#ifndef KABI_TEST_CALL_HELPERS_H_
#define KABI_TEST_CALL_HELPERS_H_

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_check.h"

/* Point the tuning cache at a fresh directory /tmp/kabi-c-<program>-XXXXXX and unset KABI_ALLOW_UNVERIFIED, so
 * that only the verdicts this program stores let a kernel serve. */
static inline void test_call_start(const char* program) {
  char directory[256];
  CHECK(snprintf(directory, sizeof directory, "/tmp/kabi-c-%s-XXXXXX", program) < (int)sizeof directory);
  CHECK(mkdtemp(directory) != NULL);
  CHECK(kabi_cache_set_directory(directory) == KABI_STATUS_OK);
  CHECK(unsetenv("KABI_ALLOW_UNVERIFIED") == 0);
}

/* Load the built-in plugins and find the op and one of its kernels; 0, with the reason printed, when either is
 * missing. */
static inline int test_find_builtin_kernel(const char* op_name, const char* kernel_name, kabi_op* op,
                                           kabi_kernel* kernel) {
  *op = NULL;
  *kernel = NULL;
  CHECK(kabi_plugin_load_builtin() == KABI_STATUS_OK);
  CHECK(kabi_op_find(op_name, op) == KABI_STATUS_OK);
  CHECK(kabi_kernel_find(op_name, kernel_name, kernel) == KABI_STATUS_OK);
  if (*op == NULL || *kernel == NULL) {
    fprintf(stderr, "%s or %s is missing: %s\n", op_name, kernel_name, kabi_last_error());
    return 0;
  }
  return 1;
}

/* Store the verdict `kabi verify` records for a kernel that passed the correctness gate on the call's problem. */
static inline void test_record_passed_gate(kabi_op op, kabi_kernel kernel, const kabi_args* args) {
  kabi_tuning_record record;
  memset(&record, 0, sizeof record);
  record.struct_size = sizeof record;
  record.kernel = kernel;
  record.note = "";
  record.flags = KABI_TUNING_RECORD_GATE_ONLY;
  CHECK(kabi_tuning_store(op, args, &record, 1) == KABI_STATUS_OK);
}

/* Clear and detach the program's tuning cache and report: the exit status of a program that checked `what`. */
static inline int test_call_finish(const char* what) {
  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  CHECK(kabi_cache_set_directory(NULL) == KABI_STATUS_OK);
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("%s from C: all checks passed\n", what);
  return 0;
}

#endif /* KABI_TEST_CALL_HELPERS_H_ */
