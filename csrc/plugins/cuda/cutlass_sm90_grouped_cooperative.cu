// sm_90a grouped GEMM, cooperative warp-specialized schedule (two consumer warpgroups share one 128x256 tile), 1x2
// cluster (the x tile is multicast to the pair of CTAs on neighbouring column tiles of the same group): groups of a
// few hundred rows or more (Qwen3-30B-A3B's prefill routes ~256 rows to an expert at T = 32768), where the wide tile
// reads the least per product. Clustering along N, not M, because a group's rows fill few row tiles and its columns
// many: every N of the MoE suites (registry/ops/grouped_mm.toml) is a multiple of 512, so no group's tiles round up
// to an idle CTA.
#include "cutlass_sm90_grouped.cuh"

namespace kabi::cuda {

extern const CutlassGroupedConfig kSm90GroupedCooperative128x256;
const CutlassGroupedConfig kSm90GroupedCooperative128x256 =
    sm90_grouped::GroupedConfig<cute::Shape<cute::_128, cute::_256, cute::_64>,
                                cute::Shape<cute::_1, cute::_2, cute::_1>,
                                cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::
        make("sm90.grouped.ws_cooperative.128x256x64.c1x2.persistent");

}  // namespace kabi::cuda
