// Registering the device binaries described by a directory of NAME.kabi-manifest files (docs/manifest.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::core {

// Registers every manifest in directory, all or nothing; returns how many kernels were new (a kernel already
// registered with the same fingerprint is skipped). Throws Error naming the file and the field that is wrong.
int32_t load_binaries(const std::string& directory);

// Registers the one kernel a manifest file describes, with an optional supports predicate (user_data is handed to
// it, and freed with user_data_free once the kernel is gone). A kernel already registered under the same op, name and
// fingerprint is kept: it is returned and user_data is freed at once. Throws Error naming the file and the field.
struct Kernel;
Kernel* load_binary(const std::string& manifest_path, kabi_supports_fn supports, void* user_data,
                    void (*user_data_free)(void*));

// One manifest of a list loaded together: load_binary's arguments, and the op it must declare (empty: any).
struct BinaryLoadRequest {
  std::string manifest_path;
  std::string op;
  kabi_supports_fn supports = nullptr;
  void* user_data = nullptr;
  void (*user_data_free)(void*) = nullptr;
};

// load_binary for each request, all or nothing: the manifests are read in parallel and committed together in the
// requests' order. Every request's user_data is freed on an error, or at once where its kernel was already there.
std::vector<Kernel*> load_binaries(const std::vector<BinaryLoadRequest>& requests);

}  // namespace kabi::core
