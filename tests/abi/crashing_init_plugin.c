/* A plugin whose init crashes (SIGSEGV, as a null dereference would): `kabi plugins check` must name the signal. */
#include <signal.h>

#include "abi_test_plugin.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  (void)host;
  abi_test_describe(out_info, "abi-test-crashing-init");
  raise(SIGSEGV);
  return KABI_STATUS_OK;
}
