// Registration racing with selection: four threads register and unregister kernels while four threads select
// and call; and workspaces, which are each thread's own. Run it under ThreadSanitizer too (see scripts/run_sanitized_cpp_tests.sh for ASan/UBSan).
#include <atomic>
#include <deque>
#include <thread>

#include "test_support.hpp"

using namespace kabi_test;

namespace {

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
  for (int t = 0; t < 4; ++t)
    problems.emplace_back(std::vector<int64_t>{9, 7}, std::vector<int64_t>{7, 5}, std::vector<int64_t>{9, 5});
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

// A kernel whose workspace is as large as its input: it notes the workspace pointer it was given, writes its whole
// workspace, then sums it back, so two threads sharing one buffer would corrupt each other's sums.
std::atomic<int> workspace_errors{0};
thread_local void* seen_workspace = nullptr;

kabi_status workspace_bytes(void*, const kabi_problem* problem, size_t* out_bytes) {
  *out_bytes = static_cast<size_t>(problem->dims[0]) * sizeof(float);
  return KABI_STATUS_OK;
}

kabi_status copy_and_sum(void*, const kabi_problem* problem, const kabi_args* args) {
  const auto* x = static_cast<const float*>(args->inputs[0].data);
  auto* scratch = static_cast<float*>(args->workspace);
  seen_workspace = scratch;
  const int64_t n = problem->dims[0];
  for (int64_t i = 0; i < n; ++i) scratch[i] = x[i];
  std::this_thread::yield();
  float total = 0;
  for (int64_t i = 0; i < n; ++i) total += scratch[i];
  *static_cast<float*>(args->outputs[0].data) = total;
  return KABI_STATUS_OK;
}

// CPU kernels on two threads get workspaces of their own: each thread's buffer, never shared.
void test_workspaces_are_per_thread() {
  kabi_op_desc op_desc{};
  op_desc.struct_size = sizeof op_desc;
  op_desc.name = "c.sum";
  op_desc.schema = "x: [N] float32 -> out: [] float32";
  kabi_op op = nullptr;
  CHECK(kabi_op_register(&op_desc, &op) == KABI_STATUS_OK);
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof desc;
  desc.op = "c.sum";
  desc.name = "c.sum.copy";
  desc.backend = "c";
  desc.device_type = kDLCPU;
  desc.layouts = KABI_LAYOUT_ANY;
  desc.batch_mode = KABI_BATCH_ANY;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = copy_and_sum;
  desc.workspace = workspace_bytes;
  CHECK(kabi_kernel_register(&desc, nullptr) == KABI_STATUS_OK);
  std::vector<void*> workspaces(4, nullptr);
  std::vector<std::thread> threads;
  // Every thread keeps its buffer (freed when the thread exits) until all have run: distinct live buffers, not an
  // address reused after another thread's exit.
  std::atomic<int> finished{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([op, t, &workspaces, &finished] {
      std::vector<float> x(1000, static_cast<float>(t + 1));
      float out = 0;
      int64_t shape[1] = {static_cast<int64_t>(x.size())};
      DLTensor input = test_tensor(x.data(), test_float32(), 1, shape, nullptr);
      DLTensor output = test_tensor(&out, test_float32(), 0, nullptr, nullptr);
      kabi_args args{};
      args.struct_size = sizeof args;
      args.inputs = &input;
      args.num_inputs = 1;
      args.outputs = &output;
      args.num_outputs = 1;
      for (int call = 0; call < 200; ++call) {
        if (kabi_call(op, &args, nullptr) != KABI_STATUS_OK || out != 1000.0f * static_cast<float>(t + 1)) {
          ++workspace_errors;
        }
      }
      workspaces[static_cast<size_t>(t)] = seen_workspace;
      ++finished;
      while (finished.load() < 4) std::this_thread::yield();
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(workspace_errors.load() == 0);
  for (size_t a = 0; a < workspaces.size(); ++a) {
    CHECK(workspaces[a] != nullptr);
    for (size_t b = a + 1; b < workspaces.size(); ++b) CHECK(workspaces[a] != workspaces[b]);
  }
  CHECK(kabi_kernel_unregister("c.sum", "c.sum.copy") == KABI_STATUS_OK);
}

}  // namespace

int main() {
  test_concurrent_registration_and_selection();
  test_workspaces_are_per_thread();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("all concurrency checks passed\n");
  return 0;
}
