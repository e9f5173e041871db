#include "plugin.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "error.hpp"
#include "manifest.hpp"
#include "names.hpp"
#include "registry.hpp"

namespace kabi::core {
namespace {

struct PluginLoad {
  // A directory of device-binary manifests (KABI_BINARY_PATH) rather than a plugin library.
  bool binaries = false;
  std::string path;
  std::string name;
  std::string version;
  uint32_t abi_version = 0;
  kabi_plugin_state state = KABI_PLUGIN_REFUSED;
  kabi_status status = KABI_STATUS_OK;
  std::string message;
  int32_t num_kernels = 0;
};

// Loads run one at a time (init runs with this thread's staging area; recursive so an init may query kabi), and
// records are append-only so the strings handed out in kabi_plugin_record stay valid.
std::recursive_mutex loads_mutex;
std::vector<std::unique_ptr<PluginLoad>>& loads() {
  static auto* records = new std::vector<std::unique_ptr<PluginLoad>>();
  return *records;
}

std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string canonical(const std::string& path) {
  char resolved[PATH_MAX];
  return realpath(path.c_str(), resolved) != nullptr ? std::string(resolved) : path;
}

std::string version_text(uint32_t version) {
  return std::to_string(KABI_ABI_VERSION_MAJOR_OF(version)) + "." + std::to_string(KABI_ABI_VERSION_MINOR_OF(version));
}

// Runs init with a staging area and commits what it registered; throws with the refusal.
void initialize(PluginLoad& load, void* library) {
  const std::string plugin = "plugin " + load.path;
  dlerror();
  auto abi_version = reinterpret_cast<kabi_plugin_abi_version_fn>(dlsym(library, KABI_PLUGIN_ABI_VERSION_SYMBOL));
  if (abi_version == nullptr) {
    throw Error(KABI_STATUS_NOT_FOUND, plugin +
                                           " does not export " KABI_PLUGIN_ABI_VERSION_SYMBOL
                                           " (define it with KABI_DEFINE_PLUGIN_ABI_VERSION()); not a kabi plugin");
  }
  load.abi_version = abi_version();
  if (KABI_ABI_VERSION_MAJOR_OF(load.abi_version) != KABI_ABI_VERSION_MAJOR) {
    throw Error(KABI_STATUS_ABI_MISMATCH, plugin + " was built for kabi ABI " + version_text(load.abi_version) +
                                              "; this kabi implements ABI " + version_text(KABI_ABI_VERSION) +
                                              " (major versions must match): rebuild the plugin against this kabi's "
                                              "headers");
  }
  auto init = reinterpret_cast<kabi_plugin_init_fn>(dlsym(library, KABI_PLUGIN_INIT_SYMBOL));
  if (init == nullptr) throw Error(KABI_STATUS_NOT_FOUND, plugin + " does not export " KABI_PLUGIN_INIT_SYMBOL);

  kabi_plugin_info info{};
  info.struct_size = sizeof info;
  Staging staging;
  Registry& registry = Registry::instance();
  registry.begin_staging(&staging);
  set_last_error("");
  kabi_status status = KABI_STATUS_INTERNAL;
  try {
    status = init(&host_api(), &info);
  } catch (...) {
    registry.end_staging();
    throw Error(KABI_STATUS_KERNEL_FAILED, plugin + ": kabi_plugin_init threw a C++ exception");
  }
  registry.end_staging();
  if (info.name != nullptr && *info.name != '\0') load.name = info.name;
  if (info.version != nullptr) load.version = info.version;
  if (status != KABI_STATUS_OK) {
    const std::string message = last_error();
    throw Error(KABI_STATUS_KERNEL_FAILED, plugin + ": kabi_plugin_init failed with " + status_name(status) +
                                               (message.empty() ? std::string() : ": " + message));
  }
  for (const auto& other : loads()) {
    if (!other->binaries && other->state == KABI_PLUGIN_LOADED && other->name == load.name) {
      throw Error(KABI_STATUS_ALREADY_EXISTS,
                  plugin + ": a plugin named \"" + load.name + "\" is already loaded from " + other->path);
    }
  }
  registry.commit(staging, load.name);
  load.num_kernels = static_cast<int32_t>(staging.kernels.size());
}

void set_error_from_plugin(const char* message) {
  set_last_error(message);
}
const char* last_error_for_plugin() {
  return last_error();
}

bool is_directory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool is_shared_library(const std::string& name) {
  return name.size() > 3 && (name.compare(name.size() - 3, 3, ".so") == 0 || name.find(".so.") != std::string::npos);
}

void load_quietly(const std::string& path) {
  try {
    load_plugin(path);
  } catch (const Error&) {
    // Recorded as refused; kabi_plugin_at reports why.
  }
}

// Registers one directory of manifests and records the outcome beside the plugin loads, so a corrupt manifest, a
// missing image or an ABI mismatch is reported the way a refused plugin is and the other directories still load.
void load_binaries_quietly(const std::string& requested_directory) {
  const std::string directory = canonical(requested_directory);
  std::lock_guard<std::recursive_mutex> lock(loads_mutex);
  for (const auto& load : loads()) {
    if (load->binaries && load->path == directory) return;
  }
  auto load = std::make_unique<PluginLoad>();
  load->binaries = true;
  load->path = directory;
  load->name = file_name(directory).empty() ? directory : file_name(directory);
  PluginLoad& record = *load;
  loads().push_back(std::move(load));
  try {
    if (!is_directory(directory)) {
      throw Error(KABI_STATUS_IO_ERROR, "KABI_BINARY_PATH: " + directory + " is not a directory");
    }
    record.num_kernels = load_binaries(directory);
    record.state = KABI_PLUGIN_LOADED;
  } catch (const Error& error) {
    record.status = error.status();
    record.message = error.what();
  } catch (const std::exception& error) {
    record.status = KABI_STATUS_IO_ERROR;
    record.message = "binaries " + directory + ": " + error.what();
  }
}

void load_plugin_path_from_environment() {
  const char* variable = std::getenv("KABI_PLUGIN_PATH");
  if (variable == nullptr) return;
  for (const std::string& entry : split(variable, ':')) {
    if (entry.empty()) continue;
    if (!is_directory(entry)) {
      load_quietly(entry);
      continue;
    }
    std::vector<std::string> libraries;
    if (DIR* directory = opendir(entry.c_str())) {
      while (const dirent* item = readdir(directory)) {
        if (is_shared_library(item->d_name)) libraries.push_back(entry + "/" + item->d_name);
      }
      closedir(directory);
    }
    std::sort(libraries.begin(), libraries.end());
    for (const std::string& library : libraries) load_quietly(library);
  }
}

void load_binary_path_from_environment() {
  const char* variable = std::getenv("KABI_BINARY_PATH");
  if (variable == nullptr) return;
  for (const std::string& entry : split(variable, ':')) {
    if (!entry.empty()) load_binaries_quietly(entry);
  }
}

}  // namespace

void load_plugin(const std::string& requested_path) {
  if (requested_path.empty()) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_plugin_load: path is empty");
  const std::string path = canonical(requested_path);
  std::lock_guard<std::recursive_mutex> lock(loads_mutex);
  for (const auto& load : loads()) {
    if (load->binaries || load->path != path) continue;
    if (load->state == KABI_PLUGIN_LOADED) return;
    throw Error(load->status, load->message);
  }
  auto load = std::make_unique<PluginLoad>();
  load->path = path;
  load->name = file_name(path);
  PluginLoad& record = *load;
  loads().push_back(std::move(load));

  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    record.status = KABI_STATUS_NOT_FOUND;
    record.message = "plugin " + path + " could not be loaded: " + (reason != nullptr ? reason : "dlopen failed");
    throw Error(record.status, record.message);
  }
  try {
    initialize(record, library);
    record.state = KABI_PLUGIN_LOADED;
  } catch (const Error& error) {
    // The staged kernels are gone (their user_data_free has run), so the library's code is no longer referenced.
    dlclose(library);
    record.status = error.status();
    record.message = error.what();
    throw;
  }
}

void load_plugins_from_environment() {
  load_plugin_path_from_environment();
  load_binary_path_from_environment();
}

namespace {

std::string libkabi_directory() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&load_builtin_plugins), &self) == 0 || self.dli_fname == nullptr) {
    throw Error(KABI_STATUS_INTERNAL, "kabi_plugin_load_builtin: cannot locate libkabi (dladdr failed)");
  }
  const std::string library = canonical(self.dli_fname);
  return library.substr(0, library.find_last_of('/'));
}

}  // namespace

void load_builtin_plugin(int32_t device_type) {
  if (device_type == kDLCPU) {
    load_quietly(libkabi_directory() + "/libkabi_cpu.so");
  } else if (device_type == kDLCUDA) {
    // The CUDA plugin exists only where it was built; its absence is normal, not a refusal worth recording.
    const std::string cuda = libkabi_directory() + "/libkabi_cuda.so";
    struct stat info;
    if (stat(cuda.c_str(), &info) == 0) load_quietly(cuda);
  }
}

void load_builtin_plugins() {
  load_builtin_plugin(kDLCPU);
  load_builtin_plugin(kDLCUDA);
}

int32_t plugin_count() {
  std::lock_guard<std::recursive_mutex> lock(loads_mutex);
  return static_cast<int32_t>(loads().size());
}

kabi_plugin_record plugin_record(int32_t index) {
  std::lock_guard<std::recursive_mutex> lock(loads_mutex);
  if (index < 0 || static_cast<size_t>(index) >= loads().size()) {
    throw Error(KABI_STATUS_NOT_FOUND,
                "plugin index " + std::to_string(index) + " is outside [0, " + std::to_string(loads().size()) + ")");
  }
  const PluginLoad& load = *loads()[static_cast<size_t>(index)];
  kabi_plugin_record record{};
  record.struct_size = sizeof record;
  record.path = load.path.c_str();
  record.name = load.name.c_str();
  record.version = load.version.c_str();
  record.abi_version = load.abi_version;
  record.state = load.state;
  record.message = load.message.c_str();
  record.num_kernels = load.num_kernels;
  record.kind = load.binaries ? KABI_PLUGIN_KIND_BINARIES : KABI_PLUGIN_KIND_LIBRARY;
  return record;
}

const kabi_host_api& host_api() {
  static const kabi_host_api api = [] {
    kabi_host_api table{};
    table.struct_size = sizeof table;
    table.abi_version = KABI_ABI_VERSION;
    table.kernel_register = &kabi_kernel_register;
    table.op_register = &kabi_op_register;
    table.device_count = &kabi_device_count;
    table.device_info_get = &kabi_device_info_get;
    table.set_error = &set_error_from_plugin;
    table.last_error = &last_error_for_plugin;
    table.memory_allocate = &kabi_memory_allocate;
    table.memory_release = &kabi_memory_release;
    return table;
  }();
  return api;
}

}  // namespace kabi::core
