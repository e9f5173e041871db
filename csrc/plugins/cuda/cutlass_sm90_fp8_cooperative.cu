// sm_90a FP8 (scaled_mm), cooperative warp-specialized schedule (two consumer warpgroups share one 128x128 tile, 64
// rows each), K blocks of 128 FP8 bytes, 2x1 cluster (the B tile is multicast across the pair), persistent tile
// scheduler: the large-M (prefill) and 8192^3 configuration.
//
// The tile is 128x128, not the bf16 kernels' 128x256: the accumulating FP8 mainloop keeps a second float32
// accumulator per warpgroup (the tensor cores' partial sums, added into the first every K block), so a 64x256
// warpgroup tile needs 256 accumulator registers per thread. ptxas then spilled 264 bytes per thread of the 128x256
// kernel to local memory (REG:168 STACK:264 in cuobjdump -res-usage), and it ran at 428 TF/s on the H200 where
// cuBLASLt reached 1264 (benchmarks/results/debug-fp8-kernels-nvidia-h200.txt). 64x128 per warpgroup needs 128 and
// compiles without a spill.
#include "cutlass_sm90_fp8.cuh"

namespace kabi::cuda {

extern const CutlassConfig kSm90Fp8Cooperative128x128;
const CutlassConfig kSm90Fp8Cooperative128x128 =
    sm90_fp8::Config<cute::Shape<cute::_128, cute::_128, cute::_128>, cute::Shape<cute::_2, cute::_1, cute::_1>,
                     cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                     cutlass::epilogue::TmaWarpSpecializedCooperative,
                     cutlass::gemm::PersistentScheduler>::make("sm90.fp8.ws_cooperative.128x128x128.c2x1.persistent");

}  // namespace kabi::cuda
