// Launches every device-binary matmul kernel of a manifest directory through libkabi's C ABI (no Python) and
// compares each result with a CPU reference.
//
//   test_launch_gpu DIR    (or KABI_TEST_BINARIES_DIR=DIR test_launch_gpu)
//
// Prints "SKIP: ..." and exits 77 (skipped, for ctest) without a CUDA device or without a directory. Inputs are random multiples of 1/64
// in [-2, 2]: exact in float16, bfloat16 and tf32, with products and sums exact in float32 accumulation for these
// sizes, so the only error left is the rounding of the output to its dtype, and the tolerance is that rounding.
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "kabi/kabi.h"

namespace {

// The driver calls the test needs for its own buffers (libkabi does the launch).
struct Driver {
  int (*cuInit)(unsigned);
  int (*cuDeviceGet)(int*, int);
  int (*cuDevicePrimaryCtxRetain)(void**, int);
  int (*cuCtxSetCurrent)(void*);
  int (*cuCtxSynchronize)();
  int (*cuMemAlloc)(unsigned long long*, size_t);
  int (*cuMemFree)(unsigned long long);
  int (*cuMemcpyHtoD)(unsigned long long, const void*, size_t);
  int (*cuMemcpyDtoH)(void*, unsigned long long, size_t);
};

template <class Function>
void bind(void* library, const char* name, Function& function) {
  function = reinterpret_cast<Function>(::dlsym(library, name));
  if (function == nullptr) {
    std::fprintf(stderr, "libcuda lacks %s\n", name);
    std::exit(EXIT_FAILURE);
  }
}

Driver open_driver() {
  void* library = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::fprintf(stderr, "cannot open libcuda.so.1: %s\n", ::dlerror());
    std::exit(EXIT_FAILURE);
  }
  Driver driver{};
  bind(library, "cuInit", driver.cuInit);
  bind(library, "cuDeviceGet", driver.cuDeviceGet);
  bind(library, "cuDevicePrimaryCtxRetain", driver.cuDevicePrimaryCtxRetain);
  bind(library, "cuCtxSetCurrent", driver.cuCtxSetCurrent);
  bind(library, "cuCtxSynchronize", driver.cuCtxSynchronize);
  bind(library, "cuMemAlloc_v2", driver.cuMemAlloc);
  bind(library, "cuMemFree_v2", driver.cuMemFree);
  bind(library, "cuMemcpyHtoD_v2", driver.cuMemcpyHtoD);
  bind(library, "cuMemcpyDtoH_v2", driver.cuMemcpyDtoH);
  return driver;
}

void check_driver(int result, const char* what) {
  if (result != 0) {
    std::fprintf(stderr, "%s failed with CUDA error %d\n", what, result);
    std::exit(EXIT_FAILURE);
  }
}

struct DtypeCase {
  uint32_t bit;
  DLDataType dlpack;
  int bytes;
  double relative_tolerance;  // the output's rounding
};

const DtypeCase kDtypes[] = {
    {KABI_DTYPE_BFLOAT16, {kDLBfloat, 16, 1}, 2, std::ldexp(1.0, -8)},
    {KABI_DTYPE_FLOAT16, {kDLFloat, 16, 1}, 2, std::ldexp(1.0, -11)},
    {KABI_DTYPE_FLOAT32, {kDLFloat, 32, 1}, 4, std::ldexp(1.0, -20)},
};

// Exact for the values used here (at most 8 significant bits, |x| >= 1/64 or 0).
void encode(float value, const DtypeCase& dtype, unsigned char* out) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (dtype.bit == KABI_DTYPE_FLOAT32) {
    std::memcpy(out, &bits, 4);
    return;
  }
  uint16_t half = static_cast<uint16_t>(bits >> 16);
  if (dtype.bit == KABI_DTYPE_FLOAT16) {
    const uint32_t exponent = (bits >> 23) & 0xFF;
    half = static_cast<uint16_t>(((bits >> 16) & 0x8000) |
                                 (value == 0.0f ? 0 : (((exponent - 127 + 15) << 10) | ((bits >> 13) & 0x3FF))));
  }
  std::memcpy(out, &half, 2);
}

double decode(const unsigned char* in, const DtypeCase& dtype) {
  float value;
  if (dtype.bit == KABI_DTYPE_FLOAT32) {
    std::memcpy(&value, in, 4);
    return value;
  }
  uint16_t half;
  std::memcpy(&half, in, 2);
  if (dtype.bit == KABI_DTYPE_BFLOAT16) {
    const uint32_t bits = static_cast<uint32_t>(half) << 16;
    std::memcpy(&value, &bits, 4);
    return value;
  }
  const double sign = (half & 0x8000) ? -1.0 : 1.0;
  const int exponent = (half >> 10) & 0x1F;
  const int mantissa = half & 0x3FF;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  if (exponent == 31) return mantissa == 0 ? sign * INFINITY : NAN;
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

struct DeviceTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  unsigned long long pointer = 0;
  DLTensor view(const DtypeCase& dtype) {
    DLTensor tensor{};
    tensor.data = reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
    tensor.device = {kDLCUDA, 0};
    tensor.ndim = 2;
    tensor.dtype = dtype.dlpack;
    tensor.shape = shape.data();
    tensor.strides = strides.data();
    return tensor;
  }
};

// Runs one kernel on one shape; returns false when it is not eligible for it (reason printed).
bool run_case(const Driver& driver, kabi_op op, const std::string& kernel_name, const DtypeCase& dtype, int64_t m,
              int64_t n, int64_t k, std::mt19937& random) {
  std::uniform_int_distribution<int> sixty_fourths(-128, 128);
  std::vector<double> a(static_cast<size_t>(m * k));
  std::vector<double> b(static_cast<size_t>(k * n));
  for (double& value : a) value = sixty_fourths(random) / 64.0;
  for (double& value : b) value = sixty_fourths(random) / 64.0;
  const auto upload = [&](const std::vector<double>& values, DeviceTensor& tensor) {
    std::vector<unsigned char> bytes(values.size() * static_cast<size_t>(dtype.bytes));
    for (size_t i = 0; i < values.size(); ++i) encode(static_cast<float>(values[i]), dtype, &bytes[i * dtype.bytes]);
    check_driver(driver.cuMemAlloc(&tensor.pointer, bytes.size()), "cuMemAlloc");
    check_driver(driver.cuMemcpyHtoD(tensor.pointer, bytes.data(), bytes.size()), "cuMemcpyHtoD");
  };
  DeviceTensor tensors[3] = {{{m, k}, {k, 1}}, {{k, n}, {n, 1}}, {{m, n}, {n, 1}}};
  upload(a, tensors[0]);
  upload(b, tensors[1]);
  upload(std::vector<double>(static_cast<size_t>(m * n), 7.0), tensors[2]);  // stale values must be overwritten
  DLTensor inputs[2] = {tensors[0].view(dtype), tensors[1].view(dtype)};
  DLTensor output = tensors[2].view(dtype);
  kabi_args args{sizeof(kabi_args), inputs, 2, 1, &output, nullptr};
  // A launch test: the problem is unverified, so it opts in.
  kabi_select_options options{sizeof(kabi_select_options), kernel_name.c_str(), 0, 0, 1, 0, KABI_EXECUTION_EAGER};
  kabi_selection selection;
  std::memset(&selection, 0, sizeof selection);
  selection.struct_size = sizeof selection;
  const kabi_status selected = kabi_select(op, &args, &options, &selection);
  bool ran = false;
  if (selected != KABI_STATUS_OK) {
    std::printf("  %s %lldx%lldx%lld: not eligible: %s\n", kernel_name.c_str(), static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(k), kabi_last_error());
  } else {
    const kabi_status launched = kabi_launch(selection.kernel, &args);
    if (launched != KABI_STATUS_OK) {
      kabi_test::report_failure(__FILE__, __LINE__, kernel_name + ": launch failed: " + kabi_last_error());
    } else {
      check_driver(driver.cuCtxSynchronize(), "cuCtxSynchronize after the kernel");
      std::vector<unsigned char> bytes(static_cast<size_t>(m * n * dtype.bytes));
      check_driver(driver.cuMemcpyDtoH(bytes.data(), tensors[2].pointer, bytes.size()), "cuMemcpyDtoH");
      int64_t wrong = 0;
      double worst = 0.0;
      for (int64_t row = 0; row < m; ++row) {
        for (int64_t column = 0; column < n; ++column) {
          double expected = 0.0;
          for (int64_t inner = 0; inner < k; ++inner) expected += a[row * k + inner] * b[inner * n + column];
          const double actual = decode(&bytes[static_cast<size_t>((row * n + column) * dtype.bytes)], dtype);
          const double error = std::fabs(actual - expected);
          if (!(error <= dtype.relative_tolerance * std::fabs(expected) + 1e-6)) ++wrong;
          worst = std::fmax(worst, error);
        }
      }
      std::printf("  %s %s %lldx%lldx%lld: %lld wrong elements, max error %.3g\n", kernel_name.c_str(),
                  kabi_dtype_name(dtype.bit), static_cast<long long>(m), static_cast<long long>(n),
                  static_cast<long long>(k), static_cast<long long>(wrong), worst);
      KABI_CHECK_EQ(wrong, int64_t{0});
      ran = true;
    }
  }
  for (DeviceTensor& tensor : tensors) driver.cuMemFree(tensor.pointer);
  return ran;
}

}  // namespace

// ctest reports this exit status as "skipped" (SKIP_RETURN_CODE), not as a pass.
constexpr int kSkipped = 77;

int main(int argc, char** argv) {
  int32_t devices = 0;
  if (kabi_device_count(kDLCUDA, &devices) != KABI_STATUS_OK || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return kSkipped;
  }
  std::string directory = argc > 1 ? argv[1] : "";
  if (directory.empty() && std::getenv("KABI_TEST_BINARIES_DIR") != nullptr) {
    directory = std::getenv("KABI_TEST_BINARIES_DIR");
  }
  if (directory.empty()) {
    std::printf("SKIP: no manifest directory (pass one, or set KABI_TEST_BINARIES_DIR)\n");
    return kSkipped;
  }
  const Driver driver = open_driver();
  int device = 0;
  void* context = nullptr;
  check_driver(driver.cuInit(0), "cuInit");
  check_driver(driver.cuDeviceGet(&device, 0), "cuDeviceGet");
  check_driver(driver.cuDevicePrimaryCtxRetain(&context, device), "cuDevicePrimaryCtxRetain");
  check_driver(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");

  int32_t registered = 0;
  if (kabi_binaries_load(directory.c_str(), &registered) != KABI_STATUS_OK) {
    std::fprintf(stderr, "kabi_binaries_load(%s): %s\n", directory.c_str(), kabi_last_error());
    return EXIT_FAILURE;
  }
  std::printf("loaded %d kernels from %s\n", registered, directory.c_str());
  kabi_op op = nullptr;
  KABI_CHECK_EQ(kabi_op_find("matmul", &op), KABI_STATUS_OK);

  std::mt19937 random(std::random_device{}());
  const int64_t shapes[][3] = {{256, 256, 256}, {333, 200, 136}, {16, 512, 1024}, {1, 128, 64}};
  int launched = 0;
  for (int32_t index = 0; index < kabi_kernel_count("matmul"); ++index) {
    kabi_kernel kernel = nullptr;
    kabi_kernel_info info;
    std::memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (kabi_kernel_at("matmul", index, &kernel) != KABI_STATUS_OK || kabi_kernel_info_get(kernel, &info) != 0 ||
        info.kind != KABI_KERNEL_DEVICE_BINARY) {
      continue;
    }
    for (const DtypeCase& dtype : kDtypes) {
      if ((info.dtypes & dtype.bit) == 0) continue;
      for (const auto& shape : shapes) {
        launched += run_case(driver, op, info.name, dtype, shape[0], shape[1], shape[2], random) ? 1 : 0;
      }
    }
  }
  KABI_CHECK(launched > 0);
  return kabi_test::finish("test_launch_gpu");
}
