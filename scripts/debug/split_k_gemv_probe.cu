// Times tilings of the split-K GEMV (csrc/plugins/cuda/split_k_gemv.cuh) on bfloat16 problems of few rows with a
// row-major b, in CUDA-graph replay, each checked against a plain reference first. Built and run by
// split_k_gemv_probe.py; prints one line per (problem, tiling): M N K, the tiling, microseconds per call, and the
// fraction of the copy-bandwidth floor (b's bytes over the bandwidth measured here).
//
//   split_k_gemv_probe M,N,K [M,N,K ...]
#include <cstdio>
#include <string>
#include <vector>

#include "probe_common.cuh"
#include "split_k_gemv.cuh"

namespace {

using namespace kabi::cuda;
using namespace kabi::cuda::gemv;
using namespace probe;

struct Problem {
  int64_t m, n, k;
};

template <class Tile>
std::string tiling_name() {
  return "rows" + std::to_string(Tile::kRows) + "_stage" + std::to_string(Tile::kRowsPerStage) + "x" +
         std::to_string(Tile::kStages) + "_t" + std::to_string(Tile::kThreads) + "_b" +
         std::to_string(Tile::kBlocksPerMultiprocessor);
}

struct Buffers {
  uint16_t* a;
  std::vector<uint16_t*> b_copies;  // enough copies that a replay's reads of b come from HBM, not L2
  uint16_t* out;
  float* partials;
  float* reference;
  int32_t multiprocessors;
};

template <class Tile>
void run_tiling(const Problem& p, const Buffers& buffers, double bandwidth) {
  const KSplits split = k_splits<Tile>(p.m, p.n, p.k, buffers.multiprocessors);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK((launch_tiled<true, Tile>(buffers.a, p.k, buffers.b_copies[0], p.n, buffers.out, p.m, p.n, p.k,
                                  buffers.partials, buffers.multiprocessors, stream)));
  CHECK(cudaStreamSynchronize(stream));
  const double error = relative_error(buffers.out, buffers.reference, p.m * p.n);
  const double us = graph_time_us(stream, buffers.b_copies, 30, [&](const uint16_t* b) {
    return launch_tiled<true, Tile>(buffers.a, p.k, b, p.n, buffers.out, p.m, p.n, p.k, buffers.partials,
                                    buffers.multiprocessors, stream);
  });
  const double floor_us = static_cast<double>(p.k) * p.n * 2 / bandwidth * 1e6;
  std::printf("%6lld %6lld %6lld  %-32s splits %4lld  %8.1f us  %.3f of floor  rel error %.1e%s\n",
              static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
              tiling_name<Tile>().c_str(), static_cast<long long>(split.splits), us, floor_us / us, error,
              error < 2e-2 ? "" : "  WRONG");
  CHECK(cudaStreamDestroy(stream));
}

// The tilings compared, each with the rows of a per block that the plugin picks for M (split_k_gemv.cu).
template <int S, int P, int T, int B>
void run_for_rows(const Problem& p, const Buffers& buffers, double bandwidth) {
  if (p.m <= 1) return run_tiling<Tiling<1, S, P, T, B>>(p, buffers, bandwidth);
  if (p.m <= 2) return run_tiling<Tiling<2, S, P, T, B>>(p, buffers, bandwidth);
  if (p.m <= 4) return run_tiling<Tiling<4, S, P, T, B>>(p, buffers, bandwidth);
  return run_tiling<Tiling<8, S, P, T, B>>(p, buffers, bandwidth);
}

void run_all(const Problem& p, const Buffers& buffers, double bandwidth) {
  run_for_rows<4, 4, 128, 1>(p, buffers, bandwidth);
  run_for_rows<4, 4, 128, 2>(p, buffers, bandwidth);
  run_for_rows<4, 4, 128, 4>(p, buffers, bandwidth);
  run_for_rows<2, 8, 128, 2>(p, buffers, bandwidth);
  run_for_rows<2, 8, 128, 4>(p, buffers, bandwidth);
  run_for_rows<2, 4, 256, 2>(p, buffers, bandwidth);
  run_for_rows<8, 2, 128, 2>(p, buffers, bandwidth);
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t multiprocessors = multiprocessor_count();
  const double bandwidth = copy_bandwidth();
  std::printf("copy bandwidth %.0f GB/s, %d multiprocessors\n", bandwidth / 1e9, multiprocessors);
  for (int i = 1; i < argc; ++i) {
    Problem p{};
    if (std::sscanf(argv[i], "%lld,%lld,%lld", reinterpret_cast<long long*>(&p.m), reinterpret_cast<long long*>(&p.n),
                    reinterpret_cast<long long*>(&p.k)) != 3) {
      std::fprintf(stderr, "problem %s: expected M,N,K\n", argv[i]);
      return 2;
    }
    Buffers buffers{};
    buffers.multiprocessors = multiprocessors;
    buffers.a = filled_array(p.m * p.k, 1);
    buffers.b_copies = rotated_copies_of_b(p.n, p.k);
    CHECK(cudaMalloc(&buffers.out, p.m * p.n * 2));
    // The most any tiling asks for: one split per stage of 2 rows of K.
    CHECK(cudaMalloc(&buffers.partials, static_cast<size_t>(ceil_div(p.k, 2) * p.m * p.n) * 4));
    CHECK(cudaMalloc(&buffers.reference, p.m * p.n * 4));
    compute_reference(buffers.a, buffers.b_copies[0], false, buffers.reference, p.m, p.n, p.k);
    run_all(p, buffers, bandwidth);
    CHECK(cudaFree(buffers.a));
    for (uint16_t* copy : buffers.b_copies) CHECK(cudaFree(copy));
    CHECK(cudaFree(buffers.out));
    CHECK(cudaFree(buffers.partials));
    CHECK(cudaFree(buffers.reference));
  }
  return 0;
}
