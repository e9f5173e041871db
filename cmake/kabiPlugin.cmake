# kabi_add_plugin(<name> SOURCES <source>... [OUTPUT_NAME <name>])
#
# Builds a kabi plugin: a loadable module (lib<name>.so) that includes kabi's headers but does not link libkabi;
# it receives the host's functions in kabi_plugin_init. Everything except the symbols the source marks
# KABI_PLUGIN_EXPORT (kabi_plugin_abi_version and kabi_plugin_init) is hidden, and undefined symbols are link
# errors, so a plugin that would need libkabi at load time fails to build instead of failing to load.
#
#   find_package(kabi CONFIG REQUIRED)
#   kabi_add_plugin(acme_kabi SOURCES plugin.c)
#   install(TARGETS acme_kabi LIBRARY DESTINATION lib)
function(kabi_add_plugin name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "OUTPUT_NAME" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kabi_add_plugin(${name}): unexpected arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "kabi_add_plugin(${name}): SOURCES is required")
  endif()
  if(NOT TARGET kabi::kabi)
    message(FATAL_ERROR "kabi_add_plugin(${name}): target kabi::kabi not found; call find_package(kabi CONFIG REQUIRED) first")
  endif()

  add_library(${name} MODULE ${arg_SOURCES})
  # Only the headers of kabi::kabi, not its library.
  target_include_directories(${name} PRIVATE $<TARGET_PROPERTY:kabi::kabi,INTERFACE_INCLUDE_DIRECTORIES>)
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(arg_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME "${arg_OUTPUT_NAME}")
  endif()
  if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
    target_link_options(${name} PRIVATE "LINKER:--no-undefined")
  endif()
endfunction()
