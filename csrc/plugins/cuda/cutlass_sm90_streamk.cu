// sm_90a, cooperative warp-specialized schedule with the stream-K tile scheduler: 128x128x64 tiles, no cluster.
// Stream-K splits the K loop of the last wave across SMs, which pays where the tile count divides poorly into the
// 132 SMs (few wide tiles: decode-sized M on wide layers, and odd problem sizes).
#include "cutlass_sm90.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90StreamK128x128;
const CutlassConfig kSm90StreamK128x128 =
    sm90::Config<cute::Shape<cute::_128, cute::_128, cute::_64>, cute::Shape<cute::_1, cute::_1, cute::_1>,
                 cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                 cutlass::epilogue::TmaWarpSpecializedCooperative,
                 cutlass::gemm::StreamKScheduler>::make("sm90.ws_cooperative.128x128x64.c1x1.streamk");

}  // namespace kabi::cuda
