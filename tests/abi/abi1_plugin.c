/* A plugin built against the headers of ABI 1.2: refused before its init runs, with a message that names both
 * versions and says to rebuild it. Its init is never called, so it needs no registration of its own. */
#include "abi_test_plugin.h"

KABI_PLUGIN_EXPORT uint32_t kabi_plugin_abi_version(void) {
  return (uint32_t)((1u << 16) | 2u);
}

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  abi_test_describe(out_info, "abi-test-abi1");
  return abi_test_register(host, "abi_test_abi1", sizeof(kabi_op_desc), sizeof(kabi_kernel_desc));
}
