// cpu.openblas.linear (csrc/plugins/cpu/linear.cpp) on its own: registered through a stand-in host table, then called
// directly with hand-built problems and arguments, as the core would call it, and compared with a float64 loop.
// Needs no libkabi: it links linear.cpp and openblas_library.cpp, and finds OpenBLAS as the plugin does
// (KABI_OPENBLAS_LIBRARY, else the build's scipy-openblas32, else libscipy_openblas.so on the loader's path).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kabi/kabi.h"
#include "linear.hpp"
#include "openblas_library.hpp"

namespace {

int failures = 0;

#define CHECK(condition)                                                                 \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #condition); \
      ++failures;                                                                        \
    }                                                                                    \
  } while (0)

// The stand-in host: keeps the last registration and the last error message.
kabi_kernel_desc registered{};
std::string registered_op, registered_name, registered_fingerprint;
std::string last_error;

kabi_status record_registration(const kabi_kernel_desc* desc, kabi_kernel* out_kernel) {
  registered = *desc;
  registered_op = desc->op;
  registered_name = desc->name;
  registered_fingerprint = desc->fingerprint;
  *out_kernel = nullptr;
  return KABI_STATUS_OK;
}

void record_error(const char* message) { last_error = message; }

const char* read_error() { return last_error.c_str(); }

constexpr const char* kActivations[] = {"none", "relu", "gelu", "gelu_tanh", "silu"};

double activate(double value, int activation) {
  switch (activation) {
    case 1:
      return value < 0 ? 0 : value;
    case 2:
      return 0.5 * value * (1 + std::erf(value / std::sqrt(2.0)));
    case 3:
      return 0.5 * value * (1 + std::tanh(std::sqrt(2 / M_PI) * (value + 0.044715 * value * value * value)));
    case 4:
      return value / (1 + std::exp(-value));
    default:
      return value;
  }
}

// A tensor over its own storage: shape, strides (in elements) and DLPack's view of them.
template <typename Scalar>
struct Tensor {
  std::vector<Scalar> storage;
  std::vector<int64_t> shape, strides;
  DLTensor dl{};

  Tensor(std::vector<int64_t> shape_in, std::vector<int64_t> strides_in, size_t storage_size, std::mt19937* random)
      : storage(storage_size), shape(std::move(shape_in)), strides(std::move(strides_in)) {
    std::normal_distribution<double> normal;
    for (Scalar& value : storage) value = static_cast<Scalar>(normal(*random));
    dl.data = storage.data();
    dl.device = {kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = {kDLFloat, static_cast<uint8_t>(8 * sizeof(Scalar)), 1};
    dl.shape = shape.data();
    dl.strides = strides.data();
  }

  Scalar at(std::initializer_list<int64_t> index) const {
    int64_t offset = 0;
    int d = 0;
    for (int64_t i : index) offset += i * strides[d++];
    return storage[offset];
  }
};

// A dense row-major tensor of the given shape.
template <typename Scalar>
Tensor<Scalar> dense(std::vector<int64_t> shape, std::mt19937* random) {
  std::vector<int64_t> strides(shape.size());
  int64_t step = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    strides[d] = step;
    step *= shape[d];
  }
  return Tensor<Scalar>(shape, strides, static_cast<size_t>(step), random);
}

kabi_problem problem_with(int activation, bool has_bias) {
  kabi_problem problem{};
  problem.struct_size = sizeof(problem);
  problem.device_type = kDLCPU;
  problem.num_inputs = 3;
  problem.inputs_present = has_bias ? 0x7u : 0x3u;
  problem.num_attributes = 1;
  problem.attributes[0].integer = activation;
  return problem;
}

kabi_args args_with(const DLTensor* inputs, int32_t num_inputs, DLTensor* out) {
  kabi_args args{};
  args.struct_size = sizeof(args);
  args.inputs = inputs;
  args.num_inputs = num_inputs;
  args.outputs = out;
  args.num_outputs = out != nullptr ? 1 : 0;
  return args;
}

// x as rows [M, K] (x_transposed: stored column-major), w as [N, K] (w_transposed: the transposed view of a dense
// [K, N]), bias dense, strided (every other element) or absent; out dense [M, N]. Checks every activation.
template <typename Scalar>
void check_case(int64_t m, int64_t n, int64_t k, bool x_transposed, bool w_transposed, int bias_kind,
                std::mt19937* random, double tolerance) {
  Tensor<Scalar> x = x_transposed ? Tensor<Scalar>({m, k}, {1, m}, static_cast<size_t>(m * k), random)
                                  : dense<Scalar>({m, k}, random);
  Tensor<Scalar> w = w_transposed ? Tensor<Scalar>({n, k}, {1, n}, static_cast<size_t>(n * k), random)
                                  : dense<Scalar>({n, k}, random);
  Tensor<Scalar> bias = bias_kind == 2 ? Tensor<Scalar>({n}, {2}, static_cast<size_t>(2 * n), random)
                                       : dense<Scalar>({n}, random);
  const bool has_bias = bias_kind != 0;
  for (int activation = 0; activation < 5; ++activation) {
    Tensor<Scalar> out = dense<Scalar>({m, n}, random);
    DLTensor inputs[3] = {x.dl, w.dl, has_bias ? bias.dl : DLTensor{}};
    const kabi_problem problem = problem_with(activation, has_bias);
    const kabi_args args = args_with(inputs, 3, &out.dl);
    char reason[256] = "";
    CHECK(registered.supports(registered.user_data, &problem, &args, reason, sizeof(reason)) == 1);
    const kabi_status status = registered.function(registered.user_data, &problem, &args);
    CHECK(status == KABI_STATUS_OK);
    double worst = 0, peak = 0;
    for (int64_t row = 0; row < m; ++row) {
      for (int64_t column = 0; column < n; ++column) {
        double sum = has_bias ? static_cast<double>(bias.at({column})) : 0.0;
        for (int64_t i = 0; i < k; ++i) sum += static_cast<double>(x.at({row, i})) * w.at({column, i});
        const double expected = activate(sum, activation);
        worst = std::fmax(worst, std::fabs(out.at({row, column}) - expected));
        peak = std::fmax(peak, std::fabs(expected));
      }
    }
    if (!(worst <= tolerance * std::fmax(peak, 1.0))) {
      std::fprintf(stderr, "%zu-byte %lldx%lldx%lld x%s w%s bias %d %s: max error %.3g of peak %.3g (%s)\n",
                   sizeof(Scalar), static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                   x_transposed ? "T" : "", w_transposed ? "T" : "", bias_kind, kActivations[activation], worst,
                   peak, last_error.c_str());
      ++failures;
    }
  }
}

void check_declines(std::mt19937* random) {
  Tensor<float> x = dense<float>({4, 6}, random);
  Tensor<float> w = dense<float>({5, 6}, random);
  // Every other element in both dimensions: no unit stride, so gemm cannot read it in place.
  Tensor<float> w_general({5, 6}, {12, 2}, 60, random);
  Tensor<float> out = dense<float>({4, 5}, random);
  Tensor<float> wrong_out = dense<float>({4, 4}, random);
  char reason[256] = "";

  DLTensor general[3] = {x.dl, w_general.dl, DLTensor{}};
  kabi_problem problem = problem_with(0, false);
  kabi_args args = args_with(general, 3, nullptr);
  CHECK(registered.supports(registered.user_data, &problem, &args, reason, sizeof(reason)) == 0);
  CHECK(std::strstr(reason, "w has strides [12, 2]") != nullptr);

  // The absent bias left out of num_inputs; an output of the wrong shape is refused at launch.
  DLTensor two[2] = {x.dl, w.dl};
  args = args_with(two, 2, &wrong_out.dl);
  CHECK(registered.function(registered.user_data, &problem, &args) == KABI_STATUS_CONSTRAINT_VIOLATED);
  CHECK(std::strstr(last_error.c_str(), "out has shape [4, 4]; expected [4, 5]") != nullptr);

  problem = problem_with(5, false);
  args = args_with(two, 2, &out.dl);
  CHECK(registered.function(registered.user_data, &problem, &args) == KABI_STATUS_CONSTRAINT_VIOLATED);
  CHECK(std::strstr(last_error.c_str(), "activation 5 is not an index") != nullptr);
}

// x of rank 3 whose leading dimensions flatten into rows, and a rank-1 x (one row).
void check_leading_dimensions(std::mt19937* random) {
  Tensor<double> x3 = dense<double>({2, 3, 7}, random);
  Tensor<double> x1 = dense<double>({7}, random);
  Tensor<double> w = dense<double>({5, 7}, random);
  Tensor<double> out3 = dense<double>({2, 3, 5}, random);
  Tensor<double> out1 = dense<double>({5}, random);
  const kabi_problem problem = problem_with(4, false);
  DLTensor inputs3[2] = {x3.dl, w.dl};
  kabi_args args = args_with(inputs3, 2, &out3.dl);
  CHECK(registered.function(registered.user_data, &problem, &args) == KABI_STATUS_OK);
  DLTensor inputs1[2] = {x1.dl, w.dl};
  args = args_with(inputs1, 2, &out1.dl);
  CHECK(registered.function(registered.user_data, &problem, &args) == KABI_STATUS_OK);
  for (int64_t column = 0; column < 5; ++column) {
    for (int64_t row = 0; row < 6; ++row) {
      double sum = 0;
      for (int64_t i = 0; i < 7; ++i) sum += x3.storage[row * 7 + i] * w.at({column, i});
      CHECK(std::fabs(out3.storage[row * 5 + column] - activate(sum, 4)) < 1e-12);
    }
    double sum = 0;
    for (int64_t i = 0; i < 7; ++i) sum += x1.storage[i] * w.at({column, i});
    CHECK(std::fabs(out1.storage[column] - activate(sum, 4)) < 1e-12);
  }
}

}  // namespace

int main() {
  kabi::cpu::OpenBlas blas;
  std::string error;
  if (!kabi::cpu::open_openblas("", &blas, &error)) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 1;
  }
  kabi_host_api host{};
  host.struct_size = sizeof(host);
  host.abi_version = KABI_ABI_VERSION;
  host.kernel_register = record_registration;
  host.set_error = record_error;
  host.last_error = read_error;
  CHECK(kabi::cpu::register_linear_kernels(host, blas) == KABI_STATUS_OK);
  CHECK(registered_op == "linear" && registered_name == "cpu.openblas.linear");
  CHECK(registered.kind == KABI_KERNEL_FUNCTION && registered.batch_mode == KABI_BATCH_UNIFORM);
  CHECK(registered.dtypes == (KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64) && registered.priority == 10);
  CHECK(registered_fingerprint.rfind("cpu.openblas.linear/1 ", 0) == 0);

  std::mt19937 random(20261130);
  // Sizes off every power of two; each layout of x and w, and each kind of bias, at least once per dtype.
  for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {
    for (int layout = 0; layout < 4; ++layout) {
      check_case<float>(13, 11, 37, layout & 1, layout & 2, bias_kind, &random, 1e-5);
      check_case<double>(5, 9, 3, layout & 1, layout & 2, bias_kind, &random, 1e-12);
    }
  }
  check_case<float>(1, 33, 65, false, true, 1, &random, 1e-5);
  check_case<float>(3, 4, 0, false, false, 1, &random, 1e-6);
  check_leading_dimensions(&random);
  check_declines(&random);
  if (failures == 0) std::printf("test_cpu_linear: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
