/* Plugin loading through the C API with the ABI test plugins of tests/abi: a good plugin, one built for the next
 * ABI major, one built for ABI 1.x, one without an init symbol, one whose init registers and then fails (its op and
 * kernel must be rolled back), and one built against an older MINOR found through a KABI_PLUGIN_PATH directory.
 * Usage: kabi_test_plugin_loading GOOD NEXT_MAJOR NO_INIT FAILING_INIT OLDER_MINOR ABI1 (paths). C99. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_check.h"
#include "test_kernels.h"

/* The header's version as text, for the refusal messages that quote it. */
#define KABI_TEST_STRING_OF(token) #token
#define KABI_TEST_STRING(macro) KABI_TEST_STRING_OF(macro)

/* The record of the load of path (which ends with `file`), or a zeroed record if there is none. */
static kabi_plugin_record record_of(const char* file) {
  kabi_plugin_record record;
  int32_t i;
  for (i = 0; i < kabi_plugin_count(); ++i) {
    memset(&record, 0, sizeof record);
    record.struct_size = sizeof record;
    if (kabi_plugin_at(i, &record) != KABI_STATUS_OK) continue;
    if (strlen(record.path) >= strlen(file) && strcmp(record.path + strlen(record.path) - strlen(file), file) == 0) {
      return record;
    }
  }
  memset(&record, 0, sizeof record);
  return record;
}

static const char* base_name(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static int op_exists(const char* name) {
  kabi_op op;
  return kabi_op_find(name, &op) == KABI_STATUS_OK;
}

/* Runs "<prefix>_double" through kabi_call on random input and checks out = 2 * x. */
static void check_doubles(const char* op_name) {
  float x[33], out[33];
  int64_t shape[1] = {33};
  DLTensor inputs[1], outputs[1];
  kabi_args args;
  kabi_op op = NULL;
  int i;
  for (i = 0; i < 33; ++i) x[i] = (float)test_random_uniform();
  inputs[0] = test_tensor(x, test_float32(), 1, shape, NULL);
  outputs[0] = test_tensor(out, test_float32(), 1, shape, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 1;
  args.outputs = outputs;
  args.num_outputs = 1;
  CHECK(kabi_op_find(op_name, &op) == KABI_STATUS_OK);
  CHECK(kabi_call(op, &args, NULL) == KABI_STATUS_OK);
  for (i = 0; i < 33; ++i) CHECK(out[i] == 2.0f * x[i]);
}

int main(int argc, char** argv) {
  const char *good, *next_major, *no_init, *failing_init, *older_minor, *abi1;
  char directory[4096];
  char plugin_path[8192];
  kabi_plugin_record record;
  kabi_kernel kernel = NULL;
  kabi_kernel_info info;
  int32_t count;
  if (argc != 7) {
    fprintf(stderr, "usage: %s GOOD NEXT_MAJOR NO_INIT FAILING_INIT OLDER_MINOR ABI1\n", argv[0]);
    return 2;
  }
  good = argv[1];
  next_major = argv[2];
  no_init = argv[3];
  failing_init = argv[4];
  older_minor = argv[5];
  abi1 = argv[6];

  CHECK(kabi_plugin_load(good) == KABI_STATUS_OK);
  record = record_of(base_name(good));
  CHECK(record.state == KABI_PLUGIN_LOADED && strcmp(record.name, "abi-test-good") == 0);
  CHECK(strcmp(record.version, "1.2.3") == 0 && record.num_kernels == 1 && record.abi_version == KABI_ABI_VERSION);
  CHECK(kabi_kernel_find("abi_test_good_double", "abi_test_good.double", &kernel) == KABI_STATUS_OK);
  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK && strcmp(info.plugin, "abi-test-good") == 0);
  check_doubles("abi_test_good_double");
  count = kabi_plugin_count();
  CHECK(kabi_plugin_load(good) == KABI_STATUS_OK);
  CHECK(kabi_plugin_count() == count);

  CHECK_STATUS(kabi_plugin_load(next_major), KABI_STATUS_ABI_MISMATCH,
               "was built for kabi ABI 3.0; this kabi implements ABI " KABI_TEST_STRING(
                   KABI_ABI_VERSION_MAJOR) "." KABI_TEST_STRING(KABI_ABI_VERSION_MINOR) " (major versions must match)");
  CHECK(strstr(kabi_last_error(), base_name(next_major)) != NULL);
  CHECK(!op_exists("abi_test_next_major_double"));
  record = record_of(base_name(next_major));
  CHECK(record.state == KABI_PLUGIN_REFUSED && record.abi_version == ((KABI_ABI_VERSION_MAJOR + 1u) << 16));
  /* A second attempt repeats the refusal without a new record. */
  count = kabi_plugin_count();
  CHECK_STATUS(kabi_plugin_load(next_major), KABI_STATUS_ABI_MISMATCH, "major versions must match");
  CHECK(kabi_plugin_count() == count);

  /* A plugin built for ABI 1.x is refused before its init runs, naming both versions and the remedy. */
  CHECK_STATUS(kabi_plugin_load(abi1), KABI_STATUS_ABI_MISMATCH,
               "was built for kabi ABI 1.2; this kabi implements ABI " KABI_TEST_STRING(KABI_ABI_VERSION_MAJOR) "."
               KABI_TEST_STRING(KABI_ABI_VERSION_MINOR) " (major versions must match): rebuild the plugin against "
               "this kabi's headers");
  CHECK(!op_exists("abi_test_abi1_double"));
  record = record_of(base_name(abi1));
  CHECK(record.state == KABI_PLUGIN_REFUSED && record.abi_version == ((1u << 16) | 2u));

  CHECK_STATUS(kabi_plugin_load(no_init), KABI_STATUS_NOT_FOUND, "does not export kabi_plugin_init");

  CHECK_STATUS(kabi_plugin_load(failing_init), KABI_STATUS_KERNEL_FAILED, "the accelerator did not answer");
  CHECK(!op_exists("abi_test_failing_init_double"));
  record = record_of(base_name(failing_init));
  CHECK(record.state == KABI_PLUGIN_REFUSED && record.num_kernels == 0);
  CHECK(strcmp(record.name, "abi-test-failing-init") == 0);

  /* KABI_PLUGIN_PATH: a directory loads every shared library in it (only the older-MINOR one is new: the others,
   * the ABI 1.x one included, were loaded or refused above), a missing file is recorded as refused, and neither fails
   * the call. */
  strncpy(directory, older_minor, sizeof directory - 1);
  directory[sizeof directory - 1] = '\0';
  *strrchr(directory, '/') = '\0';
  snprintf(plugin_path, sizeof plugin_path, "%s:/nonexistent/libkabi_absent.so", directory);
  setenv("KABI_PLUGIN_PATH", plugin_path, 1);
  count = kabi_plugin_count();
  CHECK(kabi_plugin_load_from_environment() == KABI_STATUS_OK);
  CHECK(kabi_plugin_count() == count + 2);
  CHECK(record_of(base_name(older_minor)).state == KABI_PLUGIN_LOADED);
  CHECK(record_of("libkabi_absent.so").state == KABI_PLUGIN_REFUSED);
  check_doubles("abi_test_older_minor_double");
  unsetenv("KABI_PLUGIN_PATH");

  /* One device type's built-in plugin loads without the others (the CUDA one would initialise the driver); loading
     again, or a type without a built-in plugin, loads nothing. */
  count = kabi_plugin_count();
  CHECK(kabi_plugin_load_builtin_device(kDLCPU) == KABI_STATUS_OK);
  CHECK(kabi_plugin_count() - count <= 1);
  CHECK(record_of("/libkabi_cuda.so").struct_size == 0);
  count = kabi_plugin_count();
  CHECK(kabi_plugin_load_builtin_device(kDLCPU) == KABI_STATUS_OK && kabi_plugin_count() == count);
  CHECK(kabi_plugin_load_builtin_device(kDLVulkan) == KABI_STATUS_OK && kabi_plugin_count() == count);

  if (failures != 0) {
    fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  printf("all plugin loading checks passed\n");
  return 0;
}
