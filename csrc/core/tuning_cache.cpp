// The persistent tuning cache.
//
// On disk: one append-only text file, DIR/tuning-v4.log, one record per line:
//   v4 \t <device signature> \t <op> \t <problem key> \t <kernel name> \t <fingerprint> \t <time_us> \t <note> \t
//   <flags> \t <spread> \t <recorded_at> \t <variant> \t <crc32>
// Fields escape backslash, tab, newline and carriage return as \\ \t \n \r; time_us and spread are the shortest
// decimals that round-trip ("inf" for a failed candidate); flags are kabi_tuning_flag bits in decimal; recorded_at
// is seconds since the Unix epoch; variant is what the kernel named as the variant it ran (kabi_variant_fn; empty for
// a kernel without variants); crc32 is 8 lower-case hex digits of the CRC-32 (zlib's polynomial) of every byte
// before the tab that precedes it. Records for the same (device, op, problem, kernel, execution mode) supersede
// earlier ones: the last line wins; the mode is the KABI_TUNING_RECORD_GRAPH_MODE flag, so a kernel's eager and
// graph-mode records live side by side.
//
// Older formats: v3 lines are v4 lines without the variant; v2 lines have v3's fields, but a kabi of the v2 format
// would read a graph-mode record as the kernel's eager one; v1 lines lack flags, spread and time. Each version moved
// to a file of its own because a kabi of the previous format counts a line it cannot parse as corrupt and compacts
// it away. Lines of the older formats are still read (their variant empty), from an export or from
// DIR/tuning-v1.log .. DIR/tuning-v3.log, which are read before the v4 log and never written, so a kabi of an older
// format sharing the directory keeps its cache; they are carried into the v4 log at its next compaction.
//
// Concurrency: a writer takes flock(LOCK_EX) on the sibling file DIR/tuning-v4.lock, opens the log with O_APPEND
// and writes all of its lines with one write() (looping only on a short write, still under the lock), then
// fdatasync()s. Readers take LOCK_SH. flock locks open file descriptions, so threads of one process exclude each
// other too; an in-process mutex additionally guards the memory index.
//
// Crash safety: a writer killed mid-write leaves a line without its newline or with a bad checksum. Such lines
// are skipped and counted at load, reported once on stderr, and the file is compacted: the valid records are
// written to a temporary file, fsync()ed and renamed over the log, all under LOCK_EX. A writer that finds the log
// not ending in a newline starts its write with one, so a torn line never swallows the next record.
//
// Memory-only records (KABI_TUNING_RECORD_MEMORY_ONLY) live in the index of this process alone; a reload keeps
// them, a change of directory drops them, and the file never sees them.
#include "tuning_cache.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>
#include <unordered_map>

#include "error.hpp"
#include "file_io.hpp"

namespace kabi::core {
namespace {

constexpr char kLogName[] = "tuning-v4.log";
constexpr char kLockName[] = "tuning-v4.lock";
// The logs of older formats, oldest first, each with its lock: read before the log, never written.
constexpr std::array<std::pair<const char*, const char*>, 3> kLegacyLogs = {
    {{"tuning-v1.log", "tuning-v1.lock"}, {"tuning-v2.log", "tuning-v2.lock"}, {"tuning-v3.log", "tuning-v3.lock"}}};
constexpr char kRecordVersion[] = "v4";
// Fields of a line, its checksum included, per format: v4; v3 and v2 (v2 lines have the fields of v3 lines; only the
// meaning of a graph-mode flag is new); v1.
constexpr size_t kFieldCount = 13;
constexpr char kVariantlessRecordVersion[] = "v3";
constexpr char kPreGraphModeRecordVersion[] = "v2";
constexpr size_t kVariantlessFieldCount = 12;
constexpr char kLegacyRecordVersion[] = "v1";
constexpr size_t kLegacyFieldCount = 9;

struct Record {
  std::string device_signature;
  std::string op;
  std::string problem_key;
  TuningEntry entry;
};

constexpr std::array<uint32_t, 256> make_crc32_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t index = 0; index < 256; ++index) {
    uint32_t value = index;
    for (int bit = 0; bit < 8; ++bit) value = (value & 1u) ? (0xEDB88320u ^ (value >> 1)) : (value >> 1);
    table[index] = value;
  }
  return table;
}

uint32_t crc32(std::string_view bytes) {
  static constexpr std::array<uint32_t, 256> table = make_crc32_table();
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : bytes) crc = table[(crc ^ byte) & 0xFFu] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

void append_escaped(std::string& out, std::string_view field) {
  for (char c : field) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      default: out += c;
    }
  }
}

bool unescape(std::string_view field, std::string& out) {
  out.clear();
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] != '\\') {
      out += field[i];
      continue;
    }
    if (++i == field.size()) return false;
    switch (field[i]) {
      case '\\': out += '\\'; break;
      case 't': out += '\t'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      default: return false;
    }
  }
  return true;
}

void append_number(std::string& line, double value) {
  char number[64];
  const auto result = std::to_chars(number, number + sizeof(number), value);
  line.append(number, result.ptr);
}

std::string format_record(const Record& record) {
  std::string line = kRecordVersion;
  for (const std::string* field : {&record.device_signature, &record.op, &record.problem_key, &record.entry.kernel_name,
                                   &record.entry.fingerprint}) {
    line += '\t';
    append_escaped(line, *field);
  }
  line += '\t';
  append_number(line, record.entry.time_us);
  line += '\t';
  append_escaped(line, record.entry.note);
  line += '\t';
  line += std::to_string(record.entry.flags);
  line += '\t';
  append_number(line, record.entry.spread);
  line += '\t';
  line += std::to_string(record.entry.recorded_at);
  line += '\t';
  append_escaped(line, record.entry.variant);
  char checksum[16];
  std::snprintf(checksum, sizeof(checksum), "\t%08x\n", crc32(line));
  return line + checksum;
}

template <typename Number>
bool parse_whole(std::string_view text, Number& value) {
  const auto parsed = std::from_chars(text.data(), text.data() + text.size(), value);
  return parsed.ec == std::errc() && parsed.ptr == text.data() + text.size();
}

// Parses one line (without its newline), v4, v3, v2 or v1, into record; returns nullptr, or why the line is not a valid
// record.
const char* parse_record(std::string_view line, Record& record) {
  constexpr auto npos = std::string_view::npos;
  const size_t checksum_tab = line.rfind('\t');
  if (checksum_tab == npos || line.size() - checksum_tab != 9) return "no checksum field";
  uint32_t stored_checksum = 0;
  const auto checksum = std::from_chars(line.data() + checksum_tab + 1, line.data() + line.size(), stored_checksum, 16);
  if (checksum.ec != std::errc() || checksum.ptr != line.data() + line.size()) return "checksum is not 8 hex digits";
  const std::string_view body = line.substr(0, checksum_tab);
  if (crc32(body) != stored_checksum) return "checksum mismatch";
  std::vector<std::string_view> fields;
  for (size_t start = 0;;) {
    const size_t tab = body.find('\t', start);
    fields.push_back(body.substr(start, tab == npos ? npos : tab - start));
    if (tab == npos) break;
    start = tab + 1;
  }
  const bool with_variant = fields.size() == kFieldCount - 1 && fields[0] == kRecordVersion;
  const bool variantless = fields.size() == kVariantlessFieldCount - 1 &&
                           (fields[0] == kVariantlessRecordVersion || fields[0] == kPreGraphModeRecordVersion);
  const bool current = with_variant || variantless;
  const bool legacy = fields.size() == kLegacyFieldCount - 1 && fields[0] == kLegacyRecordVersion;
  if (!current && !legacy) return "neither v4 with 13, v3 or v2 with 12, nor v1 with 9 tab-separated fields";
  std::string* const text_fields[] = {&record.device_signature,  &record.op,
                                      &record.problem_key,       &record.entry.kernel_name,
                                      &record.entry.fingerprint, &record.entry.note};
  const size_t text_positions[] = {1, 2, 3, 4, 5, 7};
  for (size_t i = 0; i < 6; ++i) {
    if (!unescape(fields[text_positions[i]], *text_fields[i])) return "bad escape sequence";
  }
  if (!parse_whole(fields[6], record.entry.time_us) || std::isnan(record.entry.time_us) || record.entry.time_us < 0) {
    return "time_us is not a non-negative number";
  }
  if (current) {
    if (!parse_whole(fields[8], record.entry.flags)) return "flags is not an unsigned integer";
    if (!parse_whole(fields[9], record.entry.spread) || !std::isfinite(record.entry.spread) ||
        record.entry.spread < 0) {
      return "spread is not a non-negative number";
    }
    if (!parse_whole(fields[10], record.entry.recorded_at)) return "recorded_at is not an integer";
    if (with_variant && !unescape(fields[11], record.entry.variant)) return "bad escape sequence";
    // A memory-only record never reaches a file; one that claims to is not ours.
    if (record.entry.memory_only()) return "a memory-only record in a file";
  }
  if (record.device_signature.empty() || record.op.empty() || record.problem_key.empty() ||
      record.entry.kernel_name.empty()) {
    return "empty key field";
  }
  return nullptr;
}

struct ParsedLog {
  std::vector<Record> records;
  int64_t corrupt = 0;
};

// Every line ends in '\n'; a final fragment without one is a torn write and counts as corrupt.
ParsedLog parse_log(std::string_view text) {
  ParsedLog parsed;
  size_t start = 0;
  while (start < text.size()) {
    const size_t newline = text.find('\n', start);
    if (newline == std::string_view::npos) {
      ++parsed.corrupt;
      break;
    }
    const std::string_view line = text.substr(start, newline - start);
    start = newline + 1;
    if (line.empty()) continue;
    Record record;
    if (parse_record(line, record) == nullptr) {
      parsed.records.push_back(std::move(record));
    } else {
      ++parsed.corrupt;
    }
  }
  return parsed;
}

std::string environment(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string();
}

std::string index_key(const std::string& device_signature, const std::string& op, const std::string& problem_key) {
  std::string key = device_signature;
  key += '\x1f';
  key += op;
  key += '\x1f';
  key += problem_key;
  return key;
}

int64_t now_seconds() {
  return static_cast<int64_t>(std::time(nullptr));
}

}  // namespace

std::string default_cache_directory() {
  if (std::string directory = environment("KABI_CACHE_DIR"); !directory.empty()) return directory;
  if (std::string xdg = environment("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/kabi";
  if (std::string home = environment("HOME"); !home.empty()) return home + "/.cache/kabi";
  return {};
}

bool TuningEntry::gate_only() const { return (flags & KABI_TUNING_RECORD_GATE_ONLY) != 0; }
bool TuningEntry::memory_only() const { return (flags & KABI_TUNING_RECORD_MEMORY_ONLY) != 0; }
bool TuningEntry::graph_mode() const { return (flags & KABI_TUNING_RECORD_GRAPH_MODE) != 0; }
bool TuningEntry::screened() const { return (flags & KABI_TUNING_RECORD_SCREENED) != 0; }

struct TuningCache::State {
  std::mutex mutex;
  std::string directory_override;
  bool loaded = false;
  std::string directory;
  std::unordered_map<std::string, std::vector<Record>> index;
  int64_t record_count = 0;
  int64_t corrupt_record_count = 0;

  std::string log_path() const { return directory + "/" + kLogName; }
  std::string lock_path() const { return directory + "/" + kLockName; }
  std::string in_directory(const char* name) const { return directory + "/" + name; }

  void require_directory() const {
    if (directory.empty()) {
      throw Error(KABI_STATUS_IO_ERROR,
                  "tuning cache: no cache directory (set KABI_CACHE_DIR, XDG_CACHE_HOME or HOME)");
    }
  }

  void create_directory() const {
    require_directory();
    std::error_code error;
    std::filesystem::create_directories(directory, error);
    if (error) {
      throw Error(KABI_STATUS_IO_ERROR, "tuning cache: cannot create directory " + directory + ": " + error.message());
    }
  }

  // The latest record per kernel name and execution mode wins.
  void insert(Record record) {
    std::vector<Record>& records = index[index_key(record.device_signature, record.op, record.problem_key)];
    for (Record& existing : records) {
      if (existing.entry.kernel_name == record.entry.kernel_name &&
          existing.entry.graph_mode() == record.entry.graph_mode()) {
        existing = std::move(record);
        return;
      }
    }
    records.push_back(std::move(record));
    ++record_count;
  }

  std::vector<Record> memory_only_records() const {
    std::vector<Record> kept;
    for (const auto& item : index) {
      for (const Record& record : item.second) {
        if (record.entry.memory_only()) kept.push_back(record);
      }
    }
    return kept;
  }

  void load() {
    std::vector<Record> memory_only = memory_only_records();
    directory = directory_override.empty() ? default_cache_directory() : directory_override;
    index.clear();
    record_count = 0;
    corrupt_record_count = 0;
    loaded = true;
    if (!directory.empty() && std::filesystem::is_directory(directory)) {
      int64_t lines = 0;
      {
        FileLock lock(lock_path(), LOCK_SH);
        lines = index_log();
      }
      if (needs_compaction(lines)) {
        FileLock lock(lock_path(), LOCK_EX);
        lines = index_log();  // another process may have compacted it meanwhile
        if (needs_compaction(lines)) compact();
      }
    }
    for (Record& record : memory_only) insert(std::move(record));
  }

  // Reads the legacy logs, then the log, into the index; returns how many valid lines the log had.
  int64_t index_log() {
    index.clear();
    record_count = 0;
    for (const auto& [log_name, lock_name] : kLegacyLogs) {
      if (!std::filesystem::exists(in_directory(log_name))) continue;
      ParsedLog legacy;
      {
        FileLock lock(in_directory(lock_name), LOCK_SH);
        legacy = parse_log(read_file(in_directory(log_name)));
      }
      for (Record& record : legacy.records) insert(std::move(record));
    }
    const int64_t legacy_records = record_count;
    ParsedLog parsed = parse_log(read_file(log_path()));
    corrupt_record_count = parsed.corrupt;
    for (Record& record : parsed.records) insert(std::move(record));
    return static_cast<int64_t>(parsed.records.size()) + legacy_records;
  }

  // Corrupt lines are always rewritten away; superseded records once they outnumber the live ones (and 1024), so
  // a long-lived cache that keeps re-tuning stays proportional to what it holds.
  bool needs_compaction(int64_t valid_lines) const {
    const int64_t superseded = valid_lines - record_count;
    return corrupt_record_count > 0 || superseded > std::max<int64_t>(record_count, 1024);
  }

  // Called under LOCK_EX: rewrites the log with the live records only.
  void compact() const {
    if (corrupt_record_count > 0) {
      std::fprintf(stderr, "kabi: skipped %lld corrupt records in %s\n", static_cast<long long>(corrupt_record_count),
                   log_path().c_str());
    }
    std::string text;
    for (const auto& item : index) {
      for (const Record& record : item.second) {
        if (!record.entry.memory_only()) text += format_record(record);
      }
    }
    try {
      write_file_atomically(log_path(), text);
    } catch (const Error& error) {
      std::fprintf(stderr, "kabi: could not rewrite the tuning cache: %s\n", error.what());
    }
  }

  // Lazy loads do not fail the lookup that triggered them: an unreadable cache is reported and treated as empty.
  // reload() and set_directory() let the error through.
  void ensure_loaded() {
    if (loaded) return;
    try {
      load();
    } catch (const Error& error) {
      std::fprintf(stderr, "kabi: tuning cache not loaded: %s\n", error.what());
    }
  }

  // Appends the lines of records to the log with one write() under LOCK_EX, then updates the index.
  void append(std::vector<Record> records) {
    std::string text;
    for (const Record& record : records) {
      if (!record.entry.memory_only()) text += format_record(record);
    }
    if (!text.empty()) {
      create_directory();
      FileLock lock(lock_path(), LOCK_EX);
      const std::string path = log_path();
      const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) throw io_error("open", path, errno);
      try {
        struct stat status{};
        char last = '\n';
        if (::fstat(fd, &status) == 0 && status.st_size > 0) {
          const int read_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
          if (read_fd >= 0) {
            if (::pread(read_fd, &last, 1, status.st_size - 1) != 1) last = '\n';
            ::close(read_fd);
          }
        }
        if (last != '\n') text.insert(text.begin(), '\n');
        write_all(fd, text, path);
        if (::fdatasync(fd) != 0) throw io_error("sync", path, errno);
      } catch (...) {
        ::close(fd);
        throw;
      }
      ::close(fd);
    }
    for (Record& record : records) insert(std::move(record));
  }
};

TuningCache::TuningCache() : state_(std::make_unique<State>()) {}

TuningCache::TuningCache(const std::string& directory) : state_(std::make_unique<State>()) {
  state_->directory_override = directory;
}

TuningCache::~TuningCache() = default;

TuningCache& TuningCache::instance() {
  // Never destroyed: kernels and plugins may still consult the cache while other statics are torn down at exit.
  static TuningCache* cache = new TuningCache();
  return *cache;
}

std::vector<TuningEntry> TuningCache::lookup(const std::string& device_signature, const std::string& op,
                                             const std::string& problem_key) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  std::vector<TuningEntry> entries;
  const auto found = state_->index.find(index_key(device_signature, op, problem_key));
  if (found != state_->index.end()) {
    for (const Record& record : found->second) entries.push_back(record.entry);
  }
  return entries;
}

void TuningCache::store(const std::string& device_signature, const std::string& op, const std::string& problem_key,
                        const std::vector<TuningEntry>& entries) {
  const auto require = [](bool condition, const std::string& message) {
    if (!condition) throw Error(KABI_STATUS_INVALID_ARGUMENT, "tuning cache: " + message);
  };
  require(!device_signature.empty(), "device_signature is empty");
  require(!op.empty(), "op is empty");
  require(!problem_key.empty(), "problem_key is empty");
  std::vector<Record> records;
  for (const TuningEntry& entry : entries) {
    require(!entry.kernel_name.empty(), "an entry has an empty kernel_name");
    require(!std::isnan(entry.time_us) && entry.time_us >= 0, "entry for " + entry.kernel_name + " has time_us " +
                                                                  std::to_string(entry.time_us) +
                                                                  "; expected a non-negative number or infinity");
    require(std::isfinite(entry.spread) && entry.spread >= 0,
            "entry for " + entry.kernel_name + " has spread " + std::to_string(entry.spread) +
                "; expected a non-negative finite number");
    require((entry.flags & ~static_cast<uint32_t>(KABI_TUNING_RECORD_GATE_ONLY | KABI_TUNING_RECORD_MEMORY_ONLY |
                                                  KABI_TUNING_RECORD_GRAPH_MODE | KABI_TUNING_RECORD_SCREENED)) == 0,
            "entry for " + entry.kernel_name + " has unknown flags " + std::to_string(entry.flags));
    require(!(entry.graph_mode() && entry.gate_only()),
            "entry for " + entry.kernel_name + " is a gate-only verdict in graph mode; verdicts are eager records");
    require(!(entry.screened() && (entry.gate_only() || !std::isfinite(entry.time_us))),
            "entry for " + entry.kernel_name + " is screened without a finite screened time");
    require(!(entry.gate_only() && std::isinf(entry.time_us)),
            "entry for " + entry.kernel_name + " is a gate-only verdict (passed) with time_us infinity (failed)");
    Record record{device_signature, op, problem_key, entry};
    if (record.entry.recorded_at == 0) record.entry.recorded_at = now_seconds();
    records.push_back(std::move(record));
  }
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  state_->append(std::move(records));
}

std::vector<TuningListing> TuningCache::list(const std::string& op) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->load();  // include what other processes recorded since this one loaded
  std::vector<TuningListing> listing;
  for (const auto& item : state_->index) {
    for (const Record& record : item.second) {
      if (op.empty() || record.op == op) {
        listing.push_back(TuningListing{record.device_signature, record.op, record.problem_key, record.entry});
      }
    }
  }
  std::sort(listing.begin(), listing.end(), [](const TuningListing& left, const TuningListing& right) {
    return std::make_tuple(std::cref(left.device_signature), std::cref(left.op), std::cref(left.problem_key),
                           std::cref(left.entry.kernel_name), left.entry.graph_mode()) <
           std::make_tuple(std::cref(right.device_signature), std::cref(right.op), std::cref(right.problem_key),
                           std::cref(right.entry.kernel_name), right.entry.graph_mode());
  });
  return listing;
}

std::string TuningCache::directory() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  return state_->directory;
}

std::string TuningCache::file_path() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  state_->require_directory();
  return state_->log_path();
}

void TuningCache::set_directory(const std::string& directory) {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->directory_override = directory;
  // Memory-only records belong to the cache they were measured into; another cache starts without them.
  state_->index.clear();
  state_->load();
}

void TuningCache::reload() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->load();
}

void TuningCache::clear() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  if (!state_->directory.empty() && std::filesystem::is_directory(state_->directory)) {
    std::vector<std::pair<std::string, std::string>> logs = {{state_->log_path(), state_->lock_path()}};
    for (const auto& [log_name, lock_name] : kLegacyLogs) {
      logs.emplace_back(state_->in_directory(log_name), state_->in_directory(lock_name));
    }
    for (const auto& [log, lock_file] : logs) {
      if (!std::filesystem::exists(log)) continue;
      FileLock lock(lock_file, LOCK_EX);
      if (::truncate(log.c_str(), 0) != 0 && errno != ENOENT) throw io_error("truncate", log, errno);
    }
  }
  state_->index.clear();
  state_->record_count = 0;
  state_->corrupt_record_count = 0;
}

void TuningCache::export_to(const std::string& path) {
  if (path.empty()) throw Error(KABI_STATUS_INVALID_ARGUMENT, "tuning cache export: path is empty");
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->load();  // include what other processes recorded since this one loaded
  std::vector<const Record*> records;
  for (const auto& item : state_->index) {
    for (const Record& record : item.second) {
      if (!record.entry.memory_only()) records.push_back(&record);
    }
  }
  std::sort(records.begin(), records.end(), [](const Record* left, const Record* right) {
    return std::make_tuple(std::cref(left->device_signature), std::cref(left->op), std::cref(left->problem_key),
                           std::cref(left->entry.kernel_name), left->entry.graph_mode()) <
           std::make_tuple(std::cref(right->device_signature), std::cref(right->op), std::cref(right->problem_key),
                           std::cref(right->entry.kernel_name), right->entry.graph_mode());
  });
  std::string text;
  for (const Record* record : records) text += format_record(*record);
  write_file_atomically(path, text);
}

void TuningCache::import_from(const std::string& path) {
  if (path.empty()) throw Error(KABI_STATUS_INVALID_ARGUMENT, "tuning cache import: path is empty");
  if (!std::filesystem::exists(path)) {
    throw Error(KABI_STATUS_IO_ERROR, "tuning cache import: " + path + " does not exist");
  }
  const std::string text = read_file(path);
  std::vector<Record> records;
  size_t start = 0;
  for (int64_t line_number = 1; start < text.size(); ++line_number) {
    const size_t newline = text.find('\n', start);
    const std::string_view line(text.data() + start, (newline == std::string::npos ? text.size() : newline) - start);
    start = newline == std::string::npos ? text.size() : newline + 1;
    if (line.empty()) continue;
    Record record;
    const char* problem =
        newline == std::string::npos ? "the last line has no newline: a truncated file" : parse_record(line, record);
    if (problem != nullptr) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, "tuning cache import: " + path + ":" + std::to_string(line_number) +
                                                    ": not a tuning record (" + problem + "); nothing was imported");
    }
    records.push_back(std::move(record));
  }
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  state_->append(std::move(records));
}

int64_t TuningCache::record_count() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  return state_->record_count;
}

int64_t TuningCache::corrupt_record_count() {
  std::lock_guard<std::mutex> guard(state_->mutex);
  state_->ensure_loaded();
  return state_->corrupt_record_count;
}

}  // namespace kabi::core
