// What the kernel probes (decode_mma_probe.cu, split_k_gemv_probe.cu) share: the error check, deterministic bfloat16
// (or float16) operands with enough copies of b that each call reads it from HBM, the float32 reference and the error
// against it, the CUDA-graph timing and the copy bandwidth that a call's floor is measured against. One translation
// unit each, so everything here is internal to the probe that includes it.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "split_sums.cuh"

#define CHECK(call)                                                                         \
  do {                                                                                      \
    const cudaError_t status_ = (call);                                                     \
    if (status_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(status_)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace probe {
namespace {

using kabi::cuda::ceil_div;

float bfloat16_value(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof value);
  return value;
}

float float16_value(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// A hash of the index rather than a random generator, so every run (and every copy of b) holds the same values.
__global__ void fill_kernel(uint16_t* data, int64_t count, uint32_t seed, bool bfloat16) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t x = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    const float value = (static_cast<float>(x & 0xffff) / 65535.0f) * 2.0f - 1.0f;
    data[i] = bfloat16 ? kabi::cuda::narrow<true>(value) : kabi::cuda::narrow<false>(value);
  }
}

__device__ float widened(uint16_t bits, bool bfloat16) {
  return bfloat16 ? kabi::cuda::widen<true>(bits) : kabi::cuda::widen<false>(bits);
}

__global__ void reference_kernel(const uint16_t* a, const uint16_t* b, bool column_major, float* out, int64_t m,
                                 int64_t n, int64_t k, bool bfloat16) {
  const int64_t column = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (column >= n) return;
  float sum = 0.0f;
  for (int64_t kk = 0; kk < k; ++kk) {
    const uint16_t weight = column_major ? b[column * k + kk] : b[kk * n + column];
    sum += widened(a[row * k + kk], bfloat16) * widened(weight, bfloat16);
  }
  out[row * n + column] = sum;
}

// a holds seed 1 and every copy of b seed 2, so a tiling checked against b's first copy is timed on equal data.
uint16_t* filled_array(int64_t count, uint32_t seed, bool bfloat16 = true) {
  uint16_t* data;
  CHECK(cudaMalloc(&data, static_cast<size_t>(count) * 2));
  fill_kernel<<<1024, 256>>>(data, count, seed, bfloat16);
  CHECK(cudaGetLastError());
  return data;
}

// Enough copies of b that the 20 calls of a graph read more than L2 holds (at most 20, one per call).
std::vector<uint16_t*> rotated_copies_of_b(int64_t n, int64_t k) {
  const size_t b_bytes = static_cast<size_t>(k * n) * 2;
  const size_t copies = std::clamp<size_t>((size_t{256} << 20) / b_bytes + 1, 1, 20);
  std::vector<uint16_t*> b_copies;
  for (size_t c = 0; c < copies; ++c) b_copies.push_back(filled_array(k * n, 2));
  return b_copies;
}

void compute_reference(const uint16_t* a, const uint16_t* b, bool column_major, float* reference, int64_t m, int64_t n,
                       int64_t k, bool bfloat16 = true) {
  reference_kernel<<<dim3(static_cast<unsigned>(ceil_div(n, 128)), static_cast<unsigned>(m)), 128>>>(
      a, b, column_major, reference, m, n, k, bfloat16);
  CHECK(cudaDeviceSynchronize());
}

// Largest difference of out (bfloat16 or float16) from the reference over the reference's largest magnitude; infinite
// where out holds a NaN or infinity, which std::max alone would pass over.
double relative_error(const uint16_t* out, const float* reference, int64_t count, bool bfloat16 = true) {
  std::vector<uint16_t> got(count);
  std::vector<float> expected(count);
  CHECK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(expected.data(), reference, expected.size() * 4, cudaMemcpyDeviceToHost));
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float value = bfloat16 ? bfloat16_value(got[i]) : float16_value(got[i]);
    const double difference = std::fabs(static_cast<double>(value) - expected[i]);
    worst = std::isfinite(difference) ? std::max(worst, difference) : INFINITY;
    largest = std::max(largest, static_cast<double>(std::fabs(expected[i])));
  }
  return worst / std::max(largest, 1e-30);
}

// Median microseconds per call over `replays` replays of one graph of 20 calls, call i reading copy i of b (cycling),
// after 3 untimed replays; launch(b) queues one call on stream.
template <class Launch>
double graph_time_us(cudaStream_t stream, const std::vector<uint16_t*>& b_copies, int replays, Launch launch) {
  constexpr int kCallsPerGraph = 20;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  for (int call = 0; call < kCallsPerGraph; ++call) CHECK(launch(b_copies[call % b_copies.size()]));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, end;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&end));
  for (int warm = 0; warm < 3; ++warm) CHECK(cudaGraphLaunch(exec, stream));
  std::vector<float> per_call;
  for (int replay = 0; replay < replays; ++replay) {
    CHECK(cudaEventRecord(start, stream));
    CHECK(cudaGraphLaunch(exec, stream));
    CHECK(cudaEventRecord(end, stream));
    CHECK(cudaEventSynchronize(end));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, end));
    per_call.push_back(ms * 1e3f / kCallsPerGraph);
  }
  std::sort(per_call.begin(), per_call.end());
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(end));
  return per_call[per_call.size() / 2];
}

// Bytes per second of a 1 GiB device-to-device copy (read plus write, median of 10): the floor a call reading b
// from HBM is measured against.
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

int32_t multiprocessor_count() {
  int device = 0;
  CHECK(cudaGetDevice(&device));
  int32_t multiprocessors = 0;
  CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  return multiprocessors;
}

}  // namespace
}  // namespace probe
