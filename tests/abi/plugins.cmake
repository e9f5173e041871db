# Plugins that exercise the plugin ABI's version and failure handling (tests/python/test_plugin_abi.py loads
# them). Included from tests/abi/CMakeLists.txt in a kabi build, and from a standalone project that the Python
# test generates; either way kabi::kabi provides the headers and no plugin links libkabi.
include("${CMAKE_CURRENT_LIST_DIR}/../../cmake/kabiPlugin.cmake")

foreach(_kabi_abi_test_plugin good next_major older_minor no_init failing_init crashing_init)
  kabi_add_plugin(kabi_abi_test_${_kabi_abi_test_plugin}
    SOURCES "${CMAKE_CURRENT_LIST_DIR}/${_kabi_abi_test_plugin}_plugin.c")
  set_target_properties(kabi_abi_test_${_kabi_abi_test_plugin} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(kabi_abi_test_${_kabi_abi_test_plugin} PRIVATE -Wall -Wextra -Werror -pedantic)
  endif()
endforeach()
