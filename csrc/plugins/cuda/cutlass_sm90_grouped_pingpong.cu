// sm_90a grouped GEMM, ping-pong warp-specialized schedule (two consumer warpgroups alternate between 64x256 tiles, so
// one's epilogue and the start of its next tile overlap the other's MMAs), 1x2 cluster (the x tile is multicast along
// N): groups whose rows fill 128-row tiles poorly. MoE prefill routes ~128 rows to an expert on DeepSeek-V3 and ~256
// on Qwen3-30B-A3B, give or take a few dozen: 64-row tiles compute about 1.2x and 1.1x the rows routed where 128-row
// tiles compute about 1.5x and 1.25x, and the short K of a down projection leaves the epilogue a large share of each
// tile's time.
#include "cutlass_sm90_grouped.cuh"

namespace kabi::cuda {

extern const CutlassGroupedConfig kSm90GroupedPingpong64x256;
const CutlassGroupedConfig kSm90GroupedPingpong64x256 =
    sm90_grouped::GroupedConfig<cute::Shape<cute::_64, cute::_256, cute::_64>,
                                cute::Shape<cute::_1, cute::_2, cute::_1>,
                                cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong,
                                cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong>::
        make("sm90.grouped.ws_pingpong.64x256x64.c1x2.persistent");

}  // namespace kabi::cuda
