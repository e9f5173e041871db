// sm_90a FP8 (scaled_mm), ping-pong warp-specialized schedule (two consumer warpgroups alternate between tiles, so
// one's epilogue overlaps the other's math), 64x128 tiles with K blocks of 128 FP8 bytes, 1x2 cluster (the A tile is
// multicast), persistent tile scheduler: mid-size problems, where 128-row tiles leave SMs idle.
//
// Each ping-pong warpgroup owns a whole tile, and the accumulating FP8 mainloop keeps two float32 accumulators of it
// (see cutlass_sm90_fp8_cooperative.cu): a 128x128 tile spilled and ran at 341 TF/s on the H200; 64x128 needs 128
// accumulator registers per thread and compiles without a spill.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8Pingpong64x128;
const CutlassConfig kSm90Fp8Pingpong64x128 =
    sm90_fp8::Config<cute::Shape<cute::_64, cute::_128, cute::_128>, cute::Shape<cute::_1, cute::_2, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized,
                     cutlass::gemm::PersistentScheduler>::make("sm90.fp8.ws_pingpong.64x128x128.c1x2.persistent");

}  // namespace kabi::cuda
