# Plugins that exercise the plugin ABI's version and failure handling (tests/python/test_plugin_abi.py loads
# them). Included from tests/abi/CMakeLists.txt in a kabi build, and from a standalone project that the Python
# test generates; either way kabi::kabi provides the headers and no plugin links libkabi.
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/kabiPlugin.cmake")

foreach(_kabi_abi_test_plugin good next_major older_minor abi1 no_init failing_init crashing_init)
  kabi_add_plugin(kabi_abi_test_${_kabi_abi_test_plugin}
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/${_kabi_abi_test_plugin}_plugin.c")
  set_target_properties(kabi_abi_test_${_kabi_abi_test_plugin} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(kabi_abi_test_${_kabi_abi_test_plugin} PRIVATE -Wall -Wextra -Werror -pedantic)
  endif()
endforeach()

# The plugin whose init crashes gets a directory of its own: a KABI_PLUGIN_PATH that names the others' directory
# (tests/cpp/test_plugin_loading.c) loads every library there, and must not load this one.
set_target_properties(kabi_abi_test_crashing_init PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}/crashing")
