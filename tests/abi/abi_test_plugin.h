/* Shared by the ABI test plugins: each registers its own op, "<prefix>_double" (x: [N] float32 -> out: [N] float32),
 * with one kernel computing out = 2 * x, so a test can tell whose kernels exist without touching real ops. */
#ifndef KABI_TESTS_ABI_TEST_PLUGIN_H_
#define KABI_TESTS_ABI_TEST_PLUGIN_H_

#include <stddef.h>
#include <stdio.h>

#include "kabi/kabi.h"

static kabi_status abi_test_double(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const DLTensor* x = &args->inputs[0];
  const DLTensor* out = &args->outputs[0];
  const float* source = (const float*)((const char*)x->data + x->byte_offset);
  float* target = (float*)((char*)out->data + out->byte_offset);
  (void)user_data;
  (void)problem;
  for (int64_t i = 0; i < x->shape[0]; ++i) target[i] = 2.0f * source[i];
  return KABI_STATUS_OK;
}

/* Register "<prefix>_double" and its kernel "<prefix>.double". op_size and kernel_size are the struct_size values
 * to send: sizeof() for a plugin built against this header, less for one built against an older MINOR. */
static kabi_status abi_test_register(const kabi_host_api* host, const char* prefix, size_t op_size,
                                     size_t kernel_size) {
  char op_name[64];
  char kernel_name[64];
  kabi_op_desc op;
  kabi_kernel_desc kernel;
  kabi_op op_handle = NULL;
  kabi_kernel kernel_handle = NULL;
  kabi_status status;

  snprintf(op_name, sizeof(op_name), "%s_double", prefix);
  snprintf(kernel_name, sizeof(kernel_name), "%s.double", prefix);
  op = (kabi_op_desc){0};
  op.struct_size = op_size;
  op.name = op_name;
  op.schema = "x: [N] float32 -> out: [N] float32";
  status = host->op_register(&op, &op_handle);
  if (status != KABI_STATUS_OK) return status;

  kernel = (kabi_kernel_desc){0};
  kernel.struct_size = kernel_size;
  kernel.op = op_name;
  kernel.name = kernel_name;
  kernel.backend = prefix;
  kernel.device_type = kDLCPU;
  kernel.dtypes = KABI_DTYPE_FLOAT32;
  kernel.layouts = KABI_LAYOUT_CONTIGUOUS;
  kernel.batch_mode = KABI_BATCH_NONE;
  kernel.kind = KABI_KERNEL_FUNCTION;
  kernel.function = abi_test_double;
  return host->kernel_register(&kernel, &kernel_handle);
}

static void abi_test_describe(kabi_plugin_info* out_info, const char* name) {
  if (out_info != NULL && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = name;
    out_info->version = "1.2.3";
  }
}

#endif /* KABI_TESTS_ABI_TEST_PLUGIN_H_ */
