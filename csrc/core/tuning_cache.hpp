// The persistent tuning cache: decisions keyed by (device signature, op, problem key, kernel fingerprint, execution
// mode).
// Owned by tuning_cache.cpp; selection (select.cpp) and the C API (c_api.cpp) use only this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kabi::core {

// One measured candidate for one problem.
struct TuningEntry {
  std::string kernel_name;
  std::string fingerprint;
  double time_us = 0.0;  // +infinity: failed the correctness gate, raised, or failed to launch
  std::string note;      // why it failed; empty otherwise
  uint32_t flags = 0;    // kabi_tuning_flag bits
  double spread = 0.0;   // (slowest - fastest) / median over the measurement's rounds; 0 when unknown
  int64_t recorded_at = 0;  // seconds since the Unix epoch; 0 when unknown (records older than the v2 format)
  // The variant the kernel ran (kabi_variant_fn); empty for a kernel without variants, and in records older than
  // the v4 format.
  std::string variant{};

  bool gate_only() const;
  bool memory_only() const;
  bool graph_mode() const;  // measured under CUDA-graph replay; kept beside the kernel's eager record
  bool screened() const;    // timed by the tuner's screen only: never a final time
};

// One live record with its key, as list() returns it.
struct TuningListing {
  std::string device_signature;
  std::string op;
  std::string problem_key;
  TuningEntry entry;
};

// KABI_CACHE_DIR, else $XDG_CACHE_HOME/kabi, else $HOME/.cache/kabi (empty when none is set), read now.
std::string default_cache_directory();

class TuningCache {
 public:
  // The process-wide cache; loads lazily from directory() on first use.
  static TuningCache& instance();

  // Every entry recorded for the problem (the latest record per kernel name and execution mode wins). Thread-safe.
  std::vector<TuningEntry> lookup(const std::string& device_signature, const std::string& op,
                                  const std::string& problem_key);

  // Record measurements for a problem, in memory and appended to the cache file (durable, many-writer safe);
  // memory-only entries stay in this process. An entry with recorded_at 0 is stamped with the current time.
  void store(const std::string& device_signature, const std::string& op, const std::string& problem_key,
             const std::vector<TuningEntry>& entries);

  // Every live record (re-read from disk first, plus this process's memory-only ones), sorted by key and kernel;
  // only op's when op is not empty.
  std::vector<TuningListing> list(const std::string& op);

  // default_cache_directory(), or what set_directory() set.
  std::string directory();
  void set_directory(const std::string& directory);  // empty: back to the default; reloads
  void reload();
  void clear();
  void export_to(const std::string& path);
  void import_from(const std::string& path);
  int64_t record_count();
  int64_t corrupt_record_count();  // skipped at the last load

  // The record file inside directory() ("tuning-v4.log"; records of the older "tuning-v1.log" .. "tuning-v3.log"
  // beside it are read too, and carried into v4 at the next compaction).
  std::string file_path();

  // A cache over its own directory, independent of instance() (tests; tools that inspect another cache).
  explicit TuningCache(const std::string& directory);
  ~TuningCache();
  TuningCache(const TuningCache&) = delete;
  TuningCache& operator=(const TuningCache&) = delete;

 private:
  TuningCache();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace kabi::core
