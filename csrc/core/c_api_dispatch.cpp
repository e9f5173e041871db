// The extern "C" functions of kabi.h for problems, selection, launch, the tuning cache and plugins.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "cuda_driver.hpp"
#include "device.hpp"
#include "error.hpp"
#include "launch.hpp"
#include "memory.hpp"
#include "plugin.hpp"
#include "problem.hpp"
#include "select.hpp"
#include "struct_io.hpp"
#include "tuning_cache.hpp"

using namespace kabi::core;

namespace {

Op& op_from_handle(kabi_op handle, const char* function) {
  if (handle == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, std::string(function) + ": op is NULL");
  return *static_cast<Op*>(handle);
}

// Writes every candidate the caller has room for, each strided by element 0's struct_size.
void write_candidates(const kabi_selection& request, const SelectionResult& result) {
  if (request.candidates == nullptr || request.candidates_capacity <= 0) return;
  const size_t stride = request.candidates[0].struct_size;
  if (stride < KABI_STRUCT_SIZE_THROUGH(kabi_candidate, kernel)) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_select: out_selection->candidates[0].struct_size is " +
                                                  std::to_string(stride) + "; set it to sizeof(kabi_candidate)");
  }
  const size_t count = std::min(result.candidates.size(), static_cast<size_t>(request.candidates_capacity));
  auto* base = reinterpret_cast<char*>(request.candidates);
  for (size_t i = 0; i < count; ++i) {
    const CandidateVerdict& verdict = result.candidates[i];
    kabi_candidate candidate{};
    candidate.struct_size = sizeof candidate;
    candidate.kernel = verdict.kernel.get();
    candidate.eligible = verdict.eligible ? 1 : 0;
    candidate.picked = verdict.picked ? 1 : 0;
    candidate.tuned_time_us = verdict.tuned_time_us;
    copy_truncated(candidate.reason, verdict.reason);
    candidate.gate = verdict.gate;
    candidate.tuned_execution_mode = verdict.tuned_execution_mode;
    candidate.tuned_screened = verdict.screened ? 1 : 0;
    copy_truncated(candidate.variant, verdict.variant);
    candidate.has_stale_record = verdict.stale_record ? 1 : 0;
    copy_truncated(candidate.stale_variant, verdict.stale_variant);
    auto* element = reinterpret_cast<kabi_candidate*>(base + i * stride);
    element->struct_size = stride;
    write_output_struct(element, candidate);
  }
}

void write_selection(kabi_selection* out, const SelectionResult& result, const kabi_problem& problem) {
  kabi_selection request{};
  std::memcpy(&request, out, std::min(out->struct_size, sizeof request));
  if (out->struct_size < KABI_STRUCT_SIZE_THROUGH(kabi_selection, candidates_capacity)) {
    request.candidates = nullptr;
    request.candidates_capacity = 0;
  }
  write_candidates(request, result);
  kabi_selection selection = request;
  selection.struct_size = sizeof selection;
  selection.kernel = result.kernel.get();
  selection.pick_reason = result.pick_reason;
  copy_truncated(selection.reason, result.reason);
  selection.num_candidates = static_cast<int32_t>(result.candidates.size());
  selection.problem = problem;
  selection.verified = result.verified ? 1 : 0;
  const size_t problem_offset = offsetof(kabi_selection, problem);
  if (out->struct_size > problem_offset) {
    selection.problem.struct_size = std::min(sizeof(kabi_problem), out->struct_size - problem_offset);
  }
  write_output_struct(out, selection);
}

}  // namespace

extern "C" {

KABI_EXPORT kabi_status kabi_problem_describe(kabi_op handle, const kabi_args* args, kabi_problem* out_problem) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_problem_describe");
    const CallArgs call(op, args, "kabi_problem_describe");
    check_output_struct(out_problem, "kabi_problem_describe: out_problem",
                        KABI_STRUCT_SIZE_THROUGH(kabi_problem, device_type));
    write_output_struct(out_problem, describe_problem(op, call.args(), ProblemUse::kDescribe));
  });
}

KABI_EXPORT kabi_status kabi_select(kabi_op handle, const kabi_args* args, const kabi_select_options* options,
                                    kabi_selection* out_selection) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_select");
    const CallArgs call(op, args, "kabi_select");
    check_output_struct(out_selection, "kabi_select: out_selection", KABI_STRUCT_SIZE_THROUGH(kabi_selection, kernel));
    const kabi_problem problem = describe_problem(op, call.args(), ProblemUse::kDescribe);
    check_outputs_do_not_alias_inputs(op, call.args());
    SelectOptions resolved = resolve_select_options(op, options);
    resolve_gate_options(options, resolved);
    const SelectionResult result = select_kernel(op, call.args(), problem, resolved);
    // Written even when nothing qualifies, so callers can show every candidate and why it was rejected.
    write_selection(out_selection, result, problem);
    if (!result.kernel) throw Error(result.status, result.reason);
  });
}

KABI_EXPORT kabi_status kabi_op_environment_force(kabi_op handle, char* buffer, size_t buffer_size) {
  return c_boundary([&] {
    const Op& op = op_from_handle(handle, "kabi_op_environment_force");
    copy_to_buffer(environment_force(op), buffer, buffer_size, "kabi_op_environment_force");
  });
}

KABI_EXPORT kabi_status kabi_launch(kabi_kernel handle, const kabi_args* args) {
  return c_boundary([&] {
    const KernelPtr kernel = Registry::instance().acquire(handle);
    const CallArgs call(*kernel->op, args, "kabi_launch");
    launch_kernel(*kernel, call.args(), describe_problem(*kernel->op, call.args(), ProblemUse::kLaunch));
  });
}

KABI_EXPORT kabi_status kabi_call(kabi_op handle, const kabi_args* args, const kabi_select_options* options) {
  return c_boundary([&] {
    Op& op = op_from_handle(handle, "kabi_call");
    const CallArgs call(op, args, "kabi_call");
    call_op(op, call.args(), options);
  });
}

KABI_EXPORT kabi_status kabi_stream_execution_mode(DLDevice device, void* stream, int32_t* out_mode) {
  return c_boundary([&] {
    if (out_mode == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_stream_execution_mode: out_mode is NULL");
    bool capturing = false;
    if (device.device_type == kDLCUDA && stream != nullptr) {
      const CudaDriver& driver = cuda_driver();
      static const std::string what = "kabi_stream_execution_mode";
      const CudaContextScope context(driver, device.device_id, what);
      capturing = stream_is_capturing(driver, static_cast<cuda::CUstream>(stream));
    }
    *out_mode = capturing ? KABI_EXECUTION_GRAPH : KABI_EXECUTION_EAGER;
  });
}

KABI_EXPORT kabi_status kabi_tuning_store(kabi_op handle, const kabi_args* args, const kabi_tuning_record* records,
                                          int32_t num_records) {
  return c_boundary([&] {
    Op& op = op_from_handle(handle, "kabi_tuning_store");
    const CallArgs call(op, args, "kabi_tuning_store");
    const kabi_problem problem = describe_problem(op, call.args(), ProblemUse::kDescribe);
    if (num_records < 0) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_tuning_store: num_records is negative");
    std::vector<TuningEntry> entries;
    if (num_records > 0) {
      check_output_struct(records, "kabi_tuning_store: records", KABI_STRUCT_SIZE_THROUGH(kabi_tuning_record, time_us));
      const size_t stride = records[0].struct_size;
      const auto* base = reinterpret_cast<const char*>(records);
      for (int32_t i = 0; i < num_records; ++i) {
        const std::string what = "kabi_tuning_store: records[" + std::to_string(i) + "]";
        const auto* element = reinterpret_cast<const kabi_tuning_record*>(base + static_cast<size_t>(i) * stride);
        const kabi_tuning_record record =
            read_input_struct(element, what.c_str(), KABI_STRUCT_SIZE_THROUGH(kabi_tuning_record, time_us));
        const KernelPtr kernel = Registry::instance().acquire(record.kernel);
        if (kernel->op != &op) {
          throw Error(KABI_STATUS_INVALID_ARGUMENT,
                      what + ": kernel " + kernel->name + " implements " + kernel->op->name + ", not " + op.name);
        }
        if (std::isnan(record.time_us) || record.time_us < 0) {
          throw Error(KABI_STATUS_INVALID_ARGUMENT, what + ": time_us must be >= 0 or INFINITY");
        }
        TuningEntry entry;
        entry.kernel_name = kernel->name;
        entry.fingerprint = kernel->fingerprint;
        entry.time_us = record.time_us;
        entry.note = record.note != nullptr ? record.note : "";
        // Fields past struct_size read as zero: an older caller stores persistent, untimed-spread records.
        entry.flags = record.flags;
        entry.spread = record.spread;
        entry.recorded_at = record.recorded_at;
        // The kernel names what it ran, not the caller: selection compares it with what the kernel names then.
        entry.variant = kernel_variant(*kernel, problem, call.args());
        entries.push_back(std::move(entry));
      }
    }
    TuningCache::instance().store(device_signature(problem.device_type, problem.device_index), op.name, problem.key,
                                  entries);
    // Only this op's records changed: other ops keep their decisions.
    Registry::instance().bump_generation({&op});
  });
}

KABI_EXPORT kabi_status kabi_allocator_set(const kabi_allocator* allocator) {
  return c_boundary([&] { set_allocator(allocator); });
}

KABI_EXPORT kabi_status kabi_memory_allocate(int32_t device_type, int32_t device_index, size_t bytes, void* stream,
                                             void** out_pointer) {
  return c_boundary([&] {
    if (out_pointer == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_memory_allocate: out_pointer is NULL");
    *out_pointer = allocate_memory(device_type, device_index, bytes, stream);
  });
}

KABI_EXPORT void kabi_memory_release(int32_t device_type, int32_t device_index, void* pointer, size_t bytes,
                                     void* stream) {
  release_memory(device_type, device_index, pointer, bytes, stream);
}

KABI_EXPORT kabi_status kabi_kernel_workspace_size(kabi_kernel handle, const kabi_args* args, size_t* out_bytes) {
  return c_boundary([&] {
    if (out_bytes == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_kernel_workspace_size: out_bytes is NULL");
    const KernelPtr kernel = Registry::instance().acquire(handle);
    const CallArgs call(*kernel->op, args, "kabi_kernel_workspace_size");
    // Outputs are optional here, as for kabi_select: the size may be wanted before they exist.
    *out_bytes = workspace_size(*kernel, describe_problem(*kernel->op, call.args(), ProblemUse::kDescribe));
  });
}

KABI_EXPORT kabi_status kabi_cache_list(const char* op, kabi_cache_visit_fn visit, void* user_data) {
  return c_boundary([&] {
    if (visit == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_cache_list: visit is NULL");
    for (const TuningListing& item : TuningCache::instance().list(op != nullptr ? op : "")) {
      kabi_cache_entry entry{};
      entry.struct_size = sizeof(entry);
      entry.device_signature = item.device_signature.c_str();
      entry.op = item.op.c_str();
      entry.problem_key = item.problem_key.c_str();
      entry.kernel_name = item.entry.kernel_name.c_str();
      entry.fingerprint = item.entry.fingerprint.c_str();
      entry.time_us = item.entry.time_us;
      entry.note = item.entry.note.c_str();
      entry.flags = item.entry.flags;
      entry.spread = item.entry.spread;
      entry.recorded_at = item.entry.recorded_at;
      entry.variant = item.entry.variant.c_str();
      if (visit(user_data, &entry) != 0) break;
    }
  });
}

KABI_EXPORT kabi_status kabi_cache_set_directory(const char* directory) {
  return c_boundary([&] {
    TuningCache::instance().set_directory(directory != nullptr ? directory : "");
    Registry::instance().bump_all_generations();
  });
}

KABI_EXPORT kabi_status kabi_cache_directory(char* buffer, size_t buffer_size) {
  return c_boundary(
      [&] { copy_to_buffer(TuningCache::instance().directory(), buffer, buffer_size, "kabi_cache_directory"); });
}

KABI_EXPORT kabi_status kabi_cache_default_directory(char* buffer, size_t buffer_size) {
  return c_boundary([&] {
    const std::string directory = default_cache_directory();
    if (directory.empty()) {
      throw Error(KABI_STATUS_NOT_FOUND,
                  "kabi_cache_default_directory: no cache directory (set KABI_CACHE_DIR, XDG_CACHE_HOME or HOME)");
    }
    copy_to_buffer(directory, buffer, buffer_size, "kabi_cache_default_directory");
  });
}

KABI_EXPORT kabi_status kabi_cache_reload(void) {
  return c_boundary([] {
    TuningCache::instance().reload();
    Registry::instance().bump_all_generations();
  });
}

KABI_EXPORT kabi_status kabi_cache_clear(void) {
  return c_boundary([] {
    TuningCache::instance().clear();
    Registry::instance().bump_all_generations();
  });
}

KABI_EXPORT kabi_status kabi_cache_export(const char* path) {
  return c_boundary([&] {
    if (path == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_cache_export: path is NULL");
    TuningCache::instance().export_to(path);
  });
}

KABI_EXPORT kabi_status kabi_cache_import(const char* path) {
  return c_boundary([&] {
    if (path == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_cache_import: path is NULL");
    TuningCache::instance().import_from(path);
    Registry::instance().bump_all_generations();
  });
}

KABI_EXPORT kabi_status kabi_cache_stats(int64_t* out_records, int64_t* out_corrupt_records) {
  return c_boundary([&] {
    if (out_records == nullptr || out_corrupt_records == nullptr) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT,
                  "kabi_cache_stats: out_records and out_corrupt_records must not be NULL");
    }
    TuningCache& cache = TuningCache::instance();
    *out_records = cache.record_count();
    *out_corrupt_records = cache.corrupt_record_count();
  });
}

KABI_EXPORT kabi_status kabi_plugin_load(const char* path) {
  return c_boundary([&] {
    if (path == nullptr) throw Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_plugin_load: path is NULL");
    load_plugin(path);
  });
}

KABI_EXPORT kabi_status kabi_plugin_load_from_environment(void) {
  return c_boundary([] { load_plugins_from_environment(); });
}

KABI_EXPORT kabi_status kabi_plugin_load_builtin(void) {
  return c_boundary([] { load_builtin_plugins(); });
}

KABI_EXPORT kabi_status kabi_plugin_load_builtin_device(int32_t device_type) {
  return c_boundary([device_type] { load_builtin_plugin(device_type); });
}

KABI_EXPORT int32_t kabi_plugin_count(void) {
  return value_boundary<int32_t>(0, [] { return plugin_count(); });
}

KABI_EXPORT kabi_status kabi_plugin_at(int32_t index, kabi_plugin_record* out_record) {
  return c_boundary([&] {
    check_output_struct(out_record, "kabi_plugin_at: out_record", KABI_STRUCT_SIZE_THROUGH(kabi_plugin_record, path));
    write_output_struct(out_record, plugin_record(index));
  });
}

}  // extern "C"
