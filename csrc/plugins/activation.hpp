// linear's activations as the built-in plugins' kernels (host and device code) apply them. Only <cstdint>, so that
// device code can include it.
#pragma once

#include <cstdint>

namespace kabi::plugins {

// The activations of linear's enum(none, relu, gelu, gelu_tanh, silu), in that order: the attribute's value is the
// index (kabi.ops._references.ACTIVATIONS keeps the same order for Python). matmul is kNone.
enum class Activation : int32_t { kNone = 0, kRelu = 1, kGelu = 2, kGeluTanh = 3, kSilu = 4 };
constexpr int64_t kActivationCount = 5;

}  // namespace kabi::plugins
