/* A plugin whose kernel names the variant it runs per problem (KABI_EXTENSION_KERNEL_VARIANT), for the tests of
 * variants in the tuning cache and in kabi.explain (tests/python/test_kernel_variants.py). It registers one kernel
 * of the built-in op "matmul", abi_test.variant.matmul (float32, contiguous, no batch: a plain loop with a double
 * accumulator), whose variant plays a vendor library's heuristic: "tile=8" below N = 64 columns, "tile=64" from
 * there, and "revision=R" with R the value of KABI_TEST_VARIANT_REVISION (1 when unset), read at every call, so that
 * a test can change what the heuristic chooses for a problem it has tuned. Not one of plugins.cmake's plugins: the
 * tests that load every library of that directory count them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kabi/kabi.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

static kabi_status multiply(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const DLTensor* a = &args->inputs[0];
  const DLTensor* b = &args->inputs[1];
  const float* a_data = (const float*)((const char*)a->data + a->byte_offset);
  const float* b_data = (const float*)((const char*)b->data + b->byte_offset);
  float* out = (float*)((char*)args->outputs[0].data + args->outputs[0].byte_offset);
  const int64_t m = a->shape[0], k = a->shape[1], n = b->shape[1];
  int64_t row, column, inner;
  (void)user_data;
  (void)problem;
  for (row = 0; row < m; ++row) {
    for (column = 0; column < n; ++column) {
      double sum = 0.0;
      for (inner = 0; inner < k; ++inner) sum += (double)a_data[row * k + inner] * (double)b_data[inner * n + column];
      out[row * n + column] = (float)sum;
    }
  }
  return KABI_STATUS_OK;
}

static int64_t columns(const kabi_problem* problem) {
  int32_t i;
  for (i = 0; i < problem->num_dims; ++i) {
    if (problem->dim_names[i][0] == 'N' && problem->dim_names[i][1] == '\0') return problem->dims[i];
  }
  return 0;
}

static kabi_status name_variant(void* user_data, const kabi_problem* problem, const kabi_args* args, char* buffer,
                                size_t buffer_size) {
  const char* revision = getenv("KABI_TEST_VARIANT_REVISION");
  (void)user_data;
  (void)args;
  snprintf(buffer, buffer_size, "tile=%d revision=%s", columns(problem) >= 64 ? 64 : 8,
           revision != NULL && revision[0] != '\0' ? revision : "1");
  return KABI_STATUS_OK;
}

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  /* Read at registration only: it may live on the stack. */
  kabi_kernel_variant_extension variant;
  kabi_kernel_desc kernel;
  kabi_kernel handle = NULL;
  if (out_info != NULL && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = "abi-test-variant";
    out_info->version = "1.0.0";
  }
  memset(&variant, 0, sizeof variant);
  memset(&kernel, 0, sizeof kernel);
  variant.extension.struct_size = sizeof variant;
  variant.extension.type = KABI_EXTENSION_KERNEL_VARIANT;
  variant.variant = name_variant;
  kernel.struct_size = sizeof kernel;
  kernel.extensions = &variant.extension;
  kernel.op = "matmul";
  kernel.name = "abi_test.variant.matmul";
  kernel.backend = "abi_test_variant";
  kernel.device_type = kDLCPU;
  kernel.dtypes = KABI_DTYPE_FLOAT32;
  kernel.layouts = KABI_LAYOUT_CONTIGUOUS;
  kernel.batch_mode = KABI_BATCH_NONE;
  kernel.kind = KABI_KERNEL_FUNCTION;
  kernel.function = multiply;
  return host->kernel_register(&kernel, &handle);
}
