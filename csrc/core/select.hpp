// Selection: which registered kernel runs a problem, and why.
//
// Candidates are the op's kernels for the problem's device type. Filters run in order (arch, features, dtype,
// layout of each input, batch mode, the kernel's own supports predicate) and the first that fails is the
// candidate's reason. Among the eligible: forced (options or KABI_FORCE) > tuned (the tuning cache) > heuristic
// (most specific arch match, then highest priority, then earliest registered).
#pragma once

#include <string>
#include <vector>

#include "kabi/kabi.h"
#include "registry.hpp"

namespace kabi::core {

struct SelectOptions {
  std::string force;         // a backend or kernel name; empty: none
  std::string force_source;  // "options" or "KABI_FORCE", for reasons
  bool use_tuning_cache = true;
};

// Reads *options (NULL: defaults) and, if asked, the op's entry of KABI_FORCE.
SelectOptions resolve_select_options(const Op& op, const kabi_select_options* options);

// The op's choice in KABI_FORCE ("matmul=torch,other=cpu.openblas.gemm"), "" when it names none. The one parser of
// that variable: an entry that is not op=choice, or an op named twice, is KABI_STATUS_INVALID_ARGUMENT quoting it.
std::string environment_force(const Op& op);

struct CandidateVerdict {
  KernelPtr kernel;
  bool eligible = false;
  bool picked = false;
  double tuned_time_us = -1.0;
  std::string reason;
};

struct SelectionResult {
  KernelPtr kernel;  // null when nothing qualifies; then `reason` is the error message
  kabi_status status = KABI_STATUS_OK;
  kabi_pick_reason pick_reason = KABI_PICK_NONE;
  std::string reason;
  std::vector<CandidateVerdict> candidates;
};

// Never throws for "nothing eligible": the result says so, so callers can still report every candidate.
SelectionResult select_kernel(const Op& op, const kabi_args& args, const kabi_problem& problem,
                              const SelectOptions& options);

}  // namespace kabi::core
