/* A library with the version symbol but no kabi_plugin_init: refused. */
#include "kabi/kabi.h"

KABI_DEFINE_PLUGIN_ABI_VERSION()
