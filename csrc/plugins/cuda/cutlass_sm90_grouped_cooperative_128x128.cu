// sm_90a grouped GEMM, cooperative warp-specialized schedule, 128x128x64 tiles, no cluster: any N (a cluster along N
// rounds a group's column tiles up to pairs, an idle CTA where N is not a multiple of 512) and narrower layers, where
// the 256-column tiles leave multiprocessors idle.
#include "cutlass_sm90_grouped.cuh"

namespace kabi::cuda {

extern const CutlassGroupedConfig kSm90GroupedCooperative128x128;
const CutlassGroupedConfig kSm90GroupedCooperative128x128 =
    sm90_grouped::GroupedConfig<cute::Shape<cute::_128, cute::_128, cute::_64>,
                                cute::Shape<cute::_1, cute::_1, cute::_1>,
                                cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative,
                                cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::
        make("sm90.grouped.ws_cooperative.128x128x64.c1x1.persistent");

}  // namespace kabi::cuda
