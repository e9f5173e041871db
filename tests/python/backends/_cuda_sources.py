"""A plain tiled CUDA C++ matmul, as a user would register it with kabi.cuda.register_source: c[M, N] = a[M, K] @ b[K, N]
for row-major (or row-strided) operands, float32 accumulation, one 16x16 tile of c per block."""

from __future__ import annotations

TILED_MATMUL_SOURCE = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>

constexpr int kTile = 16;

template <typename T>
__global__ void tiled_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n, int k,
                             int a_row_stride, int b_row_stride, int c_row_stride) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int column = blockIdx.x * kTile + threadIdx.x;
  float sum = 0.0f;
  for (int k0 = 0; k0 < k; k0 += kTile) {
    const int a_column = k0 + threadIdx.x;
    const int b_row = k0 + threadIdx.y;
    a_tile[threadIdx.y][threadIdx.x] =
        row < m && a_column < k ? static_cast<float>(a[static_cast<long long>(row) * a_row_stride + a_column]) : 0.0f;
    b_tile[threadIdx.y][threadIdx.x] =
        b_row < k && column < n ? static_cast<float>(b[static_cast<long long>(b_row) * b_row_stride + column]) : 0.0f;
    __syncthreads();
    for (int step = 0; step < kTile; ++step) sum += a_tile[threadIdx.y][step] * b_tile[step][threadIdx.x];
    __syncthreads();
  }
  if (row < m && column < n) c[static_cast<long long>(row) * c_row_stride + column] = static_cast<T>(sum);
}
"""

ENTRIES = {"float32": "tiled_matmul<float>", "float16": "tiled_matmul<__half>",
           "bfloat16": "tiled_matmul<__nv_bfloat16>"}

TILED_MATMUL_PARAMS = ["tensor index=0", "tensor index=1", "tensor index=2",
                       "dim name=M size=4", "dim name=N size=4", "dim name=K size=4",
                       "stride index=0 dim=-2 size=4", "stride index=1 dim=-2 size=4", "stride index=2 dim=-2 size=4"]


def tiled_matmul_declaration(dtype: str) -> dict:
    """The keyword arguments of register_source for the tiled matmul in ``dtype``."""
    return dict(source=TILED_MATMUL_SOURCE, entry=ENTRIES[dtype], dtypes=dtype, params=TILED_MATMUL_PARAMS,
                grid=("cdiv(N, 16)", "cdiv(M, 16)"), block=(16, 16), layouts=("contiguous", "row_strided"),
                alignment=0)
