// Times variants of the decode MMA kernel (csrc/plugins/cuda/decode_mma.cuh) on bfloat16 problems of few rows, b
// row-major [K, N] or column-major [N, K], in CUDA-graph replay over enough copies of b that each call reads it from
// HBM. Each variant is first checked against a float32 reference on awkward shapes (M, N and K off every tile, K split
// or not, bfloat16 and float16, two launches in a row), then on each timed problem
// before and after its timing; it is not timed where it disagrees. Built and run by decode_mma_probe.py, which reads
// its lines:
//   bandwidth GB_PER_S MULTIPROCESSORS
//   check DTYPE M N K ORDER VARIANT SPLITS REL_ERROR ok|WRONG
//   result M N K ORDER VARIANT RESIDENT SPLITS MICROSECONDS FRACTION_OF_FLOOR REL_ERROR ok|WRONG
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

// Named, not anonymous: nvcc's host stub names the kernels' tilings through Variant, and an anonymous namespace here
// would be ambiguous with probe_common.cuh's (this one uses that one).
namespace decode_mma_probe {

using namespace kabi::cuda;
using namespace kabi::cuda::decode;
using namespace probe;

constexpr double kTolerance = 2e-2;

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

// A tiling of the kernel, as the probe names it.
template <class Tile>
struct Variant {
  using Tiling = Tile;

  // cCwWrR: C chunks of 32 k per step, W warps, R resident blocks asked; then t2: 2 tiles (32 columns) per warp.
  static std::string name() {
    std::string text = "c" + std::to_string(Tile::kChunks) + "w" + std::to_string(Tile::kWarps) + "r" +
                       std::to_string(Tile::kResidentBlocks);
    if (Tile::kTiles != 4) text += "t" + std::to_string(Tile::kTiles);
    return text;
  }
};

// The variant's workspace for the problem (NULL where K is never split), zeroed.
template <class Tile>
float* zeroed_workspace(const Problem& p, int32_t multiprocessors) {
  const int64_t floats = workspace_floats<Tile>(p.m, p.n, p.k, multiprocessors);
  if (floats == 0) return nullptr;
  float* workspace = nullptr;
  CHECK(cudaMalloc(&workspace, static_cast<size_t>(floats) * sizeof(float)));
  CHECK(cudaMemset(workspace, 0, static_cast<size_t>(floats) * sizeof(float)));
  return workspace;
}

template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class V>
cudaError_t launch(const Problem& p, const uint16_t* a, const uint16_t* b, uint16_t* out, float* workspace,
                   int32_t multiprocessors, cudaStream_t stream) {
  return launch_tiled<kBfloat16, kOrder, kRowGroups, typename V::Tiling>(
      a, p.k, b, p.column_major ? p.k : p.n, p.m, p.n, p.k, Epilogue{}, out, workspace, multiprocessors, stream);
}

// The error of out after a launch, against the reference.
template <bool kBfloat16, MatrixOrder kOrder, int kRowGroups, class V>
double launch_error(const Problem& p, const uint16_t* a, const uint16_t* b, uint16_t* out, const float* reference,
                    float* workspace, int32_t multiprocessors, cudaStream_t stream) {
  CHECK(cudaMemsetAsync(out, 0xff, p.m * p.n * 2, stream));
  CHECK((launch<kBfloat16, kOrder, kRowGroups, V>(p, a, b, out, workspace, multiprocessors, stream)));
  CHECK(cudaStreamSynchronize(stream));
  return relative_error(out, reference, p.m * p.n, kBfloat16);
}

// Calls body<kBfloat16, order, row groups>() for the problem: one group of 8 rows of a where it holds M, as the
// plugin picks (decode_mma.cu).
template <bool kBfloat16, class Body>
void with_instantiation(const Problem& p, Body body) {
  if (p.column_major) {
    if (p.m <= 8) return body.template operator()<kBfloat16, MatrixOrder::kColumnMajor, 1>();
    return body.template operator()<kBfloat16, MatrixOrder::kColumnMajor, 2>();
  }
  if (p.m <= 8) return body.template operator()<kBfloat16, MatrixOrder::kRowMajor, 1>();
  return body.template operator()<kBfloat16, MatrixOrder::kRowMajor, 2>();
}

// Checks the variant on a problem with operands of its own, in both dtypes: two launches, the worse error.
template <class V>
void check_variant(const Problem& p, int32_t multiprocessors) {
  for (const bool bfloat16 : {true, false}) {
    uint16_t* a = filled_array(p.m * p.k, 1, bfloat16);
    uint16_t* b = filled_array(p.n * p.k, 2, bfloat16);
    uint16_t* out;
    float* reference;
    CHECK(cudaMalloc(&out, p.m * p.n * 2));
    CHECK(cudaMalloc(&reference, p.m * p.n * 4));
    compute_reference(a, b, p.column_major, reference, p.m, p.n, p.k, bfloat16);
    float* workspace = zeroed_workspace<typename V::Tiling>(p, multiprocessors);
    cudaStream_t stream;
    CHECK(cudaStreamCreate(&stream));
    double error = 0;
    int64_t splits = 0;
    const auto body = [&]<bool kBfloat16, MatrixOrder kOrder, int kRowGroups>() {
      cudaError_t query_error = cudaSuccess;
      splits = launch_splits<kBfloat16, kOrder, kRowGroups, typename V::Tiling>(p.m, p.n, p.k, multiprocessors,
                                                                               &query_error)
                   .splits;
      CHECK(query_error);
      for (int repeat = 0; repeat < 2; ++repeat) {
        error = std::max(error, launch_error<kBfloat16, kOrder, kRowGroups, V>(p, a, b, out, reference, workspace,
                                                                               multiprocessors, stream));
      }
    };
    if (bfloat16) {
      with_instantiation<true>(p, body);
    } else {
      with_instantiation<false>(p, body);
    }
    std::printf("check %s %lld %lld %lld %s %s %lld %.1e %s\n", bfloat16 ? "bf16" : "fp16",
                static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
                p.column_major ? "col" : "row", V::name().c_str(), static_cast<long long>(splits), error,
                error < kTolerance ? "ok" : "WRONG");
    CHECK(cudaStreamDestroy(stream));
    if (workspace != nullptr) CHECK(cudaFree(workspace));
    CHECK(cudaFree(a));
    CHECK(cudaFree(b));
    CHECK(cudaFree(out));
    CHECK(cudaFree(reference));
  }
}

template <class V>
void time_variant(const Problem& p, const Buffers& buffers, double bandwidth) {
  using Tile = typename V::Tiling;
  float* workspace = zeroed_workspace<Tile>(p, buffers.multiprocessors);
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  const auto body = [&]<bool kBfloat16, MatrixOrder kOrder, int kRowGroups>() {
    cudaError_t query_error = cudaSuccess;
    const int resident = resident_blocks<kBfloat16, kOrder, kRowGroups, Tile>(&query_error);
    CHECK(query_error);
    const KSplits split = launch_splits<kBfloat16, kOrder, kRowGroups, Tile>(p.m, p.n, p.k, buffers.multiprocessors,
                                                                            &query_error);
    CHECK(query_error);
    const auto error_now = [&] {
      return launch_error<kBfloat16, kOrder, kRowGroups, V>(p, buffers.a, buffers.b_copies[0], buffers.out,
                                                            buffers.reference, workspace, buffers.multiprocessors,
                                                            stream);
    };
    double error = std::max(error_now(), error_now());
    double us = NAN;
    if (error < kTolerance) {
      us = graph_time_us(stream, buffers.b_copies, 20, [&](const uint16_t* b) {
        return launch<kBfloat16, kOrder, kRowGroups, V>(p, buffers.a, b, buffers.out, workspace,
                                                        buffers.multiprocessors, stream);
      });
      // Still right after some 500 replayed launches.
      error = std::max(error, error_now());
    }
    const double floor_us = static_cast<double>(p.k) * p.n * 2 / bandwidth * 1e6;
    std::printf("result %lld %lld %lld %s %s %d %lld %.2f %.3f %.1e %s\n", static_cast<long long>(p.m),
                static_cast<long long>(p.n), static_cast<long long>(p.k), p.column_major ? "col" : "row",
                V::name().c_str(), resident, static_cast<long long>(split.splits), us, floor_us / us, error,
                error < kTolerance ? "ok" : "WRONG");
  };
  with_instantiation<true>(p, body);
  std::fflush(stdout);
  CHECK(cudaStreamDestroy(stream));
  if (workspace != nullptr) CHECK(cudaFree(workspace));
}

// The variants compared, the plugin's first (c1w4r3: one chunk, four warps, three blocks resident, 64 columns per
// warp), then 32 columns per warp, which was the fastest with an nn.Linear weight on 2026-12-04.
template <class Each>
void for_each_variant(Each each) {
  each(Variant<Tiling<1, 4, 3>>{});
  each(Variant<Tiling<2, 4, 3, 2>>{});
  each(Variant<Tiling<1, 4, 4, 2>>{});
}

// Shapes off every tile (M not 1, 8 or 16; N not a multiple of 32 or 64; K not a multiple of a step), with K split
// into many splits, a few, or none.
void check_all(int32_t multiprocessors) {
  const Problem shapes[] = {{1, 200, 4104, false}, {3, 72, 1032, false}, {9, 1000, 2056, false},
                            {13, 4104, 520, false}, {16, 136, 8200, false}};
  for (const bool column_major : {true, false}) {
    for (Problem p : shapes) {
      p.column_major = column_major;
      for_each_variant([&](auto variant) { check_variant<decltype(variant)>(p, multiprocessors); });
    }
  }
}

}  // namespace decode_mma_probe

int main(int argc, char** argv) {
  using namespace decode_mma_probe;
  const int32_t multiprocessors = multiprocessor_count();
  const double bandwidth = copy_bandwidth();
  std::printf("bandwidth %.1f %d\n", bandwidth / 1e9, multiprocessors);
  check_all(multiprocessors);
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
        for_each_variant([&](auto variant) { time_variant<decltype(variant)>(p, buffers, bandwidth); });
      }
    }
    CHECK(cudaFree(buffers.a));
    for (uint16_t* copy : buffers.b_copies) CHECK(cudaFree(copy));
    CHECK(cudaFree(buffers.out));
    CHECK(cudaFree(buffers.reference));
  }
  return 0;
}
