/* A plugin whose init registers a kernel, then crashes (SIGSEGV, as a null dereference would): `kabi plugins check`
 * must name the signal instead of dying with it. */
#include <signal.h>

#include "abi_test_plugin.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  kabi_status status;
  abi_test_describe(out_info, "abi-test-crashing-init");
  status = abi_test_register(host, "abi_test_crashing_init", sizeof(kabi_op_desc), sizeof(kabi_kernel_desc));
  if (status != KABI_STATUS_OK) return status;
  raise(SIGSEGV);
  return KABI_STATUS_OK;
}
