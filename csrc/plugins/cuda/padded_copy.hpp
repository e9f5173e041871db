// One pass that copies a matrix of 2-byte elements into another pitch, zero-filling the target beyond the source:
// how the aligned-copies kernel (cublaslt_kernels.cpp) brings operands whose rows start off 16 bytes to pitches that
// cuBLASLt's fast kernels read, and its product back into the caller's pitch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kabi::cuda {

// A row-major matrix of 2-byte elements: `rows` rows of `columns` elements, each row `pitch` elements after the last.
template <class Pointer>
struct PitchedMatrix {
  Pointer data = nullptr;
  int64_t rows = 0, columns = 0, pitch = 0;
};
using SourceMatrix = PitchedMatrix<const void*>;
using TargetMatrix = PitchedMatrix<void*>;

// Queues on `stream`: target[r][c] = source[r][c] where r and c lie within the source, else 0, for every r and c of
// the target. Any addresses and pitches; the two must not overlap. `multiprocessors`, the device's count (0: unknown),
// sizes the grid. Returns the launch's error (cudaSuccess when queued, or when the target is empty).
cudaError_t launch_padded_copy(const SourceMatrix& source, const TargetMatrix& target, int32_t multiprocessors,
                               cudaStream_t stream);

}  // namespace kabi::cuda
