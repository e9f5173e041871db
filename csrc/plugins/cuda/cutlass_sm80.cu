// sm_80 family (sm_80, sm_86, sm_89: built once for sm_80, whose code runs on all three): CUTLASS 2 multistage
// mma.sync GEMMs, 128x128x64 tiles of four 64x64 warps, three cp.async stages, fp32 accumulation. Plain products:
// the linear epilogue (bias, activation) is served on these archs by the other kernels.
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass_entry.cuh"
#include "cutlass_kernels.hpp"

namespace kabi::cuda {
namespace {

template <class Element, class LayoutB>
struct Sm80Gemm {
  static constexpr int kAlignment = 16 / sizeof(Element);
  using Device = cutlass::gemm::device::GemmUniversal<
      Element, cutlass::layout::RowMajor, Element, LayoutB, Element, cutlass::layout::RowMajor, float,
      cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, cutlass::gemm::GemmShape<128, 128, 64>,
      cutlass::gemm::GemmShape<64, 64, 64>, cutlass::gemm::GemmShape<16, 8, 16>,
      cutlass::epilogue::thread::LinearCombination<Element, kAlignment, float, float>,
      cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, 3, kAlignment, kAlignment>;

  // The sm_80 kernel is not persistent: it takes no multiprocessor count.
  static typename Device::Arguments arguments(const GemmCall& call, int32_t) {
    using Index = int64_t;
    return typename Device::Arguments(
        cutlass::gemm::GemmUniversalMode::kBatched,
        {static_cast<int>(call.m), static_cast<int>(call.n), static_cast<int>(call.k)}, static_cast<int>(call.batch),
        {1.0f, 0.0f}, call.a, call.b, call.out, call.out, call.batch_stride_a, call.batch_stride_b, call.m * call.n,
        call.m * call.n, static_cast<Index>(call.lda), static_cast<Index>(call.ldb), static_cast<Index>(call.n),
        static_cast<Index>(call.n));
  }

  static constexpr CutlassGemm entry() { return CutlassEntry<Sm80Gemm>::entry(); }
};

using Row = cutlass::layout::RowMajor;
using Column = cutlass::layout::ColumnMajor;

}  // namespace

extern const CutlassConfig kSm80Multistage128x128;
const CutlassConfig kSm80Multistage128x128{
    "sm80.multistage.128x128x64.s3",
    80,
    89,
    false,
    CutlassOps::kMatmulAndLinear,
    {{Sm80Gemm<cutlass::bfloat16_t, Row>::entry(), Sm80Gemm<cutlass::bfloat16_t, Column>::entry()},
     {Sm80Gemm<cutlass::half_t, Row>::entry(), Sm80Gemm<cutlass::half_t, Column>::entry()}}};

}  // namespace kabi::cuda
