// A C++17 caller of libkabi through the C ABI: broadcasting, selection order (arch specificity, priority,
// registration order), filter reasons, tuned decisions and their invalidation, KABI_FORCE, kabi_call's decision
// cache, custom ops, struct_size compatibility, and registration racing with selection on 8 threads.
#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <string>
#include <thread>
#include <vector>

#include "kabi/kabi.h"
#include "test_kernels.h"

namespace {

int failures = 0;

#define CHECK(condition)                                                                   \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition);  \
      ++failures;                                                                          \
    }                                                                                      \
  } while (0)

#define CHECK_STATUS(call, expected, fragment)                                                             \
  do {                                                                                                     \
    const kabi_status status_ = (call);                                                                    \
    if (status_ != (expected) || std::strstr(kabi_last_error(), (fragment)) == nullptr) {                  \
      std::fprintf(stderr, "%s:%d: %s returned %s (\"%s\"); expected %s with \"%s\"\n", __FILE__, __LINE__, \
                   #call, kabi_status_name(status_), kabi_last_error(), kabi_status_name(expected), fragment); \
      ++failures;                                                                                          \
    }                                                                                                      \
  } while (0)

kabi_op matmul_op() {
  kabi_op op = nullptr;
  CHECK(kabi_op_find("matmul", &op) == KABI_STATUS_OK);
  return op;
}

kabi_kernel_desc naive_desc(const char* name) {
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof desc;
  desc.op = "matmul";
  desc.name = name;
  desc.backend = "cpp-test";
  desc.device_type = kDLCPU;
  desc.dtypes = KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64;
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_ANY;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = test_naive_matmul;
  return desc;
}

kabi_kernel register_kernel(kabi_kernel_desc desc) {
  kabi_kernel kernel = nullptr;
  const kabi_status status = kabi_kernel_register(&desc, &kernel);
  if (status != KABI_STATUS_OK) std::fprintf(stderr, "register %s: %s\n", desc.name, kabi_last_error());
  CHECK(status == KABI_STATUS_OK);
  return kernel;
}

void unregister_all() {
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
    std::vector<double> a64(static_cast<size_t>(m * k)), b64(static_cast<size_t>(k * n)), expected(static_cast<size_t>(m * n));
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

kabi_selection select(kabi_op op, const kabi_args& args, const kabi_select_options* options, kabi_status expected,
                      kabi_candidate* candidates = nullptr, int32_t capacity = 0) {
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

std::string kernel_name(kabi_kernel kernel) {
  kabi_kernel_info info{};
  info.struct_size = sizeof info;
  if (kernel == nullptr || kabi_kernel_info_get(kernel, &info) != KABI_STATUS_OK) return "<none>";
  return info.name;
}

int32_t cpu_arch() {
  kabi_device_info info{};
  info.struct_size = sizeof info;
  CHECK(kabi_device_info_get(kDLCPU, 0, &info) == KABI_STATUS_OK);
  return info.arch;
}

void test_broadcasting() {
  kabi_op op = matmul_op();
  register_kernel(naive_desc("cpp.naive"));
  struct Case {
    std::vector<int64_t> a, b, out;
    int32_t batch_mode;
  };
  const Case cases[] = {
      {{2, 3, 7, 5}, {5, 4}, {2, 3, 7, 4}, KABI_BATCH_UNIFORM},
      {{2, 3, 7, 5}, {2, 3, 5, 4}, {2, 3, 7, 4}, KABI_BATCH_UNIFORM},
      {{2, 1, 7, 5}, {3, 5, 4}, {2, 3, 7, 4}, KABI_BATCH_ANY},
      {{1, 7, 5}, {5, 4}, {1, 7, 4}, KABI_BATCH_UNIFORM},
      {{7, 5}, {5, 4}, {7, 4}, KABI_BATCH_NONE},
  };
  for (const Case& test : cases) {
    Problem problem(test.a, test.b, test.out);
    kabi_problem described{};
    described.struct_size = sizeof described;
    CHECK(kabi_problem_describe(op, &problem.args, &described) == KABI_STATUS_OK);
    CHECK(described.batch_mode == test.batch_mode);
    CHECK(described.output_rank == static_cast<int32_t>(test.out.size()));
    CHECK(kabi_call(op, &problem.args, nullptr) == KABI_STATUS_OK);
    CHECK(problem.max_error() < 1e-5);
  }
  Problem mismatch({2, 7, 5}, {3, 5, 4}, {2, 7, 4});
  mismatch.args.num_outputs = 0;
  CHECK_STATUS(kabi_call(op, &mismatch.args, nullptr), KABI_STATUS_INVALID_ARGUMENT, "expected 1 outputs");
  kabi_selection selection{};
  selection.struct_size = sizeof selection;
  CHECK_STATUS(kabi_select(op, &mismatch.args, nullptr, &selection), KABI_STATUS_INVALID_ARGUMENT,
               "matmul: the leading dimensions of a [2, 7, 5] and b [3, 5, 4] do not broadcast: batch dimension -1 is "
               "2 in a and 3 in b");
  unregister_all();
}

int32_t even_k_only(void*, const kabi_problem* problem, const kabi_args*, char* reason, size_t reason_size) {
  if (problem->dims[1] % 2 == 0) return 1;
  std::snprintf(reason, reason_size, "K=%lld is odd", static_cast<long long>(problem->dims[1]));
  return 0;
}

void test_heuristic_and_filters() {
  kabi_op op = matmul_op();
  const int32_t arch = cpu_arch();
  Problem problem({4, 3}, {3, 5}, {4, 5});

  kabi_kernel_desc any = naive_desc("h.any");
  any.priority = 10;
  register_kernel(any);
  kabi_kernel_desc wide = naive_desc("h.wide");
  wide.arch_min = 1;
  register_kernel(wide);
  CHECK(kernel_name(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel) == "h.wide");
  kabi_kernel_desc range = naive_desc("h.range");
  range.arch_min = 1;
  range.arch_max = 4;
  register_kernel(range);
  CHECK(kernel_name(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel) == "h.range");
  const int32_t exact_archs[] = {arch};
  kabi_kernel_desc exact = naive_desc("h.exact");
  exact.archs = exact_archs;
  exact.num_archs = 1;
  exact.priority = -5;
  register_kernel(exact);
  kabi_selection selection = select(op, problem.args, nullptr, KABI_STATUS_OK);
  CHECK(kernel_name(selection.kernel) == "h.exact");
  CHECK(std::strstr(selection.reason, "exact arch") != nullptr);

  // Equal specificity: higher priority, then earlier registration.
  kabi_kernel_desc exact_later = exact;
  exact_later.name = "h.exact.later";
  register_kernel(exact_later);
  CHECK(kernel_name(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel) == "h.exact");
  kabi_kernel_desc exact_higher = exact;
  exact_higher.name = "h.exact.higher";
  exact_higher.priority = 1;
  register_kernel(exact_higher);
  CHECK(kernel_name(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel) == "h.exact.higher");

  // Every filter names its reason.
  const int32_t future_archs[] = {arch + 100};
  kabi_kernel_desc future = naive_desc("f.arch");
  future.archs = future_archs;
  future.num_archs = 1;
  future.priority = 100;
  register_kernel(future);
  kabi_kernel_desc features = naive_desc("f.features");
  features.required_features = KABI_FEATURE_WGMMA;
  register_kernel(features);
  kabi_kernel_desc layout = naive_desc("f.layout");
  layout.layouts = KABI_LAYOUT_COL_STRIDED;
  register_kernel(layout);
  kabi_kernel_desc supports = naive_desc("f.supports");
  supports.supports = even_k_only;
  register_kernel(supports);
  kabi_kernel_desc float64_only = naive_desc("f.dtype");
  float64_only.dtypes = KABI_DTYPE_FLOAT64;
  register_kernel(float64_only);

  kabi_candidate candidates[16];
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK, candidates, 16);
  CHECK(selection.num_candidates == 11);
  auto reason_of = [&](const char* name) -> std::string {
    for (int32_t i = 0; i < selection.num_candidates && i < 16; ++i) {
      if (kernel_name(candidates[i].kernel) == name) return candidates[i].reason;
    }
    return "<missing>";
  };
  CHECK(reason_of("f.arch") == "arch " + std::to_string(arch) + " not in {" + std::to_string(arch + 100) + "}");
  CHECK(reason_of("f.features") == "device lacks wgmma");
  CHECK(reason_of("f.layout") == "a is contiguous; kernel takes {col_strided}");
  CHECK(reason_of("f.supports") == "declined: K=3 is odd");
  CHECK(reason_of("f.dtype") == "dtype float32 not in {float64}");
  CHECK(reason_of("h.any").empty());

  // A capacity smaller than the candidate count still reports the full count.
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK, candidates, 2);
  CHECK(selection.num_candidates == 11);

  // A batched call needs a kernel that takes batches.
  unregister_all();
  kabi_kernel_desc plain = naive_desc("b.none");
  plain.batch_mode = KABI_BATCH_NONE;
  register_kernel(plain);
  Problem batched({2, 4, 3}, {3, 5}, {2, 4, 5});
  CHECK_STATUS(kabi_call(op, &batched.args, nullptr), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "b.none: needs batch mode uniform; kernel takes none");
  unregister_all();
}

void test_tuned_and_forced() {
  kabi_op op = matmul_op();
  char directory_template[] = "/tmp/kabi-cpp-test-XXXXXX";
  const char* directory = mkdtemp(directory_template);
  CHECK(directory != nullptr);
  CHECK(kabi_cache_set_directory(directory) == KABI_STATUS_OK);
  CHECK(kabi_cache_clear() == KABI_STATUS_OK);

  kabi_kernel_desc slow = naive_desc("t.heuristic");
  slow.priority = 10;
  const kabi_kernel heuristic = register_kernel(slow);
  const kabi_kernel fast = register_kernel(naive_desc("t.fast"));
  Problem problem({8, 6}, {6, 4}, {8, 4});
  CHECK(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel == heuristic);

  kabi_tuning_record records[2] = {};
  records[0].struct_size = sizeof records[0];
  records[0].kernel = heuristic;
  records[0].time_us = 20.0;
  records[0].note = "";
  records[1].struct_size = sizeof records[1];
  records[1].kernel = fast;
  records[1].time_us = 5.0;
  records[1].note = "";
  const uint64_t generation = kabi_registry_generation();
  CHECK(kabi_tuning_store(op, &problem.args, records, 2) == KABI_STATUS_OK);
  CHECK(kabi_registry_generation() > generation);
  kabi_candidate candidates[4];
  kabi_selection selection = select(op, problem.args, nullptr, KABI_STATUS_OK, candidates, 4);
  CHECK(selection.kernel == fast && selection.pick_reason == KABI_PICK_TUNED);
  CHECK(std::strncmp(selection.reason, "tuned: fastest of 2 measured", 28) == 0);
  CHECK(candidates[0].tuned_time_us == 20.0 && candidates[1].tuned_time_us == 5.0);

  kabi_select_options options{};
  options.struct_size = sizeof options;
  options.use_environment = 1;
  options.use_tuning_cache = 0;
  CHECK(select(op, problem.args, &options, KABI_STATUS_OK).kernel == heuristic);

  // kabi_call remembers the tuned pick.
  CHECK(kabi_call(op, &problem.args, nullptr) == KABI_STATUS_OK && problem.max_error() < 1e-5);

  // A new eligible kernel without a measurement makes the record stale: the heuristic decides again.
  kabi_kernel_desc newcomer = naive_desc("t.newcomer");
  newcomer.priority = 20;
  const kabi_kernel newest = register_kernel(newcomer);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK);
  CHECK(selection.kernel == newest && selection.pick_reason == KABI_PICK_HEURISTIC);
  CHECK(std::strstr(selection.reason, "tuning record ignored: t.newcomer") != nullptr);
  CHECK(kabi_kernel_unregister("matmul", "t.newcomer") == KABI_STATUS_OK);

  // Re-registering with another fingerprint invalidates its entry.
  CHECK(kabi_kernel_unregister("matmul", "t.fast") == KABI_STATUS_OK);
  kabi_kernel_desc changed = naive_desc("t.fast");
  changed.fingerprint = "t.fast:v2";
  register_kernel(changed);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK);
  CHECK(selection.kernel == heuristic && selection.pick_reason == KABI_PICK_HEURISTIC);

  // KABI_FORCE picks by backend or kernel name; options.force wins over it; a malformed value is an error.
  setenv("KABI_FORCE", "other=x, matmul=t.fast", 1);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK);
  CHECK(kernel_name(selection.kernel) == "t.fast" && selection.pick_reason == KABI_PICK_FORCED);
  CHECK(std::strstr(selection.reason, "KABI_FORCE") != nullptr);
  options.use_environment = 0;
  CHECK(select(op, problem.args, &options, KABI_STATUS_OK).kernel == heuristic);
  setenv("KABI_FORCE", "matmul", 1);
  CHECK_STATUS(kabi_call(op, &problem.args, nullptr), KABI_STATUS_INVALID_ARGUMENT, "KABI_FORCE entry \"matmul\"");
  unsetenv("KABI_FORCE");

  // kabi_call's decision cache follows unregistration.
  CHECK(kabi_kernel_unregister("matmul", "t.heuristic") == KABI_STATUS_OK);
  std::fill(problem.out.begin(), problem.out.end(), 0.0f);
  CHECK(kabi_call(op, &problem.args, nullptr) == KABI_STATUS_OK && problem.max_error() < 1e-5);

  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  CHECK(kabi_cache_set_directory(nullptr) == KABI_STATUS_OK);
  unregister_all();
}

void test_ops_and_struct_sizes() {
  kabi_op_desc desc{};
  desc.struct_size = sizeof desc;
  desc.name = "cpp.scale";
  desc.schema = "x: [N], y: [N] -> out: [N]";
  desc.dtypes = KABI_DTYPE_FLOAT32;
  desc.tuning_key = "dtype,N:pow2";
  kabi_op op = nullptr;
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);
  CHECK_STATUS(kabi_op_register(&desc, nullptr), KABI_STATUS_ALREADY_EXISTS, "cpp.scale");
  kabi_op_desc bad = desc;
  bad.name = "cpp.bad";
  bad.schema = "x: [N]";
  CHECK_STATUS(kabi_op_register(&bad, nullptr), KABI_STATUS_INVALID_ARGUMENT, "expected '->'");
  bad.schema = "x: [N] -> out: [M]";
  CHECK_STATUS(kabi_op_register(&bad, nullptr), KABI_STATUS_INVALID_ARGUMENT, "dimension M is not defined");
  bad.schema = desc.schema;
  bad.tuning_key = "dtype,Q";
  CHECK_STATUS(kabi_op_register(&bad, nullptr), KABI_STATUS_INVALID_ARGUMENT, "\"Q\" is neither");

  std::vector<float> x(100, 1.0f), y(100, 2.0f), out(100);
  int64_t shape[1] = {100};
  DLTensor inputs[2] = {test_tensor(x.data(), test_float32(), 1, shape, nullptr),
                        test_tensor(y.data(), test_float32(), 1, shape, nullptr)};
  kabi_args args{};
  args.struct_size = sizeof args;
  args.inputs = inputs;
  args.num_inputs = 2;
  kabi_problem problem{};
  problem.struct_size = sizeof problem;
  CHECK(kabi_problem_describe(op, &args, &problem) == KABI_STATUS_OK);
  CHECK(std::string(problem.key) == "float32|128");
  CHECK(problem.num_dims == 1 && std::string(problem.dim_names[0]) == "N" && problem.dims[0] == 100);

  // An external kernel takes part in selection but cannot be launched by the core.
  kabi_kernel_desc external{};
  external.struct_size = sizeof external;
  external.op = "cpp.scale";
  external.name = "scale.python";
  external.backend = "python";
  external.device_type = kDLCPU;
  external.dtypes = KABI_DTYPE_FLOAT32;
  external.layouts = KABI_LAYOUT_ANY;
  external.kind = KABI_KERNEL_EXTERNAL;
  kabi_kernel kernel = nullptr;
  CHECK(kabi_kernel_register(&external, &kernel) == KABI_STATUS_OK);
  DLTensor outputs[1] = {test_tensor(out.data(), test_float32(), 1, shape, nullptr)};
  args.outputs = outputs;
  args.num_outputs = 1;
  CHECK_STATUS(kabi_launch(kernel, &args), KABI_STATUS_UNAVAILABLE, "cpp.scale/scale.python runs outside the core");

  // A kernel declared by a caller built before `fingerprint` existed: the host reads only what it covers.
  kabi_kernel_desc older = naive_desc("older.minor");
  older.struct_size = offsetof(kabi_kernel_desc, fingerprint);
  older.fingerprint = "must be ignored";
  kabi_kernel registered = nullptr;
  CHECK(kabi_kernel_register(&older, &registered) == KABI_STATUS_OK);
  kabi_kernel_info info{};
  info.struct_size = offsetof(kabi_kernel_info, priority);  // an older, shorter output struct
  info.priority = 12345;
  CHECK(kabi_kernel_info_get(registered, &info) == KABI_STATUS_OK);
  CHECK(std::string(info.fingerprint) == "cpp-test:older.minor");
  CHECK(info.priority == 12345);  // beyond the caller's struct_size: untouched
  CHECK(info.struct_size == offsetof(kabi_kernel_info, priority));
  CHECK(kabi_kernel_unregister("matmul", "older.minor") == KABI_STATUS_OK);
}

// Four threads register and unregister kernels while four threads select and call: no crash, no torn state,
// every call correct.
void test_concurrent_registration_and_selection() {
  kabi_op op = matmul_op();
  register_kernel(naive_desc("c.base"));
  std::atomic<bool> registering{true};
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  constexpr int kKernelsPerThread = 60;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &errors] {
      for (int i = 0; i < kKernelsPerThread; ++i) {
        const std::string name = "c.thread" + std::to_string(t) + "." + std::to_string(i);
        kabi_kernel_desc desc = naive_desc(name.c_str());
        desc.priority = i % 7;
        if (kabi_kernel_register(&desc, nullptr) != KABI_STATUS_OK) ++errors;
        if (i % 2 == 1 && kabi_kernel_unregister("matmul", name.c_str()) != KABI_STATUS_OK) ++errors;
      }
    });
  }
  // Inputs are made here: the test's random generator is not thread-safe.
  std::deque<Problem> problems;  // never relocates: args point into each Problem
  for (int t = 0; t < 4; ++t) problems.emplace_back(std::vector<int64_t>{9, 7}, std::vector<int64_t>{7, 5},
                                                    std::vector<int64_t>{9, 5});
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([op, &registering, &errors, &problem = problems[static_cast<size_t>(t)]] {
      while (registering.load()) {
        kabi_selection selection{};
        selection.struct_size = sizeof selection;
        if (kabi_select(op, &problem.args, nullptr, &selection) != KABI_STATUS_OK) ++errors;
        std::fill(problem.out.begin(), problem.out.end(), 0.0f);
        const kabi_status status = kabi_call(op, &problem.args, nullptr);
        // A kernel picked just before another thread unregistered it is a legitimate NOT_FOUND only for launch;
        // kabi_call holds the kernel it picked, so it must always succeed.
        if (status != KABI_STATUS_OK || problem.max_error() > 1e-5) ++errors;
      }
    });
  }
  for (int t = 0; t < 4; ++t) threads[static_cast<size_t>(t)].join();
  registering = false;
  for (size_t t = 4; t < threads.size(); ++t) threads[t].join();
  CHECK(errors.load() == 0);
  CHECK(kabi_kernel_count("matmul") == 1 + 4 * kKernelsPerThread / 2);
  unregister_all();
}

}  // namespace

int main() {
  test_broadcasting();
  test_heuristic_and_filters();
  test_tuned_and_forced();
  test_ops_and_struct_sizes();
  test_concurrent_registration_and_selection();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("all C++ API checks passed\n");
  return 0;
}
