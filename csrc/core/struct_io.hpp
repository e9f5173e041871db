// Reading and writing the ABI's size-prefixed structs.
//
// A caller built against another MINOR of kabi.h passes structs of another size: the core reads only the prefix
// the caller's struct_size covers (the rest stays zero, the default of every appended field) and writes only that
// prefix of output structs.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "error.hpp"

namespace kabi::core {

// The bytes of a struct up to and including `field` (offsetof does not work through a template parameter).
#define KABI_STRUCT_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

// A zero-initialized copy of *caller holding the fields its struct_size covers. `what` names the argument in
// errors; `minimum_size` is how much of the struct the call needs.
template <class Struct>
Struct read_input_struct(const Struct* caller, const char* what, size_t minimum_size) {
  if (caller == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (caller->struct_size < minimum_size) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT,
                std::string(what) + "->struct_size is " + std::to_string(caller->struct_size) + "; at least " +
                    std::to_string(minimum_size) + " bytes are needed (set it to sizeof)");
  }
  Struct copy;
  std::memset(&copy, 0, sizeof copy);
  std::memcpy(&copy, caller, std::min(caller->struct_size, sizeof(Struct)));
  return copy;
}

// Walks an extension chain (kabi_extension), checking that each link is at least a kabi_extension, before the
// reader of the struct looks up the types it knows (kabi_extension_find) and skips the rest. A chain longer than any
// real one is refused, since it is most likely a cycle.
inline void walk_extensions(const kabi_extension* chain, const char* what) {
  constexpr int kMaxLinks = 64;
  int links = 0;
  for (; chain != nullptr; chain = chain->next) {
    if (chain->struct_size < sizeof(kabi_extension)) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + ": extension of type " +
                                                    std::to_string(chain->type) + " has struct_size " +
                                                    std::to_string(chain->struct_size) + ", below sizeof(kabi_extension)");
    }
    if (++links > kMaxLinks) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + ": extension chain longer than " +
                                                    std::to_string(kMaxLinks) + " links (a cycle?)");
    }
  }
}

// Checks an output struct before anything is computed, so a bad one fails fast.
template <class Struct>
void check_output_struct(const Struct* caller, const char* what, size_t minimum_size) {
  if (caller == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + " is NULL");
  if (caller->struct_size < minimum_size) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT,
                std::string(what) + "->struct_size is " + std::to_string(caller->struct_size) + "; at least " +
                    std::to_string(minimum_size) + " bytes are needed (set it to sizeof)");
  }
}

// Copies the prefix of `value` that caller->struct_size covers into *caller, keeping the caller's struct_size.
template <class Struct>
void write_output_struct(Struct* caller, const Struct& value) {
  const size_t caller_size = caller->struct_size;
  const size_t size = std::min(caller_size, sizeof(Struct));
  if (size > sizeof(size_t)) {
    std::memcpy(reinterpret_cast<char*>(caller) + sizeof(size_t),
                reinterpret_cast<const char*>(&value) + sizeof(size_t), size - sizeof(size_t));
  }
  caller->struct_size = caller_size;
}

// Writes text NUL-terminated into buffer; a buffer too small for all of it is an error (truncation would silently
// corrupt keys such as device signatures).
inline void copy_to_buffer(const std::string& text, char* buffer, size_t buffer_size, const char* what) {
  if (buffer == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + ": buffer is NULL");
  if (text.size() + 1 > buffer_size) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(what) + ": buffer of " + std::to_string(buffer_size) +
                                                  " bytes is too small; " + std::to_string(text.size() + 1) +
                                                  " are needed");
  }
  std::memcpy(buffer, text.c_str(), text.size() + 1);
}

// Copies text into a fixed char array, truncating (used for descriptive fields such as reasons).
template <size_t N>
void copy_truncated(char (&destination)[N], const std::string& text) {
  const size_t length = std::min(text.size(), N - 1);
  std::memcpy(destination, text.data(), length);
  destination[length] = '\0';
}

}  // namespace kabi::core
