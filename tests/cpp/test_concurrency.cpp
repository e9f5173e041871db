// Registration racing with selection: four threads register and unregister kernels while four threads select
// and call. Run it under ThreadSanitizer too (see scripts/run_sanitized_cpp_tests.sh for ASan/UBSan).
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

}  // namespace

int main() {
  test_concurrent_registration_and_selection();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("all concurrency checks passed\n");
  return 0;
}
