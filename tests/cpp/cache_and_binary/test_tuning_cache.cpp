// The persistent tuning cache: round trips, persistence, torn and garbage records, export/import, directory
// resolution and concurrent writers within one process.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <thread>

#include "expect_error.hpp"
#include "tuning_cache.hpp"

namespace {

using kabi::core::TuningCache;
using kabi::core::TuningEntry;

const std::string kDevice = "cuda|NVIDIA H200|sm90|drv13000|abi1";
const std::string kOp = "matmul";
const std::string kProblem = "float16|CC|1|256|512|128";

std::string make_temporary_directory() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kabi-tuning-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    std::exit(EXIT_FAILURE);
  }
  return pattern;
}

std::string read_text(const std::string& path) {
  std::ifstream stream(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(stream), std::istreambuf_iterator<char>());
}

void append_text(const std::string& path, const std::string& text) {
  std::ofstream stream(path, std::ios::binary | std::ios::app);
  stream << text;
}

const TuningEntry* find_entry(const std::vector<TuningEntry>& entries, const std::string& kernel_name) {
  for (const TuningEntry& entry : entries) {
    if (entry.kernel_name == kernel_name) return &entry;
  }
  return nullptr;
}

void test_round_trip_and_persistence(const std::string& directory) {
  TuningCache cache(directory + "/nested/cache");
  KABI_CHECK(!std::filesystem::exists(directory + "/nested"));  // created on the first write, not on a read
  KABI_CHECK(cache.lookup(kDevice, kOp, kProblem).empty());
  const double infinity = std::numeric_limits<double>::infinity();
  cache.store(kDevice, kOp, kProblem,
              {{"triton.matmul.a", "fp-a", 12.345678901, ""},
               {"cuda.matmul.b", "fp\tb", infinity, "wrong output:\nmax error 3.5 \\ tolerance 0.01"}});
  KABI_CHECK(std::filesystem::exists(directory + "/nested/cache/tuning-v4.log"));

  const std::vector<TuningEntry> entries = cache.lookup(kDevice, kOp, kProblem);
  KABI_CHECK_EQ(entries.size(), size_t{2});
  KABI_CHECK_EQ(cache.record_count(), int64_t{2});

  TuningCache other_process_view(directory + "/nested/cache");
  const std::vector<TuningEntry> reloaded = other_process_view.lookup(kDevice, kOp, kProblem);
  const TuningEntry* fast = find_entry(reloaded, "triton.matmul.a");
  const TuningEntry* failed = find_entry(reloaded, "cuda.matmul.b");
  KABI_CHECK(fast != nullptr && failed != nullptr);
  if (fast != nullptr && failed != nullptr) {
    KABI_CHECK_EQ(fast->time_us, 12.345678901);  // exact: the shortest round-trip decimal is stored
    KABI_CHECK_EQ(fast->fingerprint, std::string("fp-a"));
    KABI_CHECK(std::isinf(failed->time_us));
    KABI_CHECK_EQ(failed->fingerprint, std::string("fp\tb"));
    KABI_CHECK_EQ(failed->note, std::string("wrong output:\nmax error 3.5 \\ tolerance 0.01"));
  }
  KABI_CHECK(other_process_view.lookup(kDevice, kOp, "float16|CC|1|256|512|256").empty());
  KABI_CHECK(other_process_view.lookup("cuda|NVIDIA A100|sm80|drv13000|abi1", kOp, kProblem).empty());

  // A newer record for the same kernel supersedes the older one, here and after a reload elsewhere.
  cache.store(kDevice, kOp, kProblem, {{"triton.matmul.a", "fp-a2", 9.5, ""}});
  KABI_CHECK_EQ(cache.record_count(), int64_t{2});
  other_process_view.reload();
  const std::vector<TuningEntry> after_update = other_process_view.lookup(kDevice, kOp, kProblem);
  const TuningEntry* updated = find_entry(after_update, "triton.matmul.a");
  KABI_CHECK(updated != nullptr && updated->time_us == 9.5 && updated->fingerprint == "fp-a2");
  KABI_CHECK_EQ(other_process_view.corrupt_record_count(), int64_t{0});
}

// A kernel's variant text (kabi_variant_fn) is one more field of the record: escaped like the others, kept per
// record, superseded with it, and empty for a kernel without variants.
void test_variants(const std::string& directory) {
  TuningCache cache(directory);
  TuningEntry named{"cuda.cublaslt.algo1", "fp", 3.5, ""};
  named.variant = "algo=66 tile=128x256x64\tstages=4";
  cache.store(kDevice, kOp, kProblem, {named, {"cuda.cutlass.a", "fp", 4.5, ""}});
  const std::string text = read_text(cache.file_path());
  KABI_CHECK(text.rfind("v4\t", 0) == 0);
  KABI_CHECK(text.find("\talgo=66 tile=128x256x64\\tstages=4\t") != std::string::npos);

  TuningCache other_process_view(directory);
  const std::vector<TuningEntry> entries = other_process_view.lookup(kDevice, kOp, kProblem);
  const TuningEntry* slot = find_entry(entries, "cuda.cublaslt.algo1");
  const TuningEntry* plain = find_entry(entries, "cuda.cutlass.a");
  KABI_CHECK(slot != nullptr && slot->variant == named.variant);
  KABI_CHECK(plain != nullptr && plain->variant.empty());

  named.variant = "algo=31";
  cache.store(kDevice, kOp, kProblem, {named});
  other_process_view.reload();
  const std::vector<TuningEntry> superseded = other_process_view.lookup(kDevice, kOp, kProblem);
  slot = find_entry(superseded, "cuda.cublaslt.algo1");
  KABI_CHECK(slot != nullptr && slot->variant == "algo=31");
  KABI_CHECK_EQ(other_process_view.record_count(), int64_t{2});
}

void test_invalid_entries(const std::string& directory) {
  TuningCache cache(directory);
  KABI_EXPECT_ERROR(cache.store(kDevice, kOp, kProblem, {{"k", "f", std::nan(""), ""}}), KABI_STATUS_INVALID_ARGUMENT,
                    "time_us");
  KABI_EXPECT_ERROR(cache.store(kDevice, kOp, kProblem, {{"k", "f", -1.0, ""}}), KABI_STATUS_INVALID_ARGUMENT,
                    "non-negative");
  KABI_EXPECT_ERROR(cache.store(kDevice, kOp, kProblem, {{"", "f", 1.0, ""}}), KABI_STATUS_INVALID_ARGUMENT,
                    "kernel_name");
  KABI_EXPECT_ERROR(cache.store("", kOp, kProblem, {{"k", "f", 1.0, ""}}), KABI_STATUS_INVALID_ARGUMENT,
                    "device_signature");
  KABI_CHECK_EQ(cache.record_count(), int64_t{0});
}

void test_torn_and_garbage_records(const std::string& directory) {
  TuningCache writer(directory);
  writer.store(kDevice, kOp, kProblem, {{"a", "fa", 1.5, ""}, {"b", "fb", 2.5, ""}});
  const std::string log = writer.file_path();
  const std::string valid_line = read_text(log).substr(0, read_text(log).find('\n') + 1);

  // A flipped byte inside a valid record, a line of garbage, and a torn final record without its newline.
  std::string flipped = valid_line;
  flipped[4] = flipped[4] == 'X' ? 'Y' : 'X';
  append_text(log, flipped + "not a record at all\n" + valid_line.substr(0, valid_line.size() / 2));

  // A writer that loaded before the damage appends after the torn record without merging into it.
  writer.store(kDevice, kOp, "float16|CC|1|64|64|64", {{"c", "fc", 3.5, ""}});

  TuningCache reader(directory);
  KABI_CHECK_EQ(reader.corrupt_record_count(), int64_t{3});
  KABI_CHECK_EQ(reader.record_count(), int64_t{3});
  const std::vector<TuningEntry> appended_after_damage = reader.lookup(kDevice, kOp, "float16|CC|1|64|64|64");
  KABI_CHECK(find_entry(appended_after_damage, "c") != nullptr);

  // The load compacted the file: every line is valid again and nothing is reported twice.
  TuningCache after_compaction(directory);
  KABI_CHECK_EQ(after_compaction.corrupt_record_count(), int64_t{0});
  KABI_CHECK_EQ(after_compaction.record_count(), int64_t{3});
  const std::string text = read_text(log);
  KABI_CHECK(text.find("not a record") == std::string::npos);
  KABI_CHECK(!text.empty() && text.back() == '\n');
}

void test_superseded_records_are_compacted(const std::string& directory) {
  TuningCache writer(directory);
  std::vector<TuningEntry> retunes;
  for (int round = 0; round < 1100; ++round) retunes.push_back({"a", "fa", 1.0 + round, ""});
  writer.store(kDevice, kOp, kProblem, retunes);
  writer.store(kDevice, kOp, kProblem, {{"b", "fb", 0.5, ""}});
  const std::string log = writer.file_path();
  const std::string before = read_text(log);
  KABI_CHECK_EQ(std::count(before.begin(), before.end(), '\n'), std::ptrdiff_t{1101});

  TuningCache reader(directory);
  KABI_CHECK_EQ(reader.record_count(), int64_t{2});
  KABI_CHECK_EQ(reader.corrupt_record_count(), int64_t{0});
  const std::string text = read_text(log);
  KABI_CHECK_EQ(std::count(text.begin(), text.end(), '\n'), std::ptrdiff_t{2});
  const std::vector<TuningEntry> entries = reader.lookup(kDevice, kOp, kProblem);
  const TuningEntry* latest = find_entry(entries, "a");
  KABI_CHECK(latest != nullptr && latest->time_us == 1100.0);
}

void test_export_import_clear(const std::string& directory) {
  TuningCache source(directory + "/source");
  source.store(kDevice, kOp, kProblem, {{"a", "fa", 4.25, ""}, {"b", "fb", 5.0, "slow"}});
  source.store(kDevice, "other_op", kProblem, {{"c", "fc", 6.0, ""}});
  const std::string exported = directory + "/exported.log";
  source.export_to(exported);

  source.clear();
  KABI_CHECK_EQ(source.record_count(), int64_t{0});
  KABI_CHECK_EQ(TuningCache(directory + "/source").record_count(), int64_t{0});

  TuningCache destination(directory + "/destination");
  destination.store(kDevice, kOp, kProblem, {{"z", "fz", 1.0, ""}});
  destination.import_from(exported);
  KABI_CHECK_EQ(destination.record_count(), int64_t{4});
  TuningCache destination_reloaded(directory + "/destination");
  KABI_CHECK_EQ(destination_reloaded.record_count(), int64_t{4});
  const std::vector<TuningEntry> imported = destination_reloaded.lookup(kDevice, kOp, kProblem);
  const TuningEntry* b = find_entry(imported, "b");
  KABI_CHECK(b != nullptr && b->time_us == 5.0 && b->note == "slow");

  const std::string damaged = directory + "/damaged.log";
  std::ofstream(damaged) << read_text(exported) << "v1\tgarbage\n";
  KABI_EXPECT_ERROR(destination.import_from(damaged), KABI_STATUS_INVALID_ARGUMENT, damaged + ":4:");
  KABI_CHECK_EQ(destination.record_count(), int64_t{4});
  KABI_EXPECT_ERROR(destination.import_from(directory + "/missing.log"), KABI_STATUS_IO_ERROR, "does not exist");
}

void test_directory_resolution(const std::string& directory) {
  ::setenv("KABI_CACHE_DIR", (directory + "/explicit").c_str(), 1);
  ::setenv("XDG_CACHE_HOME", (directory + "/xdg").c_str(), 1);
  ::setenv("HOME", (directory + "/home").c_str(), 1);
  KABI_CHECK_EQ(TuningCache("").directory(), directory + "/explicit");
  ::unsetenv("KABI_CACHE_DIR");
  KABI_CHECK_EQ(TuningCache("").directory(), directory + "/xdg/kabi");
  ::unsetenv("XDG_CACHE_HOME");
  KABI_CHECK_EQ(TuningCache("").directory(), directory + "/home/.cache/kabi");

  TuningCache cache(directory + "/first");
  cache.store(kDevice, kOp, kProblem, {{"a", "fa", 1.0, ""}});
  cache.set_directory(directory + "/second");
  KABI_CHECK_EQ(cache.record_count(), int64_t{0});
  cache.set_directory(directory + "/first");
  KABI_CHECK_EQ(cache.record_count(), int64_t{1});
}

void test_concurrent_writers(const std::string& directory) {
  constexpr int kThreads = 8;
  constexpr int kProblemsPerThread = 40;
  TuningCache shared(directory);
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      // Half the threads share one cache object, half have their own (as separate processes would).
      TuningCache own(directory);
      TuningCache& cache = thread % 2 == 0 ? shared : own;
      for (int problem = 0; problem < kProblemsPerThread; ++problem) {
        const std::string key = "float32|CC|1|" + std::to_string(thread) + "|" + std::to_string(problem);
        cache.store(kDevice, kOp, key, {{"kernel", "f", 1.0 + problem, ""}});
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  TuningCache reader(directory);
  KABI_CHECK_EQ(reader.record_count(), int64_t{kThreads * kProblemsPerThread});
  KABI_CHECK_EQ(reader.corrupt_record_count(), int64_t{0});
}

}  // namespace

int main() {
  const std::string root = make_temporary_directory();
  test_round_trip_and_persistence(root + "/round_trip");
  test_variants(root + "/variants");
  test_invalid_entries(root + "/invalid");
  test_torn_and_garbage_records(root + "/torn");
  test_superseded_records_are_compacted(root + "/superseded");
  test_export_import_clear(root + "/export");
  test_directory_resolution(root + "/resolution");
  test_concurrent_writers(root + "/concurrent");
  std::filesystem::remove_all(root);
  return kabi_test::finish("test_tuning_cache");
}
