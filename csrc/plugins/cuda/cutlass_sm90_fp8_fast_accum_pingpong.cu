// sm_90a FP8 (scaled_mm) with fast accumulation, for calls with use_fast_accum: ping-pong warp-specialized schedule
// (two consumer warpgroups alternate between tiles, so one's epilogue overlaps the other's math), 128x128 tiles with
// K blocks of 128 FP8 bytes, 2x1 cluster (the B tile is multicast), persistent tile scheduler: mid-size problems.
//
// Each ping-pong warpgroup owns a whole tile; without the accumulating mainloop's second float32 accumulator a
// 128x128 tile needs 128 accumulator registers per thread, the tile that spilled with it
// (cutlass_sm90_fp8_pingpong.cu) fits. bfloat16 and float16 out only.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8FastAccumPingpong128x128;
const CutlassConfig kSm90Fp8FastAccumPingpong128x128 =
    sm90_fp8::Config<cute::Shape<cute::_128, cute::_128, cute::_128>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                     cutlass::epilogue::TmaWarpSpecialized, cutlass::gemm::PersistentScheduler>::
        make("sm90.fp8_fast_accum.ws_pingpong.128x128x128.c2x1.persistent");

}  // namespace kabi::cuda
