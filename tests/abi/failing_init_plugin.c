/* A plugin whose init registers a kernel, then fails: refused, and the kernel it registered must not stay. */
#include "abi_test_plugin.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  kabi_status status;
  abi_test_describe(out_info, "abi-test-failing-init");
  status = abi_test_register(host, "abi_test_failing_init", sizeof(kabi_op_desc), sizeof(kabi_kernel_desc));
  if (status != KABI_STATUS_OK) return status;
  host->set_error("abi-test-failing-init: the accelerator did not answer");
  return KABI_STATUS_UNAVAILABLE;
}
