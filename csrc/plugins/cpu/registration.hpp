// How every kernel of the CPU plugin (plugin.cpp, linear.cpp, grouped_mm.cpp) is declared to the host, and how its
// supports predicate reports a plan's verdict.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "kabi/kabi.h"

namespace kabi::cpu {

// What differs between the plugin's kernels; each runs on the CPU in float32 and float64.
struct CpuKernel {
  const char* op;
  const char* name;
  int32_t priority;
  uint32_t layouts;
  int32_t batch_mode;
  kabi_kernel_fn function;
  kabi_supports_fn supports;
  void* user_data;
};

// A kernel's fingerprint names the OpenBLAS build it computes with: a different build can be faster or slower, so
// tuning records made with another one do not apply.
inline std::string kernel_fingerprint(const char* name, const std::string& blas_config) {
  return std::string(name) + "/1 " + blas_config;
}

// Registers kernel through the host table, whose fields up to set_error the plugin's init has checked.
inline kabi_status register_cpu_kernel(const kabi_host_api& host, const CpuKernel& kernel,
                                       const std::string& fingerprint) {
  kabi_kernel_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.op = kernel.op;
  desc.name = kernel.name;
  desc.backend = "cpu";
  desc.device_type = kDLCPU;
  desc.priority = kernel.priority;
  desc.dtypes = KABI_DTYPE_FLOAT32 | KABI_DTYPE_FLOAT64;
  desc.layouts = kernel.layouts;
  desc.batch_mode = kernel.batch_mode;
  desc.kind = KABI_KERNEL_FUNCTION;
  desc.function = kernel.function;
  desc.supports = kernel.supports;
  desc.user_data = kernel.user_data;
  desc.fingerprint = fingerprint.c_str();
  kabi_kernel registered = nullptr;
  return host.kernel_register(&desc, &registered);
}

// A supports predicate's answer from a plan: 1 when plan() finds no reason to decline, else 0 with the reason (or
// the message of what plan() threw) in reason.
template <typename Plan>
int32_t supports_verdict(Plan&& plan, char* reason, size_t reason_size) {
  try {
    const std::string why_not = plan();
    if (why_not.empty()) return 1;
    std::snprintf(reason, reason_size, "%s", why_not.c_str());
  } catch (const std::exception& error) {
    std::snprintf(reason, reason_size, "%s", error.what());
  }
  return 0;
}

}  // namespace kabi::cpu
