// Devices, plugins, device binaries, the tuning cache and versions.
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <tuple>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "errors.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace kabi::python {
namespace {

py::dict device_info(int32_t device_type, int32_t device_index) {
  kabi_device_info info{};
  info.struct_size = sizeof(info);
  check(kabi_device_info_get(device_type, device_index, &info));
  py::dict result;
  result["device_type"] = info.device_type;
  result["device_index"] = info.device_index;
  result["arch"] = info.arch;
  result["compute_units"] = info.compute_units;
  result["features"] = info.features;
  result["driver_version"] = info.driver_version;
  result["total_memory_bytes"] = info.total_memory_bytes;
  result["vendor"] = std::string(info.vendor, strnlen(info.vendor, sizeof(info.vendor)));
  result["name"] = std::string(info.name, strnlen(info.name, sizeof(info.name)));
  return result;
}

std::string device_signature(int32_t device_type, int32_t device_index) {
  std::vector<char> buffer(1024);
  check(kabi_device_signature(device_type, device_index, buffer.data(), buffer.size()));
  return std::string(buffer.data());
}

int32_t device_count(int32_t device_type) {
  int32_t count = 0;
  check(kabi_device_count(device_type, &count));
  return count;
}

py::list plugin_records() {
  py::list records;
  const int32_t count = kabi_plugin_count();
  for (int32_t i = 0; i < count; ++i) {
    kabi_plugin_record record{};
    record.struct_size = sizeof(record);
    check(kabi_plugin_at(i, &record));
    py::dict entry;
    entry["path"] = record.path != nullptr ? record.path : "";
    entry["name"] = record.name != nullptr ? record.name : "";
    entry["version"] = record.version != nullptr ? record.version : "";
    entry["abi_version"] = record.abi_version;
    entry["loaded"] = record.state == KABI_PLUGIN_LOADED;
    entry["message"] = record.message != nullptr ? record.message : "";
    entry["num_kernels"] = record.num_kernels;
    entry["kind"] = record.kind == KABI_PLUGIN_KIND_BINARIES ? "binaries" : "library";
    records.append(entry);
  }
  return records;
}

using TuningMeasurement = std::tuple<std::string, double, std::string, uint32_t, double>;

void tuning_store(const std::string& op_name, const py::sequence& inputs, const py::sequence& outputs,
                  const std::vector<TuningMeasurement>& measurements, const py::sequence& attributes) {
  kabi_op op = find_op(op_name);
  CallTensors tensors(op, inputs, outputs, 0, attributes);
  std::vector<kabi_tuning_record> records;
  records.reserve(measurements.size());
  for (const auto& [kernel_name, time_us, note, flags, spread] : measurements) {
    kabi_tuning_record record{};
    record.struct_size = sizeof(record);
    record.kernel = find_kernel(op_name, kernel_name);
    record.time_us = time_us;
    record.note = note.c_str();
    record.flags = flags;
    record.spread = spread;
    records.push_back(record);
  }
  check(kabi_tuning_store(op, &tensors.args(), records.data(), static_cast<int32_t>(records.size())));
}

py::list cache_list(const std::optional<std::string>& op) {
  py::list records;
  const auto visit = [](void* user_data, const kabi_cache_entry* entry) -> int {
    py::dict record;
    record["device"] = entry->device_signature;
    record["op"] = entry->op;
    record["problem"] = entry->problem_key;
    record["kernel"] = entry->kernel_name;
    record["fingerprint"] = entry->fingerprint;
    record["time_us"] = entry->time_us;
    record["note"] = entry->note;
    record["flags"] = entry->flags;
    record["spread"] = entry->spread;
    record["recorded_at"] = entry->recorded_at;
    record["variant"] = entry->variant;
    static_cast<py::list*>(user_data)->append(std::move(record));
    return 0;
  };
  check(kabi_cache_list(op ? op->c_str() : nullptr, visit, &records));
  return records;
}

std::string cache_directory() {
  std::vector<char> buffer(4096);
  check(kabi_cache_directory(buffer.data(), buffer.size()));
  return std::string(buffer.data());
}

py::dict bit_names(const char* (*name_of)(uint32_t), int bits) {
  py::dict names;
  for (int bit = 0; bit < bits; ++bit) {
    const char* name = name_of(1u << bit);
    if (name != nullptr) names[py::str(name)] = 1u << bit;
  }
  return names;
}

}  // namespace

void bind_runtime(py::module_& m) {
  m.def("abi_version", &kabi_abi_version, "The ABI version libkabi implements, as (MAJOR << 16) | MINOR.");
  m.def("library_version", []() { return std::string(kabi_library_version()); }, "libkabi's release version.");
  m.attr("HEADER_ABI_VERSION") = KABI_ABI_VERSION;
  m.def("status_name", [](int status) { return std::string(kabi_status_name(static_cast<kabi_status>(status))); },
        py::arg("status"));

  m.attr("DTYPES") = bit_names(&kabi_dtype_name, 32);
  py::dict features;
  for (int bit = 0; bit < 64; ++bit) {
    const char* name = kabi_feature_name(uint64_t{1} << bit);
    if (name != nullptr) features[py::str(name)] = uint64_t{1} << bit;
  }
  m.attr("FEATURES") = features;
  py::dict layouts;
  layouts["contiguous"] = KABI_LAYOUT_CONTIGUOUS;
  layouts["row_strided"] = KABI_LAYOUT_ROW_STRIDED;
  layouts["col_strided"] = KABI_LAYOUT_COL_STRIDED;
  layouts["general"] = KABI_LAYOUT_GENERAL;
  m.attr("LAYOUTS") = layouts;
  py::dict batch_modes;
  batch_modes["none"] = KABI_BATCH_NONE;
  batch_modes["uniform"] = KABI_BATCH_UNIFORM;
  batch_modes["any"] = KABI_BATCH_ANY;
  m.attr("BATCH_MODES") = batch_modes;

  m.def("device_count", &device_count, py::arg("device_type"), "Devices of a DLDeviceType (0 without a driver).");
  m.def("device_info", &device_info, py::arg("device_type"), py::arg("device_index") = 0,
        "What libkabi knows of one device, as a dict.");
  m.def("device_signature", &device_signature, py::arg("device_type"), py::arg("device_index") = 0,
        "The signature that keys tuning decisions, e.g. 'cuda|NVIDIA H200|sm90|drv13000|abi2'.");

  m.def("plugin_load", [](const std::string& path) { check(kabi_plugin_load(path.c_str())); }, py::arg("path"),
        "Load a plugin shared library; a refusal raises and is recorded.");
  m.def("plugin_load_builtin", []() { check(kabi_plugin_load_builtin()); },
        "Load the plugins that ship beside libkabi (idempotent).");
  m.def("plugin_load_builtin_device", [](int32_t device_type) { check(kabi_plugin_load_builtin_device(device_type)); },
        py::arg("device_type"), "Load the built-in plugin serving one DLPack device type (idempotent).");
  m.def("plugin_load_from_environment", []() { check(kabi_plugin_load_from_environment()); },
        "Load every plugin named in KABI_PLUGIN_PATH.");
  m.def("plugin_records", &plugin_records, "Every plugin load, loaded or refused, as dicts.");
  m.def(
      "binaries_load",
      [](const std::string& directory) {
        int32_t registered = 0;
        check(kabi_binaries_load(directory.c_str(), &registered));
        return registered;
      },
      py::arg("directory"), "Register every NAME.kabi-manifest device binary in a directory; returns the count.");

  m.def("tuning_store", &tuning_store, py::arg("op"), py::arg("inputs"), py::arg("outputs"),
        py::arg("measurements"), py::arg("attributes") = py::tuple(),
        "Record measured candidates (kernel name, time in us or inf, note, kabi_tuning_flag bits, relative spread) "
        "for a call's problem.");
  m.attr("TUNING_RECORD_GATE_ONLY") = static_cast<uint32_t>(KABI_TUNING_RECORD_GATE_ONLY);
  m.attr("TUNING_RECORD_MEMORY_ONLY") = static_cast<uint32_t>(KABI_TUNING_RECORD_MEMORY_ONLY);
  m.attr("TUNING_RECORD_GRAPH_MODE") = static_cast<uint32_t>(KABI_TUNING_RECORD_GRAPH_MODE);
  m.attr("TUNING_RECORD_SCREENED") = static_cast<uint32_t>(KABI_TUNING_RECORD_SCREENED);
  m.def("cache_list", &cache_list, py::arg("op") = py::none(),
        "Every live tuning record (disk and memory-only), sorted, as dicts; only op's when given.");
  m.def("cache_directory", &cache_directory, "The tuning cache directory in use.");
  m.def(
      "cache_default_directory",
      []() {
        std::vector<char> buffer(4096);
        check(kabi_cache_default_directory(buffer.data(), buffer.size()));
        return std::string(buffer.data());
      },
      "The default cache directory (KABI_CACHE_DIR, else $XDG_CACHE_HOME/kabi, else ~/.cache/kabi), whatever "
      "cache_set_directory chose: where compiled kernel images live.");
  m.def(
      "cache_set_directory",
      [](const std::optional<std::string>& directory) {
        check(kabi_cache_set_directory(directory ? directory->c_str() : nullptr));
      },
      py::arg("directory"), "Use another tuning cache directory (None: back to the default); reloads.");
  m.def("cache_reload", []() { check(kabi_cache_reload()); }, "Re-read the tuning cache from disk.");
  m.def("cache_clear", []() { check(kabi_cache_clear()); }, "Forget every tuning decision, in memory and on disk.");
  m.def("cache_export", [](const std::string& path) { check(kabi_cache_export(path.c_str())); }, py::arg("path"),
        "Write every valid tuning record to a file.");
  m.def("cache_import", [](const std::string& path) { check(kabi_cache_import(path.c_str())); }, py::arg("path"),
        "Merge a file written by cache_export.");
  m.def(
      "cache_stats",
      []() {
        int64_t records = 0;
        int64_t corrupt = 0;
        check(kabi_cache_stats(&records, &corrupt));
        return std::make_pair(records, corrupt);
      },
      "(valid records, corrupt records skipped at the last load).");
}

}  // namespace kabi::python
