# The installed CMake package: find_package(kabi CONFIG REQUIRED) gives the imported target kabi::kabi (libkabi
# plus the include directory holding kabi/kabi.h, kabi/kabi.hpp and dlpack/dlpack.h) and kabi_add_plugin().
# From a pip install, point CMake at it with -Dkabi_DIR=$(python -m kabi.config --cmakedir).
include(CMakePackageConfigHelpers)

install(EXPORT kabiTargets NAMESPACE kabi:: DESTINATION "${KABI_INSTALL_CMAKEDIR}")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/kabiConfig.cmake.in" "${PROJECT_BINARY_DIR}/kabiConfig.cmake"
  INSTALL_DESTINATION "${KABI_INSTALL_CMAKEDIR}"
  PATH_VARS KABI_INSTALL_LIBDIR KABI_INSTALL_INCLUDEDIR)
# kabi is 0.x: a minor release may change the C++ package, while the C ABI carries its own version.
write_basic_package_version_file(
  "${PROJECT_BINARY_DIR}/kabiConfigVersion.cmake" VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)

install(FILES
  "${PROJECT_BINARY_DIR}/kabiConfig.cmake"
  "${PROJECT_BINARY_DIR}/kabiConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/cmake/kabiPlugin.cmake"
  DESTINATION "${KABI_INSTALL_CMAKEDIR}")
