// A C++17 caller of libkabi through the C ABI: broadcasting, selection order (arch specificity, priority,
// registration order), filter reasons, tuned decisions and their invalidation, KABI_FORCE, kabi_call's decision
// cache, custom ops and struct_size compatibility. ctest opts these mechanics in to unverified picks
// (KABI_ALLOW_UNVERIFIED=1); test_gate_verdicts checks strict selection without it.
#include <stdlib.h>

#include <cmath>
#include <cstddef>

#include "test_support.hpp"

using namespace kabi_test;

namespace {

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
    CHECK(described.output_ranks[0] == static_cast<int32_t>(test.out.size()));
    CHECK(kabi_call(op, &problem.args, nullptr) == KABI_STATUS_OK);
    CHECK(problem.max_error() < 1e-5);
  }
  // An empty output is contiguous whatever its strides (torch gives a [5, 0] tensor the strides [1, 1]).
  Problem empty({5, 3}, {3, 0}, {5, 0});
  int64_t empty_strides[2] = {1, 1};
  empty.outputs[0].strides = empty_strides;
  CHECK(kabi_call(op, &empty.args, nullptr) == KABI_STATUS_OK);

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
  CHECK(reason_of("f.dtype") == "dtype of T float32 not in {float64}");
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

  // Graph-mode records live beside the eager ones: a graph-mode selection picks by them, an eager one ignores them.
  kabi_tuning_record graph_records[2] = {records[0], records[1]};
  graph_records[0].time_us = 1.0;
  graph_records[1].time_us = 3.0;
  for (kabi_tuning_record& record : graph_records) record.flags = KABI_TUNING_RECORD_GRAPH_MODE;
  CHECK(kabi_tuning_store(op, &problem.args, graph_records, 2) == KABI_STATUS_OK);
  kabi_select_options graph_options{};
  graph_options.struct_size = sizeof graph_options;
  graph_options.use_environment = 1;
  graph_options.use_tuning_cache = 1;
  graph_options.execution_mode = KABI_EXECUTION_GRAPH;
  selection = select(op, problem.args, &graph_options, KABI_STATUS_OK, candidates, 4);
  CHECK(selection.kernel == heuristic && selection.pick_reason == KABI_PICK_TUNED);
  CHECK(std::strncmp(selection.reason, "tuned for CUDA-graph replay: fastest of 2", 41) == 0);
  CHECK(candidates[0].tuned_time_us == 1.0 && candidates[0].tuned_execution_mode == KABI_EXECUTION_GRAPH);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK, candidates, 4);
  CHECK(selection.kernel == fast && candidates[1].tuned_time_us == 5.0);
  CHECK(candidates[1].tuned_execution_mode == KABI_EXECUTION_EAGER);
  // kabi_call keeps the decisions of the two modes apart.
  CHECK(kabi_call(op, &problem.args, &graph_options) == KABI_STATUS_OK && problem.max_error() < 1e-5);
  graph_options.execution_mode = 7;
  CHECK_STATUS(kabi_call(op, &problem.args, &graph_options), KABI_STATUS_INVALID_ARGUMENT, "execution_mode 7");

  // A new eligible kernel without a measurement makes the record stale: the heuristic decides again, preferring the
  // kernels that passed the gate over the higher-priority newcomer.
  kabi_kernel_desc newcomer = naive_desc("t.newcomer");
  newcomer.priority = 20;
  register_kernel(newcomer);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK);
  CHECK(selection.kernel == heuristic && selection.pick_reason == KABI_PICK_HEURISTIC && selection.verified == 1);
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
  desc.schema = "x: [N] T, y: [N] T -> out: [N] T";
  desc.type_variables = "T: float32";
  desc.tuning_key = "dtype,N:pow2";
  kabi_op op = nullptr;
  CHECK(kabi_op_register(&desc, &op) == KABI_STATUS_OK);
  CHECK_STATUS(kabi_op_register(&desc, nullptr), KABI_STATUS_ALREADY_EXISTS, "cpp.scale");
  kabi_op_desc bad = desc;
  bad.name = "cpp.bad";
  bad.schema = "x: [N] T";
  CHECK_STATUS(kabi_op_register(&bad, nullptr), KABI_STATUS_INVALID_ARGUMENT, "expected '->'");
  bad.schema = "x: [N] T -> out: [M] T";
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

// Strict selection: an unverified problem is refused with the remedy, a failed gate verdict makes a kernel
// ineligible (also when forced, unless allow_failed_gate), and a verified problem selects without any option.
void test_gate_verdicts() {
  kabi_op op = matmul_op();
  char directory_template[] = "/tmp/kabi-cpp-gate-XXXXXX";
  const char* directory = mkdtemp(directory_template);
  CHECK(directory != nullptr);
  CHECK(kabi_cache_set_directory(directory) == KABI_STATUS_OK);
  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  unsetenv("KABI_ALLOW_UNVERIFIED");

  kabi_kernel_desc preferred = naive_desc("g.wrong");
  preferred.priority = 100;
  const kabi_kernel wrong = register_kernel(preferred);
  const kabi_kernel right = register_kernel(naive_desc("g.right"));
  Problem problem({8, 6}, {6, 4}, {8, 4});

  kabi_candidate candidates[4];
  kabi_selection selection = select(op, problem.args, nullptr, KABI_STATUS_NO_ELIGIBLE_KERNEL, candidates, 4);
  CHECK(std::strstr(kabi_last_error(), "no eligible kernel has passed the correctness gate") != nullptr);
  CHECK(std::strstr(kabi_last_error(), "kabi verify matmul") != nullptr);
  CHECK(selection.kernel == nullptr && selection.num_candidates == 2 && candidates[0].gate == KABI_GATE_NONE);
  CHECK_STATUS(kabi_call(op, &problem.args, nullptr), KABI_STATUS_NO_ELIGIBLE_KERNEL, "kabi verify matmul");

  kabi_select_options options{};
  options.struct_size = sizeof options;
  options.use_environment = 1;
  options.use_tuning_cache = 1;
  options.allow_unverified = 1;
  selection = select(op, problem.args, &options, KABI_STATUS_OK);
  CHECK(selection.kernel == wrong && selection.verified == 0);
  setenv("KABI_ALLOW_UNVERIFIED", "1", 1);
  CHECK(select(op, problem.args, nullptr, KABI_STATUS_OK).kernel == wrong);
  unsetenv("KABI_ALLOW_UNVERIFIED");

  // The verdicts `kabi verify` records: g.wrong failed the gate, g.right passed it untimed.
  kabi_tuning_record records[2] = {};
  records[0].struct_size = sizeof records[0];
  records[0].kernel = wrong;
  records[0].time_us = INFINITY;
  records[0].note = "wrong result: norm error 1.0e+00 > 2e-05";
  records[1].struct_size = sizeof records[1];
  records[1].kernel = right;
  records[1].note = "";
  records[1].flags = KABI_TUNING_RECORD_GATE_ONLY;
  CHECK(kabi_tuning_store(op, &problem.args, records, 2) == KABI_STATUS_OK);
  selection = select(op, problem.args, nullptr, KABI_STATUS_OK, candidates, 4);
  CHECK(selection.kernel == right && selection.verified == 1 && selection.pick_reason == KABI_PICK_HEURISTIC);
  CHECK(candidates[0].kernel == wrong && candidates[0].eligible == 0 && candidates[0].gate == KABI_GATE_FAILED);
  CHECK(std::strcmp(candidates[0].reason,
                    "failed the correctness gate on this problem: wrong result: norm error 1.0e+00 > 2e-05") == 0);
  CHECK(candidates[1].gate == KABI_GATE_PASSED_UNTIMED && candidates[1].tuned_time_us < 0);
  CHECK(kabi_call(op, &problem.args, nullptr) == KABI_STATUS_OK && problem.max_error() < 1e-5);
  CHECK(select(op, problem.args, &options, KABI_STATUS_OK).kernel == right);  // never the failed one

  options.force = "g.wrong";
  selection.struct_size = sizeof selection;
  CHECK_STATUS(kabi_select(op, &problem.args, &options, &selection), KABI_STATUS_NO_ELIGIBLE_KERNEL,
               "g.wrong: failed the correctness gate on this problem: wrong result");
  options.allow_failed_gate = 1;
  selection = select(op, problem.args, &options, KABI_STATUS_OK);
  CHECK(selection.kernel == wrong && selection.verified == 0 && selection.pick_reason == KABI_PICK_FORCED);

  CHECK(kabi_cache_clear() == KABI_STATUS_OK);
  CHECK(kabi_cache_set_directory(nullptr) == KABI_STATUS_OK);
  setenv("KABI_ALLOW_UNVERIFIED", "1", 1);
  unregister_all();
}

}  // namespace

int main() {
  test_broadcasting();
  test_heuristic_and_filters();
  test_tuned_and_forced();
  test_gate_verdicts();
  test_ops_and_struct_sizes();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("all C++ API checks passed\n");
  return 0;
}
