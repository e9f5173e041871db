// CUTLASS 3 grouped GEMMs for sm_90a (grouped_mm): the ptr-array warp-specialized kernels with CUTLASS's group tile
// scheduler, which walks every group's tiles in one persistent launch, each group's A, B and D reached through a TMA
// descriptor the kernel rewrites in place (address, rows, strides) when a CTA moves to another group.
//
// The groups' rows exist only on the device (grouped_mm's offsets are never read on the host: no synchronization, and
// a CUDA-graph capture replays new routings), so each call first queues a setup kernel of its own on the call's
// stream. It reads the offsets, clamps each into [previous end, T] as every grouped_mm kernel must, and writes into
// the kernel's workspace what CUTLASS reads per group: the problem shape (M_g, N, K), the A, B and D addresses and
// their strides. It also zeroes out's rows past the last offset, which belong to no group. The GEMM then launches with
// no host problem shapes: CUTLASS sizes its grid by the multiprocessors, and CTAs without a tile exit.
#pragma once

#include <cuda_runtime_api.h>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda/functional>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass_grouped_kernels.hpp"

namespace kabi::cuda::sm90_grouped {

// One group's problem (M_g, N, K), as CUTLASS's GroupProblemShape reads it from the device.
using GroupShape = cute::Shape<int, int, int>;
using ProblemShape = cutlass::gemm::GroupProblemShape<GroupShape>;

// Threads of the setup kernel's blocks; its first block scans the offsets in chunks of this many groups.
constexpr int kSetupThreads = 256;
// The setup kernel's blocks that zero the rows past the last offset, per multiprocessor: enough 16-byte stores in
// flight to stream a large tail at memory speed; a call without a tail costs them one read of the offsets each.
constexpr int kTailBlocksPerMultiprocessor = 2;
// Each section of the workspace starts on this boundary (CUTLASS keeps TMA descriptors in its part, which need 64).
constexpr size_t kSectionAlignment = 256;

constexpr size_t round_up(size_t bytes) {
  return (bytes + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
}

// What the setup kernel reads: the call's operands and shapes (GroupedGemmCall without its host-only fields).
// Strides are in elements; out's rows are N apart.
struct GroupSource {
  const int32_t* offsets;  // NULL: the 3-D form, `rows` rows per group
  int32_t groups, rows, n, k;
  const void* x;
  int64_t x_row_stride, x_group_stride;
  const void* w;
  int64_t w_leading_dimension, w_group_stride;
  void* out;
  int64_t out_group_stride;
};

template <class Element, class LayoutB, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule>
struct GroupedGemm {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  // 16-byte accesses: TMA needs 16-byte aligned bases and strides anyway.
  static constexpr int kAlignment = 16 / sizeof(Element);
  // out = x @ w: alpha 1 and no source (C is void, so nothing is read before the store).
  using FusionOperation = cutlass::epilogue::fusion::LinearCombination<Element, float, void, float>;
  // The pointer layouts (LayoutA*, ...) select the ptr-array collectives: one address and stride per group.
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD*, kAlignment, Element, LayoutD*,
      kAlignment, EpilogueSchedule, FusionOperation>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA*, kAlignment, Element, LayoutB*,
      kAlignment, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  // One group's strides: A [M, K] and D [M, N] row-major, B per LayoutB.
  using StrideA = typename Kernel::InternalStrideA;
  using StrideB = typename Kernel::InternalStrideB;
  using StrideD = typename Kernel::InternalStrideD;
  using ElementType = Element;
  static constexpr bool kRowMajorB = cute::is_same_v<LayoutB, cutlass::layout::RowMajor>;

  // The per-group arguments CUTLASS reads, one entry per group, which the setup kernel writes.
  struct GroupArrays {
    GroupShape* shapes;
    const Element** a;
    const Element** b;
    Element** d;
    StrideA* stride_a;
    StrideB* stride_b;
    StrideD* stride_d;
  };

  // Where each of GroupArrays' arrays lies in the workspace, and where CUTLASS's own workspace starts after them.
  struct WorkspaceLayout {
    size_t shapes = 0, a = 0, b = 0, d = 0, stride_a = 0, stride_b = 0, stride_d = 0, cutlass = 0;

    explicit WorkspaceLayout(int64_t groups) {
      const auto count = static_cast<size_t>(groups);
      size_t offset = 0;
      for (auto [field, bytes] : {std::pair{&shapes, sizeof(GroupShape)}, std::pair{&a, sizeof(Element*)},
                                  std::pair{&b, sizeof(Element*)}, std::pair{&d, sizeof(Element*)},
                                  std::pair{&stride_a, sizeof(StrideA)}, std::pair{&stride_b, sizeof(StrideB)},
                                  std::pair{&stride_d, sizeof(StrideD)}}) {
        *field = offset;
        offset = round_up(offset + count * bytes);
      }
      cutlass = offset;
    }

    GroupArrays arrays(void* workspace) const {
      char* base = static_cast<char*>(workspace);
      return {reinterpret_cast<GroupShape*>(base + shapes),   reinterpret_cast<const Element**>(base + a),
              reinterpret_cast<const Element**>(base + b),    reinterpret_cast<Element**>(base + d),
              reinterpret_cast<StrideA*>(base + stride_a),    reinterpret_cast<StrideB*>(base + stride_b),
              reinterpret_cast<StrideD*>(base + stride_d)};
    }
  };

  // CUTLASS's arguments for the call, its per-group arrays at `arrays` (null pointers where only CUTLASS's checks
  // and workspace size are asked, which read none of them).
  static typename Device::Arguments arguments(const GroupedGemmCall& call, const GroupArrays& arrays,
                                              int32_t multiprocessors) {
    cutlass::KernelHardwareInfo hardware;
    hardware.device_id = call.device_index;
    hardware.sm_count = multiprocessors;
    typename Device::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        // No host problem shapes: the groups' rows are known only on the device.
        {static_cast<int32_t>(call.groups), arrays.shapes, nullptr},
        {arrays.a, arrays.stride_a, arrays.b, arrays.stride_b},
        {{}, nullptr, nullptr, arrays.d, arrays.stride_d},
        hardware};
    arguments.epilogue.thread.alpha = 1.0f;
    arguments.epilogue.thread.beta = 0.0f;
    return arguments;
  }

  static std::string check(const GroupedGemmCall& call, int32_t multiprocessors) {
    const auto status = Device::can_implement(arguments(call, GroupArrays{}, multiprocessors));
    if (status == cutlass::Status::kSuccess) return {};
    return std::string("CUTLASS declines the grouped GEMM: ") + cutlass::cutlassGetStatusString(status);
  }

  static size_t workspace_bytes(const GroupedGemmCall& call, int32_t multiprocessors) {
    return WorkspaceLayout(call.groups).cutlass +
           Device::get_workspace_size(arguments(call, GroupArrays{}, multiprocessors));
  }

  static std::string run(const GroupedGemmCall& call, void* workspace, int32_t multiprocessors);

  static constexpr CutlassGroupedGemm entry() { return {&check, &workspace_bytes, &run}; }
};

// Group bounds as every grouped_mm kernel reads the offsets: each clamped into [previous end, T]. Block 0 scans them in
// chunks of kSetupThreads groups; each group's end is then the running maximum of the offsets so far (and of 0),
// capped at T, and its start the end before it.
template <class Gemm>
__device__ void write_group_arrays(const GroupSource& source, const typename Gemm::GroupArrays& arrays) {
  using Element = typename Gemm::ElementType;
  using Scan = cub::BlockScan<int32_t, kSetupThreads>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int32_t chunk_ends[kSetupThreads];
  int32_t previous_end = 0;  // the end of the groups before this chunk, in [0, T]
  for (int32_t first = 0; first < source.groups; first += kSetupThreads) {
    const int32_t group = first + static_cast<int32_t>(threadIdx.x);
    const bool in_range = group < source.groups;
    int32_t start = 0, end = source.rows;
    if (source.offsets != nullptr) {
      int32_t running = 0;
      // A thread past the last group adds 0, which changes no maximum: its end repeats the last group's.
      Scan(scan_storage).InclusiveScan(in_range ? source.offsets[group] : 0, running, ::cuda::maximum<int32_t>{});
      end = min(source.rows, max(previous_end, running));
      chunk_ends[threadIdx.x] = end;
      __syncthreads();
      start = threadIdx.x == 0 ? previous_end : chunk_ends[threadIdx.x - 1];
      previous_end = chunk_ends[kSetupThreads - 1];
      __syncthreads();  // the next chunk reuses chunk_ends and the scan's storage
    }
    if (!in_range) continue;
    const auto* x = static_cast<const Element*>(source.x);
    const auto* w = static_cast<const Element*>(source.w);
    auto* out = static_cast<Element*>(source.out);
    arrays.shapes[group] = cute::make_shape(end - start, source.n, source.k);
    arrays.a[group] = x + group * source.x_group_stride + start * source.x_row_stride;
    arrays.b[group] = w + group * source.w_group_stride;
    arrays.d[group] = out + group * source.out_group_stride + int64_t{start} * source.n;
    arrays.stride_a[group] = cute::make_stride(source.x_row_stride, cute::Int<1>{}, cute::Int<0>{});
    if constexpr (Gemm::kRowMajorB) {
      arrays.stride_b[group] = cute::make_stride(cute::Int<1>{}, source.w_leading_dimension, cute::Int<0>{});
    } else {
      arrays.stride_b[group] = cute::make_stride(source.w_leading_dimension, cute::Int<1>{}, cute::Int<0>{});
    }
    arrays.stride_d[group] = cute::make_stride(int64_t{source.n}, cute::Int<1>{}, cute::Int<0>{});
  }
}

// out's rows from the last group's end to T, which belong to no group, set to zero. That end is the largest offset
// (and 0) capped at T, what block 0's scan ends with; each block finds it itself rather than wait for block 0. N is
// a multiple of 8 elements, so the rows are whole 16-byte words.
template <class Gemm>
__device__ void zero_rows_past_the_groups(const GroupSource& source) {
  using Element = typename Gemm::ElementType;
  using Reduce = cub::BlockReduce<int32_t, kSetupThreads>;
  __shared__ typename Reduce::TempStorage reduce_storage;
  __shared__ int32_t last_end;
  int32_t largest = 0;
  for (int32_t group = threadIdx.x; group < source.groups; group += kSetupThreads) {
    largest = max(largest, source.offsets[group]);
  }
  largest = Reduce(reduce_storage).Reduce(largest, ::cuda::maximum<int32_t>{});
  if (threadIdx.x == 0) last_end = min(largest, source.rows);
  __syncthreads();
  constexpr int64_t kElementsPerWord = sizeof(uint4) / sizeof(Element);
  auto* words = static_cast<uint4*>(source.out);
  const int64_t end_word = int64_t{source.rows} * source.n / kElementsPerWord;
  const int64_t step = int64_t{gridDim.x - 1} * kSetupThreads;
  for (int64_t word = int64_t{last_end} * source.n / kElementsPerWord + (blockIdx.x - 1) * kSetupThreads + threadIdx.x;
       word < end_word; word += step) {
    words[word] = make_uint4(0, 0, 0, 0);
  }
}

// The setup kernel (see the top of this file): block 0 writes the per-group arrays; in the 2-D form the other blocks
// zero the rows past the groups.
template <class Gemm>
__global__ void __launch_bounds__(kSetupThreads) prepare_groups(GroupSource source,
                                                                typename Gemm::GroupArrays arrays) {
  if (blockIdx.x == 0) {
    write_group_arrays<Gemm>(source, arrays);
  } else {
    zero_rows_past_the_groups<Gemm>(source);
  }
}

template <class Element, class LayoutB, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule>
std::string GroupedGemm<Element, LayoutB, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule>::run(
    const GroupedGemmCall& call, void* workspace, int32_t multiprocessors) {
  const WorkspaceLayout layout(call.groups);
  const GroupArrays arrays = layout.arrays(workspace);
  const GroupSource source{call.offsets,
                           static_cast<int32_t>(call.groups),
                           static_cast<int32_t>(call.rows),
                           static_cast<int32_t>(call.n),
                           static_cast<int32_t>(call.k),
                           call.x,
                           call.x_row_stride,
                           call.x_group_stride,
                           call.w,
                           call.w_leading_dimension,
                           call.w_group_stride,
                           call.out,
                           call.out_group_stride};
  // Blocks to zero the rows past the groups: a grid of them streams a large tail; a small out needs fewer.
  int64_t blocks = 1;
  if (call.offsets != nullptr) {
    const int64_t words = call.rows * call.n / kAlignment;
    blocks += std::min<int64_t>(int64_t{std::max(multiprocessors, 1)} * kTailBlocksPerMultiprocessor,
                                (words + kSetupThreads - 1) / kSetupThreads);
  }
  auto stream = static_cast<cudaStream_t>(call.stream);
  prepare_groups<GroupedGemm><<<static_cast<unsigned>(blocks), kSetupThreads, 0, stream>>>(source, arrays);
  if (const cudaError_t error = cudaGetLastError(); error != cudaSuccess) {
    return std::string("the setup kernel did not launch: ") + cudaGetErrorString(error);
  }
  Device gemm;
  cutlass::Status status = gemm.initialize(arguments(call, arrays, multiprocessors),
                                           static_cast<char*>(workspace) + layout.cutlass, stream);
  if (status == cutlass::Status::kSuccess) status = gemm.run(stream);
  if (status != cutlass::Status::kSuccess) {
    const cudaError_t error = cudaGetLastError();
    return std::string(cutlass::cutlassGetStatusString(status)) + " (" + cudaGetErrorString(error) + ")";
  }
  return {};
}

// Both dtypes and w orders of one schedule, tile and cluster shape.
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule>
struct GroupedConfig {
  template <class Element, class LayoutB>
  using G = GroupedGemm<Element, LayoutB, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule>;
  using Row = cutlass::layout::RowMajor;
  using Column = cutlass::layout::ColumnMajor;

  static constexpr CutlassGroupedConfig make(const char* name) {
    return CutlassGroupedConfig{name,
                                {{G<cutlass::bfloat16_t, Row>::entry(), G<cutlass::bfloat16_t, Column>::entry()},
                                 {G<cutlass::half_t, Row>::entry(), G<cutlass::half_t, Column>::entry()}}};
  }
};

}  // namespace kabi::cuda::sm90_grouped
