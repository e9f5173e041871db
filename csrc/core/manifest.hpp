// Registering the device binaries described by a directory of NAME.kabi-manifest files (docs/manifest.md).
#pragma once

#include <cstdint>
#include <string>

namespace kabi::core {

// Registers every manifest in directory, all or nothing; returns how many kernels were new (a kernel already
// registered with the same fingerprint is skipped). Throws Error naming the file and the field that is wrong.
int32_t load_binaries(const std::string& directory);

}  // namespace kabi::core
