// sm_90a, ping-pong warp-specialized schedule (two consumer warpgroups alternate between tiles, so one's epilogue
// overlaps the other's math), 128x128x64 tiles, 1x2 cluster (the B tile is multicast), persistent tile scheduler:
// mid-size problems, where the cooperative 128x256 tile leaves SMs idle.
#include "cutlass_sm90.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Pingpong128x128;
const CutlassConfig kSm90Pingpong128x128 =
    sm90::Config<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_1, cute::_2, cute::_1>,
                 cutlass::gemm::KernelTmaWarpSpecializedPingpong, cutlass::epilogue::TmaWarpSpecialized,
                 cutlass::gemm::PersistentScheduler>::make("sm90.ws_pingpong.128x128x64.c1x2.persistent");

}  // namespace kabi::cuda
