// Times tilings of the decode MMA kernel (csrc/plugins/cuda/decode_mma.cuh) on bfloat16 problems of few rows, b
// row-major [K, N] or column-major [N, K], in CUDA-graph replay over enough copies of b that each call reads it from
// HBM; each tiling is checked against a float32 reference first and not timed where it disagrees. Built and run by
// decode_mma_probe.py, which reads its lines:
//   bandwidth GB_PER_S MULTIPROCESSORS
//   result M N K ORDER TILING RESIDENT SPLITS MICROSECONDS FRACTION_OF_FLOOR REL_ERROR ok|WRONG
//
//   decode_mma_probe N,K:M[,M...] [N,K:M...]   (each layer with both b orders)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "decode_mma.cuh"
#include "probe_common.cuh"

namespace {

using namespace kabi::cuda;
using namespace kabi::cuda::decode;
using namespace probe;

struct Problem {
  int64_t m, n, k;
  bool column_major;
};

struct Buffers {
  uint16_t* a;
  std::vector<uint16_t*> b_copies;  // enough copies that a replay's reads of b come from HBM, not L2
  uint16_t* out;
  float* reference;
  int32_t multiprocessors;
};

template <class Tile>
std::string tiling_name() {
  return "c" + std::to_string(Tile::kChunks) + "w" + std::to_string(Tile::kWarps) + "r" +
         std::to_string(Tile::kResidentBlocks);
}

template <MatrixOrder kOrder, int kRowGroups, class Tile>
cudaError_t launch(const Problem& p, const Buffers& buffers, const uint16_t* b, float* partials, cudaStream_t stream) {
  return launch_tiled<true, kOrder, kRowGroups, Tile>(buffers.a, p.k, b, p.column_major ? p.k : p.n, p.m, p.n, p.k,
                                                      Epilogue{}, buffers.out, partials, buffers.multiprocessors,
                                                      stream);
}

template <MatrixOrder kOrder, int kRowGroups, class Tile>
void run_tiling(const Problem& p, const Buffers& buffers, double bandwidth) {
  cudaError_t query_error = cudaSuccess;
  const int resident = resident_blocks<true, kOrder, kRowGroups, Tile>(&query_error);
  CHECK(query_error);
  const KSplits split = k_splits<Tile>(p.m, p.n, p.k, int64_t{resident} * buffers.multiprocessors);
  float* partials = nullptr;
  const int64_t floats = workspace_floats<Tile>(p.m, p.n, p.k, buffers.multiprocessors);
  if (floats > 0) CHECK(cudaMalloc(&partials, static_cast<size_t>(floats) * sizeof(float)));
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaMemset(buffers.out, 0xff, p.m * p.n * 2));
  CHECK((launch<kOrder, kRowGroups, Tile>(p, buffers, buffers.b_copies[0], partials, stream)));
  CHECK(cudaStreamSynchronize(stream));
  const double error = relative_error(buffers.out, buffers.reference, p.m * p.n);
  double us = NAN;
  if (error < 2e-2) {
    us = graph_time_us(stream, buffers.b_copies, 20, [&](const uint16_t* b) {
      return launch<kOrder, kRowGroups, Tile>(p, buffers, b, partials, stream);
    });
  }
  const double floor_us = static_cast<double>(p.k) * p.n * 2 / bandwidth * 1e6;
  std::printf("result %lld %lld %lld %s %s %d %lld %.2f %.3f %.1e %s\n", static_cast<long long>(p.m),
              static_cast<long long>(p.n), static_cast<long long>(p.k), p.column_major ? "col" : "row",
              tiling_name<Tile>().c_str(), resident, static_cast<long long>(split.splits), us, floor_us / us, error,
              error < 2e-2 ? "ok" : "WRONG");
  std::fflush(stdout);
  CHECK(cudaStreamDestroy(stream));
  if (partials != nullptr) CHECK(cudaFree(partials));
}

template <class Tile>
void run_for_problem(const Problem& p, const Buffers& buffers, double bandwidth) {
  // One group of 8 rows of a where it holds M, as the plugin picks (decode_mma.cu).
  if (p.column_major) {
    if (p.m <= 8) return run_tiling<MatrixOrder::kColumnMajor, 1, Tile>(p, buffers, bandwidth);
    return run_tiling<MatrixOrder::kColumnMajor, 2, Tile>(p, buffers, bandwidth);
  }
  if (p.m <= 8) return run_tiling<MatrixOrder::kRowMajor, 1, Tile>(p, buffers, bandwidth);
  return run_tiling<MatrixOrder::kRowMajor, 2, Tile>(p, buffers, bandwidth);
}

// The tilings compared (Chunks, Warps, ResidentBlocks), the plugin's first; none spills (cuobjdump -res-usage, sm_90:
// 116-148, 198-228 and 198-228 registers). One chunk with eight warps and two blocks resident is left out: its 128
// registers spill at M = 16 (8 and 56 bytes of stack).
void run_all(const Problem& p, const Buffers& buffers, double bandwidth) {
  run_for_problem<Tiling<1, 4, 3>>(p, buffers, bandwidth);
  run_for_problem<Tiling<2, 4, 2>>(p, buffers, bandwidth);
  run_for_problem<Tiling<2, 8, 1>>(p, buffers, bandwidth);
}

}  // namespace

int main(int argc, char** argv) {
  const int32_t multiprocessors = multiprocessor_count();
  const double bandwidth = copy_bandwidth();
  std::printf("bandwidth %.1f %d\n", bandwidth / 1e9, multiprocessors);
  for (int i = 1; i < argc; ++i) {
    long long n = 0, k = 0;
    int consumed = 0;
    if (std::sscanf(argv[i], "%lld,%lld:%n", &n, &k, &consumed) != 2 || consumed == 0) {
      std::fprintf(stderr, "layer %s: expected N,K:M[,M...]\n", argv[i]);
      return 2;
    }
    std::vector<int64_t> rows;
    for (const char* cursor = argv[i] + consumed; *cursor != '\0';) {
      char* after = nullptr;
      rows.push_back(std::strtoll(cursor, &after, 10));
      const bool parsed = after != cursor;
      cursor = *after == ',' ? after + 1 : after;
      if (rows.back() < 1 || rows.back() > 16 || !parsed) {
        std::fprintf(stderr, "layer %s: M from 1 to 16\n", argv[i]);
        return 2;
      }
    }
    const int64_t most_rows = *std::max_element(rows.begin(), rows.end());
    Buffers buffers{};
    buffers.multiprocessors = multiprocessors;
    buffers.a = filled_array(most_rows * k, 1);
    buffers.b_copies = rotated_copies_of_b(n, k);
    CHECK(cudaMalloc(&buffers.out, most_rows * n * 2));
    CHECK(cudaMalloc(&buffers.reference, most_rows * n * 4));
    for (const bool column_major : {true, false}) {
      for (const int64_t m : rows) {
        const Problem p{m, n, k, column_major};
        compute_reference(buffers.a, buffers.b_copies[0], column_major, buffers.reference, m, n, k);
        run_all(p, buffers, bandwidth);
      }
    }
    CHECK(cudaFree(buffers.a));
    for (uint16_t* copy : buffers.b_copies) CHECK(cudaFree(copy));
    CHECK(cudaFree(buffers.out));
    CHECK(cudaFree(buffers.reference));
  }
  return 0;
}
