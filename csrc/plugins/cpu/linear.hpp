// The linear op on the CPU: out[..., N] = activation(x[..., K] @ w[N, K]^T + bias[N]), bias optional, activation
// one of the op's enum(none, relu, gelu, gelu_tanh, silu). OpenBLAS gemm writes the product into out, then one pass
// over out adds the bias and applies the activation. float32 and float64, as the plugin's matmul. Written against
// the ABI 2.0 kernel signature (kabi_kernel_fn: user_data, problem, args).
#pragma once

#include "kabi/kabi.h"
#include "openblas_library.hpp"

namespace kabi::cpu {

inline constexpr const char* kLinearKernelName = "cpu.openblas.linear";

// Register cpu.openblas.linear for the op "linear" through host->kernel_register. The kernel computes with blas,
// which is copied: its functions stay valid for the life of the process, since the plugin never closes the OpenBLAS
// it opened. Returns the host's status; a failure's message is set through host->set_error where the host has one.
kabi_status register_linear_kernels(const kabi_host_api& host, const OpenBlas& blas);

}  // namespace kabi::cpu
