# Whether this build gets the CUDA plugin (libkabi_cuda.so: CUTLASS and cuBLASLt GEMMs). It needs a CUDA compiler
# (check_language(CUDA)) and CUTLASS's headers (the nvidia-cutlass package, a build requirement, or
# KABI_CUTLASS_INCLUDE_DIR). Without either the build still succeeds, says what it lacks, and kabi runs on CUDA
# devices with its other backends (torch, Triton, device binaries).
option(KABI_ENABLE_CUDA "Build the CUDA plugin libkabi_cuda.so where a CUDA compiler is found" ON)
set(KABI_CUTLASS_INCLUDE_DIR "" CACHE PATH "Directory holding cutlass/ and cute/ (default: from nvidia-cutlass)")

# A plugin built elsewhere from these same sources (benchmarks/prebuilt_cuda_plugin.sh builds one on a machine with
# nvcc for a GPU machine) is installed as it is, and no CUDA compiler is needed. The plugin ABI check at load time
# refuses one built against another ABI.
set(KABI_CUDA_PLUGIN_PREBUILT "" CACHE FILEPATH "A libkabi_cuda.so built elsewhere, installed instead of building one")

if(NOT KABI_ENABLE_CUDA)
  message(STATUS "kabi: KABI_ENABLE_CUDA is OFF; the CUDA plugin (CUTLASS and cuBLASLt kernels) is not built")
  return()
endif()
if(KABI_CUDA_PLUGIN_PREBUILT)
  if(NOT EXISTS "${KABI_CUDA_PLUGIN_PREBUILT}")
    message(FATAL_ERROR "KABI_CUDA_PLUGIN_PREBUILT is ${KABI_CUDA_PLUGIN_PREBUILT}, which does not exist")
  endif()
  message(STATUS "kabi: CUDA plugin prebuilt, ${KABI_CUDA_PLUGIN_PREBUILT}; not compiled here")
  configure_file("${KABI_CUDA_PLUGIN_PREBUILT}" "${PROJECT_BINARY_DIR}/lib/libkabi_cuda.so" COPYONLY)
  install(PROGRAMS "${PROJECT_BINARY_DIR}/lib/libkabi_cuda.so" DESTINATION "${KABI_INSTALL_LIBDIR}")
  return()
endif()
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "kabi: no CUDA compiler found; the CUDA plugin (CUTLASS and cuBLASLt kernels) is not built")
  return()
endif()
if(NOT KABI_CUTLASS_INCLUDE_DIR)
  # find_spec locates the package without importing it (its __init__ pulls in cuda-python).
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -c
      "import importlib.util, os; spec = importlib.util.find_spec('cutlass_library'); print(os.path.join(spec.submodule_search_locations[0], 'source', 'include'))"
    OUTPUT_VARIABLE KABI_CUTLASS_INCLUDE_DIR OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
endif()
if(NOT EXISTS "${KABI_CUTLASS_INCLUDE_DIR}/cutlass/cutlass.h")
  message(STATUS "kabi: CUTLASS headers not found (pip install nvidia-cutlass, or set KABI_CUTLASS_INCLUDE_DIR); "
                 "the CUDA plugin is not built")
  return()
endif()
message(STATUS "kabi: CUDA plugin with ${CMAKE_CUDA_COMPILER}, CUTLASS from ${KABI_CUTLASS_INCLUDE_DIR}")
enable_language(CUDA)
add_subdirectory(csrc/plugins/cuda)
