// Device-binary kernels: a cubin/PTX image plus a launch spec, launched through the CUDA driver API.
// Owned by device_binary.cpp (launch) and manifest.cpp (reading NAME.kabi-manifest files).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kabi/kabi.h"
#include "schema.hpp"

namespace kabi::core {

class DeviceBinary;  // the image and spec; reads a manifest's image and loads a module per device lazily, thread-safely

// An image that a manifest names on disk. It is read, and checked against its format and the hash the manifest
// declares, when the kernel is first launched, not when it is registered: registering a package's hundreds of device
// binaries then reads no image, and a launch still never runs an image that fails those checks. A failing image is
// refused at that launch, with the manifest's line and the image's file named (docs/manifest.md).
struct ImageFile {
  std::string path;              // the image file
  std::string manifest;          // the manifest naming it, and the lines of its `image` and `image_fnv1a64` keys
  int image_line = 0;
  int hash_line = 0;
  uint64_t declared_fnv1a64 = 0;
};

// Validate and deep-copy a kabi_device_binary for an op of this schema (reads only what desc->struct_size covers; a
// NULL grid axis means "1", a cluster_size of 0 means 1; tensor and attribute indices must exist in the schema). Throws
// kabi::core::Error(KABI_STATUS_INVALID_ARGUMENT, ...) naming the bad field. With image_file, desc's image is ignored:
// the image stays in that file until the first launch.
std::shared_ptr<DeviceBinary> make_device_binary(const kabi_device_binary* desc, const Schema& schema,
                                                 const ImageFile* image_file = nullptr);

// FNV-1a, 64-bit: the hash manifests record for their images (image_fnv1a64) and the base of default fingerprints.
uint64_t fnv1a64(const void* data, size_t size, uint64_t hash = 0xcbf29ce484222325ull);

// A stable hash of the image and the launch spec (for default fingerprints). An image on disk counts by the hash its
// manifest declares, which its bytes must have to be launched.
std::string device_binary_fingerprint(const DeviceBinary& binary);

// Why the image cannot run the problem: the first dim or stride parameter whose value is not a multiple of the
// divisible_by it declares ("param 7 (stride of b, dim -2) is 4100, not a multiple of 16 as the image assumes"), or
// one such value that cannot be read (a stride of a dim the tensor lacks); "" when every assumption holds. Reads args'
// inputs (as CallArgs completed them); outputs from the problem's shapes, so a selection may leave them out.
std::string divisibility_mismatch(const DeviceBinary& binary, const Schema& schema, const kabi_problem& problem,
                                  const kabi_args& args);

// Launch on args->stream: evaluate the grid rule over the problem's dims, marshal the parameters, cuLaunchKernel
// (or cuLaunchKernelEx for clusters). Errors become kabi::core::Error(KABI_STATUS_KERNEL_FAILED or UNAVAILABLE); an
// image on disk is read and checked first, at the first launch, and one that fails is refused with the status of its
// check (KABI_STATUS_IO_ERROR: unreadable; KABI_STATUS_INVALID_ARGUMENT: a wrong format or hash).
void launch_device_binary(DeviceBinary& binary, const kabi_problem& problem, const kabi_args& args);

// A grid expression parsed once (at registration) and evaluated at every launch. Grammar: + - * / (integer
// division), unary -, parentheses, cdiv(a, b), min(a, b), max(a, b), non-negative integer literals, and names: the
// problem's dimension names and "batch" (resolved at evaluation, as only the op knows its dimension names).
class GridExpression {
 public:
  // Throws Error(KABI_STATUS_INVALID_ARGUMENT) naming the expression and the column on a syntax error.
  explicit GridExpression(const std::string& text);
  // Throws Error(KABI_STATUS_INVALID_ARGUMENT) naming the expression on an unknown name, a division by zero or an
  // overflow.
  int64_t evaluate(const kabi_problem& problem) const;
  const std::string& text() const { return text_; }
  // The names it reads, in order of appearance (for checking them against an op's dimensions early).
  std::vector<std::string> names() const;

  enum class Operation { kPushNumber, kPushName, kAdd, kSubtract, kMultiply, kDivide, kNegate, kCdiv, kMin, kMax };
  struct Step {
    Operation operation;
    int64_t number;
    std::string name;
  };

 private:
  std::string text_;
  std::vector<Step> program_;  // postfix
};

// Evaluate a grid expression ("cdiv(M, 128) * cdiv(N, 64)") over the problem's dims and "batch". Throws
// Error(KABI_STATUS_INVALID_ARGUMENT) on a syntax error or unknown name. Exposed for tests.
int64_t evaluate_grid_expression(const std::string& expression, const kabi_problem& problem);

}  // namespace kabi::core
