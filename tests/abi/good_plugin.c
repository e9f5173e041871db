/* A plugin built against this header: accepted, and its kernel works. */
#include "abi_test_plugin.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  abi_test_describe(out_info, "abi-test-good");
  return abi_test_register(host, "abi_test_good", sizeof(kabi_op_desc), sizeof(kabi_kernel_desc));
}
