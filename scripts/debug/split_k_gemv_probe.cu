// Times tilings of the split-K GEMV (csrc/plugins/cuda/split_k_gemv.cuh) on bfloat16 problems of few rows with a
// row-major b, in CUDA-graph replay, each checked against a plain reference first. Built and run by
// split_k_gemv_probe.py; prints one line per (problem, tiling): M N K, the tiling, microseconds per call, and the
// fraction of the copy-bandwidth floor (b's bytes over the bandwidth measured here).
//
//   split_k_gemv_probe M,N,K [M,N,K ...]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "split_k_gemv.cuh"

namespace {

using namespace kabi::cuda;
using namespace kabi::cuda::gemv;

#define CHECK(call)                                                                       \
  do {                                                                                    \
    const cudaError_t status_ = (call);                                                   \
    if (status_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

__global__ void reference_kernel(const uint16_t* a, const uint16_t* b, float* out, int64_t m, int64_t n, int64_t k) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (column >= n) return;
  float sum = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) sum += widen<true>(a[row * k + kk]) * widen<true>(b[kk * n + column]);
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
  std::vector<uint16_t> got(p.m * p.n);
  std::vector<float> expected(p.m * p.n);
  CHECK(cudaMemcpy(got.data(), buffers.out, got.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(expected.data(), buffers.reference, expected.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const uint32_t bits = static_cast<uint32_t>(got[i]) << 16;
    float value;
    std::memcpy(&value, &bits, sizeof value);
    worst = std::max(worst, static_cast<double>(std::fabs(value - expected[i])));
    largest = std::max(largest, static_cast<double>(std::fabs(expected[i])));
  }
  const double error = worst / std::max(largest, 1e-30);
  constexpr int kCallsPerGraph = 20;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int call = 0; call < kCallsPerGraph; ++call) {
    CHECK((launch_tiled<true, Tile>(buffers.a, p.k, buffers.b_copies[call % buffers.b_copies.size()], p.n,
                                    buffers.out, p.m, p.n, p.k, buffers.partials, buffers.multiprocessors, stream)));
  }
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  for (int warm = 0; warm < 3; ++warm) CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> per_call;
  for (int replay = 0; replay < 30; ++replay) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    per_call.push_back(ms * 1e3f / kCallsPerGraph);
  }
  std::sort(per_call.begin(), per_call.end());
  const double us = per_call[per_call.size() / 2];
  const double floor_us = static_cast<double>(p.k) * p.n * 2 / bandwidth * 1e6;
  std::printf("%6lld %6lld %6lld  %-32s splits %4lld  %8.1f us  %.3f of floor  rel error %.1e%s\n",
              static_cast<long long>(p.m), static_cast<long long>(p.n), static_cast<long long>(p.k),
              tiling_name<Tile>().c_str(), static_cast<long long>(split.splits), us, floor_us / us, error,
              error < 2e-2 ? "" : "  WRONG");
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
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
  return 2.0 * bytes / (times[times.size() / 2] * 1e-3);
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  int32_t multiprocessors = 0;
  CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
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
    const size_t b_bytes = static_cast<size_t>(p.k * p.n) * 2;
    const size_t copies = std::clamp<size_t>((size_t{256} << 20) / b_bytes + 1, 1, 20);
    CHECK(cudaMalloc(&buffers.a, p.m * p.k * 2));
    fill_kernel<<<256, 256>>>(buffers.a, p.m * p.k, 1);
    for (size_t c = 0; c < copies; ++c) {
      uint16_t* copy;
      CHECK(cudaMalloc(&copy, b_bytes));
      fill_kernel<<<1024, 256>>>(copy, p.k * p.n, 2);
      buffers.b_copies.push_back(copy);
    }
    CHECK(cudaMalloc(&buffers.out, p.m * p.n * 2));
    // The most any tiling asks for: one split per stage of 2 rows of K.
    CHECK(cudaMalloc(&buffers.partials, static_cast<size_t>(ceil_div(p.k, 2) * p.m * p.n) * 4));
    CHECK(cudaMalloc(&buffers.reference, p.m * p.n * 4));
    reference_kernel<<<dim3(static_cast<unsigned>(ceil_div(p.n, 128)), static_cast<unsigned>(p.m)), 128>>>(
        buffers.a, buffers.b_copies[0], buffers.reference, p.m, p.n, p.k);
    CHECK(cudaDeviceSynchronize());
    run_all(p, buffers, bandwidth);
    CHECK(cudaFree(buffers.a));
    for (uint16_t* copy : buffers.b_copies) CHECK(cudaFree(copy));
    CHECK(cudaFree(buffers.out));
    CHECK(cudaFree(buffers.partials));
    CHECK(cudaFree(buffers.reference));
  }
  return 0;
}
