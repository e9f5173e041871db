// kabi_matmul_app: a C++ caller of kabi with no Python. Loads the built-in plugins (and any named with --plugin or
// KABI_PLUGIN_PATH) and the device binaries of --binaries directories (Triton kernels compiled to cubins with their
// manifests), selects a matmul kernel once for its own buffers, launches it many times, checks the result against a
// naive host reference and prints the pick, the reason, the error and the time per launch. Decisions that Python
// tuned into the tuning cache (KABI_CACHE_DIR) are used: the pick then reads "[tuned]".
//
//   kabi_matmul_app [--device cpu|cuda] [--dtype float32|float16|bfloat16] [--shape MxNxK] [--iterations N]
//                   [--plugin PATH]... [--binaries DIR]... [--force BACKEND_OR_KERNEL] [--allow-unverified]
//
// Exit status: 0 the result matched the reference; 1 it did not, or kabi or CUDA reported an error; 2 bad usage;
// 77 skipped: --device cuda on a machine without a CUDA driver or device (one line says which).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_device.hpp"
#include "dtype.hpp"
#include "kabi/kabi.hpp"
#include "matmul_check.hpp"

namespace {

constexpr int kSkipped = 77;  // the status ctest and automake read as "skipped"

struct Options {
  std::string device = "cpu";
  std::string dtype;  // empty: float32 on the CPU, bfloat16 on CUDA
  int64_t m = 64, n = 64, k = 64;
  int iterations = 1000;
  std::vector<std::string> plugins;
  std::vector<std::string> binaries;
  std::string force;
  // libkabi picks only kernels that passed the correctness gate on the problem (`kabi verify`, or tuned from
  // Python); this app checks its result against a reference itself, so as a developer tool it may opt out.
  bool allow_unverified = false;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "kabi_matmul_app: %s\nusage: kabi_matmul_app [--device cpu|cuda] [--dtype %s] [--shape MxNxK] "
               "[--iterations N] [--plugin PATH]... [--binaries DIR]... [--force BACKEND_OR_KERNEL] "
               "[--allow-unverified]\n",
               problem.c_str(), dtype_names().c_str());
  std::exit(2);
}

int64_t positive(const std::string& text, const char* what) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value <= 0) usage(std::string(what) + " must be a positive integer, got \"" + text + "\"");
  return value;
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--allow-unverified") {
      options.allow_unverified = true;
      continue;
    }
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--shape") {
      const size_t first = value.find('x');
      const size_t second = value.find('x', first == std::string::npos ? first : first + 1);
      if (first == std::string::npos || second == std::string::npos) usage("--shape takes MxNxK, got \"" + value + "\"");
      options.m = positive(value.substr(0, first), "M");
      options.n = positive(value.substr(first + 1, second - first - 1), "N");
      options.k = positive(value.substr(second + 1), "K");
    } else if (flag == "--device") {
      if (value != "cpu" && value != "cuda") usage("--device takes cpu or cuda, got \"" + value + "\"");
      options.device = value;
    } else if (flag == "--dtype") {
      if (find_dtype(value) == nullptr) usage("--dtype takes " + dtype_names() + ", got \"" + value + "\"");
      options.dtype = value;
    } else if (flag == "--iterations") {
      options.iterations = static_cast<int>(positive(value, "--iterations"));
    } else if (flag == "--plugin") {
      options.plugins.push_back(value);
    } else if (flag == "--binaries") {
      options.binaries.push_back(value);
    } else if (flag == "--force") {
      options.force = value;
    } else {
      usage("unknown option " + flag);
    }
  }
  if (options.dtype.empty()) options.dtype = options.device == "cuda" ? "bfloat16" : "float32";
  return options;
}

void load_kernels(const Options& options) {
  kabi::load_builtin_plugins();
  kabi::load_plugins_from_environment();
  for (const std::string& path : options.plugins) kabi::load_plugin(path);
  for (const kabi::PluginRecord& plugin : kabi::plugins()) {
    if (plugin.loaded) {
      std::printf("plugin %s %s: loaded, %d kernel(s)\n", plugin.name.c_str(), plugin.version.c_str(),
                  plugin.num_kernels);
    } else {
      std::printf("plugin %s: refused: %s\n", plugin.name.c_str(), plugin.message.c_str());
    }
  }
  // Reading manifests needs no GPU: an image goes to the driver at its kernel's first launch.
  for (const std::string& directory : options.binaries) {
    int32_t registered = 0;
    kabi::check(kabi_binaries_load(directory.c_str(), &registered));
    std::printf("binaries %s: %d kernel(s) registered\n", directory.c_str(), registered);
  }
}

const char* pick_name(kabi_pick_reason reason) {
  switch (reason) {
    case KABI_PICK_FORCED: return "forced";
    case KABI_PICK_TUNED: return "tuned";
    case KABI_PICK_HEURISTIC: return "heuristic";
    default: return "none";
  }
}

const char* kind_name(kabi_kernel_kind kind) {
  switch (kind) {
    case KABI_KERNEL_FUNCTION: return "native function";
    case KABI_KERNEL_DEVICE_BINARY: return "device binary";
    default: return "external";
  }
}

kabi::Selection select_kernel(const kabi::Call& call, const Options& options) {
  kabi::SelectOptions select_options;
  select_options.force = options.force;
  select_options.allow_unverified = options.allow_unverified;
  const kabi::Selection selection = kabi::Op::find("matmul").select(call, select_options);
  for (const kabi::Candidate& candidate : selection.candidates()) {
    std::printf("candidate %s: %s\n", candidate.kernel.name().c_str(),
                candidate.eligible ? "eligible" : candidate.reason.c_str());
  }
  const kabi::Kernel kernel = selection.kernel();
  std::printf("pick: %s [%s] %s\n", kernel.name().c_str(), pick_name(selection.pick_reason()),
              selection.reason().c_str());
  std::printf("kind: %s, backend %s, %s\n", kind_name(kernel.info().kind), kernel.backend().c_str(),
              selection.verified() ? "verified (passed the correctness gate on this problem)"
                                   : "unverified (allowed by --allow-unverified)");
  return selection;
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Launches `selection` options.iterations times; returns each launch call's host time in microseconds.
std::vector<double> launch_many(const kabi::Selection& selection, const kabi::Call& call, const Options& options) {
  std::vector<double> microseconds;
  microseconds.reserve(static_cast<size_t>(options.iterations));
  for (int i = 0; i < options.iterations; ++i) {
    const auto start = std::chrono::steady_clock::now();
    selection.launch(call);
    microseconds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  }
  return microseconds;
}

// On the CPU the kernel works on the host vectors themselves, and a launch returns when it is done.
std::vector<unsigned char> run_on_cpu(const std::vector<unsigned char>& a, const std::vector<unsigned char>& b,
                                      std::vector<unsigned char> out, const Dtype& dtype, const Options& options) {
  const kabi::Call call({kabi::TensorView(const_cast<unsigned char*>(a.data()), {options.m, options.k}, dtype.dlpack),
                         kabi::TensorView(const_cast<unsigned char*>(b.data()), {options.k, options.n}, dtype.dlpack)},
                        {kabi::TensorView(out.data(), {options.m, options.n}, dtype.dlpack)});
  const kabi::Selection selection = select_kernel(call, options);
  const std::vector<double> microseconds = launch_many(selection, call, options);
  std::printf("time: median %.2f us per launch over %d launches\n", median(microseconds), options.iterations);
  return out;
}

// Device buffers and a stream: launches are enqueued back to back, timed on the GPU with events, then the output
// is copied back.
std::vector<unsigned char> run_on_cuda(CudaDevice& gpu, const std::vector<unsigned char>& a,
                                       const std::vector<unsigned char>& b, std::vector<unsigned char> out,
                                       const Dtype& dtype, const Options& options) {
  for (const kabi_device_info& info : kabi::devices(kDLCUDA)) {
    if (info.device_index == gpu.ordinal()) {
      std::printf("device: %s (sm_%d, %d SMs, driver %d)\n", info.name, info.arch, info.compute_units,
                  info.driver_version);
    }
  }
  DeviceBuffer device_a(a.size()), device_b(b.size()), device_out(out.size());
  gpu.copy_to_device(device_a, a.data(), a.size());
  gpu.copy_to_device(device_b, b.data(), b.size());
  gpu.copy_to_device(device_out, out.data(), out.size());
  const DLDevice where{kDLCUDA, gpu.ordinal()};
  const kabi::Call call({kabi::TensorView(device_a.data(), {options.m, options.k}, dtype.dlpack, where),
                         kabi::TensorView(device_b.data(), {options.k, options.n}, dtype.dlpack, where)},
                        {kabi::TensorView(device_out.data(), {options.m, options.n}, dtype.dlpack, where)},
                        gpu.stream());
  const kabi::Selection selection = select_kernel(call, options);
  // The first launch loads the image into the driver (and allocates any scratch): keep it out of the timing.
  selection.launch(call);
  gpu.synchronize();
  std::vector<double> host_microseconds;
  const double milliseconds = gpu.time_on_stream_ms([&] { host_microseconds = launch_many(selection, call, options); });
  const double microseconds_per_launch = 1000.0 * milliseconds / options.iterations;
  const double flops = 2.0 * double(options.m) * double(options.n) * double(options.k);
  const double teraflops = flops / (microseconds_per_launch * 1e6);
  std::printf("time: %.2f us per launch on the GPU (CUDA events around %d back-to-back launches, %.1f TFLOP/s); "
              "host: median %.2f us per launch call\n",
              microseconds_per_launch, options.iterations, teraflops, median(host_microseconds));
  gpu.copy_to_host(out.data(), device_out, out.size());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const Dtype& dtype = *find_dtype(options.dtype);
  try {
    // Opened first, so that a machine without CUDA answers with one line and nothing else.
    std::unique_ptr<CudaDevice> gpu = options.device == "cuda" ? std::make_unique<CudaDevice>(0) : nullptr;
    load_kernels(options);

    // Fresh inputs every run, rounded to the dtype once; the reference uses the rounded values.
    std::mt19937 generator(std::random_device{}());
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(options.m * options.k)), b(static_cast<size_t>(options.k * options.n));
    for (float& value : a) value = uniform(generator);
    for (float& value : b) value = uniform(generator);
    const std::vector<unsigned char> a_bytes = encode(a, dtype), b_bytes = encode(b, dtype);
    a = decode(a_bytes, dtype);
    b = decode(b_bytes, dtype);
    // NaN everywhere: an element the kernel leaves unwritten fails the check.
    std::vector<unsigned char> out_bytes =
        encode(std::vector<float>(static_cast<size_t>(options.m * options.n), NAN), dtype);

    out_bytes = gpu ? run_on_cuda(*gpu, a_bytes, b_bytes, std::move(out_bytes), dtype, options)
                    : run_on_cpu(a_bytes, b_bytes, std::move(out_bytes), dtype, options);

    const MatmulError error = compare_with_reference(a, b, decode(out_bytes, dtype), options.m, options.n, options.k);
    const bool ok = error.norm <= dtype.norm_tolerance && error.extreme <= dtype.extreme_tolerance;
    std::printf("result: relative error %.3g (Frobenius), %.3g (largest element) over %lldx%lldx%lld %s "
                "(tolerances %.1e, %.1e): %s\n",
                error.norm, error.extreme, static_cast<long long>(options.m), static_cast<long long>(options.n),
                static_cast<long long>(options.k), dtype.name, dtype.norm_tolerance, dtype.extreme_tolerance,
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  } catch (const CudaUnavailable& unavailable) {
    std::printf("%s\n", unavailable.what());
    return kSkipped;
  } catch (const std::runtime_error& error) {  // kabi::Error, CudaError
    std::fflush(stdout);  // what was printed so far comes first where both streams go to one file
    std::fprintf(stderr, "kabi_matmul_app: %s\n", error.what());
    return 1;
  }
}
