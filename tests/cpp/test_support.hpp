// Helpers shared by the C++ test programs: CHECK macros, kernel declarations over the naive test kernel, and a
// float32 matmul problem with fresh random inputs and a broadcasting reference check.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "kabi/kabi.h"
#include "test_kernels.h"

namespace kabi_test {

inline int failures = 0;

#define CHECK(condition)                                                                 \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

#define CHECK_STATUS(call, expected, fragment)                                                                     \
  do {                                                                                                             \
    const kabi_status status_ = (call);                                                                            \
    if (status_ != (expected) || std::strstr(kabi_last_error(), (fragment)) == nullptr) {                          \
      std::fprintf(stderr, "%s:%d: %s returned %s (\"%s\"); expected %s with \"%s\"\n", __FILE__, __LINE__, #call, \
                   kabi_status_name(status_), kabi_last_error(), kabi_status_name(expected), fragment);            \
      ++failures;                                                                                                  \
    }                                                                                                              \
  } while (0)

inline kabi_op matmul_op() {
  kabi_op op = nullptr;
  CHECK(kabi_op_find("matmul", &op) == KABI_STATUS_OK);
  return op;
}

inline kabi_kernel_desc naive_desc(const char* name) {
  return test_naive_desc(name, "cpp-test");
}

inline kabi_kernel register_kernel(kabi_kernel_desc desc) {
  kabi_kernel kernel = nullptr;
  const kabi_status status = kabi_kernel_register(&desc, &kernel);
  if (status != KABI_STATUS_OK) std::fprintf(stderr, "register %s: %s\n", desc.name, kabi_last_error());
  CHECK(status == KABI_STATUS_OK);
  return kernel;
}

inline void unregister_all() {
  while (kabi_kernel_count("matmul") > 0) {
    kabi_kernel kernel = nullptr;
    kabi_kernel_info info{};
    info.struct_size = sizeof info;
    CHECK(kabi_kernel_at("matmul", 0, &kernel) == KABI_STATUS_OK);
    CHECK(kabi_kernel_info_get(kernel, &info) == KABI_STATUS_OK);
    CHECK(kabi_kernel_unregister("matmul", info.name) == KABI_STATUS_OK);
  }
}

// A float32 matmul problem with owned, freshly random storage.
struct Problem {
  std::vector<int64_t> a_shape, b_shape, out_shape;
  std::vector<float> a, b, out;
  DLTensor inputs[2];
  DLTensor outputs[1];
  kabi_args args{};

  Problem(std::vector<int64_t> a_dims, std::vector<int64_t> b_dims, std::vector<int64_t> out_dims)
      : a_shape(std::move(a_dims)), b_shape(std::move(b_dims)), out_shape(std::move(out_dims)) {
    a.resize(count(a_shape));
    b.resize(count(b_shape));
    out.assign(count(out_shape), 0.0f);
    for (float& value : a) value = static_cast<float>(test_random_uniform());
    for (float& value : b) value = static_cast<float>(test_random_uniform());
    inputs[0] = test_tensor(a.data(), test_float32(), static_cast<int32_t>(a_shape.size()), a_shape.data(), nullptr);
    inputs[1] = test_tensor(b.data(), test_float32(), static_cast<int32_t>(b_shape.size()), b_shape.data(), nullptr);
    outputs[0] =
        test_tensor(out.data(), test_float32(), static_cast<int32_t>(out_shape.size()), out_shape.data(), nullptr);
    args.struct_size = sizeof args;
    args.inputs = inputs;
    args.num_inputs = 2;
    args.outputs = outputs;
    args.num_outputs = 1;
  }

  Problem(const Problem&) = delete;  // args point into this object
  Problem& operator=(const Problem&) = delete;

  static size_t count(const std::vector<int64_t>& shape) {
    size_t total = 1;
    for (int64_t size : shape) total *= static_cast<size_t>(size);
    return total;
  }

  // Checks out against a reference, broadcasting the leading dims of a and b as torch does.
  double max_error() const {
    const size_t rank = out_shape.size();
    const int64_t m = out_shape[rank - 2], n = out_shape[rank - 1], k = a_shape[a_shape.size() - 1];
    const size_t batch = count(out_shape) / static_cast<size_t>(m * n);
    double worst = 0.0;
    std::vector<double> a64(static_cast<size_t>(m * k)), b64(static_cast<size_t>(k * n)),
        expected(static_cast<size_t>(m * n));
    for (size_t index = 0; index < batch; ++index) {
      const size_t a_batch = broadcast_index(a_shape, index), b_batch = broadcast_index(b_shape, index);
      for (size_t i = 0; i < a64.size(); ++i) a64[i] = a[a_batch * a64.size() + i];
      for (size_t i = 0; i < b64.size(); ++i) b64[i] = b[b_batch * b64.size() + i];
      test_reference_matmul(a64.data(), b64.data(), expected.data(), m, n, k);
      worst = std::max(worst, test_max_relative_error(out.data() + index * expected.size(), expected.data(), m * n));
    }
    return worst;
  }

  // The matrix index within `shape` that output batch `index` reads.
  size_t broadcast_index(const std::vector<int64_t>& shape, size_t index) const {
    const size_t out_batch_rank = out_shape.size() - 2, batch_rank = shape.size() - 2;
    size_t result = 0, stride = 1;
    for (size_t d = out_batch_rank; d-- > 0;) {
      const auto size = static_cast<size_t>(out_shape[d]);
      const size_t position = index % size;
      index /= size;
      if (d + batch_rank >= out_batch_rank) {
        const size_t own = d + batch_rank - out_batch_rank;
        if (shape[own] != 1) result += position * stride;
        stride *= static_cast<size_t>(shape[own]);
      }
    }
    return result;
  }
};

inline kabi_selection select(kabi_op op, const kabi_args& args, const kabi_select_options* options,
                             kabi_status expected, kabi_candidate* candidates = nullptr, int32_t capacity = 0) {
  kabi_selection selection{};
  selection.struct_size = sizeof selection;
  selection.candidates = candidates;
  selection.candidates_capacity = capacity;
  if (candidates != nullptr) candidates[0].struct_size = sizeof(kabi_candidate);
  const kabi_status status = kabi_select(op, &args, options, &selection);
  if (status != expected) std::fprintf(stderr, "kabi_select: %s: %s\n", kabi_status_name(status), kabi_last_error());
  CHECK(status == expected);
  return selection;
}

inline std::string kernel_name(kabi_kernel kernel) {
  kabi_kernel_info info{};
  info.struct_size = sizeof info;
  if (kernel == nullptr || kabi_kernel_info_get(kernel, &info) != KABI_STATUS_OK) return "<none>";
  return info.name;
}

inline int32_t cpu_arch() {
  kabi_device_info info{};
  info.struct_size = sizeof info;
  CHECK(kabi_device_info_get(kDLCPU, 0, &info) == KABI_STATUS_OK);
  return info.arch;
}

}  // namespace kabi_test
