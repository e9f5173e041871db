#include "tuning_cache.hpp"

namespace kabi::core {

TuningCache& TuningCache::instance() {
  static TuningCache cache;
  return cache;
}

std::vector<TuningEntry> TuningCache::lookup(const std::string&, const std::string&, const std::string&) {
  return {};
}
void TuningCache::store(const std::string&, const std::string&, const std::string&,
                        const std::vector<TuningEntry>&) {}
std::string TuningCache::directory() { return {}; }
void TuningCache::set_directory(const std::string&) {}
void TuningCache::reload() {}
void TuningCache::clear() {}
void TuningCache::export_to(const std::string&) {}
void TuningCache::import_from(const std::string&) {}
int64_t TuningCache::record_count() { return 0; }
int64_t TuningCache::corrupt_record_count() { return 0; }

}  // namespace kabi::core
