// OpenBLAS, opened at plugin init with dlopen so that neither libkabi nor this plugin has a link-time dependency
// on it. The library normally comes from the scipy-openblas32 wheel, whose symbols carry a `scipy_` prefix.
#pragma once

#include <string>

namespace kabi::cpu {

// The CBLAS enum values are fixed by the CBLAS standard (and match cblas.h of every implementation).
enum CblasOrder : int { kCblasRowMajor = 101 };
enum CblasTranspose : int { kCblasNoTrans = 111, kCblasTrans = 112 };

// cblas_?gemm with 32-bit integers (the LP64 interface that scipy-openblas32 provides).
template <typename Scalar>
using GemmFunction = void (*)(int order, int transpose_a, int transpose_b, int m, int n, int k, Scalar alpha,
                              const Scalar* a, int lda, const Scalar* b, int ldb, Scalar beta, Scalar* c, int ldc);

struct OpenBlas {
  GemmFunction<float> sgemm = nullptr;
  GemmFunction<double> dgemm = nullptr;
  // The path that loaded and OpenBLAS's own description of its build ("OpenBLAS 0.3.34 DYNAMIC_ARCH ... SkylakeX").
  std::string path;
  std::string config;
};

// Open OpenBLAS from the first of these that loads and has the 32-bit CBLAS gemm symbols:
//   1. $KABI_OPENBLAS_LIBRARY (if set, it is the only candidate, so a wrong setting is reported, not skipped);
//   2. the library scipy-openblas32 had at build time (KABI_CPU_DEFAULT_OPENBLAS, when CMake found it);
//   3. scipy-openblas32 installed in the same site-packages as this plugin (a wheel install of kabi);
//   4. "libscipy_openblas.so" through the dynamic loader's search path.
// The first success is kept for the life of the process. On failure returns false and sets *error to a message
// listing what was tried and why each failed.
bool open_openblas(const std::string& plugin_directory, OpenBlas* out, std::string* error);

}  // namespace kabi::cpu
