// kabi_matmul_app: a C++ caller of kabi with no Python. Loads the built-in plugins (and any named with --plugin
// or KABI_PLUGIN_PATH), selects a float32 matmul kernel once for its own buffers, launches it many times, checks
// the result against a naive reference and prints the pick, the reason and the time per launch. Decisions that
// Python tuned into the tuning cache (KABI_CACHE_DIR) are used: the pick then reads "[tuned]".
//
//   kabi_matmul_app [--shape MxNxK] [--iterations N] [--plugin PATH]... [--force BACKEND_OR_KERNEL]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kabi/kabi.hpp"

namespace {

struct Options {
  int64_t m = 64, n = 64, k = 64;
  int iterations = 1000;
  std::vector<std::string> plugins;
  std::string force;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "kabi_matmul_app: %s\nusage: kabi_matmul_app [--shape MxNxK] [--iterations N] [--plugin PATH]... "
               "[--force BACKEND_OR_KERNEL]\n",
               problem.c_str());
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
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--shape") {
      const size_t first = value.find('x');
      const size_t second = value.find('x', first == std::string::npos ? first : first + 1);
      if (first == std::string::npos || second == std::string::npos) usage("--shape takes MxNxK, got \"" + value + "\"");
      options.m = positive(value.substr(0, first), "M");
      options.n = positive(value.substr(first + 1, second - first - 1), "N");
      options.k = positive(value.substr(second + 1), "K");
    } else if (flag == "--iterations") {
      options.iterations = static_cast<int>(positive(value, "--iterations"));
    } else if (flag == "--plugin") {
      options.plugins.push_back(value);
    } else if (flag == "--force") {
      options.force = value;
    } else {
      usage("unknown option " + flag);
    }
  }
  return options;
}

const char* pick_name(kabi_pick_reason reason) {
  switch (reason) {
    case KABI_PICK_FORCED: return "forced";
    case KABI_PICK_TUNED: return "tuned";
    case KABI_PICK_HEURISTIC: return "heuristic";
    default: return "none";
  }
}

// Largest |out - reference| over the largest |reference|, with the reference summed in double.
double relative_error(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& out,
                      const Options& shape) {
  double worst = 0.0, scale = 1.0;
  for (int64_t i = 0; i < shape.m; ++i) {
    for (int64_t j = 0; j < shape.n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < shape.k; ++p) sum += double(a[i * shape.k + p]) * double(b[p * shape.n + j]);
      worst = std::max(worst, std::fabs(double(out[i * shape.n + j]) - sum));
      scale = std::max(scale, std::fabs(sum));
    }
  }
  return worst / scale;
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  try {
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

    std::mt19937 generator(std::random_device{}());
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> a(static_cast<size_t>(options.m * options.k)), b(static_cast<size_t>(options.k * options.n));
    std::vector<float> out(static_cast<size_t>(options.m * options.n), NAN);
    for (float& value : a) value = uniform(generator);
    for (float& value : b) value = uniform(generator);

    const kabi::Op matmul = kabi::Op::find("matmul");
    const kabi::Call call({kabi::TensorView::of(a.data(), {options.m, options.k}),
                           kabi::TensorView::of(b.data(), {options.k, options.n})},
                          {kabi::TensorView::of(out.data(), {options.m, options.n})});
    kabi::SelectOptions select_options;
    select_options.force = options.force;
    const kabi::Selection selection = matmul.select(call, select_options);
    for (const kabi::Candidate& candidate : selection.candidates()) {
      std::printf("candidate %s: %s\n", candidate.kernel.name().c_str(),
                  candidate.eligible ? "eligible" : candidate.reason.c_str());
    }
    const kabi::Kernel kernel = selection.kernel();
    std::printf("pick: %s [%s] %s\n", kernel.name().c_str(), pick_name(selection.pick_reason()),
                selection.reason().c_str());

    std::vector<double> microseconds;
    microseconds.reserve(static_cast<size_t>(options.iterations));
    for (int i = 0; i < options.iterations; ++i) {
      const auto start = std::chrono::steady_clock::now();
      selection.launch(call);
      microseconds.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
    }
    std::nth_element(microseconds.begin(), microseconds.begin() + microseconds.size() / 2, microseconds.end());

    const double error = relative_error(a, b, out, options);
    const double tolerance = 1e-4;  // matmul's float32 tolerance (registry/ops/matmul.toml, "extreme")
    std::printf("result: max relative error %.3g over %lldx%lldx%lld float32 (tolerance %.0e): %s\n", error,
                static_cast<long long>(options.m), static_cast<long long>(options.n),
                static_cast<long long>(options.k), tolerance, error <= tolerance ? "ok" : "WRONG");
    std::printf("time: median %.2f us per launch over %d launches\n", microseconds[microseconds.size() / 2],
                options.iterations);
    return error <= tolerance ? 0 : 1;
  } catch (const kabi::Error& error) {
    std::fprintf(stderr, "kabi_matmul_app: %s\n", error.what());
    return 1;
  }
}
