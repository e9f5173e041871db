// Times tilings of the decode MMA kernel (csrc/plugins/cuda/decode_mma.cuh) on bfloat16 problems of few rows, b
// row-major [K, N] or column-major [N, K], in CUDA-graph replay over enough copies of b that each call reads it from
// HBM; each tiling is checked against a float32 reference first and not timed where it disagrees. Built and run by
// decode_mma_probe.py, which reads its lines:
//   bandwidth GB_PER_S MULTIPROCESSORS
//   result M N K ORDER TILING RESIDENT SPLITS MICROSECONDS FRACTION_OF_FLOOR REL_ERROR ok|WRONG
//
//   decode_mma_probe N,K:M[,M...] [N,K:M...]   (each layer with both b orders)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "decode_mma.cuh"

namespace {

using namespace kabi::cuda;
using namespace kabi::cuda::decode;

#define CHECK(call)                                                                         \
  do {                                                                                      \
    const cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

__global__ void reference_kernel(const uint16_t* a, const uint16_t* b, bool column_major, float* out, int64_t m,
                                 int64_t n, int64_t k) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (column >= n) return;
  float sum = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) {
    sum += widen<true>(a[row * k + kk]) * widen<true>(column_major ? b[column * k + kk] : b[kk * n + column]);
  }
  out[row * n + column] = sum;
}

__global__ void fill_kernel(uint16_t* data, int64_t count, uint32_t seed) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    data[i] = narrow<true>((static_cast<float>(x & 0xffff) / 65535.0f) * 2.0f - 1.0f);
  }
}

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
  const auto kernel = decode_mma_kernel<true, kOrder, kRowGroups, Tile>;
  cudaError_t query_error = cudaSuccess;
  const int resident = resident_blocks<Tile>(kernel, &query_error);
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
  std::vector<uint16_t> got(p.m * p.n);
  std::vector<float> expected(p.m * p.n);
  CHECK(cudaMemcpy(got.data(), buffers.out, got.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(expected.data(), buffers.reference, expected.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(got[i]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    const double difference = std::fabs(static_cast<double>(value) - expected[i]);
    worst = std::isfinite(difference) ? std::max(worst, difference) : INFINITY;
    largest = std::max(largest, static_cast<double>(std::fabs(expected[i])));
  }
  const double error = worst / std::max(largest, 1e-30);
  double us = NAN;
  if (error < 2e-2) {
    constexpr int kCallsPerGraph = 20;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    for (int call = 0; call < kCallsPerGraph; ++call) {
      CHECK((launch<kOrder, kRowGroups, Tile>(p, buffers, buffers.b_copies[call % buffers.b_copies.size()], partials,
                                              stream)));
    }
    CHECK(cudaStreamEndCapture(stream, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    cudaEvent_t start, end;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&end));
    for (int warm = 0; warm < 3; ++warm) CHECK(cudaGraphLaunch(exec, stream));
    std::vector<float> per_call;
    for (int replay = 0; replay < 20; ++replay) {
      CHECK(cudaEventRecord(start, stream));
      CHECK(cudaGraphLaunch(exec, stream));
      CHECK(cudaEventRecord(end, stream));
      CHECK(cudaEventSynchronize(end));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, end));
      per_call.push_back(ms * 1e3f / kCallsPerGraph);
    }
    std::sort(per_call.begin(), per_call.end());
    us = per_call[per_call.size() / 2];
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(end));
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

double copy_bandwidth() {
  const size_t bytes = size_t{1} << 30;
  void *source, *target;
  CHECK(cudaMalloc(&source, bytes));
  CHECK(cudaMalloc(&target, bytes));
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  CHECK(cudaMemcpy(target, source, bytes, cudaMemcpyDeviceToDevice));
  std::vector<float> times;
  for (int i = 0; i < 10; ++i) {
    CHECK(cudaEventRecord(start));
    CHECK(cudaMemcpy(target, source, bytes, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(end));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  CHECK(cudaFree(source));
  CHECK(cudaFree(target));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  return 2.0 * bytes / (times[times.size() / 2] * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  int32_t multiprocessors = 0;
  CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
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
    const size_t b_bytes = static_cast<size_t>(k * n) * 2;
    const size_t copies = std::clamp<size_t>((size_t{256} << 20) / b_bytes + 1, 1, 20);
    CHECK(cudaMalloc(&buffers.a, most_rows * k * 2));
    fill_kernel<<<256, 256>>>(buffers.a, most_rows * k, 1);
    for (size_t c = 0; c < copies; ++c) {
      uint16_t* copy;
      CHECK(cudaMalloc(&copy, b_bytes));
      fill_kernel<<<1024, 256>>>(copy, k * n, 2);
      buffers.b_copies.push_back(copy);
    }
    CHECK(cudaMalloc(&buffers.out, most_rows * n * 2));
    CHECK(cudaMalloc(&buffers.reference, most_rows * n * 4));
    for (const bool column_major : {true, false}) {
      for (const int64_t m : rows) {
        const Problem p{m, n, k, column_major};
        reference_kernel<<<dim3(static_cast<unsigned>(ceil_div(n, 128)), static_cast<unsigned>(m)), 128>>>(
            buffers.a, buffers.b_copies[0], column_major, buffers.reference, m, n, k);
        CHECK(cudaDeviceSynchronize());
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
