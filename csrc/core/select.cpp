#include "select.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <tuple>

#include "device.hpp"
#include "launch.hpp"
#include "names.hpp"
#include "problem.hpp"
#include "struct_io.hpp"
#include "tuning_cache.hpp"

namespace kabi::core {
namespace {

constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

std::string format_time(double microseconds) {
  return format_fixed(microseconds, microseconds < 10 ? 3 : 1) + " us";
}

std::string describe_archs(const Kernel& kernel) {
  if (!kernel.archs.empty()) {
    std::vector<std::string> archs;
    for (int32_t arch : kernel.archs) archs.push_back(std::to_string(arch));
    return "{" + join(archs, ", ") + "}";
  }
  return "[" + (kernel.arch_min > 0 ? std::to_string(kernel.arch_min) : std::string("-")) + ", " +
         (kernel.arch_max > 0 ? std::to_string(kernel.arch_max) : std::string("-")) + "]";
}

bool constrains_arch(const Kernel& kernel) {
  return !kernel.archs.empty() || kernel.arch_min > 0 || kernel.arch_max > 0;
}

// Smaller is more specific: an exact set beats any range, a smaller set or narrower range beats a larger one, and
// any arch constraint beats none.
std::tuple<int, int64_t> arch_specificity(const Kernel& kernel) {
  if (!kernel.archs.empty()) return {0, static_cast<int64_t>(kernel.archs.size())};
  if (kernel.arch_min > 0 && kernel.arch_max > 0) return {1, kernel.arch_max - kernel.arch_min};
  if (constrains_arch(kernel)) return {1, kUnbounded};
  return {2, 0};
}

std::string describe_specificity(const Kernel& kernel) {
  if (!kernel.archs.empty()) return "exact arch " + describe_archs(kernel);
  if (constrains_arch(kernel)) return "arch range " + describe_archs(kernel);
  return "any arch";
}

}  // namespace

std::string dtype_mismatch(const Kernel& kernel, const kabi_problem& problem) {
  const auto& variables = kernel.op->schema.type_variables;
  for (size_t v = 0; v < variables.size(); ++v) {
    const uint32_t bound = problem.type_bindings[v];
    // 0: the variable types only absent optional inputs, so no dtype of it reaches the kernel.
    if (bound != 0 && (kernel.accepted_dtypes[v] & bound) == 0) {
      return "dtype of " + variables[v].name + " " + dtype_name(bound) + " not in " +
             describe_dtype_set(kernel.accepted_dtypes[v]);
    }
  }
  return "";
}

std::string layout_mismatch(const Kernel& kernel, const kabi_problem& problem) {
  const auto& inputs = kernel.op->schema.inputs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const uint32_t accepted = kernel.layouts_of_input(i);
    if (!input_present(problem, static_cast<int32_t>(i)) || layout_accepted(accepted, problem.input_layouts[i])) {
      continue;
    }
    const std::string found = inputs[i].name + " is " + layout_name(problem.input_layouts[i]);
    if (i < kernel.input_layouts.size()) {
      return found + "; the kernel takes " + describe_layout_set(accepted) + " for " + inputs[i].name;
    }
    return found + "; kernel takes " + describe_layout_set(accepted);
  }
  return "";
}

std::string unmet_assumption(const Kernel& kernel, const kabi_problem& problem, const kabi_args& args) {
  if (!kernel.binary) return "";
  return divisibility_mismatch(*kernel.binary, kernel.op->schema, problem, args);
}

namespace {

// The first filter the kernel fails, or "" if it passes them all.
std::string rejection(const Kernel& kernel, const kabi_device_info* device, const kabi_problem& problem,
                      const kabi_args& args) {
  if (constrains_arch(kernel)) {
    if (device == nullptr) return "the device is unknown to kabi, so its arch cannot match " + describe_archs(kernel);
    const int32_t arch = device->arch;
    const bool in_set =
        !kernel.archs.empty() && std::find(kernel.archs.begin(), kernel.archs.end(), arch) != kernel.archs.end();
    const bool in_range = kernel.archs.empty() && (kernel.arch_min <= 0 || arch >= kernel.arch_min) &&
                          (kernel.arch_max <= 0 || arch <= kernel.arch_max);
    if (!in_set && !in_range) {
      return "arch " + std::to_string(arch) + (kernel.archs.empty() ? " outside " : " not in ") +
             describe_archs(kernel);
    }
  }
  const uint64_t device_features = device != nullptr ? device->features : 0;
  if (const uint64_t missing = kernel.required_features & ~device_features) {
    return "device lacks " + join(feature_names(missing), ", ");
  }
  if (std::string mismatch = dtype_mismatch(kernel, problem); !mismatch.empty()) return mismatch;
  if (std::string mismatch = layout_mismatch(kernel, problem); !mismatch.empty()) return mismatch;
  if (std::string unmet = unmet_assumption(kernel, problem, args); !unmet.empty()) return unmet;
  if (problem.batch_mode > kernel.batch_mode) {
    return std::string("needs batch mode ") + batch_mode_name(problem.batch_mode) + "; kernel takes " +
           batch_mode_name(kernel.batch_mode);
  }
  if (kernel.alignment > 1) {
    // Data pointers are optional at selection; those given must already meet the alignment.
    const uint32_t alignment = data_alignment(args);
    if (alignment != 0 && alignment < kernel.alignment) {
      return "data aligned to " + std::to_string(alignment) + " bytes; kernel needs " +
             std::to_string(kernel.alignment);
    }
  }
  if (kernel.supports != nullptr) {
    char reason[256] = {};
    if (kernel.supports(kernel.user_data, &problem, &args, reason, sizeof reason) == 0) {
      reason[sizeof reason - 1] = '\0';
      return reason[0] != '\0' ? std::string("declined: ") + reason : "declined by its supports predicate";
    }
  }
  try {
    workspace_size(kernel, problem);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

// Most specific arch, then highest priority, then earliest registered.
CandidateVerdict* heuristic_pick(const std::vector<CandidateVerdict*>& eligible) {
  CandidateVerdict* best = nullptr;
  for (CandidateVerdict* candidate : eligible) {
    if (best == nullptr) {
      best = candidate;
      continue;
    }
    const Kernel& a = *candidate->kernel;
    const Kernel& b = *best->kernel;
    const auto rank_a = std::make_tuple(arch_specificity(a), -static_cast<int64_t>(a.priority), a.serial);
    const auto rank_b = std::make_tuple(arch_specificity(b), -static_cast<int64_t>(b.priority), b.serial);
    if (rank_a < rank_b) best = candidate;
  }
  return best;
}

struct Choice {
  CandidateVerdict* pick = nullptr;  // null: no candidate may be picked under the options; reason says why
  std::string reason;
  bool tuned = false;
  bool verified = false;
};

// Why a candidate's stale record does not count ("none" for a record without a variant).
std::string describe_stale(const CandidateVerdict& candidate) {
  const auto quoted = [](const std::string& variant) {
    return variant.empty() ? std::string("none") : "\"" + variant + "\"";
  };
  return "its record's variant is " + quoted(candidate.stale_variant) + ", it now runs " + quoted(candidate.variant);
}

std::string list_names(const std::vector<CandidateVerdict*>& candidates) {
  std::vector<std::string> names;
  for (const CandidateVerdict* candidate : candidates) names.push_back(candidate->kernel->name);
  return join(names, ", ");
}

// Graph-mode times pick only when every candidate that passed the gate has one: a graph time and an eager time
// measure different things and are never compared with each other.
bool use_graph_times(const std::vector<CandidateVerdict*>& pool) {
  bool any = false;
  for (const CandidateVerdict* candidate : pool) {
    if (candidate->gate == KABI_GATE_FAILED) continue;
    if (!candidate->passed_gate() || candidate->graph_time_us < 0) return false;
    any = true;
  }
  return any;
}

// Tuned if every pickable kernel has a timing under its current fingerprint (and timings count); else the
// heuristic among the verified kernels, else among the unverified ones when allowed, else among kernels that
// failed the gate (only forced ones with allow_failed_gate reach here).
Choice choose(const std::vector<CandidateVerdict*>& pool, const SelectOptions& options) {
  Choice choice;
  const bool graph_times = options.execution_mode == KABI_EXECUTION_GRAPH && use_graph_times(pool);
  if (graph_times) {
    for (CandidateVerdict* candidate : pool) {
      candidate->tuned_time_us = candidate->graph_time_us;
      candidate->screened = candidate->graph_screened;
      candidate->gate = KABI_GATE_PASSED_TIMED;
      candidate->tuned_execution_mode = KABI_EXECUTION_GRAPH;
    }
  }
  std::vector<CandidateVerdict*> verified, unverified, failed;
  const CandidateVerdict* untimed = nullptr;
  CandidateVerdict* fastest = nullptr;
  CandidateVerdict* fastest_screened = nullptr;
  size_t measured = 0;
  size_t screened = 0;
  for (CandidateVerdict* candidate : pool) {
    if (candidate->gate == KABI_GATE_FAILED) {
      failed.push_back(candidate);
      continue;
    }
    (candidate->passed_gate() ? verified : unverified).push_back(candidate);
    if (candidate->gate != KABI_GATE_PASSED_TIMED) {
      if (untimed == nullptr) untimed = candidate;
      continue;
    }
    // A screened time says the tuner measured the kernel and cut it; only fully measured times compete.
    if (candidate->screened) {
      ++screened;
      if (fastest_screened == nullptr || candidate->tuned_time_us < fastest_screened->tuned_time_us) {
        fastest_screened = candidate;
      }
      continue;
    }
    ++measured;
    if (fastest == nullptr || candidate->tuned_time_us < fastest->tuned_time_us) fastest = candidate;
  }
  if (options.use_tuning_cache && untimed == nullptr && fastest != nullptr) {
    choice.pick = fastest;
    choice.tuned = true;
    choice.verified = true;
    choice.reason = std::string(graph_times ? "tuned for CUDA-graph replay: " : "tuned: ") + "fastest of " +
                    std::to_string(measured) + " measured (" + format_time(fastest->tuned_time_us) + ")" +
                    (screened > 0 ? ", " + std::to_string(screened) + " screened out" : std::string());
    if (options.execution_mode == KABI_EXECUTION_GRAPH && !graph_times) {
      choice.reason += "; eager times: not every eligible kernel has a graph-mode measurement";
    }
    return choice;
  }
  // Every fully measured kernel is out of this pool (e.g. Python kernels, for a C++ caller): the screens still rank
  // the kernels that lost to them, which beats the heuristic.
  if (options.use_tuning_cache && untimed == nullptr && fastest_screened != nullptr) {
    choice.pick = fastest_screened;
    choice.tuned = true;
    choice.verified = true;
    choice.reason = std::string(graph_times ? "tuned for CUDA-graph replay: " : "tuned: ") + "fastest of " +
                    std::to_string(screened) + " screened (" + format_time(fastest_screened->tuned_time_us) +
                    "); no kernel measured in full is eligible here";
    return choice;
  }
  const std::vector<CandidateVerdict*>* tier = nullptr;
  std::string verification;
  if (!verified.empty()) {
    tier = &verified;
    verification = "passed the correctness gate on this problem";
  } else if (options.allow_unverified && !unverified.empty()) {
    tier = &unverified;
    verification = "unverified: no gate verdict on this problem, allowed by allow_unverified";
  } else if (!failed.empty()) {
    tier = &failed;
    verification = "failed the correctness gate on this problem, allowed by allow_failed_gate";
  }
  if (tier == nullptr) {
    choice.reason = "no eligible kernel has passed the correctness gate on this problem (no verdict yet: " +
                    list_names(unverified) + ")";
    return choice;
  }
  choice.pick = heuristic_pick(*tier);
  choice.verified = tier == &verified;
  const Kernel& kernel = *choice.pick->kernel;
  choice.reason = "heuristic: " + describe_specificity(kernel) + ", priority " + std::to_string(kernel.priority) +
                  ", among " + std::to_string(pool.size()) + " eligible; " + verification;
  if (options.use_tuning_cache && measured > 0 && untimed != nullptr) {
    choice.reason += " (tuning record ignored: " + untimed->kernel->name +
                     (untimed->stale_record ? " was measured on another variant; " + describe_stale(*untimed)
                                            : std::string(" has no measurement under its current fingerprint")) +
                     ")";
  }
  return choice;
}

std::string describe_problem_briefly(const Op& op, const kabi_problem& problem) {
  return describe_bindings(op, problem) + " " + problem.key + " on " +
         describe_device(DLDevice{static_cast<DLDeviceType>(problem.device_type), problem.device_index});
}

std::string list_rejections(const std::vector<CandidateVerdict*>& candidates) {
  std::vector<std::string> lines;
  for (CandidateVerdict* candidate : candidates) lines.push_back(candidate->kernel->name + ": " + candidate->reason);
  return join(lines, "; ");
}

}  // namespace

SelectOptions resolve_select_options(const Op& op, const kabi_select_options* caller) {
  kabi_select_options options{};
  options.use_environment = 1;
  options.use_tuning_cache = 1;
  if (caller != nullptr) {
    options = read_input_struct(caller, "select options", KABI_STRUCT_SIZE_THROUGH(kabi_select_options, force));
    walk_extensions(options.extensions, "select options");
    if (caller->struct_size < KABI_STRUCT_SIZE_THROUGH(kabi_select_options, use_environment))
      options.use_environment = 1;
    if (caller->struct_size < KABI_STRUCT_SIZE_THROUGH(kabi_select_options, use_tuning_cache))
      options.use_tuning_cache = 1;
  }
  SelectOptions resolved;
  resolved.use_tuning_cache = options.use_tuning_cache != 0;
  if (options.execution_mode != KABI_EXECUTION_EAGER && options.execution_mode != KABI_EXECUTION_GRAPH) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "select options: execution_mode " +
                                                  std::to_string(options.execution_mode) +
                                                  " is neither KABI_EXECUTION_EAGER (0) nor KABI_EXECUTION_GRAPH (1)");
  }
  resolved.execution_mode = static_cast<kabi_execution_mode>(options.execution_mode);
  if (options.force != nullptr && *options.force != '\0') {
    resolved.force = options.force;
    resolved.force_source = "options";
    return resolved;
  }
  if (!options.use_environment) return resolved;
  resolved.force = environment_force(op);
  if (!resolved.force.empty()) resolved.force_source = "KABI_FORCE";
  return resolved;
}

std::string environment_force(const Op& op) {
  const char* environment = std::getenv("KABI_FORCE");
  if (environment == nullptr) return "";
  auto trim = [](std::string text) {
    text.erase(0, text.find_first_not_of(' '));
    text.erase(text.find_last_not_of(' ') + 1);
    return text;
  };
  const std::string quoted = std::string("KABI_FORCE=\"") + environment + "\"";
  std::string forced;
  std::vector<std::string> named;
  for (const std::string& entry : split(environment, ',')) {
    if (trim(entry).empty()) continue;
    const size_t equals = entry.find('=');
    const std::string name = equals == std::string::npos ? "" : trim(entry.substr(0, equals));
    const std::string choice = equals == std::string::npos ? "" : trim(entry.substr(equals + 1));
    if (name.empty() || choice.empty()) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT,
                  "KABI_FORCE entry \"" + trim(entry) + "\" is not op=backend-or-kernel (" + quoted + ")");
    }
    // Two choices for one op would leave each reader to pick one; refusing keeps every reader in agreement.
    if (std::find(named.begin(), named.end(), name) != named.end()) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT,
                  "KABI_FORCE names op " + name + " twice; give each op one choice (" + quoted + ")");
    }
    named.push_back(name);
    if (name == op.name) forced = choice;
  }
  return forced;
}

void resolve_gate_options(const kabi_select_options* caller, SelectOptions& resolved) {
  kabi_select_options options{};
  options.use_environment = 1;
  if (caller != nullptr) {
    options = read_input_struct(caller, "select options", KABI_STRUCT_SIZE_THROUGH(kabi_select_options, force));
    if (caller->struct_size < KABI_STRUCT_SIZE_THROUGH(kabi_select_options, use_environment))
      options.use_environment = 1;
  }
  resolved.allow_unverified = options.allow_unverified != 0;
  resolved.allow_failed_gate = options.allow_failed_gate != 0;
  if (options.use_environment && !resolved.allow_unverified) {
    const char* environment = std::getenv("KABI_ALLOW_UNVERIFIED");
    resolved.allow_unverified = environment != nullptr && std::string(environment) == "1";
  }
}

namespace {

// The gate verdict and eager time the tuning cache holds for the kernel under its current fingerprint, and its
// graph-mode time. With check_variant (a kernel that named its variant for the problem), records of another variant
// are stale: set aside, and remembered only to say so.
void read_verdict(const std::vector<TuningEntry>& tuning, bool check_variant, CandidateVerdict& verdict,
                  std::string& failure_note) {
  for (const TuningEntry& entry : tuning) {
    if (entry.kernel_name != verdict.kernel->name || entry.fingerprint != verdict.kernel->fingerprint) continue;
    if (check_variant && entry.variant != verdict.variant) {
      verdict.stale_record = true;
      verdict.stale_variant = entry.variant;
      continue;
    }
    if (entry.graph_mode()) {
      verdict.graph_time_us = entry.time_us;
      verdict.graph_note = entry.note;
      verdict.graph_screened = entry.screened();
    } else if (!std::isfinite(entry.time_us)) {
      verdict.gate = KABI_GATE_FAILED;
      verdict.tuned_time_us = std::numeric_limits<double>::infinity();
      failure_note = entry.note;
    } else if (entry.gate_only()) {
      verdict.gate = KABI_GATE_PASSED_UNTIMED;
      verdict.tuned_time_us = -1.0;
    } else {
      verdict.gate = KABI_GATE_PASSED_TIMED;
      verdict.tuned_time_us = entry.time_us;
      verdict.screened = entry.screened();
    }
  }
}

std::string describe_gate_failure(const std::string& note) {
  return "failed the correctness gate on this problem" + (note.empty() ? std::string() : ": " + note);
}

std::string describe_graph_failure(const std::string& note) {
  return "could not run inside a CUDA graph on this problem" + (note.empty() ? std::string() : ": " + note);
}

std::string verify_remedy(const Op& op, const kabi_problem& problem) {
  std::vector<std::string> dims;
  for (int32_t i = 0; i < problem.num_dims; ++i) {
    dims.push_back(std::string(problem.dim_names[i] != nullptr ? problem.dim_names[i] : "?") + "=" +
                   std::to_string(problem.dims[i]));
  }
  return "verify it first (`kabi verify " + op.name + "` for this shape, " + join(dims, " ") + ", dtype " +
         describe_bindings(op, problem) + "), or call it once from Python (which gates and tunes it), or set "
         "allow_unverified in kabi_select_options (KABI_ALLOW_UNVERIFIED=1) for development";
}

}  // namespace

SelectionResult select_kernel(const Op& op, const kabi_args& args, const kabi_problem& problem,
                              const SelectOptions& options) {
  SelectionResult result;
  const kabi_device_info* device = find_device(problem.device_type, problem.device_index);
  // Verdicts count whatever use_tuning_cache says: it only decides whether timings pick the kernel.
  const std::vector<TuningEntry> tuning = TuningCache::instance().lookup(
      device_signature(problem.device_type, problem.device_index), op.name, problem.key);
  std::vector<bool> passes_filters;
  for (const KernelPtr& kernel : Registry::instance().candidates(op, problem.device_type)) {
    CandidateVerdict verdict;
    verdict.kernel = kernel;
    verdict.reason = rejection(*kernel, device, problem, args);
    if (verdict.reason.empty()) {
      try {
        verdict.variant = kernel_variant(*kernel, problem, args);
      } catch (const Error& error) {
        verdict.reason = error.what();
      }
    }
    std::string failure_note;
    read_verdict(tuning, kernel->variant != nullptr && verdict.reason.empty(), verdict, failure_note);
    passes_filters.push_back(verdict.reason.empty());
    if (verdict.reason.empty() && verdict.gate == KABI_GATE_FAILED) verdict.reason = describe_gate_failure(failure_note);
    if (verdict.reason.empty() && options.execution_mode == KABI_EXECUTION_GRAPH &&
        std::isinf(verdict.graph_time_us)) {
      verdict.reason = describe_graph_failure(verdict.graph_note);
    }
    verdict.eligible = verdict.reason.empty();
    result.candidates.push_back(std::move(verdict));
  }

  std::vector<CandidateVerdict*> pool;
  std::vector<CandidateVerdict*> forced_rejected;
  const std::string forced = "forced \"" + options.force + "\" (" + options.force_source + ")";
  if (!options.force.empty()) {
    bool failed_gate = false;
    for (bool by_backend : {true, false}) {
      for (size_t i = 0; i < result.candidates.size(); ++i) {
        CandidateVerdict& candidate = result.candidates[i];
        const std::string& label = by_backend ? candidate.kernel->backend : candidate.kernel->name;
        if (label != options.force) continue;
        const bool only_failed_gate = passes_filters[i] && candidate.gate == KABI_GATE_FAILED;
        failed_gate = failed_gate || only_failed_gate;
        (candidate.eligible || (only_failed_gate && options.allow_failed_gate) ? pool : forced_rejected)
            .push_back(&candidate);
      }
      if (!pool.empty() || !forced_rejected.empty()) break;
    }
    if (pool.empty()) {
      result.status = KABI_STATUS_NO_ELIGIBLE_KERNEL;
      result.reason = op.name + ": " + forced +
                      (forced_rejected.empty()
                           ? " names no backend or kernel registered for " + device_type_name(problem.device_type)
                           : " has no eligible kernel for " + describe_problem_briefly(op, problem) + ": " +
                                 list_rejections(forced_rejected));
      if (failed_gate) result.reason += " (to run it anyway: kabi.use(..., allow_failed_gate=True) in Python, the allow_failed_gate select option in C)";
      return result;
    }
  } else {
    for (CandidateVerdict& candidate : result.candidates) {
      if (candidate.eligible) pool.push_back(&candidate);
    }
    if (pool.empty()) {
      std::vector<CandidateVerdict*> all;
      for (CandidateVerdict& candidate : result.candidates) all.push_back(&candidate);
      result.status = KABI_STATUS_NO_ELIGIBLE_KERNEL;
      result.reason = op.name + ": no eligible kernel for " + describe_problem_briefly(op, problem) +
                      (all.empty() ? ": no kernels are registered for " + device_type_name(problem.device_type)
                                   : " among " + std::to_string(all.size()) + " candidates: " + list_rejections(all));
      return result;
    }
  }

  const Choice choice = choose(pool, options);
  if (choice.pick == nullptr) {
    result.status = KABI_STATUS_NO_ELIGIBLE_KERNEL;
    result.reason = op.name + ": " + (options.force.empty() ? std::string() : forced + ": ") + choice.reason +
                    " for " + describe_problem_briefly(op, problem) + "; " + verify_remedy(op, problem);
    return result;
  }
  result.kernel = choice.pick->kernel;
  result.verified = choice.verified;
  choice.pick->picked = true;
  if (!options.force.empty()) {
    result.pick_reason = KABI_PICK_FORCED;
    result.reason = forced + ", then " + choice.reason;
  } else {
    result.pick_reason = choice.tuned ? KABI_PICK_TUNED : KABI_PICK_HEURISTIC;
    result.reason = choice.reason;
  }
  return result;
}

}  // namespace kabi::core
