// CUTLASS 3 FP8 GEMMs for sm_90a, serving scaled_mm: a float8_e4m3fn [M, K] row-major, b float8_e4m3fn column-major
// (the transposed view of an [N, K] weight: the "TN" layout wgmma reads FP8 in), TMA loads, warp-specialized
// schedules, a float32 accumulator, and out = scale_a * (scale_b * accumulator) + bias in bfloat16, float16 or
// float32.
//
// The accurate configurations use CUTLASS's accumulating FP8 mainloop (the KernelTmaWarpSpecialized* schedules): it
// adds the tensor cores' partial sums into float32 registers every K block. The fast-accumulation ones use the
// *FP8FastAccum schedules, which keep the partial sums in the tensor cores' narrower accumulator for the whole K loop:
// no second accumulator (so larger tiles fit in registers), but an error over long K that only a call with
// use_fast_accum permits (cutlass_registration.cpp declines the others), and that the gate still checks. They build
// bfloat16 and float16 outputs only: a float32 output's tolerance is below that error.
//
// The scales and the bias are an epilogue visitor tree. scale_a is a column broadcast (one value per row of out) and
// scale_b a row broadcast (one per column), each with a run-time stride flag that reads either a vector or a single
// value (CUTLASS's dynamic broadcast), so one instantiation serves per-tensor, row-wise and mixed scales; all are
// read on the device when the kernel runs, so no host sync and graph replays see new values. A NULL bias adds 0.
#pragma once

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass_entry.cuh"
#include "cutlass_kernels.hpp"

namespace kabi::cuda::sm90_fp8 {

template <class ElementOut, class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule,
          class TileScheduler>
struct ScaledGemm {
  using ElementIn = cutlass::float_e4m3_t;
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutB = cutlass::layout::ColumnMajor;
  using LayoutD = cutlass::layout::RowMajor;
  // 16-byte accesses: TMA needs 16-byte aligned bases and strides anyway.
  static constexpr int kAlignmentIn = 16 / sizeof(ElementIn);
  static constexpr int kAlignmentOut = 16 / sizeof(ElementOut);
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  // The stride flags: true reads one value per row (scale_a) or column (scale_b), false one value for all.
  using ScaleAStride = cute::Stride<bool, cute::_0, int64_t>;
  using ScaleBStride = cute::Stride<cute::_0, bool, int64_t>;
  using BiasStride = cute::Stride<cute::_0, cute::_1, int64_t>;
  using ScaleA = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, float, float, ScaleAStride>;
  using ScaleB = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, float, float, ScaleBStride>;
  using Bias = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, ElementOut, float, BiasStride>;
  using ScaledAccumulator = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, kRound>, ScaleB,
      cutlass::epilogue::fusion::Sm90AccFetch>;
  // out = scale_a * (scale_b * accumulator) + bias, rounded once to ElementOut.
  using Epilogue = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::homogeneous_multiply_add, ElementOut, float, kRound>, ScaleA,
      ScaledAccumulator, Bias>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignmentOut, ElementOut, LayoutD,
      kAlignmentOut, EpilogueSchedule, Epilogue>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementIn, LayoutA, kAlignmentIn, ElementIn, LayoutB,
      kAlignmentIn, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                      CollectiveEpilogue, TileScheduler>;
  using Device = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  static typename Device::Arguments arguments(const GemmCall& call, int32_t multiprocessors) {
    using StrideA = typename Kernel::StrideA;
    using StrideB = typename Kernel::StrideB;
    using StrideD = typename Kernel::StrideD;
    const StrideA stride_a = cute::make_stride(call.lda, cute::Int<1>{}, int64_t{0});
    const StrideB stride_b = cute::make_stride(call.ldb, cute::Int<1>{}, int64_t{0});
    const StrideD stride_d = cute::make_stride(call.n, cute::Int<1>{}, call.m * call.n);
    cutlass::KernelHardwareInfo hardware;
    hardware.device_id = call.device_index;
    hardware.sm_count = multiprocessors;
    typename Device::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(call.m), static_cast<int>(call.n), static_cast<int>(call.k), 1},
        {static_cast<const ElementIn*>(call.a), stride_a, static_cast<const ElementIn*>(call.b), stride_b},
        {{}, nullptr, stride_d, static_cast<ElementOut*>(call.out), stride_d},
        hardware};
    // The tree's arguments nest as its nodes do: children first, then the node's own operation.
    arguments.epilogue.thread = {
        {call.scale_a, 1.0f, ScaleAStride{call.scale_a_row_wise, cute::_0{}, int64_t{0}}},
        {{call.scale_b, 1.0f, ScaleBStride{cute::_0{}, call.scale_b_row_wise, int64_t{0}}}, {}, {}},
        {static_cast<const ElementOut*>(call.bias), ElementOut(0), BiasStride{}},
        {}};
    return arguments;
  }

  static constexpr CutlassGemm entry() { return CutlassEntry<ScaledGemm>::entry(); }
};

// Whether a kernel schedule keeps the partial sums in the tensor cores' accumulator over the whole K loop.
template <class KernelSchedule>
constexpr bool kFastAccumulation =
    std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum> ||
    std::is_same_v<KernelSchedule, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>;

// Every output dtype of one schedule, tile and cluster shape (bfloat16 and float16 only for a fast-accumulation
// schedule); b is column-major only.
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule, class TileScheduler>
struct Config {
  template <class ElementOut>
  using G = ScaledGemm<ElementOut, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule, TileScheduler>;
  static constexpr bool kFast = kFastAccumulation<KernelSchedule>;

  static constexpr CutlassConfig make(const char* name) {
    CutlassGemm float32_out{};
    if constexpr (!kFast) float32_out = G<float>::entry();
    return CutlassConfig{name,
                         90,
                         90,
                         true,
                         CutlassOps::kScaledMm,
                         {{{}, G<cutlass::bfloat16_t>::entry()}, {{}, G<cutlass::half_t>::entry()}, {{}, float32_out}},
                         kFast};
  }
};

}  // namespace kabi::cuda::sm90_fp8
