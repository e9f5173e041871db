// sm_90a FP8 (scaled_mm) with fast accumulation, for calls with use_fast_accum: cooperative warp-specialized schedule
// (two consumer warpgroups share one 128x256 tile, 64 rows each), K blocks of 128 FP8 bytes, 2x1 cluster (the B tile
// is multicast across the pair), persistent tile scheduler: the large-problem configuration.
//
// The FP8FastAccum mainloop keeps the partial sums in the tensor cores' accumulator for the whole K loop, so there is
// no second float32 accumulator: a 64x256 warpgroup tile needs 128 accumulator registers per thread, the tile that
// spilled with the accumulating mainloop (cutlass_sm90_fp8_cooperative.cu) fits. bfloat16 and float16 out only.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8FastAccumCooperative128x256;
const CutlassConfig kSm90Fp8FastAccumCooperative128x256 =
    sm90_fp8::Config<cute::Shape<cute::_128, cute::_256, cute::_128>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                     cutlass::epilogue::TmaWarpSpecializedCooperative, cutlass::gemm::PersistentScheduler>::
        make("sm90.fp8_fast_accum.ws_cooperative.128x256x128.c2x1.persistent");

}  // namespace kabi::cuda
