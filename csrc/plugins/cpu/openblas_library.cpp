#include "openblas_library.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace kabi::cpu {
namespace {

// scipy-openblas32 prefixes every symbol with `scipy_`; a plain OpenBLAS (named through KABI_OPENBLAS_LIBRARY)
// does not.
constexpr const char* kSymbolPrefixes[] = {"scipy_", ""};

void* find_symbol(void* handle, const std::string& prefix, const char* name) {
  return dlsym(handle, (prefix + name).c_str());
}

// Resolve the gemm functions in an opened library; false with a reason if they are missing or if the library was
// built with 64-bit integers (calling it through the 32-bit signature would read garbage dimensions).
bool resolve(void* handle, OpenBlas* out, std::string* reason) {
  for (const char* prefix : kSymbolPrefixes) {
    void* sgemm = find_symbol(handle, prefix, "cblas_sgemm");
    void* dgemm = find_symbol(handle, prefix, "cblas_dgemm");
    if (sgemm == nullptr || dgemm == nullptr) continue;
    auto get_config = reinterpret_cast<const char* (*)()>(find_symbol(handle, prefix, "openblas_get_config"));
    std::string config = get_config != nullptr ? get_config() : "";
    if (config.find("USE64BITINT") != std::string::npos) {
      *reason = "it is a 64-bit-integer (ILP64) build (" + config + "); kabi-cpu needs the 32-bit interface";
      return false;
    }
    out->sgemm = reinterpret_cast<GemmFunction<float>>(sgemm);
    out->dgemm = reinterpret_cast<GemmFunction<double>>(dgemm);
    out->config = config.empty() ? "unknown OpenBLAS build" : config;
    return true;
  }
  *reason = "it has neither scipy_cblas_sgemm/scipy_cblas_dgemm nor cblas_sgemm/cblas_dgemm";
  return false;
}

std::vector<std::string> candidate_paths(const std::string& plugin_directory) {
  if (const char* forced = std::getenv("KABI_OPENBLAS_LIBRARY"); forced != nullptr && *forced != '\0') {
    return {forced};
  }
  std::vector<std::string> paths;
#ifdef KABI_CPU_DEFAULT_OPENBLAS
  paths.emplace_back(KABI_CPU_DEFAULT_OPENBLAS);
#endif
  // A wheel puts this plugin in site-packages/kabi/lib; scipy-openblas32 lives beside the kabi package.
  if (!plugin_directory.empty()) {
    paths.push_back(plugin_directory + "/../../scipy_openblas32/lib/libscipy_openblas.so");
  }
  paths.emplace_back("libscipy_openblas.so");
  return paths;
}

}  // namespace

bool open_openblas(const std::string& plugin_directory, OpenBlas* out, std::string* error) {
  std::string tried;
  for (const std::string& path : candidate_paths(plugin_directory)) {
    if (!tried.empty()) tried += "; ";
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += why != nullptr ? why : path + ": dlopen failed";
      continue;
    }
    std::string reason;
    if (resolve(handle, out, &reason)) {
      // Kept open for the life of the process: registered kernels point into it.
      out->path = path;
      return true;
    }
    dlclose(handle);
    tried += path + ": " + reason;
  }
  *error = "kabi-cpu: cannot load OpenBLAS: " + tried + "; set KABI_OPENBLAS_LIBRARY to the path of " +
           "libscipy_openblas.so (pip install scipy-openblas32) or of another 32-bit-integer OpenBLAS";
  return false;
}

}  // namespace kabi::cpu
