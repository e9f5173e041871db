/* Kernels that name their variant per problem (KABI_EXTENSION_KERNEL_VARIANT, ABI 2.3), from a C caller: the
 * variant a kernel names is stored with its tuning records (kabi_tuning_store, kabi_cache_list) and shown per
 * candidate (kabi_select); a record of another variant than the kernel now names is stale, so the problem counts as
 * untuned for it until it is measured again; a kernel without the extension behaves as before; a variant function
 * that fails makes its kernel ineligible and fails a store; a malformed extension is refused at registration; and a
 * caller's candidate array of the ABI 2.2 size is written within its bounds. C99. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"
#include "test_check.h"
#include "test_kernels.h"

#define OP "c_variant.double"

/* What the variant kernel's heuristic would choose; a test moves it to play a library whose choice changed. */
static int heuristic_revision = 1;
/* Whether the failing kernel's variant function fails. */
static int variant_fails = 1;

static kabi_status double_kernel(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const float* x = (const float*)args->inputs[0].data;
  float* out = (float*)args->outputs[0].data;
  int64_t i;
  (void)user_data;
  for (i = 0; i < problem->dims[0]; ++i) out[i] = 2.0f * x[i];
  return KABI_STATUS_OK;
}

/* The variant depends on the problem (N) and on the revision of the pretend heuristic. */
static kabi_status name_variant(void* user_data, const kabi_problem* problem, const kabi_args* args, char* buffer,
                                size_t buffer_size) {
  (void)user_data;
  (void)args;
  snprintf(buffer, buffer_size, "block=%d revision=%d", problem->dims[0] >= 64 ? 64 : 8, heuristic_revision);
  return KABI_STATUS_OK;
}

static kabi_status fail_to_name_variant(void* user_data, const kabi_problem* problem, const kabi_args* args,
                                        char* buffer, size_t buffer_size) {
  (void)user_data;
  (void)problem;
  (void)args;
  if (!variant_fails) {
    snprintf(buffer, buffer_size, "only");
    return KABI_STATUS_OK;
  }
  kabi_set_last_error("the heuristic offers no algorithm");
  return KABI_STATUS_KERNEL_FAILED;
}

static kabi_kernel_desc kernel_desc(const char* name, const kabi_extension* extensions) {
  kabi_kernel_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.extensions = extensions;
  desc.op = OP;
  desc.name = name;
  desc.backend = "c-variant-test";
  desc.device_type = kDLCPU;
  desc.dtypes = KABI_DTYPE_FLOAT32;
  desc.layouts = KABI_LAYOUT_CONTIGUOUS;
  desc.batch_mode = KABI_BATCH_NONE;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = double_kernel;
  return desc;
}

static kabi_kernel_variant_extension variant_extension(kabi_variant_fn variant) {
  kabi_kernel_variant_extension extension;
  memset(&extension, 0, sizeof extension);
  extension.extension.struct_size = sizeof extension;
  extension.extension.type = KABI_EXTENSION_KERNEL_VARIANT;
  extension.variant = variant;
  return extension;
}

static kabi_op op = NULL;
static kabi_kernel variant_kernel = NULL, plain_kernel = NULL, failing_kernel = NULL;

static kabi_tuning_record timed(kabi_kernel kernel, double time_us) {
  kabi_tuning_record record;
  memset(&record, 0, sizeof record);
  record.struct_size = sizeof record;
  record.kernel = kernel;
  record.time_us = time_us;
  record.note = "";
  return record;
}

/* The call of x[n] (no outputs: selection and stores read only shapes). */
static float x[128];
static int64_t shape[1];
static DLTensor input;

static kabi_args args_of(int64_t n) {
  kabi_args args;
  shape[0] = n;
  input = test_tensor(x, test_float32(), 1, shape, NULL);
  memset(&args, 0, sizeof args);
  args.struct_size = sizeof args;
  args.inputs = &input;
  args.num_inputs = 1;
  return args;
}

static kabi_candidate candidates[4];

static kabi_status select_for(int64_t n, kabi_selection* selection) {
  const kabi_args args = args_of(n);
  int i;
  for (i = 0; i < 4; ++i) {
    memset(&candidates[i], 0, sizeof candidates[i]);
    candidates[i].struct_size = sizeof candidates[i];
  }
  memset(selection, 0, sizeof *selection);
  selection->struct_size = sizeof *selection;
  selection->candidates = candidates;
  selection->candidates_capacity = 4;
  return kabi_select(op, &args, NULL, selection);
}

static const kabi_candidate* candidate_of(const kabi_selection* selection, kabi_kernel kernel) {
  int32_t i;
  for (i = 0; i < selection->num_candidates && i < 4; ++i) {
    if (candidates[i].kernel == kernel) return &candidates[i];
  }
  return NULL;
}

typedef struct listed_variants {
  char variant[KABI_VARIANT_CAPACITY];
  char plain[KABI_VARIANT_CAPACITY];
  int records;
} listed_variants;

static int record_variant(void* user_data, const kabi_cache_entry* entry) {
  listed_variants* listed = (listed_variants*)user_data;
  ++listed->records;
  if (strcmp(entry->kernel_name, "c_variant.named") == 0) {
    snprintf(listed->variant, sizeof listed->variant, "%s", entry->variant);
  } else if (strcmp(entry->kernel_name, "c_variant.plain") == 0) {
    snprintf(listed->plain, sizeof listed->plain, "%s", entry->variant);
  }
  return 0;
}

static void test_registration(void) {
  kabi_op_desc desc;
  kabi_kernel_variant_extension named = variant_extension(name_variant);
  kabi_kernel_variant_extension failing = variant_extension(fail_to_name_variant);
  kabi_kernel_variant_extension too_small = variant_extension(name_variant);
  kabi_kernel_variant_extension without_function = variant_extension(NULL);
  /* An unknown extension before the variant one is skipped. */
  kabi_extension unknown = {sizeof(kabi_extension), KABI_EXTENSION_VENDOR_FIRST + 3, &named.extension};
  kabi_kernel_desc kernel;
  kabi_kernel_info info;

  memset(&desc, 0, sizeof desc);
  desc.struct_size = sizeof desc;
  desc.name = OP;
  desc.schema = "x: [N] float32 -> out: [N] float32";
  desc.tuning_key = "N";
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);

  kernel = kernel_desc("c_variant.named", &unknown);
  CHECK(kabi_kernel_register(&kernel, &variant_kernel) == KABI_STATUS_OK);
  kernel = kernel_desc("c_variant.plain", NULL);
  kernel.priority = 5; /* the heuristic's pick once the named kernel's records go stale */
  CHECK(kabi_kernel_register(&kernel, &plain_kernel) == KABI_STATUS_OK);
  kernel = kernel_desc("c_variant.failing", &failing.extension);
  kernel.priority = -1;
  CHECK(kabi_kernel_register(&kernel, &failing_kernel) == KABI_STATUS_OK);

  too_small.extension.struct_size = sizeof(kabi_extension);
  kernel = kernel_desc("c_variant.too_small", &too_small.extension);
  CHECK_STATUS(kabi_kernel_register(&kernel, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "its variant extension has struct_size");
  kernel = kernel_desc("c_variant.without_function", &without_function.extension);
  CHECK_STATUS(kabi_kernel_register(&kernel, NULL), KABI_STATUS_INVALID_ARGUMENT,
               "variant extension's variant is NULL");

  memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  CHECK(kabi_kernel_info_get(variant_kernel, &info) == KABI_STATUS_OK && info.has_variant == 1);
  CHECK(kabi_kernel_info_get(plain_kernel, &info) == KABI_STATUS_OK && info.has_variant == 0);
}

static void test_variants_recorded_and_checked(void) {
  kabi_args args = args_of(16);
  kabi_tuning_record records[2];
  kabi_selection selection;
  const kabi_candidate* named;
  const kabi_candidate* plain;
  listed_variants listed;

  /* The store asks the kernel: the record carries the variant it names for the problem. */
  records[0] = timed(variant_kernel, 5.0);
  records[1] = timed(plain_kernel, 10.0);
  CHECK(kabi_tuning_store(op, &args, records, 2) == KABI_STATUS_OK);
  memset(&listed, 0, sizeof listed);
  CHECK(kabi_cache_list(OP, record_variant, &listed) == KABI_STATUS_OK);
  CHECK(listed.records == 2);
  CHECK(strcmp(listed.variant, "block=8 revision=1") == 0);
  CHECK(strcmp(listed.plain, "") == 0);

  /* The same variant: the records count, and each candidate shows what it runs. */
  CHECK(select_for(16, &selection) == KABI_STATUS_OK);
  named = candidate_of(&selection, variant_kernel);
  plain = candidate_of(&selection, plain_kernel);
  CHECK(named != NULL && plain != NULL);
  CHECK(selection.kernel == variant_kernel && selection.pick_reason == KABI_PICK_TUNED);
  CHECK(named != NULL && strcmp(named->variant, "block=8 revision=1") == 0 && named->has_stale_record == 0);
  CHECK(named != NULL && named->gate == KABI_GATE_PASSED_TIMED && named->tuned_time_us == 5.0);
  CHECK(plain != NULL && strcmp(plain->variant, "") == 0 && plain->has_stale_record == 0);
  CHECK(plain != NULL && plain->tuned_time_us == 10.0);

  /* The heuristic now chooses another variant for the problem: the named kernel's record is stale, so it has no
   * verdict, the problem is not tuned, and the plain kernel (verified, as before) is the heuristic's pick. */
  heuristic_revision = 2;
  CHECK(select_for(16, &selection) == KABI_STATUS_OK);
  named = candidate_of(&selection, variant_kernel);
  plain = candidate_of(&selection, plain_kernel);
  CHECK(named != NULL && named->has_stale_record == 1 && strcmp(named->stale_variant, "block=8 revision=1") == 0);
  CHECK(named != NULL && strcmp(named->variant, "block=8 revision=2") == 0);
  CHECK(named != NULL && named->gate == KABI_GATE_NONE && named->tuned_time_us < 0 && named->eligible == 1);
  CHECK(plain != NULL && plain->gate == KABI_GATE_PASSED_TIMED && plain->tuned_time_us == 10.0);
  CHECK(selection.kernel == plain_kernel && selection.pick_reason == KABI_PICK_HEURISTIC);
  CHECK(strstr(selection.reason, "c_variant.named was measured on another variant; its record's variant is "
                                 "\"block=8 revision=1\", it now runs \"block=8 revision=2\"") != NULL);

  /* Measured again, on the variant it runs now: tuned again. */
  records[0] = timed(variant_kernel, 4.0);
  CHECK(kabi_tuning_store(op, &args, records, 1) == KABI_STATUS_OK);
  CHECK(select_for(16, &selection) == KABI_STATUS_OK);
  named = candidate_of(&selection, variant_kernel);
  CHECK(selection.kernel == variant_kernel && selection.pick_reason == KABI_PICK_TUNED);
  CHECK(named != NULL && named->has_stale_record == 0 && named->tuned_time_us == 4.0);

  /* Another problem is another variant (block=64): nothing recorded for it, nothing stale. */
  CHECK(select_for(100, &selection) == KABI_STATUS_NO_ELIGIBLE_KERNEL);
  named = candidate_of(&selection, variant_kernel);
  CHECK(named != NULL && strcmp(named->variant, "block=64 revision=2") == 0 && named->has_stale_record == 0);
}

static void test_failing_variant_function(void) {
  kabi_args args = args_of(16);
  kabi_tuning_record record = timed(failing_kernel, 1.0);
  kabi_selection selection;
  const kabi_candidate* failing;

  CHECK(select_for(16, &selection) == KABI_STATUS_OK);
  failing = candidate_of(&selection, failing_kernel);
  CHECK(failing != NULL && failing->eligible == 0);
  CHECK(failing != NULL &&
        strstr(failing->reason, "could not name its variant for the problem: the heuristic offers no algorithm"));
  CHECK_STATUS(kabi_tuning_store(op, &args, &record, 1), KABI_STATUS_KERNEL_FAILED,
               "c_variant.failing: could not name its variant for the problem: the heuristic offers no algorithm");
  variant_fails = 0;
  CHECK(kabi_tuning_store(op, &args, &record, 1) == KABI_STATUS_OK);
  variant_fails = 1;
}

/* A caller built against ABI 2.2 strides its candidates by the 2.2 size: nothing is written past it. */
static void test_older_candidate_size(void) {
  /* sizeof(kabi_candidate) in ABI 2.2: its fields end where variant starts, padded to the struct's 8-byte
   * alignment (size_t, double). */
  const size_t older_size = (offsetof(kabi_candidate, variant) + 7) / 8 * 8;
  const size_t count = 4;
  unsigned char* memory = (unsigned char*)malloc(older_size * count + 64);
  kabi_selection selection;
  kabi_args args = args_of(16);
  size_t i, written_size;
  kabi_kernel written_kernel;
  int untouched = 1;
  CHECK(memory != NULL);
  if (memory == NULL) return;
  memset(memory, 0xAB, older_size * count + 64);
  /* struct_size leads every element; memcpy, since a whole kabi_candidate does not fit at each element. */
  for (i = 0; i < count; ++i) memcpy(memory + i * older_size, &older_size, sizeof older_size);
  memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  selection.candidates = (kabi_candidate*)memory;
  selection.candidates_capacity = (int32_t)count;
  CHECK(kabi_select(op, &args, NULL, &selection) == KABI_STATUS_OK);
  for (i = older_size * count; i < older_size * count + 64; ++i) untouched = untouched && memory[i] == 0xAB;
  CHECK(untouched);
  memcpy(&written_size, memory, sizeof written_size);
  memcpy(&written_kernel, memory + offsetof(kabi_candidate, kernel), sizeof written_kernel);
  CHECK(written_size == older_size && written_kernel != NULL);
  free(memory);
}

int main(void) {
  char directory[] = "/tmp/kabi-variant-cache-XXXXXX";
  CHECK(kabi_abi_version() >= ((2u << 16) | 3u));
  CHECK(mkdtemp(directory) != NULL && kabi_cache_set_directory(directory) == KABI_STATUS_OK);
  test_registration();
  test_variants_recorded_and_checked();
  test_failing_variant_function();
  test_older_candidate_size();
  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  CHECK(kabi_cache_set_directory(NULL) == KABI_STATUS_OK);
  if (failures == 0) printf("kabi kernel variant tests passed\n");
  return failures == 0 ? 0 : 1;
}
