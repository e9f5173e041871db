// Device-binary manifests through the public C ABI: a valid manifest with a fake cubin registers a kernel with the
// declared facts (no GPU needed), and every kind of damage is refused with a message naming file, line and field: a
// damaged manifest when it is loaded, a damaged image when its kernel is first launched.
// Directories named by KABI_BINARY_PATH load with the plugins of the environment, each recorded like a plugin.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "check.hpp"
#include "kabi/kabi.h"

namespace {

namespace fs = std::filesystem;
using Fields = std::vector<std::pair<std::string, std::string>>;

fs::path g_root;
int g_case = 0;

std::string fnv1a64_hex(const std::string& bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ull;
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

// An ELF header followed by random bytes: enough for registration, which never loads the module.
std::string fake_cubin() {
  std::random_device seed;
  std::mt19937 random(seed());
  std::string bytes = {'\x7f', 'E', 'L', 'F'};
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(random() & 0xFF);
  return bytes;
}

struct Bundle {
  fs::path directory;
  fs::path manifest;
  fs::path image;
  std::string kernel_name;
};

Fields valid_fields(const std::string& kernel_name, const std::string& image_name, const std::string& image) {
  return {{"abi_major", "2"},
          {"op", "matmul"},
          {"name", kernel_name},
          {"backend", "triton"},
          {"device", "cuda"},
          {"archs", "90"},
          {"priority", "10"},
          {"features", "tma,wgmma"},
          {"dtypes", "float16,bfloat16"},
          {"layouts", "contiguous,row_strided"},
          {"alignment", "16"},
          {"batch_mode", "none"},
          {"fingerprint", "test:" + kernel_name},
          {"image", image_name},
          {"image_format", "cubin"},
          {"image_fnv1a64", fnv1a64_hex(image)},
          {"arch", "90"},
          {"entry", "matmul_kernel"},
          {"grid", "cdiv(M, 128) * cdiv(N, 128); 1; 1"},
          {"block", "256, 1, 1"},
          {"shared_memory_bytes", "98304"},
          {"cluster_size", "1"},
          {"param", "tensor index=0"},
          {"param", "tensor index=1"},
          {"param", "tensor index=2"},
          {"param", "dim name=M size=4"},
          {"param", "dim name=N size=4"},
          {"param", "dim name=K size=4"},
          {"param", "stride index=0 dim=-2 size=4"},
          {"param", "stride index=1 dim=-2 size=4"},
          {"param", "stride index=2 dim=-2 size=4"},
          {"param", "scratch value=0"},
          {"param", "scratch value=0"}};
}

// Writes a manifest and its image into a fresh directory; `edit` changes the fields first.
template <class Edit>
Bundle write_bundle(Edit edit, const std::string& first_line = "kabi-manifest 1") {
  Bundle bundle;
  bundle.kernel_name = "test.matmul.case" + std::to_string(++g_case);
  bundle.directory = g_root / ("case" + std::to_string(g_case));
  fs::create_directories(bundle.directory);
  const std::string image = fake_cubin();
  const std::string image_name = bundle.kernel_name + ".cubin";
  bundle.image = bundle.directory / image_name;
  std::ofstream(bundle.image, std::ios::binary) << image;
  Fields fields = valid_fields(bundle.kernel_name, image_name, image);
  edit(fields);
  bundle.manifest = bundle.directory / (bundle.kernel_name + ".kabi-manifest");
  std::ofstream stream(bundle.manifest);
  stream << first_line << "\n# written by test_manifest\n\n";
  for (const auto& field : fields) stream << field.first << " = " << field.second << "\n";
  return bundle;
}

void set_field(Fields& fields, const std::string& key, const std::string& value) {
  for (auto& field : fields) {
    if (field.first == key) field.second = value;
  }
}

void remove_field(Fields& fields, const std::string& key) {
  Fields kept;
  for (auto& field : fields) {
    if (field.first != key) kept.push_back(field);
  }
  fields = kept;
}

// Line numbers of a manifest: 1 magic, 2 comment, 3 blank, then one line per field.
int line_of(const Bundle& bundle, const std::string& key) {
  std::ifstream stream(bundle.manifest);
  std::string line;
  for (int number = 1; std::getline(stream, line); ++number) {
    if (line.rfind(key + " =", 0) == 0) return number;
  }
  return -1;
}

void expect_refused(const Bundle& bundle, kabi_status status, const std::string& fragment) {
  const int32_t before = kabi_kernel_count("matmul");
  int32_t registered = -1;
  const kabi_status result = kabi_binaries_load(bundle.directory.c_str(), &registered);
  const std::string message = kabi_last_error();
  if (result != status) {
    kabi_test::report_failure(__FILE__, __LINE__,
                              bundle.kernel_name + ": status " + kabi_status_name(result) + " (" + message +
                                  "); expected " + kabi_status_name(status) + " with \"" + fragment + "\"");
    return;
  }
  if (message.find(fragment) == std::string::npos || message.find(bundle.directory.string()) == std::string::npos) {
    kabi_test::report_failure(__FILE__, __LINE__, "message \"" + message + "\" lacks the path or \"" + fragment + "\"");
  }
  KABI_CHECK_EQ(registered, 0);
  KABI_CHECK_EQ(kabi_kernel_count("matmul"), before);
}

void test_valid_manifest_registers() {
  const Bundle bundle = write_bundle([](Fields&) {});
  int32_t registered = -1;
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), &registered), KABI_STATUS_OK);
  KABI_CHECK_EQ(registered, 1);
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  kabi_kernel_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  KABI_CHECK_EQ(kabi_kernel_info_get(kernel, &info), KABI_STATUS_OK);
  KABI_CHECK_EQ(std::string(info.backend), std::string("triton"));
  KABI_CHECK_EQ(std::string(info.fingerprint), "test:" + bundle.kernel_name);
  KABI_CHECK_EQ(std::string(info.plugin), std::string(""));
  KABI_CHECK_EQ(info.device_type, static_cast<int32_t>(kDLCUDA));
  KABI_CHECK_EQ(info.num_archs, 1);
  KABI_CHECK_EQ(info.archs[0], 90);
  KABI_CHECK_EQ(info.priority, 10);
  KABI_CHECK_EQ(static_cast<int>(info.kind), static_cast<int>(KABI_KERNEL_DEVICE_BINARY));
  KABI_CHECK_EQ(info.required_features, KABI_FEATURE_TMA | KABI_FEATURE_WGMMA);
  KABI_CHECK_EQ(info.dtypes, KABI_DTYPE_FLOAT16 | KABI_DTYPE_BFLOAT16);
  KABI_CHECK_EQ(info.layouts, KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED);
  KABI_CHECK_EQ(info.alignment, 16u);
  KABI_CHECK_EQ(info.batch_mode, KABI_BATCH_NONE);

  // Loading the same directory again registers nothing new and is not an error.
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), &registered), KABI_STATUS_OK);
  KABI_CHECK_EQ(registered, 0);
}

void test_defaults_for_optional_keys() {
  // Without archs or a range, a cubin for sm_80 runs on 80..89; without a fingerprint one is derived from the image.
  const Bundle bundle = write_bundle([](Fields& fields) {
    for (const char* key : {"archs", "priority", "features", "alignment", "batch_mode", "fingerprint",
                            "shared_memory_bytes", "cluster_size"}) {
      remove_field(fields, key);
    }
    set_field(fields, "arch", "80");
  });
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), nullptr), KABI_STATUS_OK);
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  kabi_kernel_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  KABI_CHECK_EQ(kabi_kernel_info_get(kernel, &info), KABI_STATUS_OK);
  KABI_CHECK_EQ(info.num_archs, 0);
  KABI_CHECK_EQ(info.arch_min, 80);
  KABI_CHECK_EQ(info.arch_max, 89);
  KABI_CHECK(std::string(info.fingerprint).rfind("triton:" + bundle.kernel_name + ":", 0) == 0);
}

void test_refusals() {
  const kabi_status invalid = KABI_STATUS_INVALID_ARGUMENT;
  expect_refused(write_bundle([](Fields&) {}, "kabi-manifest 4"), invalid,
                 ":1: first line is \"kabi-manifest 4\"; expected \"kabi-manifest 1\", \"kabi-manifest 2\" or "
                 "\"kabi-manifest 3\" (a newer format needs a newer kabi)");
  expect_refused(write_bundle([](Fields&) {}, "{\"json\": true}"), invalid, ":1: first line is");

  // A manifest written for ABI 1.x: refused with the remedy.
  Bundle bundle = write_bundle([](Fields& fields) { set_field(fields, "abi_major", "1"); });
  expect_refused(bundle, KABI_STATUS_ABI_MISMATCH,
                 ":" + std::to_string(line_of(bundle, "abi_major")) +
                     ": abi_major: is 1; this libkabi implements ABI major 2: rebuild the binary and its manifest "
                     "against this kabi");
  bundle = write_bundle([](Fields& fields) { set_field(fields, "abi_major", "3"); });
  expect_refused(bundle, KABI_STATUS_ABI_MISMATCH,
                 ":" + std::to_string(line_of(bundle, "abi_major")) + ": abi_major: is 3; this libkabi implements ABI "
                 "major 2");

  // The ABI major is checked before the keys: a manifest for another major may have keys this reader does not know.
  bundle = write_bundle([](Fields& fields) {
    set_field(fields, "abi_major", "3");
    fields.emplace_back("colour", "blue");
  });
  expect_refused(bundle, KABI_STATUS_ABI_MISMATCH,
                 ":" + std::to_string(line_of(bundle, "abi_major")) + ": abi_major: is 3");

  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "image_fnv1a64", "0123456789ABCDEF"); }), invalid,
                 "image_fnv1a64: \"0123456789ABCDEF\" is not 16 lower-case hex digits");
  expect_refused(write_bundle([](Fields& fields) { remove_field(fields, "entry"); }), invalid,
                 ".kabi-manifest: missing required key entry");

  bundle = write_bundle([](Fields& fields) { set_field(fields, "dtypes", "float16,float13"); });
  expect_refused(bundle, invalid,
                 ":" + std::to_string(line_of(bundle, "dtypes")) + ": dtypes: unknown name \"float13\"");

  bundle = write_bundle([](Fields& fields) { fields.emplace_back("colour", "blue"); });
  expect_refused(bundle, invalid, ":" + std::to_string(line_of(bundle, "colour")) + ": colour: unknown key");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("entry", "other"); }), invalid,
                 "entry: repeats the key of line");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "priority", "high"); }), invalid,
                 "priority: \"high\" is not an integer");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "layouts", "diagonal"); }), invalid,
                 "layouts: unknown name \"diagonal\"");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "features", "tma,warp_drive"); }), invalid,
                 "features: unknown feature \"warp_drive\"");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "image", "missing.cubin"); }),
                 KABI_STATUS_IO_ERROR, "image: image file ");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "grid", "cdiv(Q, 128); 1; 1"); }), invalid,
                 "grid: \"cdiv(Q, 128)\" reads Q, which op matmul does not have");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "grid", "cdiv(M, 128) *; 1; 1"); }), invalid,
                 "grid: grid expression \"cdiv(M, 128) *\"");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "grid", "1; 1"); }), invalid,
                 "grid: expected three expressions");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("param", "register index=0"); }), invalid,
                 "param: kind \"register\"");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("param", "tensor index=3"); }), invalid,
                 "param index: 3 is outside [0, 2]");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("param", "dim name=Z size=4"); }), invalid,
                 "param name: op matmul has no dimension Z");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("param", "dim name=M"); }), invalid,
                 "param: dim needs size=");
  expect_refused(write_bundle([](Fields& fields) { fields.emplace_back("param", "dim name=M size"); }), invalid,
                 "param: \"size\" is not a field of a dim parameter");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "archs", "80,90"); }), invalid,
                 "archs: a cubin built for sm_90 cannot run on arch 80");
  expect_refused(write_bundle([](Fields& fields) { set_field(fields, "op", "convolution"); }), KABI_STATUS_NOT_FOUND,
                 "op: no op named \"convolution\"");

  int32_t registered = -1;
  const std::string missing = (g_root / "no-such-directory").string();
  KABI_CHECK_EQ(kabi_binaries_load(missing.c_str(), &registered), KABI_STATUS_IO_ERROR);
  KABI_CHECK(std::string(kabi_last_error()).find(missing) != std::string::npos);
  KABI_CHECK_EQ(kabi_binaries_load(nullptr, &registered), KABI_STATUS_INVALID_ARGUMENT);
}

// The fields of ABI 2.4 (format 2): per-input layouts and the divisibility a parameter assumes.
void test_format_2_fields() {
  const auto with_new_fields = [](Fields& fields) {
    fields.emplace_back("input_layouts", "contiguous, row_strided; col_strided");
    fields.emplace_back("param", "stride index=1 dim=-1 size=4 divisible_by=16");
    fields.emplace_back("param", "dim name=K size=4 divisible_by=16");
  };
  const Bundle bundle = write_bundle(with_new_fields, "kabi-manifest 2");
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), nullptr), KABI_STATUS_OK);
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  kabi_kernel_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  KABI_CHECK_EQ(kabi_kernel_info_get(kernel, &info), KABI_STATUS_OK);
  KABI_CHECK_EQ(info.num_input_layouts, 2);
  KABI_CHECK_EQ(info.input_layouts[0], KABI_LAYOUT_CONTIGUOUS | KABI_LAYOUT_ROW_STRIDED);
  KABI_CHECK_EQ(info.input_layouts[1], KABI_LAYOUT_COL_STRIDED);
  const Bundle any = write_bundle([](Fields& fields) { fields.emplace_back("input_layouts", "any; col_strided"); },
                                  "kabi-manifest 2");
  KABI_CHECK_EQ(kabi_binaries_load(any.directory.c_str(), nullptr), KABI_STATUS_OK);
  KABI_CHECK_EQ(kabi_kernel_find("matmul", any.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  KABI_CHECK_EQ(kabi_kernel_info_get(kernel, &info), KABI_STATUS_OK);
  KABI_CHECK_EQ(info.input_layouts[0], static_cast<uint32_t>(KABI_LAYOUT_ANY));

  // Format 1 cannot carry them: a reader that knows only format 1 would not check what they assume.
  const kabi_status invalid = KABI_STATUS_INVALID_ARGUMENT;
  Bundle refused = write_bundle(with_new_fields);
  expect_refused(refused, invalid,
                 ":" + std::to_string(line_of(refused, "input_layouts")) +
                     ": input_layouts: needs the first line \"kabi-manifest 2\"");
  expect_refused(write_bundle([](Fields& fields) {
                   fields.emplace_back("param", "stride index=1 dim=-1 size=4 divisible_by=16");
                 }),
                 invalid, ": param divisible_by: needs the first line \"kabi-manifest 2\"");

  const auto format_2 = [](auto edit) { return write_bundle(edit, "kabi-manifest 2"); };
  refused = format_2([](Fields& fields) { fields.emplace_back("input_layouts", "contiguous; diagonal"); });
  expect_refused(refused, invalid,
                 ":" + std::to_string(line_of(refused, "input_layouts")) +
                     ": input_layouts: unknown layout \"diagonal\" for b");
  expect_refused(format_2([](Fields& fields) { fields.emplace_back("input_layouts", "contiguous"); }), invalid,
                 "input_layouts: 1 entries separated by ';'; op matmul has 2 inputs (a, b)");
  expect_refused(format_2([](Fields& fields) { fields.emplace_back("input_layouts", "any; any; any"); }), invalid,
                 "input_layouts: 3 entries separated by ';'; op matmul has 2 inputs");
  expect_refused(format_2([](Fields& fields) { fields.emplace_back("input_layouts", "any;"); }), invalid,
                 "input_layouts: the entry of b is empty; write any");
  expect_refused(format_2([](Fields& fields) { fields.emplace_back("param", "tensor index=1 divisible_by=16"); }),
                 invalid, "param divisible_by: only dim and stride parameters take one, not tensor");
  expect_refused(
      format_2([](Fields& fields) { fields.emplace_back("param", "stride index=1 dim=-1 size=4 divisible_by=-16"); }),
      invalid, "param divisible_by: -16 is outside [0, ");
  expect_refused(
      format_2([](Fields& fields) { fields.emplace_back("param", "dim name=K size=4 divisible_by=12"); }), invalid,
      "param divisible_by: 12 is not a power of two");
}

// The field of ABI 2.5 (format 3): zeroed scratch, which a kernel finds zero and leaves zero.
void test_format_3_fields() {
  const auto with_zeroed_scratch = [](Fields& fields) {
    set_field(fields, "grid", "cdiv(N, 64); 4; cdiv(M, 16)");
    fields.emplace_back("param", "scratch value=4096");
    fields.emplace_back("param", "zeroed_scratch value=4");
  };
  const Bundle bundle = write_bundle(with_zeroed_scratch, "kabi-manifest 3");
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), nullptr), KABI_STATUS_OK);
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  // Format 3 holds the fields of format 2 as well.
  const Bundle both = write_bundle(
      [&](Fields& fields) {
        with_zeroed_scratch(fields);
        fields.emplace_back("input_layouts", "contiguous, row_strided; col_strided");
        fields.emplace_back("param", "dim name=K size=4 divisible_by=16");
      },
      "kabi-manifest 3");
  KABI_CHECK_EQ(kabi_binaries_load(both.directory.c_str(), nullptr), KABI_STATUS_OK);

  // An older format cannot carry it: a libkabi that knows only that format could not hand the kernel zeroed memory.
  const kabi_status invalid = KABI_STATUS_INVALID_ARGUMENT;
  for (const char* older : {"kabi-manifest 1", "kabi-manifest 2"}) {
    const Bundle refused = write_bundle(with_zeroed_scratch, older);
    const int line = line_of(refused, "param") + 12;  // the zeroed_scratch param: the last of the 13 params
    expect_refused(refused, invalid,
                   ":" + std::to_string(line) +
                       ": param zeroed_scratch: needs the first line \"kabi-manifest 3\" (a field of ABI 2.5), not "
                       "\"" + older + "\"");
  }
  const auto format_3 = [](auto edit) { return write_bundle(edit, "kabi-manifest 3"); };
  expect_refused(format_3([](Fields& fields) { fields.emplace_back("param", "zeroed_scratch value=-4"); }), invalid,
                 "param value: -4 is outside [0, ");
  expect_refused(format_3([](Fields& fields) { fields.emplace_back("param", "scratch value=-1"); }), invalid,
                 "param value: -1 is outside [0, ");
  expect_refused(format_3([](Fields& fields) { fields.emplace_back("param", "zeroed_scratch value=four"); }), invalid,
                 "param value: \"four\" is not an integer");
  expect_refused(format_3([](Fields& fields) { fields.emplace_back("param", "zeroed_scratch"); }), invalid,
                 "param: zeroed_scratch needs value=");
  expect_refused(format_3([](Fields& fields) { fields.emplace_back("param", "zeroed_scratch value=4 size=4"); }),
                 invalid, "param: \"size=4\" is not a field of a zeroed_scratch parameter");
  expect_refused(
      format_3([](Fields& fields) { fields.emplace_back("param", "zeroed_scratch value=4 divisible_by=16"); }),
      invalid, "param divisible_by: only dim and stride parameters take one, not zeroed_scratch");
}

// kabi_launch of the bundle's kernel on 128 x 128 float16 matrices at made-up device addresses. The image is checked
// before the driver is asked for anything, so what the check says shows on any machine; an image that passes goes on
// to the driver (no driver here, or a module the fake cubin cannot make on a GPU machine).
kabi_status launch_bundle(const Bundle& bundle) {
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  int64_t shape[2] = {128, 128};
  DLTensor tensors[3];
  for (int i = 0; i < 3; ++i) {
    tensors[i] = DLTensor{};
    tensors[i].data = reinterpret_cast<void*>(static_cast<uintptr_t>(i + 1) << 20);
    tensors[i].device = DLDevice{kDLCUDA, 0};
    tensors[i].ndim = 2;
    tensors[i].dtype = DLDataType{kDLFloat, 16, 1};
    tensors[i].shape = shape;
  }
  kabi_args args{};
  args.struct_size = sizeof args;
  args.inputs = tensors;
  args.num_inputs = 2;
  args.outputs = tensors + 2;
  args.num_outputs = 1;
  return kabi_launch(kernel, &args);
}

void expect_message(const std::string& fragment) {
  const std::string message = kabi_last_error();
  if (message.find(fragment) == std::string::npos) {
    kabi_test::report_failure(__FILE__, __LINE__, "message \"" + message + "\" lacks \"" + fragment + "\"");
  }
}

// Registering reads no image: its bytes are read and checked against the manifest at the kernel's first launch, which
// refuses a damaged one (at every launch), naming the manifest's line and the image.
void test_image_is_checked_at_its_first_launch() {
  const Bundle tampered = write_bundle([](Fields&) {});
  std::ofstream(tampered.image, std::ios::binary | std::ios::app) << "tampered";
  int32_t registered = -1;
  KABI_CHECK_EQ(kabi_binaries_load(tampered.directory.c_str(), &registered), KABI_STATUS_OK);
  KABI_CHECK_EQ(registered, 1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    KABI_CHECK_EQ(launch_bundle(tampered), KABI_STATUS_INVALID_ARGUMENT);
    expect_message(tampered.manifest.string() + ":" + std::to_string(line_of(tampered, "image_fnv1a64")) +
                   ": image_fnv1a64: image " + tampered.image.filename().string() + " hashes to ");
    expect_message("(corrupt or replaced image); the kernel is not launched");
  }

  const Bundle removed = write_bundle([](Fields&) {});
  KABI_CHECK_EQ(kabi_binaries_load(removed.directory.c_str(), nullptr), KABI_STATUS_OK);
  fs::remove(removed.image);
  KABI_CHECK_EQ(launch_bundle(removed), KABI_STATUS_IO_ERROR);
  expect_message(removed.manifest.string() + ":" + std::to_string(line_of(removed, "image")) + ": image: image file " +
                 removed.image.string() + " is missing");

  const Bundle not_elf = write_bundle([](Fields&) {});
  std::ofstream(not_elf.image, std::ios::binary | std::ios::trunc) << "PTX?";
  KABI_CHECK_EQ(kabi_binary_load(not_elf.manifest.c_str(), nullptr, nullptr, nullptr, nullptr), KABI_STATUS_OK);
  KABI_CHECK_EQ(launch_bundle(not_elf), KABI_STATUS_INVALID_ARGUMENT);
  expect_message(": image: " + not_elf.image.filename().string() + ": image is not a cubin (no ELF header)");

  const Bundle intact = write_bundle([](Fields&) {});
  KABI_CHECK_EQ(kabi_binaries_load(intact.directory.c_str(), nullptr), KABI_STATUS_OK);
  const kabi_status status = launch_bundle(intact);
  KABI_CHECK(status != KABI_STATUS_OK);
  KABI_CHECK(std::string(kabi_last_error()).find(intact.manifest.string()) == std::string::npos);
}

// Windows line ends, and a last line without one, read as any other manifest does.
void test_line_ends() {
  const Bundle bundle = write_bundle([](Fields&) {});
  std::ifstream written(bundle.manifest);
  std::string text;
  for (std::string line; std::getline(written, line);) text += line + "\r\n";
  text.resize(text.size() - 2);
  std::ofstream(bundle.manifest, std::ios::binary | std::ios::trunc) << text;
  int32_t registered = -1;
  KABI_CHECK_EQ(kabi_binaries_load(bundle.directory.c_str(), &registered), KABI_STATUS_OK);
  KABI_CHECK_EQ(registered, 1);
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
}

void test_directory_loads_all_or_nothing() {
  const Bundle good = write_bundle([](Fields&) {});
  const Bundle bad = write_bundle([](Fields& fields) { set_field(fields, "block", "256, 1"); });
  fs::copy_file(good.manifest, bad.directory / good.manifest.filename());
  fs::copy_file(good.image, bad.directory / good.image.filename());
  expect_refused(bad, KABI_STATUS_INVALID_ARGUMENT, "block: expected three integers");
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", good.kernel_name.c_str(), &kernel), KABI_STATUS_NOT_FOUND);
}

// The record of the environment load whose path is directory's, or a record with a null path.
kabi_plugin_record record_of(const fs::path& directory) {
  const std::string wanted = fs::weakly_canonical(directory).string();
  for (int32_t index = 0; index < kabi_plugin_count(); ++index) {
    kabi_plugin_record record;
    std::memset(&record, 0, sizeof record);
    record.struct_size = sizeof record;
    if (kabi_plugin_at(index, &record) == KABI_STATUS_OK && record.path != nullptr && wanted == record.path) {
      return record;
    }
  }
  kabi_plugin_record missing;
  std::memset(&missing, 0, sizeof missing);
  return missing;
}

void test_environment_directories_load_with_the_plugins() {
  // A corrupt directory first: it is recorded with its error and does not stop the good one after it.
  const Bundle corrupt = write_bundle([](Fields& fields) { remove_field(fields, "entry"); });
  const Bundle good = write_bundle([](Fields&) {});
  const fs::path missing = g_root / "no-such-binaries";
  const std::string path = corrupt.directory.string() + ":" + good.directory.string() + "::" + missing.string();
  KABI_CHECK_EQ(::setenv("KABI_BINARY_PATH", path.c_str(), 1), 0);
  KABI_CHECK_EQ(kabi_plugin_load_from_environment(), KABI_STATUS_OK);

  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", good.kernel_name.c_str(), &kernel), KABI_STATUS_OK);
  KABI_CHECK_EQ(kabi_kernel_find("matmul", corrupt.kernel_name.c_str(), &kernel), KABI_STATUS_NOT_FOUND);

  const kabi_plugin_record loaded = record_of(good.directory);
  KABI_CHECK(loaded.path != nullptr);
  KABI_CHECK_EQ(static_cast<int>(loaded.state), static_cast<int>(KABI_PLUGIN_LOADED));
  KABI_CHECK_EQ(loaded.num_kernels, 1);
  KABI_CHECK_EQ(std::string(loaded.message), std::string(""));
  KABI_CHECK_EQ(static_cast<int>(loaded.kind), static_cast<int>(KABI_PLUGIN_KIND_BINARIES));

  const kabi_plugin_record refused = record_of(corrupt.directory);
  KABI_CHECK(refused.path != nullptr);
  KABI_CHECK_EQ(static_cast<int>(refused.state), static_cast<int>(KABI_PLUGIN_REFUSED));
  KABI_CHECK_EQ(refused.num_kernels, 0);
  KABI_CHECK(std::string(refused.message).find("missing required key entry") != std::string::npos);
  KABI_CHECK_EQ(static_cast<int>(refused.kind), static_cast<int>(KABI_PLUGIN_KIND_BINARIES));

  const kabi_plugin_record absent = record_of(missing);
  KABI_CHECK(absent.path != nullptr);
  KABI_CHECK_EQ(static_cast<int>(absent.state), static_cast<int>(KABI_PLUGIN_REFUSED));
  KABI_CHECK(std::string(absent.message).find("is not a directory") != std::string::npos);

  // Loading the environment again reads no directory twice.
  const int32_t records = kabi_plugin_count();
  KABI_CHECK_EQ(kabi_plugin_load_from_environment(), KABI_STATUS_OK);
  KABI_CHECK_EQ(kabi_plugin_count(), records);
  KABI_CHECK_EQ(::unsetenv("KABI_BINARY_PATH"), 0);
}

}  // namespace

int g_freed = 0;

void count_free(void* user_data) { g_freed += *static_cast<int*>(user_data); }

int32_t never_supports(void*, const kabi_problem*, const kabi_args*, char* reason, size_t reason_size) {
  std::snprintf(reason, reason_size, "never");
  return 0;
}

void test_one_manifest_loads_with_a_supports_predicate() {
  const Bundle bundle = write_bundle([](Fields&) {});
  static int token = 1;
  g_freed = 0;
  kabi_kernel kernel = nullptr;
  KABI_CHECK_EQ(kabi_binary_load(bundle.manifest.c_str(), &never_supports, &token, &count_free, &kernel),
                KABI_STATUS_OK);
  kabi_kernel found = nullptr;
  KABI_CHECK_EQ(kabi_kernel_find("matmul", bundle.kernel_name.c_str(), &found), KABI_STATUS_OK);
  KABI_CHECK(kernel == found);
  KABI_CHECK_EQ(g_freed, 0);
  // The same kernel again is kept, and the second user_data is freed at once.
  kabi_kernel again = nullptr;
  KABI_CHECK_EQ(kabi_binary_load(bundle.manifest.c_str(), &never_supports, &token, &count_free, &again),
                KABI_STATUS_OK);
  KABI_CHECK(again == kernel);
  KABI_CHECK_EQ(g_freed, 1);
  KABI_CHECK_EQ(kabi_kernel_unregister("matmul", bundle.kernel_name.c_str()), KABI_STATUS_OK);
  KABI_CHECK_EQ(g_freed, 2);

  // A refused manifest and a NULL path free user_data too, and register nothing.
  const Bundle damaged = write_bundle([](Fields& fields) { set_field(fields, "image_fnv1a64", "not a hash"); });
  const int32_t before = kabi_kernel_count("matmul");
  KABI_CHECK_EQ(kabi_binary_load(damaged.manifest.c_str(), &never_supports, &token, &count_free, nullptr),
                KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK(std::string(kabi_last_error()).find("image_fnv1a64") != std::string::npos);
  KABI_CHECK_EQ(kabi_binary_load(nullptr, &never_supports, &token, &count_free, nullptr), KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK_EQ(kabi_binary_load(damaged.directory.c_str(), nullptr, nullptr, nullptr, nullptr), KABI_STATUS_IO_ERROR);
  KABI_CHECK_EQ(std::string(kabi_last_error()), damaged.directory.string() + " is not a file");
  const std::string absent = (damaged.directory / "absent.kabi-manifest").string();
  KABI_CHECK_EQ(kabi_binary_load(absent.c_str(), nullptr, nullptr, nullptr, nullptr), KABI_STATUS_IO_ERROR);
  KABI_CHECK_EQ(std::string(kabi_last_error()), absent + " is not a file");
  KABI_CHECK_EQ(g_freed, 4);
  KABI_CHECK_EQ(kabi_kernel_count("matmul"), before);
}

kabi_binary_load_request load_request(const Bundle& bundle, int* token, const char* op = "matmul") {
  kabi_binary_load_request request{};
  request.struct_size = sizeof request;
  request.manifest_path = bundle.manifest.c_str();
  request.op = op;
  request.supports = &never_supports;
  request.user_data = token;
  request.user_data_free = &count_free;
  return request;
}

void test_many_manifests_load_together_all_or_nothing() {
  // More than one reader thread's share, so that the reads run in parallel.
  std::vector<Bundle> bundles;
  for (int i = 0; i < 100; ++i) bundles.push_back(write_bundle([](Fields&) {}));
  static int token = 1;
  std::vector<kabi_binary_load_request> requests;
  for (const Bundle& bundle : bundles) requests.push_back(load_request(bundle, &token));
  const int32_t before = kabi_kernel_count("matmul");
  g_freed = 0;

  // One damaged manifest (not the first) refuses the list, names that file, and frees every user_data.
  const Bundle damaged = write_bundle([](Fields& fields) { set_field(fields, "image_fnv1a64", "not a hash"); });
  std::vector<kabi_binary_load_request> with_damage = requests;
  with_damage.insert(with_damage.begin() + 57, load_request(damaged, &token));
  KABI_CHECK_EQ(kabi_binary_load_many(with_damage.data(), static_cast<int32_t>(with_damage.size()), nullptr),
                KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK(std::string(kabi_last_error()).find(damaged.manifest.string()) != std::string::npos);
  KABI_CHECK_EQ(g_freed, static_cast<int>(with_damage.size()));
  KABI_CHECK_EQ(kabi_kernel_count("matmul"), before);

  // A manifest of another op than its request names is refused the same way.
  g_freed = 0;
  std::vector<kabi_binary_load_request> wrong_op = requests;
  wrong_op[3].op = "linear";
  KABI_CHECK_EQ(kabi_binary_load_many(wrong_op.data(), static_cast<int32_t>(wrong_op.size()), nullptr),
                KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK(std::string(kabi_last_error()).find("declares op matmul, not linear") != std::string::npos);
  KABI_CHECK_EQ(g_freed, static_cast<int>(wrong_op.size()));
  KABI_CHECK_EQ(kabi_kernel_count("matmul"), before);

  // A request too small to be read is named, and the others' user_data freed.
  g_freed = 0;
  std::vector<kabi_binary_load_request> truncated = requests;
  truncated[9].struct_size = sizeof(size_t);
  KABI_CHECK_EQ(kabi_binary_load_many(truncated.data(), static_cast<int32_t>(truncated.size()), nullptr),
                KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK(std::string(kabi_last_error()).find("requests[9]->struct_size") != std::string::npos);
  KABI_CHECK_EQ(g_freed, static_cast<int>(truncated.size()) - 1);

  // The list loads, each kernel in its request's place; the first repeated at the end gets the same kernel and its
  // user_data is freed at once.
  g_freed = 0;
  requests.push_back(requests.front());
  std::vector<kabi_kernel> kernels(requests.size());
  KABI_CHECK_EQ(kabi_binary_load_many(requests.data(), static_cast<int32_t>(requests.size()), kernels.data()),
                KABI_STATUS_OK);
  KABI_CHECK_EQ(g_freed, 1);
  KABI_CHECK_EQ(kabi_kernel_count("matmul"), before + static_cast<int32_t>(bundles.size()));
  for (size_t i = 0; i < bundles.size(); ++i) {
    kabi_kernel found = nullptr;
    KABI_CHECK_EQ(kabi_kernel_find("matmul", bundles[i].kernel_name.c_str(), &found), KABI_STATUS_OK);
    KABI_CHECK(kernels[i] == found);
  }
  KABI_CHECK(kernels.back() == kernels.front());

  // Bad arguments.
  KABI_CHECK_EQ(kabi_binary_load_many(nullptr, 2, nullptr), KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK_EQ(kabi_binary_load_many(requests.data(), -1, nullptr), KABI_STATUS_INVALID_ARGUMENT);
  KABI_CHECK(std::string(kabi_last_error()).find("count is -1") != std::string::npos);
  KABI_CHECK_EQ(kabi_binary_load_many(nullptr, 0, nullptr), KABI_STATUS_OK);

  for (const Bundle& bundle : bundles) {
    KABI_CHECK_EQ(kabi_kernel_unregister("matmul", bundle.kernel_name.c_str()), KABI_STATUS_OK);
  }
  KABI_CHECK_EQ(g_freed, 1 + static_cast<int>(bundles.size()));
}

int main() {
  std::string pattern = (fs::temp_directory_path() / "kabi-manifest-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror("mkdtemp");
    return EXIT_FAILURE;
  }
  g_root = pattern;
  test_valid_manifest_registers();
  test_defaults_for_optional_keys();
  test_refusals();
  test_format_2_fields();
  test_format_3_fields();
  test_line_ends();
  test_image_is_checked_at_its_first_launch();
  test_directory_loads_all_or_nothing();
  test_environment_directories_load_with_the_plugins();
  test_one_manifest_loads_with_a_supports_predicate();
  test_many_manifests_load_together_all_or_nothing();
  fs::remove_all(g_root);
  return kabi_test::finish("test_manifest");
}
