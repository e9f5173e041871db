// CUTLASS 3 GEMMs for sm_90a: TMA loads, wgmma, warp-specialized schedules, built with CUTLASS's collective
// builders. One template serves matmul and linear: the epilogue is CUTLASS's per-column-bias + activation fusion
// (LinCombPerColBiasEltAct), whose bias may be NULL (CUTLASS then adds nothing) and whose activation is chosen at run
// time, so one instantiation per dtype and b order covers every activation instead of five.
#pragma once

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/fusion/operations.hpp"
#include "cutlass/epilogue/thread/activation.h"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/kernel_hardware_info.h"
#include "cutlass_entry.cuh"
#include "cutlass_kernels.hpp"

namespace kabi::cuda::sm90 {

// The activation as a run-time argument of the epilogue (CUTLASS's Sm90Compute passes a functor's Arguments to it).
// The math is CUTLASS's own activation functors, in float on the accumulator plus bias.
struct ActivationArguments {
  int32_t kind = 0;  // an Activation
};

template <class T>
struct RuntimeActivation {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE T operator()(T const& value, Arguments const& arguments) const {
    switch (static_cast<Activation>(arguments.kind)) {
      case Activation::kRelu: return cutlass::epilogue::thread::ReLu<T>{}(value);
      case Activation::kGelu: return cutlass::epilogue::thread::GELU<T>{}(value);
      case Activation::kGeluTanh: return cutlass::epilogue::thread::GELU_taylor<T>{}(value);
      case Activation::kSilu: return cutlass::epilogue::thread::SiLu<T>{}(value);
      default: return value;
    }
  }
};

template <class T, int N>
struct RuntimeActivation<cutlass::Array<T, N>> {
  using Arguments = ActivationArguments;
  CUTLASS_HOST_DEVICE cutlass::Array<T, N> operator()(cutlass::Array<T, N> const& value,
                                                      Arguments const& arguments) const {
    using Fragment = cutlass::Array<T, N>;
    switch (static_cast<Activation>(arguments.kind)) {
      case Activation::kRelu: return cutlass::epilogue::thread::ReLu<Fragment>{}(value);
      case Activation::kGelu: return cutlass::epilogue::thread::GELU<Fragment>{}(value);
      case Activation::kGeluTanh: return cutlass::epilogue::thread::GELU_taylor<Fragment>{}(value);
      case Activation::kSilu: return cutlass::epilogue::thread::SiLu<Fragment>{}(value);
      default: return value;
    }
  }
};

template <class Element, class LayoutB, class TileShape, class ClusterShape, class KernelSchedule,
          class EpilogueSchedule, class TileScheduler>
struct Gemm {
  using LayoutA = cutlass::layout::RowMajor;
  using LayoutD = cutlass::layout::RowMajor;
  // 16-byte accesses: TMA needs 16-byte aligned bases and strides anyway.
  static constexpr int kAlignment = 16 / sizeof(Element);
  using FusionOperation =
      cutlass::epilogue::fusion::LinCombPerColBiasEltAct<RuntimeActivation, Element, float, Element, void, float>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, LayoutD, kAlignment, Element, LayoutD,
      kAlignment, EpilogueSchedule, FusionOperation>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Element, LayoutA, kAlignment, Element, LayoutB, kAlignment,
      float, TileShape, ClusterShape,
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
    const StrideA stride_a = cute::make_stride(call.lda, cute::Int<1>{}, call.batch_stride_a);
    StrideB stride_b;
    if constexpr (cute::is_same_v<LayoutB, cutlass::layout::RowMajor>) {
      stride_b = cute::make_stride(cute::Int<1>{}, call.ldb, call.batch_stride_b);
    } else {
      stride_b = cute::make_stride(call.ldb, cute::Int<1>{}, call.batch_stride_b);
    }
    const StrideD stride_d = cute::make_stride(call.n, cute::Int<1>{}, call.m * call.n);
    cutlass::KernelHardwareInfo hardware;
    hardware.device_id = call.device_index;
    hardware.sm_count = multiprocessors;
    typename Device::Arguments arguments{
        cutlass::gemm::GemmUniversalMode::kGemm,
        {static_cast<int>(call.m), static_cast<int>(call.n), static_cast<int>(call.k), static_cast<int>(call.batch)},
        {static_cast<const Element*>(call.a), stride_a, static_cast<const Element*>(call.b), stride_b},
        {{}, nullptr, stride_d, static_cast<Element*>(call.out), stride_d},
        hardware};
    auto& fusion = arguments.epilogue.thread;
    fusion.alpha = 1.0f;
    fusion.beta = 0.0f;
    fusion.bias_ptr = static_cast<const Element*>(call.bias);
    fusion.activation.kind = static_cast<int32_t>(call.activation);
    return arguments;
  }

  static constexpr CutlassGemm entry() { return CutlassEntry<Gemm>::entry(); }
};

// Every dtype and b order of one schedule, tile and cluster shape.
template <class TileShape, class ClusterShape, class KernelSchedule, class EpilogueSchedule, class TileScheduler>
struct Config {
  template <class Element, class LayoutB>
  using G = Gemm<Element, LayoutB, TileShape, ClusterShape, KernelSchedule, EpilogueSchedule, TileScheduler>;
  using Row = cutlass::layout::RowMajor;
  using Column = cutlass::layout::ColumnMajor;

  static constexpr CutlassConfig make(const char* name) {
    return CutlassConfig{name,
                         90,
                         90,
                         true,
                         CutlassOps::kMatmulAndLinear,
                         {{G<cutlass::bfloat16_t, Row>::entry(), G<cutlass::bfloat16_t, Column>::entry()},
                          {G<cutlass::half_t, Row>::entry(), G<cutlass::half_t, Column>::entry()}}};
  }
};

}  // namespace kabi::cuda::sm90
