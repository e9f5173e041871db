// cuBLASLt, opened at run time (never linked): from KABI_CUBLASLT_LIBRARY, the nvidia-cublas package
// (nvidia/cu13/lib/libcublasLt.so.13) or the copy torch ships beside it, or the loader's search path. The few types
// and constants the plugin uses are declared here, with the values of cublasLt.h (CUDA 12 and 13 agree on them), so
// the plugin builds where no cuBLAS header is installed (CI's CPU machine) exactly as where one is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace kabi::cuda::lt {

using Handle = struct cublasLtContext*;
using MatmulDesc = void*;
using MatrixLayout = void*;
using Preference = void*;
using Status = int32_t;  // cublasStatus_t; 0 is success

struct MatmulAlgo {
  uint64_t data[8];
};
struct HeuristicResult {
  MatmulAlgo algo;
  size_t workspace_size;
  Status state;
  float waves_count;
  int reserved[4];
};

// cudaDataType_t, cublasComputeType_t, cublasOperation_t, cublasLtOrder_t.
constexpr int32_t kCudaR32F = 0, kCudaR16F = 2, kCudaR16BF = 14, kCudaR8FE4M3 = 28, kCudaR8FE5M2 = 29;
constexpr int32_t kCompute32F = 68;
constexpr int32_t kOpN = 0, kOpT = 1;
// cublasLtMatmulDescAttributes_t. The scale modes exist from cuBLASLt 12.8 on. kDescFastAccum (an int8_t, 0 by
// default) lets an FP8 algorithm keep its partial sums in the tensor cores' accumulator over the whole K loop.
constexpr int32_t kDescTransA = 3, kDescTransB = 4, kDescEpilogue = 7, kDescBiasPointer = 8, kDescAScalePointer = 17,
                  kDescBScalePointer = 18, kDescFastAccum = 25, kDescAScaleMode = 31, kDescBScaleMode = 32;
// cublasLtMatmulMatrixScale_t: one float32 per row of op(A) (A) or per column of op(B) (B), from cuBLASLt 12.9 on.
constexpr int32_t kScaleOuterVector32F = 3;
// cublasLtMatrixLayoutAttribute_t.
constexpr int32_t kLayoutBatchCount = 5, kLayoutStridedBatchOffset = 6;
// cublasLtMatmulPreferenceAttributes_t.
constexpr int32_t kPrefMaxWorkspaceBytes = 1, kPrefMinAlignmentA = 5, kPrefMinAlignmentB = 6, kPrefMinAlignmentC = 7,
                  kPrefMinAlignmentD = 8;
// cublasLtEpilogue_t.
constexpr uint32_t kEpilogueDefault = 1, kEpilogueRelu = 2, kEpilogueBias = 4, kEpilogueGelu = 32;
// cublasLtMatmulAlgoConfigAttributes_t: what identifies an algorithm the heuristic returned. Inner and cluster shapes
// exist only in newer cuBLASLt versions (an older one answers them with an error status).
constexpr int32_t kAlgoConfigId = 0, kAlgoConfigTileId = 1, kAlgoConfigSplitKNum = 2, kAlgoConfigReductionScheme = 3,
                  kAlgoConfigCtaSwizzling = 4, kAlgoConfigCustomOption = 5, kAlgoConfigStagesId = 6,
                  kAlgoConfigInnerShapeId = 7, kAlgoConfigClusterShapeId = 8;

struct Library {
  void* handle = nullptr;
  std::string path;
  size_t version = 0;
  Status (*create)(Handle*) = nullptr;
  size_t (*get_version)() = nullptr;
  Status (*desc_create)(MatmulDesc*, int32_t compute_type, int32_t scale_type) = nullptr;
  Status (*desc_destroy)(MatmulDesc) = nullptr;
  Status (*desc_set)(MatmulDesc, int32_t attribute, const void* value, size_t size) = nullptr;
  Status (*layout_create)(MatrixLayout*, int32_t type, uint64_t rows, uint64_t cols, int64_t ld) = nullptr;
  Status (*layout_destroy)(MatrixLayout) = nullptr;
  Status (*layout_set)(MatrixLayout, int32_t attribute, const void* value, size_t size) = nullptr;
  Status (*preference_create)(Preference*) = nullptr;
  Status (*preference_destroy)(Preference) = nullptr;
  Status (*preference_set)(Preference, int32_t attribute, const void* value, size_t size) = nullptr;
  Status (*heuristic)(Handle, MatmulDesc, MatrixLayout a, MatrixLayout b, MatrixLayout c, MatrixLayout d,
                      Preference, int requested, HeuristicResult* results, int* returned) = nullptr;
  Status (*matmul)(Handle, MatmulDesc, const void* alpha, const void* a, MatrixLayout, const void* b, MatrixLayout,
                   const void* beta, const void* c, MatrixLayout, void* d, MatrixLayout, const MatmulAlgo*,
                   void* workspace, size_t workspace_size, void* stream) = nullptr;
  // cublasLtMatmulAlgoConfigGetAttribute: with size 0 and written set, it writes the attribute's size instead.
  Status (*algo_config_get)(const MatmulAlgo*, int32_t attribute, void* value, size_t size, size_t* written) = nullptr;
};

// Open cuBLASLt once (later calls return the first outcome). plugin_directory is where libkabi_cuda.so lies: the
// nvidia-cublas package of the same environment is searched from it. False with *error set when none loads.
bool open_cublaslt(const std::string& plugin_directory, Library* library, std::string* error);

}  // namespace kabi::cuda::lt
