// Selection: which registered kernel runs a problem, and why.
//
// Candidates are the op's kernels for the problem's device type. Filters run in order (arch, features, the dtype of
// each type variable, layout of each given input, a device binary's divisibility assumptions, batch mode, the
// kernel's own supports predicate, its workspace function, its variant function, a failed correctness-gate verdict,
// and for a graph-mode selection a failed graph-mode record) and the first that fails is the candidate's reason. A
// kernel that names its variants (kabi_variant_fn) counts only the records of the variant it runs now: the others
// are stale, as if never recorded.
// A graph-mode selection picks by graph-mode times when every pickable kernel has one, else by eager times, as eager
// selection always does. Among the eligible: forced (options or KABI_FORCE) > tuned (the tuning cache) > heuristic
// (kernels that passed the gate on the problem first, then the most specific arch match, the highest priority, the
// earliest registered). The pick must have passed the gate unless the caller allows unverified picks: nothing
// serves a problem before it has passed the op's gate on it.
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
  bool allow_unverified = false;   // the pick may lack a gate verdict
  bool allow_failed_gate = false;  // a forced kernel may have failed the gate
  kabi_execution_mode execution_mode = KABI_EXECUTION_EAGER;  // which records' times pick the kernel
};

// Reads *options (NULL: defaults) and, if asked, the op's entry of KABI_FORCE.
SelectOptions resolve_select_options(const Op& op, const kabi_select_options* options);

// The op's choice in KABI_FORCE ("matmul=torch,other=cpu.openblas.gemm"), "" when it names none. The one parser of
// that variable: an entry that is not op=choice, or an op named twice, is KABI_STATUS_INVALID_ARGUMENT quoting it.
std::string environment_force(const Op& op);
// Sets resolved's allow_unverified and allow_failed_gate from *options (NULL: defaults) and, when use_environment
// is set, KABI_ALLOW_UNVERIFIED.
void resolve_gate_options(const kabi_select_options* options, SelectOptions& resolved);

struct CandidateVerdict {
  KernelPtr kernel;
  bool eligible = false;
  bool picked = false;
  double tuned_time_us = -1.0;  // in tuned_execution_mode
  kabi_gate_verdict gate = KABI_GATE_NONE;
  kabi_execution_mode tuned_execution_mode = KABI_EXECUTION_EAGER;
  double graph_time_us = -1.0;  // its graph-mode record's time (INFINITY: could not run in a graph); -1: none
  bool screened = false;        // tuned_time_us is a screened time: never picked by it
  bool graph_screened = false;  // likewise for graph_time_us
  std::string graph_note;       // why a failed graph-mode record failed
  std::string variant;          // what the kernel names as its variant for the problem ("" without variants)
  // Whether records of the kernel on the problem were set aside because they were measured or gated on another
  // variant, stale_variant ("" when recorded without one), than the kernel runs now.
  bool stale_record = false;
  std::string stale_variant;
  std::string reason;

  bool passed_gate() const { return gate == KABI_GATE_PASSED_TIMED || gate == KABI_GATE_PASSED_UNTIMED; }
};

struct SelectionResult {
  KernelPtr kernel;  // null when nothing qualifies; then `reason` is the error message
  kabi_status status = KABI_STATUS_OK;
  kabi_pick_reason pick_reason = KABI_PICK_NONE;
  std::string reason;
  bool verified = false;  // the pick passed the correctness gate on the problem
  std::vector<CandidateVerdict> candidates;
};

// "dtype of T bfloat16 not in {float32, float64}" for the first type variable whose bound dtype the kernel does not
// accept; "" when it accepts them all.
std::string dtype_mismatch(const Kernel& kernel, const kabi_problem& problem);
// "b is general; kernel takes {contiguous, row_strided}" for the first given input whose layout class the kernel does
// not take ("b is row_strided; the kernel takes {col_strided} for b" where the kernel declared b's own classes); ""
// when it takes them all.
std::string layout_mismatch(const Kernel& kernel, const kabi_problem& problem);
// Why a device binary's image cannot run the problem: "param 7 (stride of b, dim -2) is 4100, not a multiple of 16 as
// the image assumes" for the first dim or stride parameter that misses its divisible_by; "" when every one holds, and
// for kernels of other kinds.
std::string unmet_assumption(const Kernel& kernel, const kabi_problem& problem, const kabi_args& args);

// Never throws for "nothing eligible": the result says so, so callers can still report every candidate.
SelectionResult select_kernel(const Op& op, const kabi_args& args, const kabi_problem& problem,
                              const SelectOptions& options);

}  // namespace kabi::core
