/* A plugin built against an older MINOR: its structs end before the fields a later MINOR appended (the op's
 * tuning_key, the kernel's fingerprint). The host must read only what struct_size covers and accept it. */
#include "abi_test_plugin.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()

KABI_PLUGIN_EXPORT kabi_status kabi_plugin_init(const kabi_host_api* host, kabi_plugin_info* out_info) {
  abi_test_describe(out_info, "abi-test-older-minor");
  return abi_test_register(host, "abi_test_older_minor", offsetof(kabi_op_desc, tuning_key),
                           offsetof(kabi_kernel_desc, fingerprint));
}
