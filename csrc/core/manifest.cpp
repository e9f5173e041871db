// Reading NAME.kabi-manifest files (docs/manifest.md) and registering them as device-binary kernels.
//
// A directory loads all or nothing: every manifest is read, checked against its op, and turned into a kernel first;
// only then are they committed to the table together. An image is read and checked against the manifest's hash at
// its kernel's first launch (device_binary.cpp), not here. A kernel already registered under the same op,
// name and fingerprint is skipped, so loading a directory twice is harmless.
#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <exception>
#include <filesystem>
#include <map>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>

#include "device_binary.hpp"
#include "error.hpp"
#include "file_io.hpp"
#include "manifest.hpp"
#include "names.hpp"
#include "registry.hpp"
#include "struct_io.hpp"

namespace kabi::core {
namespace {

// Format 2 is format 1 with the fields of ABI 2.4 (input_layouts, a param's divisible_by): a writer uses it only for
// a manifest that has them, so that a 2.3 libkabi, which cannot check their assumptions, refuses it by its first line
// instead of loading a binary it would launch on problems the image was not built for. Format 3 is format 2 with the
// zeroed_scratch param of ABI 2.5, for the same reason: a 2.4 libkabi could not give the kernel zeroed memory.
// kFormatLines[f - 1] is the first line of format f.
const char* const kFormatLines[] = {"kabi-manifest 1", "kabi-manifest 2", "kabi-manifest 3"};
const char* const kFormatAbi[] = {"2.0", "2.4", "2.5"};
constexpr int kNewestFormat = 3;
constexpr char kManifestSuffix[] = ".kabi-manifest";

// Every key a manifest may have: the kRequiredKeyCount required ones, then the optional ones. A key's position is its
// slot in Manifest::lines_by_key_.
constexpr std::string_view kKeys[] = {
    "abi_major", "op", "name", "backend", "device", "dtypes", "layouts", "image", "image_format", "image_fnv1a64",
    "arch", "entry", "grid", "block",
    "archs", "arch_min", "arch_max", "priority", "features", "alignment", "batch_mode", "fingerprint",
    "shared_memory_bytes", "cluster_size", "type_constraints", "param", "input_layouts"};
constexpr size_t kRequiredKeyCount = 14;
constexpr size_t kKeyCount = std::size(kKeys);

// The slot of a known key, or kKeyCount. string_view compares lengths first, so most keys differ at no cost.
size_t key_slot(std::string_view key) {
  return static_cast<size_t>(std::find(std::begin(kKeys), std::end(kKeys), key) - std::begin(kKeys));
}

struct Line {
  std::string key;
  std::string value;
  int number = 0;
};

std::string_view trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t") - begin + 1);
}

std::vector<std::string> split_trimmed(const std::string& text, char separator) {
  std::vector<std::string> items = split(text, separator);
  for (std::string& item : items) item = std::string(trim(item));
  return items;
}

// The whitespace-separated words of text, as views into it.
std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> found;
  size_t begin = text.find_first_not_of(" \t");
  while (begin != std::string_view::npos) {
    const size_t end = text.find_first_of(" \t", begin);
    found.push_back(text.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    begin = end == std::string_view::npos ? end : text.find_first_not_of(" \t", end);
  }
  return found;
}

// One manifest file being read; every error names the file, the line and the field.
class Manifest {
 public:
  explicit Manifest(std::filesystem::path path) : path_(std::move(path)) {}
  // lines_by_key_ points into lines_.
  Manifest(const Manifest&) = delete;
  Manifest& operator=(const Manifest&) = delete;

  void read() {
    const std::string contents = read_regular_file(path_.string());
    // Each line is a view into contents, up to its '\n'; a last line without one counts too.
    std::string_view rest = contents;
    int number = 0;
    while (!rest.empty()) {
      const size_t end = rest.find('\n');
      std::string_view text = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
      ++number;
      if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
      if (number == 1) {
        for (int format = 1; format <= kNewestFormat; ++format) {
          if (text == kFormatLines[format - 1]) format_ = format;
        }
        if (format_ == 0) {
          fail(1, "",
               "first line is \"" + std::string(text) + "\"; expected \"" + kFormatLines[0] + "\", \"" +
                   kFormatLines[1] + "\" or \"" + kFormatLines[2] + "\" (a newer format needs a newer kabi)");
        }
        continue;
      }
      const std::string_view content = trim(text);
      if (content.empty() || content[0] == '#') continue;
      const size_t equals = content.find('=');
      if (equals == std::string_view::npos) {
        fail(number, "", "expected `key = value`, got \"" + std::string(content) + "\"");
      }
      lines_.push_back(
          Line{std::string(trim(content.substr(0, equals))), std::string(trim(content.substr(equals + 1))), number});
    }
    if (number == 0) fail(1, "", std::string("file is empty; expected \"") + kFormatLines[0] + "\"");
    // Each known key's first line (param repeats: all() reads it), for required() and find(), before the loop below
    // refuses unknown and repeated keys: abi_major is read in between.
    for (const Line& line : lines_) {
      const size_t slot = key_slot(line.key);
      if (slot != kKeyCount && line.key != "param" && lines_by_key_[slot] == nullptr) lines_by_key_[slot] = &line;
    }
    // The ABI major first: a manifest for another major may use keys this reader does not know.
    const Line& abi = required("abi_major");
    if (integer(abi, 0, INT32_MAX) != KABI_ABI_VERSION_MAJOR) {
      fail(abi.number, abi.key,
           "is " + abi.value + "; this libkabi implements ABI major " + std::to_string(KABI_ABI_VERSION_MAJOR) +
               ": rebuild the binary and its manifest against this kabi (kabi binaries compile)",
           KABI_STATUS_ABI_MISMATCH);
    }
    for (const Line& line : lines_) {
      const size_t slot = key_slot(line.key);
      if (slot == kKeyCount) fail(line.number, line.key, "unknown key");
      const Line* first = lines_by_key_[slot];
      if (first != nullptr && first != &line) {
        fail(line.number, line.key, "repeats the key of line " + std::to_string(first->number));
      }
    }
    for (size_t slot = 0; slot < kRequiredKeyCount; ++slot) required(kKeys[slot]);
  }

  const Line& required(std::string_view key) const {
    if (const Line* line = find(key)) return *line;
    throw Error(KABI_STATUS_INVALID_ARGUMENT, path_.string() + ": missing required key " + std::string(key));
  }

  // The line of a key other than param (which repeats: all()), or nullptr.
  const Line* find(std::string_view key) const {
    const size_t slot = key_slot(key);
    return slot == kKeyCount ? nullptr : lines_by_key_[slot];
  }

  std::vector<const Line*> all(const std::string& key) const {
    std::vector<const Line*> found;
    for (const Line& line : lines_) {
      if (line.key == key) found.push_back(&line);
    }
    return found;
  }

  int64_t integer(const Line& line, int64_t minimum, int64_t maximum) const {
    return parse_integer(line, line.value, line.key, minimum, maximum);
  }

  int64_t parse_integer(const Line& line, std::string_view text, const std::string& field, int64_t minimum,
                        int64_t maximum) const {
    int64_t value = 0;
    const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
    if (text.empty() || result.ec != std::errc() || result.ptr != text.data() + text.size()) {
      fail(line.number, field, "\"" + std::string(text) + "\" is not an integer");
    }
    if (value < minimum || value > maximum) {
      fail(line.number, field,
           std::to_string(value) + " is outside [" + std::to_string(minimum) + ", " + std::to_string(maximum) + "]");
    }
    return value;
  }

  [[noreturn]] void fail(int number, const std::string& field, const std::string& message,
                         kabi_status status = KABI_STATUS_INVALID_ARGUMENT) const {
    throw Error(status,
                path_.string() + ":" + std::to_string(number) + ": " + (field.empty() ? "" : field + ": ") + message);
  }

  const std::filesystem::path& path() const { return path_; }

  // Refuses a field of `format` in a manifest whose first line says an older one.
  void require_format(const Line& line, const std::string& field, int format) const {
    if (format_ < format) {
      fail(line.number, field,
           std::string("needs the first line \"") + kFormatLines[format - 1] + "\" (a field of ABI " +
               kFormatAbi[format - 1] + "), not \"" + kFormatLines[format_ - 1] + "\"");
    }
  }

 private:
  std::filesystem::path path_;
  std::vector<Line> lines_;
  // Each key's line by its slot in kKeys (param's stays empty): the reader looks up some 30 keys per manifest.
  std::array<const Line*, kKeyCount> lines_by_key_{};
  int format_ = 0;  // read from the first line
};

// The storage a kabi_kernel_desc points into while make_kernel copies it, and the image file the binary reads at its
// first launch.
struct Declaration {
  std::vector<std::string> strings;  // reserved up front: pointers into it stay valid
  std::vector<int32_t> archs;
  ImageFile image;
  std::vector<kabi_launch_param> params;
  std::vector<uint32_t> input_layouts;
  kabi_device_binary binary{};
  kabi_kernel_desc kernel{};

  const char* keep(const std::string& text) {
    strings.push_back(text);
    return strings.back().c_str();
  }
};

uint32_t parse_bits(const Manifest& manifest, const Line& line, uint32_t (*bit_of)(const std::string&) noexcept) {
  uint32_t bits = 0;
  for (const std::string& name : split_trimmed(line.value, ',')) {
    const uint32_t bit = bit_of(name);
    if (bit == 0) manifest.fail(line.number, line.key, "unknown name \"" + name + "\"");
    bits |= bit;
  }
  if (bits == 0) manifest.fail(line.number, line.key, "is empty");
  return bits;
}

// input_layouts = contiguous,row_strided; col_strided: one comma list of layout classes (or `any`) per input of the
// op, in input order.
void read_input_layouts(const Manifest& manifest, const Op& op, Declaration& declaration) {
  const Line* line = manifest.find("input_layouts");
  if (line == nullptr) return;
  manifest.require_format(*line, line->key, 2);
  const std::vector<std::string> entries = split_trimmed(line->value, ';');
  const auto& inputs = op.schema.inputs;
  if (entries.size() != inputs.size()) {
    std::vector<std::string> names;
    for (const auto& input : inputs) names.push_back(input.name);
    manifest.fail(line->number, line->key,
                  std::to_string(entries.size()) + " entries separated by ';'; op " + op.name + " has " +
                      std::to_string(inputs.size()) + " inputs (" + join(names, ", ") + ")");
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    uint32_t mask = 0;
    for (const std::string& name : split_trimmed(entries[i], ',')) {
      const uint32_t bit = name == "any" ? KABI_LAYOUT_ANY : layout_bit_from_name(name);
      if (bit == 0) {
        manifest.fail(line->number, line->key,
                      "unknown layout \"" + name + "\" for " + inputs[i].name +
                          "; expected contiguous, row_strided, col_strided, general or any");
      }
      mask |= bit;
    }
    if (mask == 0) manifest.fail(line->number, line->key, "the entry of " + inputs[i].name + " is empty; write any");
    declaration.input_layouts.push_back(mask);
  }
  declaration.kernel.input_layouts = declaration.input_layouts.data();
  declaration.kernel.num_input_layouts = static_cast<int32_t>(declaration.input_layouts.size());
}

// The image file and the hash it must have. Its bytes are read and checked at the kernel's first launch
// (device_binary.cpp), so that registering many binaries reads none of them.
void read_image(const Manifest& manifest, Declaration& declaration) {
  const Line& image = manifest.required("image");
  if (image.value.empty() || image.value.find('/') != std::string::npos) {
    manifest.fail(image.number, image.key, "\"" + image.value + "\" is not a file name in the manifest's directory");
  }
  const std::filesystem::path path = manifest.path().parent_path() / image.value;
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    manifest.fail(image.number, image.key, "image file " + path.string() + " is missing", KABI_STATUS_IO_ERROR);
  }
  const Line& hash = manifest.required("image_fnv1a64");
  const bool well_formed =
      hash.value.size() == 16 && hash.value.find_first_not_of("0123456789abcdef") == std::string::npos;
  if (!well_formed) manifest.fail(hash.number, hash.key, "\"" + hash.value + "\" is not 16 lower-case hex digits");
  ImageFile& file = declaration.image;
  file.path = path.string();
  file.manifest = manifest.path().string();
  file.image_line = image.number;
  file.hash_line = hash.number;
  file.declared_fnv1a64 = std::stoull(hash.value, nullptr, 16);
}

void read_param(const Manifest& manifest, const Line& line, const Op& op, Declaration& declaration) {
  const std::vector<std::string_view> items = words(line.value);
  const std::string kind_name = items.empty() ? std::string() : std::string(items.front());
  static const std::map<std::string, std::pair<int32_t, std::vector<std::string>>, std::less<>> kinds = {
      {"tensor", {KABI_PARAM_TENSOR_DATA, {"index"}}},
      {"dim", {KABI_PARAM_DIM, {"name", "size"}}},
      {"stride", {KABI_PARAM_STRIDE, {"index", "dim", "size"}}},
      {"constant", {KABI_PARAM_CONSTANT, {"value", "size"}}},
      {"scratch", {KABI_PARAM_SCRATCH, {"value"}}},
      {"zeroed_scratch", {KABI_PARAM_ZEROED_SCRATCH, {"value"}}},
      {"attribute", {KABI_PARAM_ATTRIBUTE, {"index", "size"}}},
      {"workspace", {KABI_PARAM_WORKSPACE, {}}}};
  const auto kind = kinds.find(kind_name);
  if (kind == kinds.end()) {
    manifest.fail(line.number, "param",
                  "kind \"" + kind_name +
                      "\"; expected tensor, dim, stride, constant, scratch, zeroed_scratch, attribute or workspace");
  }
  if (kind->second.first == KABI_PARAM_ZEROED_SCRATCH) manifest.require_format(line, "param zeroed_scratch", 3);
  const bool takes_divisor = kind->second.first == KABI_PARAM_DIM || kind->second.first == KABI_PARAM_STRIDE;
  // (field, value) views into the line, in its order: a handful per line, so a scan beats a map's allocations.
  std::vector<std::pair<std::string_view, std::string_view>> fields;
  for (size_t position = 1; position < items.size(); ++position) {
    const std::string_view item = items[position];
    const size_t equals = item.find('=');
    const std::string_view field = item.substr(0, equals);
    const auto& allowed = kind->second.second;
    if (field == "divisible_by" && equals != std::string_view::npos) {
      if (!takes_divisor) {
        manifest.fail(line.number, "param divisible_by", "only dim and stride parameters take one, not " + kind_name);
      }
    } else if (equals == std::string_view::npos ||
               std::find(allowed.begin(), allowed.end(), field) == allowed.end()) {
      manifest.fail(line.number, "param",
                    "\"" + std::string(item) + "\" is not a field of a " + kind_name + " parameter");
    }
    fields.emplace_back(field, item.substr(equals + 1));
  }
  // A field given twice keeps its last value.
  const auto value_of = [&fields](std::string_view field) -> const std::string_view* {
    for (auto given = fields.rbegin(); given != fields.rend(); ++given) {
      if (given->first == field) return &given->second;
    }
    return nullptr;
  };
  kabi_launch_param param{};
  param.struct_size = sizeof param;
  param.kind = kind->second.first;
  param.size_bytes = 8;
  // The index of an attribute parameter counts the op's attributes; every other one counts its tensors.
  const int64_t indexed = param.kind == KABI_PARAM_ATTRIBUTE
                              ? static_cast<int64_t>(op.schema.attributes.size())
                              : static_cast<int64_t>(op.schema.inputs.size() + op.schema.outputs.size());
  for (const std::string& field : kind->second.second) {
    const std::string_view* found = value_of(field);
    if (found == nullptr) manifest.fail(line.number, "param", kind_name + " needs " + field + "=");
    const std::string label = "param " + field;
    if (field == "index")
      param.index = static_cast<int32_t>(manifest.parse_integer(line, *found, label, 0, indexed - 1));
    if (field == "dim") param.dim = static_cast<int32_t>(manifest.parse_integer(line, *found, label, -16, 15));
    if (field == "value") {
      // A constant is any integer; scratch of either kind is a count of bytes.
      const bool bytes = param.kind == KABI_PARAM_SCRATCH || param.kind == KABI_PARAM_ZEROED_SCRATCH;
      param.value = manifest.parse_integer(line, *found, label, bytes ? 0 : INT64_MIN, INT64_MAX);
    }
    if (field == "size") {
      param.size_bytes = static_cast<int32_t>(manifest.parse_integer(line, *found, label, 4, 8));
      if (param.size_bytes != 4 && param.size_bytes != 8) manifest.fail(line.number, label, "expected 4 or 8");
    }
    if (field == "name") param.name = declaration.keep(std::string(*found));
  }
  if (const std::string_view* divisor = value_of("divisible_by")) {
    manifest.require_format(line, "param divisible_by", 2);
    param.divisible_by = manifest.parse_integer(line, *divisor, "param divisible_by", 0, INT64_C(1) << 62);
    if ((param.divisible_by & (param.divisible_by - 1)) != 0) {
      manifest.fail(line.number, "param divisible_by", std::string(*divisor) + " is not a power of two");
    }
  }
  if (param.kind == KABI_PARAM_DIM) {
    const std::string name = param.name;
    const auto& dims = op.schema.dim_names;
    if (name != "batch" && std::find(dims.begin(), dims.end(), name) == dims.end()) {
      manifest.fail(line.number, "param name",
                    "op " + op.name + " has no dimension " + name + " (it has " + join(dims, ", ") + ", batch)");
    }
  }
  declaration.params.push_back(param);
}

void read_grid(const Manifest& manifest, const Op& op, Declaration& declaration) {
  const Line& grid = manifest.required("grid");
  const std::vector<std::string> axes = split_trimmed(grid.value, ';');
  if (axes.size() != 3) manifest.fail(grid.number, grid.key, "expected three expressions separated by ';'");
  for (size_t axis = 0; axis < 3; ++axis) {
    std::vector<std::string> names;
    try {
      names = GridExpression(axes[axis]).names();
    } catch (const Error& error) {
      manifest.fail(grid.number, grid.key, error.what());
    }
    const auto& dims = op.schema.dim_names;
    for (const std::string& name : names) {
      if (name != "batch" && std::find(dims.begin(), dims.end(), name) == dims.end()) {
        manifest.fail(grid.number, grid.key,
                      "\"" + axes[axis] + "\" reads " + name + ", which op " + op.name + " does not have (it has " +
                          join(dims, ", ") + ", batch)");
      }
    }
    declaration.binary.grid[axis] = declaration.keep(axes[axis]);
  }
  const Line& block = manifest.required("block");
  const std::vector<std::string> sizes = split_trimmed(block.value, ',');
  if (sizes.size() != 3) manifest.fail(block.number, block.key, "expected three integers separated by ','");
  for (size_t axis = 0; axis < 3; ++axis) {
    declaration.binary.block[axis] = static_cast<int32_t>(manifest.parse_integer(block, sizes[axis], "block", 1, 1024));
  }
}

// The archs a cubin can run on: its own major, minors at or above its own. PTX is compiled by the driver for newer
// archs too.
void read_archs(const Manifest& manifest, Declaration& declaration, int32_t image_arch, bool cubin) {
  kabi_kernel_desc& kernel = declaration.kernel;
  const int32_t cubin_max = image_arch / 10 * 10 + 9;
  if (const Line* archs = manifest.find("archs"); archs != nullptr && !archs->value.empty()) {
    for (const std::string& item : split_trimmed(archs->value, ',')) {
      const auto arch = static_cast<int32_t>(manifest.parse_integer(*archs, item, "archs", 1, 1000));
      if (arch < image_arch || (cubin && arch > cubin_max)) {
        manifest.fail(archs->number, "archs",
                      "a " + std::string(cubin ? "cubin" : "PTX") + " built for sm_" + std::to_string(image_arch) +
                          " cannot run on arch " + std::to_string(arch));
      }
      declaration.archs.push_back(arch);
    }
    kernel.archs = declaration.archs.data();
    kernel.num_archs = static_cast<int32_t>(declaration.archs.size());
    return;
  }
  const Line* minimum = manifest.find("arch_min");
  const Line* maximum = manifest.find("arch_max");
  kernel.arch_min = minimum != nullptr ? static_cast<int32_t>(manifest.integer(*minimum, 0, 1000)) : image_arch;
  kernel.arch_max =
      maximum != nullptr ? static_cast<int32_t>(manifest.integer(*maximum, 0, 1000)) : (cubin ? cubin_max : 0);
  if (kernel.arch_min < image_arch || (cubin && (kernel.arch_max == 0 || kernel.arch_max > cubin_max))) {
    const Line& where = minimum != nullptr ? *minimum : (maximum != nullptr ? *maximum : manifest.required("arch"));
    manifest.fail(where.number, where.key,
                  "a " + std::string(cubin ? "cubin" : "PTX") + " built for sm_" + std::to_string(image_arch) +
                      " cannot run on all of [" + std::to_string(kernel.arch_min) + ", " +
                      std::to_string(kernel.arch_max) + "] (0 = unbounded)");
  }
}

KernelPtr read_kernel(const std::filesystem::path& path) {
  Manifest manifest(path);
  manifest.read();
  Declaration declaration;
  declaration.strings.reserve(64);
  kabi_kernel_desc& kernel = declaration.kernel;
  kabi_device_binary& binary = declaration.binary;
  kernel.struct_size = sizeof kernel;
  binary.struct_size = sizeof binary;

  const Line& op_line = manifest.required("op");
  Op* op = Registry::instance().find_op(op_line.value);
  if (op == nullptr)
    manifest.fail(op_line.number, "op", "no op named \"" + op_line.value + "\" is registered", KABI_STATUS_NOT_FOUND);
  kernel.op = declaration.keep(op_line.value);
  kernel.name = declaration.keep(manifest.required("name").value);
  kernel.backend = declaration.keep(manifest.required("backend").value);
  const Line& device = manifest.required("device");
  if (device.value != "cuda") manifest.fail(device.number, "device", "\"" + device.value + "\"; expected cuda");
  kernel.device_type = kDLCUDA;
  if (const Line* priority = manifest.find("priority"))
    kernel.priority = static_cast<int32_t>(manifest.integer(*priority, INT32_MIN, INT32_MAX));
  if (const Line* features = manifest.find("features")) {
    for (const std::string& name : features->value.empty() ? std::vector<std::string>{} : split_trimmed(features->value, ',')) {
      const uint64_t bit = feature_bit_from_name(name);
      if (bit == 0) manifest.fail(features->number, "features", "unknown feature \"" + name + "\"");
      kernel.required_features |= bit;
    }
  }
  kernel.dtypes = parse_bits(manifest, manifest.required("dtypes"), dtype_bit_from_name);
  kernel.layouts = parse_bits(manifest, manifest.required("layouts"), layout_bit_from_name);
  read_input_layouts(manifest, *op, declaration);
  if (const Line* constraints = manifest.find("type_constraints")) {
    kernel.type_constraints = declaration.keep(constraints->value);
  }
  if (const Line* alignment = manifest.find("alignment"))
    kernel.alignment = static_cast<uint32_t>(manifest.integer(*alignment, 0, 4096));
  kernel.batch_mode = KABI_BATCH_NONE;
  if (const Line* batch = manifest.find("batch_mode")) {
    kernel.batch_mode = -1;
    for (int32_t mode = KABI_BATCH_NONE; mode <= KABI_BATCH_ANY; ++mode) {
      if (batch->value == batch_mode_name(mode)) kernel.batch_mode = mode;
    }
    if (kernel.batch_mode < 0)
      manifest.fail(batch->number, "batch_mode", "\"" + batch->value + "\"; expected none, uniform or any");
  }
  if (const Line* fingerprint = manifest.find("fingerprint")) kernel.fingerprint = declaration.keep(fingerprint->value);
  kernel.kind = KABI_KERNEL_DEVICE_BINARY;
  kernel.binary = &binary;

  const Line& format = manifest.required("image_format");
  if (format.value != "cubin" && format.value != "ptx")
    manifest.fail(format.number, "image_format", "\"" + format.value + "\"; expected cubin or ptx");
  binary.format = format.value == "cubin" ? KABI_BINARY_CUBIN : KABI_BINARY_PTX;
  binary.arch = static_cast<int32_t>(manifest.integer(manifest.required("arch"), 10, 1000));
  read_archs(manifest, declaration, binary.arch, binary.format == KABI_BINARY_CUBIN);
  read_image(manifest, declaration);
  binary.entry = declaration.keep(manifest.required("entry").value);
  for (const Line* line : manifest.all("param")) read_param(manifest, *line, *op, declaration);
  binary.params = declaration.params.empty() ? nullptr : declaration.params.data();
  binary.num_params = static_cast<int32_t>(declaration.params.size());
  read_grid(manifest, *op, declaration);
  if (const Line* shared = manifest.find("shared_memory_bytes"))
    binary.shared_memory_bytes = static_cast<int32_t>(manifest.integer(*shared, 0, INT32_MAX));
  binary.cluster_size = 1;
  if (const Line* cluster = manifest.find("cluster_size"))
    binary.cluster_size = static_cast<int32_t>(manifest.integer(*cluster, 1, 16));
  try {
    return make_kernel(&kernel, *op, &declaration.image);
  } catch (const Error& error) {
    throw Error(error.status(), path.string() + ": " + error.what());
  }
}

// Reads the manifests in parallel: each read is independent (the table is only looked up), and a backend's first
// call registers some 300 of them, whose reads (file, parse, checks) would otherwise run one after another. The
// results stay in `paths`' order; the error of the first failing path in that order is rethrown.
std::vector<KernelPtr> read_kernels(const std::vector<std::filesystem::path>& paths) {
  constexpr size_t kManifestsPerThread = 32;  // below this a thread's start costs more than the reads it takes over
  constexpr size_t kMaxThreads = 8;
  std::vector<KernelPtr> kernels(paths.size());
  std::vector<std::exception_ptr> errors(paths.size());
  std::atomic<size_t> next{0};
  auto read_some = [&] {
    for (size_t index = next.fetch_add(1); index < paths.size(); index = next.fetch_add(1)) {
      try {
        kernels[index] = read_kernel(paths[index]);
      } catch (...) {
        errors[index] = std::current_exception();
      }
    }
  };
  const size_t hardware = std::max<size_t>(std::thread::hardware_concurrency(), 1);
  const size_t helpers = std::min({hardware, kMaxThreads, paths.size() / kManifestsPerThread + 1}) - 1;
  std::vector<std::thread> threads;
  threads.reserve(helpers);
  try {
    for (size_t i = 0; i < helpers; ++i) threads.emplace_back(read_some);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started and this one read the rest.
  }
  read_some();
  for (std::thread& thread : threads) thread.join();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
  return kernels;
}

// The kernel a staged one duplicates: one of this load's earlier ones (`staged`, by op and name) or one of the table,
// with the same fingerprint; nullptr when it is new. Another fingerprint under the same name is an error.
KernelPtr same_kernel(const Kernel& kernel, const std::map<std::string, std::pair<KernelPtr, std::string>>& staged,
                      const std::string& path) {
  const std::string key = kernel.op->name + "/" + kernel.name;
  if (auto earlier = staged.find(key); earlier != staged.end()) {
    if (earlier->second.first->fingerprint == kernel.fingerprint) return earlier->second.first;
    throw Error(KABI_STATUS_ALREADY_EXISTS, path + ": kernel " + key + " is also declared by " +
                                                earlier->second.second + " with fingerprint " +
                                                earlier->second.first->fingerprint + ", not " + kernel.fingerprint);
  }
  if (KernelPtr existing = Registry::instance().find_kernel(kernel.op->name, kernel.name)) {
    if (existing->fingerprint == kernel.fingerprint) return existing;
    throw Error(KABI_STATUS_ALREADY_EXISTS, path + ": kernel " + key + " is already registered with fingerprint " +
                                                existing->fingerprint + ", not " + kernel.fingerprint);
  }
  return nullptr;
}

}  // namespace

int32_t load_binaries(const std::string& directory) {
  std::error_code error;
  if (!std::filesystem::is_directory(directory, error)) {
    throw Error(KABI_STATUS_IO_ERROR, "kabi_binaries_load: " + directory + " is not a directory");
  }
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const std::string name = entry.path().filename().string();
    const size_t suffix = sizeof(kManifestSuffix) - 1;
    if (name.size() > suffix && name.compare(name.size() - suffix, suffix, kManifestSuffix) == 0) {
      paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<KernelPtr> kernels = read_kernels(paths);
  Staging staging;
  std::map<std::string, std::pair<KernelPtr, std::string>> staged;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const std::string path = paths[i].string();
    // Two files of one directory declaring one kernel is an error even with equal fingerprints: one is a stray copy.
    const std::string key = kernels[i]->op->name + "/" + kernels[i]->name;
    if (auto clash = staged.find(key); clash != staged.end()) {
      throw Error(KABI_STATUS_ALREADY_EXISTS, path + ": kernel " + key + " is also declared by " + clash->second.second);
    }
    if (same_kernel(*kernels[i], staged, path) != nullptr) continue;
    staged.emplace(key, std::pair{kernels[i], path});
    staging.kernels.push_back(std::move(kernels[i]));
  }
  Registry::instance().commit(staging, "");
  return static_cast<int32_t>(staging.kernels.size());
}

std::vector<Kernel*> load_binaries(const std::vector<BinaryLoadRequest>& requests) {
  // Until a kernel holds its request's user_data, freeing it on the way out is this function's job.
  std::vector<std::unique_ptr<void, void (*)(void*)>> owned;
  owned.reserve(requests.size());
  for (const BinaryLoadRequest& request : requests) {
    owned.emplace_back(request.user_data,
                       request.user_data_free != nullptr ? request.user_data_free : [](void*) {});
  }
  std::vector<std::filesystem::path> paths;
  paths.reserve(requests.size());
  for (const BinaryLoadRequest& request : requests) paths.emplace_back(request.manifest_path);
  std::vector<KernelPtr> kernels = read_kernels(paths);
  std::vector<Kernel*> result(requests.size());
  Staging staging;
  std::map<std::string, std::pair<KernelPtr, std::string>> staged;
  for (size_t i = 0; i < kernels.size(); ++i) {
    const BinaryLoadRequest& request = requests[i];
    KernelPtr& kernel = kernels[i];
    if (!request.op.empty() && kernel->op->name != request.op) {
      throw Error(KABI_STATUS_INVALID_ARGUMENT, request.manifest_path + ": declares op " + kernel->op->name +
                                                    ", not " + request.op);
    }
    if (KernelPtr same = same_kernel(*kernel, staged, request.manifest_path)) {
      result[i] = same.get();
      continue;
    }
    result[i] = kernel.get();
    staged.emplace(kernel->op->name + "/" + kernel->name, std::pair{kernel, request.manifest_path});
    staging.kernels.push_back(kernel);
  }
  // Every check passed: the staged kernels take their user_data (freed with them should the commit still fail).
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (result[i] != kernels[i].get()) continue;
    kernels[i]->supports = requests[i].supports;
    kernels[i]->user_data = owned[i].release();
    kernels[i]->user_data_free = requests[i].user_data_free;
  }
  kernels.clear();
  Registry::instance().commit(staging, "");
  return result;
}

Kernel* load_binary(const std::string& manifest_path, kabi_supports_fn supports, void* user_data,
                    void (*user_data_free)(void*)) {
  return load_binaries({BinaryLoadRequest{manifest_path, "", supports, user_data, user_data_free}}).front();
}

}  // namespace kabi::core

extern "C" KABI_EXPORT kabi_status kabi_binary_load(const char* manifest_path, kabi_supports_fn supports,
                                                    void* user_data, void (*user_data_free)(void* user_data),
                                                    kabi_kernel* out_kernel) {
  return kabi::core::c_boundary([&] {
    if (manifest_path == nullptr) {
      if (user_data_free != nullptr) user_data_free(user_data);
      throw kabi::core::Error(KABI_STATUS_INVALID_ARGUMENT, "kabi_binary_load: manifest_path is NULL");
    }
    kabi::core::Kernel* kernel = kabi::core::load_binary(manifest_path, supports, user_data, user_data_free);
    if (out_kernel != nullptr) *out_kernel = kernel;
  });
}

extern "C" KABI_EXPORT kabi_status kabi_binary_load_many(const kabi_binary_load_request* requests, int32_t count,
                                                         kabi_kernel* out_kernels) {
  return kabi::core::c_boundary([&] {
    // Whatever is refused below, the caller handed over every request's user_data: it is freed.
    std::vector<kabi::core::BinaryLoadRequest> loads;
    auto free_unread = [&](size_t from) {
      for (size_t i = from; i < static_cast<size_t>(count); ++i) {
        if (requests[i].struct_size >= KABI_STRUCT_SIZE_THROUGH(kabi_binary_load_request, user_data_free) &&
            requests[i].user_data_free != nullptr) {
          requests[i].user_data_free(requests[i].user_data);
        }
      }
    };
    kabi::core::require(count >= 0, KABI_STATUS_INVALID_ARGUMENT,
                        "kabi_binary_load_many: count is " + std::to_string(count) + "; expected >= 0");
    kabi::core::require(count == 0 || requests != nullptr, KABI_STATUS_INVALID_ARGUMENT,
                        "kabi_binary_load_many: requests is NULL but count is " + std::to_string(count));
    loads.reserve(static_cast<size_t>(count));
    for (int32_t i = 0; i < count; ++i) {
      const std::string what = "kabi_binary_load_many: requests[" + std::to_string(i) + "]";
      try {
        const kabi_binary_load_request request = kabi::core::read_input_struct(
            &requests[i], what.c_str(), KABI_STRUCT_SIZE_THROUGH(kabi_binary_load_request, user_data_free));
        kabi::core::walk_extensions(request.extensions, what.c_str());
        kabi::core::require(request.manifest_path != nullptr, KABI_STATUS_INVALID_ARGUMENT,
                            what + ".manifest_path is NULL");
        loads.push_back({request.manifest_path, request.op != nullptr ? request.op : "", request.supports,
                         request.user_data, request.user_data_free});
      } catch (...) {
        // The requests read so far own their user_data in `loads`, which frees nothing: free them here too.
        for (const kabi::core::BinaryLoadRequest& load : loads) {
          if (load.user_data_free != nullptr) load.user_data_free(load.user_data);
        }
        free_unread(static_cast<size_t>(i));
        throw;
      }
    }
    const std::vector<kabi::core::Kernel*> kernels = kabi::core::load_binaries(loads);
    if (out_kernels != nullptr) std::copy(kernels.begin(), kernels.end(), out_kernels);
  });
}

extern "C" KABI_EXPORT kabi_status kabi_binaries_load(const char* directory, int32_t* out_registered) {
  return kabi::core::c_boundary([&] {
    if (out_registered != nullptr) *out_registered = 0;
    kabi::core::require(directory != nullptr, KABI_STATUS_INVALID_ARGUMENT, "kabi_binaries_load: directory is NULL");
    const int32_t registered = kabi::core::load_binaries(directory);
    if (out_registered != nullptr) *out_registered = registered;
  });
}
