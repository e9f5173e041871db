// The C++ wrapper kabi.hpp against a real libkabi and the built-in CPU plugin: value handles, TensorView copies,
// select once / launch many, errors as kabi::Error with the C status. Prints "ok" and exits 0 when every check holds.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kabi/kabi.hpp"

namespace {

int failures = 0;

void expect(bool condition, const std::string& what) {
  if (!condition) {
    std::fprintf(stderr, "FAILED: %s\n", what.c_str());
    ++failures;
  }
}

template <typename Body>
void expect_error(kabi_status status, const std::string& needle, Body body, const std::string& what) {
  try {
    body();
    expect(false, what + ": no kabi::Error thrown");
  } catch (const kabi::Error& error) {
    expect(error.status() == status, what + ": status " + kabi_status_name(error.status()));
    expect(std::string(error.what()).find(needle) != std::string::npos,
           what + ": message \"" + error.what() + "\" lacks \"" + needle + "\"");
  }
}

std::vector<double> random_values(size_t count, std::mt19937& generator) {
  std::normal_distribution<double> normal;
  std::vector<double> values(count);
  for (double& value : values) value = normal(generator);
  return values;
}

// out[i][j] = sum_p a(i, p) * b(p, j), with a's elements at a[i * a_row + p * a_col].
double max_error(const std::vector<double>& a, int64_t a_row, int64_t a_col, const std::vector<double>& b,
                 const std::vector<double>& out, int64_t m, int64_t n, int64_t k) {
  double worst = 0.0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) sum += a[i * a_row + p * a_col] * b[p * n + j];
      worst = std::max(worst, std::fabs(sum - out[i * n + j]));
    }
  }
  return worst;
}

void check_tensor_view() {
  std::vector<float> storage(24);
  kabi::TensorView view = kabi::TensorView::of(storage.data(), {2, 3, 4});
  expect(view.strides() == std::vector<int64_t>({12, 4, 1}), "default strides are C-contiguous");
  expect(view.numel() == 24 && view.dtype().bits == 32 && view.dtype().code == kDLFloat, "numel and dtype");
  kabi::TensorView copy = view;
  kabi::TensorView moved = std::move(view);
  expect(copy.dl().shape == copy.shape().data() && copy.dl().strides == copy.strides().data(),
         "a copy's DLTensor points at its own shape and strides");
  expect(moved.dl().shape == moved.shape().data() && moved.dl().ndim == 3, "a moved view stays bound");
  expect_error(KABI_STATUS_INVALID_ARGUMENT, "strides", [&] { kabi::TensorView::of(storage.data(), {4, 6}, {1}); },
               "strides of the wrong rank");
}

void check_matmul(std::mt19937& generator) {
  const kabi::Op matmul = kabi::Op::find("matmul");
  expect(matmul.name() == "matmul", "Op::find");
  const int64_t m = 5, n = 3, k = 7;
  std::vector<double> a = random_values(m * k, generator), b = random_values(k * n, generator);
  std::vector<double> out(m * n, NAN);
  const kabi::Call call({kabi::TensorView::of(a.data(), {m, k}), kabi::TensorView::of(b.data(), {k, n})},
                        {kabi::TensorView::of(out.data(), {m, n})});
  // Selection mechanics on a problem no one has verified: opt in to an unverified pick.
  const kabi::Selection selection = kabi::select(matmul, call, kabi::SelectOptions{"cpu", true, false, true});
  expect(selection.kernel().name() == "cpu.openblas.gemm", "forced cpu picks the OpenBLAS kernel");
  expect(!selection.verified(), "an opted-in pick without a gate verdict is not verified");
  expect(selection.kernel().plugin() == "kabi-cpu", "the kernel names its plugin");
  expect(selection.pick_reason() == KABI_PICK_FORCED, "pick reason forced");
  bool picked_listed = false;
  for (const kabi::Candidate& candidate : selection.candidates()) {
    picked_listed = picked_listed || (candidate.picked && candidate.kernel.name() == "cpu.openblas.gemm");
  }
  expect(picked_listed, "the pick is among the candidates");
  expect(selection.problem().dims[0] == m, "the selection carries the problem");
  for (int repeat = 0; repeat < 3; ++repeat) selection.launch(call);
  expect(max_error(a, k, 1, b, out, m, n, k) < 1e-12, "row-major result");

  // a stored column-major: a K x M buffer viewed as M x K with strides {1, M}.
  std::vector<double> a_columns = random_values(k * m, generator);
  std::fill(out.begin(), out.end(), NAN);
  const kabi::Call transposed({kabi::TensorView::of(a_columns.data(), {m, k}, {1, m}),
                               kabi::TensorView::of(b.data(), {k, n})},
                              {kabi::TensorView::of(out.data(), {m, n})});
  matmul.call(transposed, kabi::SelectOptions{"cpu", true, false, true});
  expect(max_error(a_columns, 1, m, b, out, m, n, k) < 1e-12, "column-major result through Op::call");

  std::vector<double> wrong(m * (n + 1));
  const kabi::Call bad_output({kabi::TensorView::of(a.data(), {m, k}), kabi::TensorView::of(b.data(), {k, n})},
                              {kabi::TensorView::of(wrong.data(), {m, n + 1})});
  expect_error(KABI_STATUS_INVALID_ARGUMENT, "out", [&] { selection.launch(bad_output); }, "output of the wrong shape");

  // int32 is one of matmul's dtypes, which no native kernel serves (torch's kernels are Python's alone).
  std::vector<int32_t> integers(m * k);
  const kabi::Call integer_call({kabi::TensorView::of(integers.data(), {m, k}),
                                 kabi::TensorView::of(integers.data(), {k, m})});
  expect_error(KABI_STATUS_NO_ELIGIBLE_KERNEL, "int32", [&] { kabi::select(matmul, integer_call); }, "int32 matmul");
  // uint16 is no dtype of kabi's.
  const DLDataType uint16{kDLUInt, 16, 1};
  std::vector<uint16_t> halves(m * k);
  const kabi::Call uint16_call({kabi::TensorView(halves.data(), {m, k}, uint16),
                                kabi::TensorView(halves.data(), {k, m}, uint16)});
  expect_error(KABI_STATUS_UNSUPPORTED_DTYPE, "matmul", [&] { kabi::select(matmul, uint16_call); }, "uint16 matmul");
}

// A naive float64 matmul for contiguous rank-2 tensors, registered from C++ to test KernelRegistration.
kabi_status naive_matmul(void* /*user_data*/, const kabi_problem* /*problem*/, const kabi_args* args) {
  const DLTensor& a = args->inputs[0];
  const DLTensor& b = args->inputs[1];
  const DLTensor& out = args->outputs[0];
  const int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  const auto* x = static_cast<const double*>(a.data);
  const auto* y = static_cast<const double*>(b.data);
  auto* z = static_cast<double*>(out.data);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) sum += x[i * k + p] * y[p * n + j];
      z[i * n + j] = sum;
    }
  }
  return KABI_STATUS_OK;
}

void check_kernel_registration(std::mt19937& generator) {
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.op = "matmul";
  desc.name = "test.naive_matmul";
  desc.backend = "test";
  desc.device_type = kDLCPU;
  desc.priority = 1000;
  desc.dtypes = KABI_DTYPE_FLOAT64;
  desc.layouts = KABI_LAYOUT_CONTIGUOUS;
  desc.batch_mode = KABI_BATCH_NONE;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = naive_matmul;
  const int64_t m = 4, n = 6, k = 3;
  std::vector<double> a = random_values(m * k, generator), b = random_values(k * n, generator);
  std::vector<double> out(m * n, NAN);
  const kabi::Call call({kabi::TensorView::of(a.data(), {m, k}), kabi::TensorView::of(b.data(), {k, n})},
                        {kabi::TensorView::of(out.data(), {m, n})});
  const kabi::Op matmul = kabi::Op::find("matmul");
  const uint64_t generation = matmul.generation();
  {
    kabi::KernelRegistration registration(desc);
    expect(matmul.generation() > generation, "registering a kernel moves its op's generation");
    expect_error(KABI_STATUS_ALREADY_EXISTS, "test.naive_matmul", [&] { kabi::KernelRegistration again(desc); },
                 "registering a name twice");
    kabi::KernelRegistration moved = std::move(registration);
    const kabi::Selection selection = kabi::select(kabi::Op::find("matmul"), call,
                                                   kabi::SelectOptions{"test.naive_matmul", false, false, true});
    expect(selection.kernel().name() == "test.naive_matmul", "the registered kernel can be forced");
    selection.launch(call);
    expect(max_error(a, k, 1, b, out, m, n, k) < 1e-12, "the registered kernel ran");
  }
  expect_error(KABI_STATUS_NOT_FOUND, "test.naive_matmul", [] { kabi::Kernel::find("matmul", "test.naive_matmul"); },
               "the kernel is unregistered with its registration");
}

void check_environment_force() {
  const kabi::Op matmul = kabi::Op::find("matmul");
  ::setenv("KABI_FORCE", "matmul=cpu", 1);
  expect(matmul.environment_force() == "cpu", "KABI_FORCE's entry for matmul");
  ::setenv("KABI_FORCE", "matmul=torch,matmul=cpu", 1);
  expect_error(KABI_STATUS_INVALID_ARGUMENT, "KABI_FORCE names op matmul twice", [&] { matmul.environment_force(); },
               "an op named twice in KABI_FORCE");
  ::unsetenv("KABI_FORCE");
  expect(matmul.environment_force().empty(), "no KABI_FORCE");
}

}  // namespace

int main() {
  std::mt19937 generator(std::random_device{}());
  try {
    expect(kabi::abi_version() == KABI_ABI_VERSION, "run-time ABI version matches the header");
    expect(!kabi::library_version().empty(), "library version");
    expect(!kabi::devices(kDLCPU).empty(), "at least one CPU device");
    expect(!kabi::device_signature(kDLCPU, 0).empty(), "CPU device signature");
    expect(kabi::stream_execution_mode(DLDevice{kDLCPU, 0}, nullptr) == KABI_EXECUTION_EAGER,
           "a CPU launch runs eagerly");
    expect_error(KABI_STATUS_NOT_FOUND, "no_such_op", [] { kabi::Op::find("no_such_op"); }, "unknown op");

    kabi::load_builtin_plugins();
    bool cpu_loaded = false;
    for (const kabi::PluginRecord& plugin : kabi::plugins()) {
      cpu_loaded = cpu_loaded || (plugin.name == "kabi-cpu" && plugin.loaded && plugin.num_kernels == 3 && !plugin.binaries);
    }
    expect(cpu_loaded, "kabi-cpu is loaded with its three kernels (matmul's, linear's and grouped_mm's)");
    expect_error(KABI_STATUS_NOT_FOUND, "/nonexistent/libnothing.so",
                 [] { kabi::load_plugin("/nonexistent/libnothing.so"); }, "missing plugin file");

    check_tensor_view();
    check_matmul(generator);
    check_kernel_registration(generator);
    check_environment_force();
  } catch (const kabi::Error& error) {
    std::fprintf(stderr, "FAILED: unexpected kabi::Error: %s\n", error.what());
    return 1;
  }
  if (failures > 0) return 1;
  std::printf("ok\n");
  return 0;
}
