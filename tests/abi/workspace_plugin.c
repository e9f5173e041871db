/* A plugin whose kernel declares a workspace, for the tests of the allocator behind workspaces
 * (tests/python/test_workspace_allocator.py). Op "abi_test_workspace_copy": out = 3 * x, computed through the
 * workspace: the kernel asks for N floats plus EXTRA_BYTES, copies x into the start of it and writes out from there,
 * so what the allocator handed out ends up holding x. It fails, saying why, when the workspace is missing, smaller
 * than it asked, or not aligned as kabi.h promises. Op "abi_test_workspace_cuda" has a CUDA kernel that computes
 * nothing (this library has no CUDA code): it asks for the same workspace and checks it is there, for the GPU test
 * of where CUDA workspaces come from. Not one of plugins.cmake's plugins: the tests that load every
 * library of that directory count them. */
#include <stdint.h>

#include "kabi/kabi.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

/* Beyond x's floats, so the size asked is not a size any other buffer of the test has. */
#define EXTRA_BYTES 40

static void (*set_error)(const char* message) = NULL;

static size_t bytes_for(const kabi_problem* problem) { return (size_t)problem->dims[0] * sizeof(float) + EXTRA_BYTES; }

static kabi_status workspace_bytes(void* user_data, const kabi_problem* problem, size_t* out_bytes) {
  (void)user_data;
  *out_bytes = bytes_for(problem);
  return KABI_STATUS_OK;
}

static kabi_status copy_through_workspace(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  const float* x = (const float*)args->inputs[0].data;
  float* out = (float*)args->outputs[0].data;
  float* scratch = (float*)args->workspace;
  int64_t i;
  (void)user_data;
  if (scratch == NULL || args->workspace_size < bytes_for(problem)) {
    set_error("abi_test_workspace.copy: no workspace of the size it declared");
    return KABI_STATUS_INTERNAL;
  }
  if ((uintptr_t)scratch % 256 != 0) {
    set_error("abi_test_workspace.copy: the workspace is not aligned to 256 bytes");
    return KABI_STATUS_INTERNAL;
  }
  for (i = 0; i < problem->dims[0]; ++i) scratch[i] = x[i];
  for (i = 0; i < problem->dims[0]; ++i) out[i] = 3.0f * scratch[i];
  return KABI_STATUS_OK;
}

static kabi_status check_cuda_workspace(void* user_data, const kabi_problem* problem, const kabi_args* args) {
  (void)user_data;
  if (args->workspace == NULL || args->workspace_size < bytes_for(problem)) {
    set_error("abi_test_workspace.cuda: no workspace of the size it declared");
    return KABI_STATUS_INTERNAL;
  }
  return KABI_STATUS_OK;
}

static kabi_status register_op_and_kernel(const kabi_host_api* host, const char* op_name, const char* kernel_name,
                                          int32_t device_type, kabi_kernel_fn function) {
  kabi_op_desc op = {0};
  kabi_kernel_desc kernel = {0};
  kabi_op op_handle = NULL;
  kabi_kernel kernel_handle = NULL;
  kabi_status status;
  op.struct_size = sizeof op;
  op.name = op_name;
  op.schema = "x: [N] float32 -> out: [N] float32";
  status = host->op_register(&op, &op_handle);
  if (status != KABI_STATUS_OK) return status;
  kernel.struct_size = sizeof kernel;
  kernel.op = op_name;
  kernel.name = kernel_name;
  kernel.backend = "abi_test_workspace";
  kernel.device_type = device_type;
  kernel.dtypes = KABI_DTYPE_FLOAT32;
  kernel.layouts = KABI_LAYOUT_CONTIGUOUS;
  kernel.batch_mode = KABI_BATCH_NONE;
  kernel.kind = KABI_KERNEL_FUNCTION;
  kernel.function = function;
  kernel.workspace = workspace_bytes;
  return host->kernel_register(&kernel, &kernel_handle);
}

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  kabi_status status;
  if (out_info != NULL && out_info->struct_size >= offsetof(kabi_plugin_info, version) + sizeof(const char*)) {
    out_info->name = "abi-test-workspace";
    out_info->version = "1.0.0";
  }
  set_error = host->set_error;
  status = register_op_and_kernel(host, "abi_test_workspace_copy", "abi_test_workspace.copy", kDLCPU,
                                  copy_through_workspace);
  if (status != KABI_STATUS_OK) return status;
  return register_op_and_kernel(host, "abi_test_workspace_cuda", "abi_test_workspace.cuda", kDLCUDA,
                                check_cuda_workspace);
}
