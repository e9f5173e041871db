// The ops declared in registry/ops/*.toml, compiled in so C++ callers get them with no Python.
// The definitions are generated at build time by cmake/generate_builtin_ops.py (builtin_ops_generated.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

namespace kabi::core {

struct BuiltinOp {
  const char* name;
  const char* schema;
  const char* type_variables;
  const char* tuning_key;
};

extern const BuiltinOp kBuiltinOps[];
extern const size_t kBuiltinOpCount;

}  // namespace kabi::core
