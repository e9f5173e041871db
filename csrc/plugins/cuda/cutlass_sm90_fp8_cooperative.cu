// sm_90a FP8 (scaled_mm), cooperative warp-specialized schedule (two consumer warpgroups share one 128x256 tile),
// K blocks of 128 FP8 bytes, 2x1 cluster (the B tile is multicast across the pair), persistent tile scheduler: the
// large-M (prefill) and 8192^3 configuration.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8Cooperative128x256;
const CutlassConfig kSm90Fp8Cooperative128x256 =
    sm90_fp8::Config<cute::Shape<cute::_128, cute::_256, cute::_128>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                     cutlass::epilogue::TmaWarpSpecializedCooperative,
                     cutlass::gemm::PersistentScheduler>::make("sm90.fp8.ws_cooperative.128x256x128.c2x1.persistent");

}  // namespace kabi::cuda
