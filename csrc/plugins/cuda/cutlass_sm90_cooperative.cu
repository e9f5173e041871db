// sm_90a, cooperative warp-specialized schedule (two consumer warpgroups share one 128x256 tile), 2x1 cluster
// (the A tile is multicast across the pair), persistent tile scheduler: the large-M (prefill) configuration.
#include "cutlass_sm90.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Cooperative128x256;
const CutlassConfig kSm90Cooperative128x256 =
    sm90::Config<cute::Shape<cute::_128, cute::_256, cute::_64>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                 cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                 cutlass::epilogue::TmaWarpSpecializedCooperative,
                 cutlass::gemm::PersistentScheduler>::make("sm90.ws_cooperative.128x256x64.c2x1.persistent");

}  // namespace kabi::cuda
