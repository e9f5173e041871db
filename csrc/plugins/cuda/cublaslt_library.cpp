#include "cublaslt_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace kabi::cuda::lt {
namespace {

template <typename Function>
bool resolve(void* handle, const char* symbol, Function* out, std::string* missing) {
  *out = reinterpret_cast<Function>(dlsym(handle, symbol));
  if (*out == nullptr && missing->empty()) *missing = symbol;
  return *out != nullptr;
}

bool bind(void* handle, Library* library, std::string* missing) {
  bool ok = true;
  ok &= resolve(handle, "cublasLtCreate", &library->create, missing);
  ok &= resolve(handle, "cublasLtGetVersion", &library->get_version, missing);
  ok &= resolve(handle, "cublasLtMatmulDescCreate", &library->desc_create, missing);
  ok &= resolve(handle, "cublasLtMatmulDescDestroy", &library->desc_destroy, missing);
  ok &= resolve(handle, "cublasLtMatmulDescSetAttribute", &library->desc_set, missing);
  ok &= resolve(handle, "cublasLtMatrixLayoutCreate", &library->layout_create, missing);
  ok &= resolve(handle, "cublasLtMatrixLayoutDestroy", &library->layout_destroy, missing);
  ok &= resolve(handle, "cublasLtMatrixLayoutSetAttribute", &library->layout_set, missing);
  ok &= resolve(handle, "cublasLtMatmulPreferenceCreate", &library->preference_create, missing);
  ok &= resolve(handle, "cublasLtMatmulPreferenceDestroy", &library->preference_destroy, missing);
  ok &= resolve(handle, "cublasLtMatmulPreferenceSetAttribute", &library->preference_set, missing);
  ok &= resolve(handle, "cublasLtMatmulAlgoGetHeuristic", &library->heuristic, missing);
  ok &= resolve(handle, "cublasLtMatmul", &library->matmul, missing);
  ok &= resolve(handle, "cublasLtMatmulAlgoConfigGetAttribute", &library->algo_config_get, missing);
  return ok;
}

// Where to look, first match wins: the environment's choice, the nvidia-cublas package installed beside kabi or
// found at build time, then the loader's search (which also finds a libcublasLt torch has already loaded).
std::vector<std::string> candidates(const std::string& plugin_directory) {
  std::vector<std::string> paths;
  if (const char* chosen = std::getenv("KABI_CUBLASLT_LIBRARY"); chosen != nullptr && *chosen != '\0') {
    paths.emplace_back(chosen);
  }
  // An installed wheel keeps the plugin in site-packages/kabi/lib.
  if (!plugin_directory.empty()) {
    paths.push_back(plugin_directory + "/../../nvidia/cu13/lib/libcublasLt.so.13");
    paths.push_back(plugin_directory + "/../../nvidia/cublas/lib/libcublasLt.so.12");
  }
#ifdef KABI_CUDA_DEFAULT_CUBLASLT
  paths.emplace_back(KABI_CUDA_DEFAULT_CUBLASLT);
#endif
  for (const char* soname : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}) paths.emplace_back(soname);
  return paths;
}

}  // namespace

bool open_cublaslt(const std::string& plugin_directory, Library* library, std::string* error) {
  static std::mutex mutex;
  static bool attempted = false;
  static Library opened;
  static std::string failure;
  std::lock_guard<std::mutex> lock(mutex);
  if (!attempted) {
    attempted = true;
    std::string tried;
    for (const std::string& path : candidates(plugin_directory)) {
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      Library candidate;
      std::string missing;
      if (!bind(handle, &candidate, &missing)) {
        tried += (tried.empty() ? "" : ", ") + path + " (no " + missing + ")";
        dlclose(handle);
        continue;
      }
      candidate.handle = handle;
      candidate.path = path;
      candidate.version = candidate.get_version();
      opened = candidate;
      break;
    }
    if (opened.handle == nullptr) {
      failure = "cuBLASLt not found (tried " + tried + "); set KABI_CUBLASLT_LIBRARY or install nvidia-cublas";
    }
  }
  if (opened.handle == nullptr) {
    *error = failure;
    return false;
  }
  *library = opened;
  return true;
}

}  // namespace kabi::cuda::lt
