// sm_90a FP8 (scaled_mm), ping-pong warp-specialized schedule (two consumer warpgroups alternate between tiles, so
// one's epilogue overlaps the other's math), 128x128 tiles with K blocks of 128 FP8 bytes, 1x2 cluster (the A tile is
// multicast), persistent tile scheduler: mid-size problems, where the cooperative 128x256 tile leaves SMs idle.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8Pingpong128x128;
const CutlassConfig kSm90Fp8Pingpong128x128 =
    sm90_fp8::Config<cute::Shape<cute::_128, cute::_128, cute::_128>, cute::Shape<cute::_1, cute::_2, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized,
                     cutlass::gemm::PersistentScheduler>::make("sm90.fp8.ws_pingpong.128x128x128.c1x2.persistent");

}  // namespace kabi::cuda
