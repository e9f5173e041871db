/* A plugin built for ABI MAJOR + 1: refused before its init runs, so its op must never appear. */
#include "abi_test_plugin.h"

KABI_PLUGIN_EXPORT uint32_t kabi_plugin_abi_version(void) {
  return (uint32_t)(KABI_ABI_VERSION_MAJOR + 1) << 16;
}

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  abi_test_describe(out_info, "abi-test-next-major");
  return abi_test_register(host, "abi_test_next_major", sizeof(kabi_op_desc), sizeof(kabi_kernel_desc));
}
