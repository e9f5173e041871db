// Device binaries: validation and deep copy of a kabi_device_binary, and its launch through the CUDA driver.
//
// An image a manifest names on disk is read and checked (format, the manifest's hash) at the binary's first launch,
// once, under the binary's mutex: registering reads only the manifest. A binary loads one module per device on first
// launch there (under the binary's mutex, so concurrent first launches load it once). Launches use the calling thread's
// current context when it belongs to the problem's device (torch and Triton make the primary context current);
// otherwise the device's primary context is retained and made current for the launch and the previous context restored.
// Scratch buffers are allocated on first need and kept per (device, stream, parameter, size): two launches on one
// stream run in order and can share them, launches on different streams may run at once and must not. Zeroed scratch is
// kept the same way and zeroed once, on the launch's stream, when it is allocated: the kernel leaves it zero for the
// next launch. A stream being captured into a CUDA graph cannot allocate that way; there scratch comes from the
// stream-ordered allocator (allocated before the kernel and freed after it, and zeroed scratch zeroed by a memset
// between, so the graph owns every step).
#include "device_binary.hpp"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <tuple>

#include "cuda_driver.hpp"
#include "error.hpp"
#include "file_io.hpp"
#include "struct_io.hpp"

namespace kabi::core {

struct LaunchParam {
  int32_t kind = 0;
  int32_t size_bytes = 0;
  int32_t index = 0;
  int32_t dim = 0;
  std::string name;
  int64_t value = 0;
  int64_t divisible_by = 0;     // DIM and STRIDE: a power of two the image assumes the value is a multiple of; 0: none
  bool real_attribute = false;  // ATTRIBUTE of a float attribute: passed as a float or double
};

class DeviceBinary {
 public:
  int32_t format = 0;
  int32_t arch = 0;
  // The image's FNV-1a hash: of the bytes handed over, or as the manifest of an image on disk declares it.
  uint64_t image_fnv1a64 = 0;
  std::string entry;
  std::vector<LaunchParam> params;
  std::vector<GridExpression> grid;
  int32_t num_inputs = 0;  // of the op's schema: tensor indices below it are inputs, the rest outputs
  int32_t block[3] = {1, 1, 1};
  int32_t shared_memory_bytes = 0;
  int32_t cluster_size = 1;

  ~DeviceBinary();
  // An image handed over in memory (copied), or one left on disk until require_image().
  void keep_image(std::vector<unsigned char> image);
  void defer_image(ImageFile file);
  // Reads and checks an image on disk the first time; throws the Error of a failed check each time it is called.
  void require_image();
  cuda::CUfunction function_on(const CudaDriver& driver, int32_t device_index);
  // The scratch of parameter `param` for launches on `stream`, allocated (and, when `zeroed`, zeroed on the stream) on
  // first need.
  void* scratch(const CudaDriver& driver, int32_t device_index, void* stream, size_t param, size_t bytes, bool zeroed);

 private:
  void require_image_locked();

  std::mutex mutex_;
  std::vector<unsigned char> image_;  // PTX images end in a NUL, as cuModuleLoadData needs
  std::optional<ImageFile> image_file_;  // until its image is read
  std::atomic<bool> image_ready_{false};
  std::map<int32_t, std::pair<cuda::CUmodule, cuda::CUfunction>> loaded_;
  std::map<std::tuple<int32_t, void*, size_t, size_t>, cuda::CUdeviceptr> scratch_;
};

namespace {

constexpr int32_t kDefaultSharedMemoryLimit = 48 * 1024;  // above this a kernel must opt in
constexpr int32_t kMaxParams = 64;  // launches marshal into fixed arrays of this size: no allocation per launch

Error invalid(const std::string& message) { return Error(KABI_STATUS_INVALID_ARGUMENT, message); }

std::string param_label(size_t index) { return "params[" + std::to_string(index) + "]"; }

LaunchParam copy_param(const kabi_launch_param& raw, size_t index) {
  LaunchParam param;
  param.kind = raw.kind;
  param.size_bytes = raw.size_bytes;
  param.index = raw.index;
  param.dim = raw.dim;
  param.value = raw.value;
  const std::string label = param_label(index);
  const bool integer = raw.kind == KABI_PARAM_DIM || raw.kind == KABI_PARAM_STRIDE ||
                       raw.kind == KABI_PARAM_CONSTANT || raw.kind == KABI_PARAM_ATTRIBUTE;
  if (integer && raw.size_bytes != 4 && raw.size_bytes != 8) {
    throw invalid(label + ".size_bytes is " + std::to_string(raw.size_bytes) + "; expected 4 or 8");
  }
  switch (raw.kind) {
    case KABI_PARAM_TENSOR_DATA:
    case KABI_PARAM_STRIDE:
      if (raw.index < 0) throw invalid(label + ".index is " + std::to_string(raw.index) + "; expected >= 0");
      break;
    case KABI_PARAM_DIM:
      if (raw.name == nullptr || raw.name[0] == '\0') {
        throw invalid(label + ".name is empty; expected a dimension name");
      }
      param.name = raw.name;
      break;
    case KABI_PARAM_CONSTANT:
      if (raw.size_bytes == 4 && (raw.value < INT32_MIN || raw.value > INT32_MAX)) {
        throw invalid(label + ".value " + std::to_string(raw.value) + " does not fit 4 bytes");
      }
      break;
    case KABI_PARAM_SCRATCH:
    case KABI_PARAM_ZEROED_SCRATCH:
      if (raw.value < 0) throw invalid(label + ".value is " + std::to_string(raw.value) + "; expected bytes >= 0");
      break;
    case KABI_PARAM_ATTRIBUTE:
      if (raw.index < 0) throw invalid(label + ".index is " + std::to_string(raw.index) + "; expected >= 0");
      break;
    case KABI_PARAM_WORKSPACE: break;
    default: throw invalid(label + ".kind is " + std::to_string(raw.kind) + "; expected a kabi_param_kind");
  }
  if (raw.divisible_by < 0 || (raw.divisible_by & (raw.divisible_by - 1)) != 0) {
    throw invalid(label + ".divisible_by is " + std::to_string(raw.divisible_by) +
                  "; expected 0 (no assumption) or a power of two");
  }
  if (raw.divisible_by > 1) {
    if (raw.kind != KABI_PARAM_DIM && raw.kind != KABI_PARAM_STRIDE) {
      throw invalid(label + ".divisible_by is " + std::to_string(raw.divisible_by) +
                    "; only dim and stride parameters take one");
    }
    param.divisible_by = raw.divisible_by;
  }
  return param;
}

// Checks the indices a parameter reads against the op's schema, and marks float attributes.
void bind_param_to_schema(LaunchParam& param, size_t index, const Schema& schema) {
  const std::string label = param_label(index);
  const auto tensors = static_cast<int32_t>(schema.inputs.size() + schema.outputs.size());
  const bool reads_tensor = param.kind == KABI_PARAM_TENSOR_DATA || param.kind == KABI_PARAM_STRIDE;
  if (reads_tensor && param.index >= tensors) {
    throw invalid(label + ".index is " + std::to_string(param.index) + "; the op has " + std::to_string(tensors) +
                  " tensors");
  }
  if (param.kind == KABI_PARAM_ATTRIBUTE) {
    const auto attributes = static_cast<int32_t>(schema.attributes.size());
    if (param.index >= attributes) {
      throw invalid(label + ".index is " + std::to_string(param.index) + "; the op has " + std::to_string(attributes) +
                    " attributes");
    }
    param.real_attribute = schema.attributes[static_cast<size_t>(param.index)].type == KABI_ATTRIBUTE_FLOAT;
  }
}

void check_format(int32_t format) {
  if (format != KABI_BINARY_CUBIN && format != KABI_BINARY_PTX) {
    throw invalid("format is " + std::to_string(format) + "; expected KABI_BINARY_CUBIN or KABI_BINARY_PTX");
  }
}

// Why the bytes are not an image of the format ("" when they are one): a cubin must be an ELF file, a PTX text.
std::string image_format_mismatch(int32_t format, const unsigned char* bytes, size_t size) {
  if (bytes == nullptr || size == 0) return "image is empty";
  if (format == KABI_BINARY_CUBIN) {
    static constexpr unsigned char kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
    if (size < sizeof kElfMagic || std::memcmp(bytes, kElfMagic, sizeof kElfMagic) != 0) {
      return "image is not a cubin (no ELF header); for PTX set format to KABI_BINARY_PTX";
    }
    return "";
  }
  const void* first_nul = std::memchr(bytes, '\0', size);
  if (first_nul != nullptr && first_nul != bytes + size - 1) {
    return "image is not PTX text (it holds a NUL byte before its end)";
  }
  return "";
}

std::string hex64(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, value);
  return text;
}

int64_t dim_value(const std::string& name, const kabi_problem& problem) {
  if (name == "batch") return problem.batch_size;
  for (int32_t i = 0; i < problem.num_dims; ++i) {
    if (problem.dim_names[i] != nullptr && name == problem.dim_names[i]) return problem.dims[i];
  }
  throw invalid("device binary parameter names dimension " + name + ", which the problem does not have");
}

// The stride in elements of dimension `dim` of a tensor. Size-1 batch dimensions and dimensions counted from the end
// that a tensor does not have read 0: broadcast ones, as torch aligns shapes from the end (a per-tensor scale []
// read as a row-wise [M, 1] one).
int64_t stride_value(const DLTensor& tensor, int32_t dim) {
  const int32_t rank = tensor.ndim;
  const int32_t axis = dim < 0 ? rank + dim : dim;
  const bool batch_axis = dim < 0 ? dim <= -3 : dim < rank - 2;
  if (axis < 0) return 0;
  if (axis >= rank) {
    throw invalid("device binary parameter reads stride of dim " + std::to_string(dim) + " of a tensor of rank " +
                  std::to_string(rank));
  }
  if (batch_axis && tensor.shape[axis] == 1) return 0;
  if (tensor.strides != nullptr) return tensor.strides[axis];
  int64_t stride = 1;
  for (int32_t later = axis + 1; later < rank; ++later) stride *= tensor.shape[later];
  return stride;
}

void store_integer(uint64_t& slot, int64_t value, const LaunchParam& param) {
  if (param.size_bytes == 4) {
    if (value < INT32_MIN || value > INT32_MAX) {
      const std::string what = param.kind == KABI_PARAM_DIM ? param.name
                               : param.kind == KABI_PARAM_STRIDE
                                   ? "stride " + std::to_string(param.dim) + " of tensor " + std::to_string(param.index)
                               : param.kind == KABI_PARAM_ATTRIBUTE ? "attribute " + std::to_string(param.index)
                                                                    : std::string("constant");
      throw invalid(what + " = " + std::to_string(value) + " does not fit the kernel's 4-byte parameter");
    }
    const int32_t narrow = static_cast<int32_t>(value);
    std::memcpy(&slot, &narrow, sizeof narrow);
  } else {
    std::memcpy(&slot, &value, sizeof value);
  }
}

void store_attribute(uint64_t& slot, const kabi_attribute_value& value, const LaunchParam& param) {
  if (!param.real_attribute) {
    store_integer(slot, value.integer, param);
  } else if (param.size_bytes == 4) {
    const auto narrow = static_cast<float>(value.real);
    std::memcpy(&slot, &narrow, sizeof narrow);
  } else {
    std::memcpy(&slot, &value.real, sizeof value.real);
  }
}

// Scratch taken from the stream-ordered allocator for one launch under graph capture (zeroed scratch zeroed on the
// stream after its allocation); freed on the stream after the launch.
class CapturedScratch {
 public:
  CapturedScratch(const CudaDriver& driver, cuda::CUstream stream) : driver_(driver), stream_(stream) {}
  ~CapturedScratch() {
    for (cuda::CUdeviceptr pointer : pointers_) driver_.cuMemFreeAsync(pointer, stream_);
  }
  CapturedScratch(const CapturedScratch&) = delete;
  CapturedScratch& operator=(const CapturedScratch&) = delete;

  void* allocate(size_t bytes, bool zeroed, const std::string& entry) {
    if (driver_.cuMemAllocAsync == nullptr || driver_.cuMemFreeAsync == nullptr) {
      throw Error(KABI_STATUS_UNAVAILABLE, entry +
                                               " needs scratch memory inside CUDA-graph capture, which needs the "
                                               "stream-ordered allocator (CUDA 11.2+ driver)");
    }
    cuda::CUdeviceptr pointer = 0;
    check_cuda(driver_.cuMemAllocAsync(&pointer, bytes, stream_),
               "allocating " + std::to_string(bytes) + " bytes of scratch for " + entry + " during graph capture");
    pointers_.push_back(pointer);
    if (zeroed) {
      check_cuda(driver_.cuMemsetD8Async(pointer, 0, bytes, stream_),
                 "zeroing " + std::to_string(bytes) + " bytes of scratch for " + entry + " during graph capture");
    }
    return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
  }

 private:
  const CudaDriver& driver_;
  cuda::CUstream stream_;
  std::vector<cuda::CUdeviceptr> pointers_;
};

}  // namespace

DeviceBinary::~DeviceBinary() {
  if (!cuda_available() || (loaded_.empty() && scratch_.empty())) return;
  const CudaDriver& driver = cuda_driver();
  for (const auto& item : scratch_) driver.cuMemFree(item.second);
  for (const auto& item : loaded_) driver.cuModuleUnload(item.second.first);
}

void DeviceBinary::keep_image(std::vector<unsigned char> image) {
  image_ = std::move(image);
  if (format == KABI_BINARY_PTX && image_.back() != '\0') image_.push_back('\0');
  image_ready_.store(true, std::memory_order_release);
}

void DeviceBinary::defer_image(ImageFile file) { image_file_ = std::move(file); }

void DeviceBinary::require_image() {
  if (image_ready_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  require_image_locked();
}

void DeviceBinary::require_image_locked() {
  if (image_ready_.load(std::memory_order_acquire)) return;
  const ImageFile& file = *image_file_;
  const std::string name = std::filesystem::path(file.path).filename().string();
  const auto refuse = [&](kabi_status status, int line, const std::string& key, const std::string& message) {
    return Error(status, file.manifest + ":" + std::to_string(line) + ": " + key + ": " + message +
                             "; the kernel is not launched");
  };
  std::error_code missing;
  if (!std::filesystem::is_regular_file(file.path, missing)) {
    throw refuse(KABI_STATUS_IO_ERROR, file.image_line, "image", "image file " + file.path + " is missing");
  }
  std::string bytes;
  try {
    bytes = read_file(file.path);
  } catch (const Error& error) {
    throw refuse(KABI_STATUS_IO_ERROR, file.image_line, "image", error.what());
  }
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  if (const std::string mismatch = image_format_mismatch(format, data, bytes.size()); !mismatch.empty()) {
    throw refuse(KABI_STATUS_INVALID_ARGUMENT, file.image_line, "image", name + ": " + mismatch);
  }
  const uint64_t actual = fnv1a64(data, bytes.size());
  if (actual != file.declared_fnv1a64) {
    throw refuse(KABI_STATUS_INVALID_ARGUMENT, file.hash_line, "image_fnv1a64",
                 "image " + name + " hashes to " + hex64(actual) + ", not " + hex64(file.declared_fnv1a64) +
                     " (corrupt or replaced image)");
  }
  keep_image(std::vector<unsigned char>(data, data + bytes.size()));
  image_file_.reset();
}

cuda::CUfunction DeviceBinary::function_on(const CudaDriver& driver, int32_t device_index) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = loaded_.find(device_index);
  if (found != loaded_.end()) return found->second.second;
  require_image_locked();
  cuda::CUmodule module = nullptr;
  check_cuda(driver.cuModuleLoadData(&module, image_.data()), "cuModuleLoadData for " + entry + " (built for sm_" +
                                                                 std::to_string(arch) +
                                                                 ") on cuda:" + std::to_string(device_index));
  cuda::CUfunction function = nullptr;
  try {
    check_cuda(driver.cuModuleGetFunction(&function, module, entry.c_str()), "cuModuleGetFunction(" + entry + ")");
    if (shared_memory_bytes > kDefaultSharedMemoryLimit) {
      check_cuda(driver.cuFuncSetAttribute(function, cuda::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                           shared_memory_bytes),
                 "raising the shared memory of " + entry + " to " + std::to_string(shared_memory_bytes) + " bytes");
    }
    if (cluster_size > 8) {
      check_cuda(driver.cuFuncSetAttribute(function, cuda::CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                 "allowing clusters of " + std::to_string(cluster_size) + " for " + entry);
    }
  } catch (...) {
    driver.cuModuleUnload(module);
    throw;
  }
  loaded_.emplace(device_index, std::make_pair(module, function));
  return function;
}

void* DeviceBinary::scratch(const CudaDriver& driver, int32_t device_index, void* stream, size_t param, size_t bytes,
                            bool zeroed) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_tuple(device_index, stream, param, bytes);
  auto found = scratch_.find(key);
  if (found != scratch_.end()) return reinterpret_cast<void*>(static_cast<uintptr_t>(found->second));
  cuda::CUdeviceptr pointer = 0;
  check_cuda(driver.cuMemAlloc(&pointer, bytes),
             "allocating " + std::to_string(bytes) + " bytes of scratch for " + entry);
  if (zeroed) {
    // On the launch's stream, so that the launch after it finds the memory zero whatever kind of stream it is.
    const cuda::CUresult result = driver.cuMemsetD8Async(pointer, 0, bytes, static_cast<cuda::CUstream>(stream));
    if (result != cuda::CUDA_SUCCESS) {
      driver.cuMemFree(pointer);
      check_cuda(result, "zeroing " + std::to_string(bytes) + " bytes of scratch for " + entry);
    }
  }
  scratch_.emplace(key, pointer);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(pointer));
}

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= bytes[i];
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::shared_ptr<DeviceBinary> make_device_binary(const kabi_device_binary* desc_pointer, const Schema& schema,
                                                 const ImageFile* image_file) {
  const kabi_device_binary desc =
      read_input_struct(desc_pointer, "binary", KABI_STRUCT_SIZE_THROUGH(kabi_device_binary, cluster_size));
  walk_extensions(desc.extensions, "binary");
  check_format(desc.format);
  auto binary = std::make_shared<DeviceBinary>();
  binary->format = desc.format;
  if (image_file != nullptr) {
    binary->image_fnv1a64 = image_file->declared_fnv1a64;
    binary->defer_image(*image_file);
  } else {
    const auto* image = static_cast<const unsigned char*>(desc.image);
    if (const std::string mismatch = image_format_mismatch(desc.format, image, desc.image_size); !mismatch.empty()) {
      throw invalid(mismatch);
    }
    binary->image_fnv1a64 = fnv1a64(image, desc.image_size);
    binary->keep_image(std::vector<unsigned char>(image, image + desc.image_size));
  }
  if (desc.arch <= 0) throw invalid("arch is " + std::to_string(desc.arch) + "; expected a compute capability (90)");
  binary->arch = desc.arch;
  if (desc.entry == nullptr || desc.entry[0] == '\0') throw invalid("entry is empty; expected the kernel's name");
  binary->entry = desc.entry;

  if (desc.num_params < 0 || desc.num_params > kMaxParams) {
    throw invalid("num_params is " + std::to_string(desc.num_params) + "; expected 0 to " + std::to_string(kMaxParams));
  }
  if (desc.num_params > 0) {
    if (desc.params == nullptr) throw invalid("params is NULL but num_params is " + std::to_string(desc.num_params));
    const size_t stride = desc.params[0].struct_size;
    if (stride < KABI_STRUCT_SIZE_THROUGH(kabi_launch_param, value)) {
      throw invalid("params[0].struct_size is " + std::to_string(stride) + "; set it to sizeof(kabi_launch_param)");
    }
    const auto* base = reinterpret_cast<const unsigned char*>(desc.params);
    for (size_t i = 0; i < static_cast<size_t>(desc.num_params); ++i) {
      kabi_launch_param raw;
      std::memset(&raw, 0, sizeof raw);
      std::memcpy(&raw, base + i * stride, std::min(stride, sizeof raw));
      binary->params.push_back(copy_param(raw, i));
      bind_param_to_schema(binary->params.back(), i, schema);
    }
  }
  binary->num_inputs = static_cast<int32_t>(schema.inputs.size());
  for (int axis = 0; axis < 3; ++axis) {
    try {
      binary->grid.emplace_back(desc.grid[axis] != nullptr ? std::string(desc.grid[axis]) : std::string("1"));
    } catch (const Error& error) {
      throw invalid("grid[" + std::to_string(axis) + "]: " + error.what());
    }
  }
  int64_t threads = 1;
  for (int axis = 0; axis < 3; ++axis) {
    if (desc.block[axis] < 1) {
      throw invalid("block[" + std::to_string(axis) + "] is " + std::to_string(desc.block[axis]) + "; expected >= 1");
    }
    binary->block[axis] = desc.block[axis];
    threads *= desc.block[axis];
  }
  if (threads > 1024) throw invalid("block has " + std::to_string(threads) + " threads; CUDA allows at most 1024");
  if (desc.shared_memory_bytes < 0) {
    throw invalid("shared_memory_bytes is " + std::to_string(desc.shared_memory_bytes) + "; expected >= 0");
  }
  binary->shared_memory_bytes = desc.shared_memory_bytes;
  binary->cluster_size = desc.cluster_size == 0 ? 1 : desc.cluster_size;
  if (binary->cluster_size < 1 || binary->cluster_size > 16) {
    throw invalid("cluster_size is " + std::to_string(desc.cluster_size) + "; expected 1 to 16");
  }
  return binary;
}

std::string device_binary_fingerprint(const DeviceBinary& binary) {
  std::string spec = std::to_string(binary.format) + "|" + std::to_string(binary.arch) + "|" + binary.entry + "|";
  for (const LaunchParam& param : binary.params) {
    spec += std::to_string(param.kind) + "," + std::to_string(param.size_bytes) + "," + std::to_string(param.index) +
            "," + std::to_string(param.dim) + "," + param.name + "," + std::to_string(param.value);
    // Only where assumed, so that the fingerprints of binaries without assumptions stay what they were before 2.4.
    if (param.divisible_by > 1) spec += ",divisible_by=" + std::to_string(param.divisible_by);
    spec += ";";
  }
  for (const GridExpression& axis : binary.grid) spec += axis.text() + ";";
  spec += std::to_string(binary.block[0]) + "," + std::to_string(binary.block[1]) + "," +
          std::to_string(binary.block[2]) + "|" + std::to_string(binary.shared_memory_bytes) + "|" +
          std::to_string(binary.cluster_size);
  return hex64(fnv1a64(spec.data(), spec.size(), binary.image_fnv1a64));
}

std::string divisibility_mismatch(const DeviceBinary& binary, const Schema& schema, const kabi_problem& problem,
                                  const kabi_args& args) {
  for (size_t i = 0; i < binary.params.size(); ++i) {
    const LaunchParam& param = binary.params[i];
    if (param.divisible_by <= 1) continue;
    std::string what;
    int64_t value = 0;
    try {
      if (param.kind == KABI_PARAM_DIM) {
        what = "dim " + param.name;
        value = dim_value(param.name, problem);
      } else {
        const bool input = param.index < binary.num_inputs;
        const auto position = static_cast<size_t>(input ? param.index : param.index - binary.num_inputs);
        what = "stride of " + (input ? schema.inputs[position].name : schema.outputs[position].name) + ", dim " +
               std::to_string(param.dim);
        if (input) {
          const DLTensor& tensor = args.inputs[param.index];
          value = tensor.dtype.bits == 0 ? 0 : stride_value(tensor, param.dim);
        } else {
          // Outputs are dense row-major of the problem's shapes, and a selection may be made before they exist.
          DLTensor output{};
          output.ndim = problem.output_ranks[position];
          output.shape = const_cast<int64_t*>(problem.output_shapes[position]);
          value = stride_value(output, param.dim);
        }
      }
    } catch (const Error& error) {
      return "param " + std::to_string(i) + ": " + error.what();
    }
    if (value % param.divisible_by != 0) {
      return "param " + std::to_string(i) + " (" + what + ") is " + std::to_string(value) + ", not a multiple of " +
             std::to_string(param.divisible_by) + " as the image assumes";
    }
  }
  return "";
}

void launch_device_binary(DeviceBinary& binary, const kabi_problem& problem, const kabi_args& args) {
  if (problem.device_type != kDLCUDA) {
    throw invalid("device binary " + binary.entry + " runs on CUDA devices, not device type " +
                  std::to_string(problem.device_type));
  }
  binary.require_image();
  const CudaDriver& driver = cuda_driver();
  int64_t grid[3];
  int64_t blocks = 1;
  for (int axis = 0; axis < 3; ++axis) {
    grid[axis] = binary.grid[static_cast<size_t>(axis)].evaluate(problem);
    const int64_t limit = axis == 0 ? INT32_MAX : 65535;
    if (grid[axis] < 0 || grid[axis] > limit) {
      throw invalid("grid expression \"" + binary.grid[static_cast<size_t>(axis)].text() + "\" of " + binary.entry +
                    " gives " + std::to_string(grid[axis]) + "; expected 0 to " + std::to_string(limit));
    }
    blocks *= grid[axis];
  }
  if (blocks == 0) return;  // an empty problem: nothing to compute
  if (grid[0] % binary.cluster_size != 0) {
    throw invalid("grid x of " + binary.entry + " is " + std::to_string(grid[0]) +
                  ", not a multiple of its cluster size " + std::to_string(binary.cluster_size));
  }

  CudaContextScope context(driver, problem.device_index, binary.entry);
  const cuda::CUfunction function = binary.function_on(driver, problem.device_index);

  auto stream = static_cast<cuda::CUstream>(args.stream);
  CapturedScratch captured_scratch(driver, stream);
  int capturing = -1;  // asked only when a scratch or zeroed-scratch parameter needs memory
  // args holds every input of the schema (the core completes trailing optional ones), then the outputs.
  const auto tensor = [&](int32_t index) -> const DLTensor& {
    return index < binary.num_inputs ? args.inputs[index] : args.outputs[index - binary.num_inputs];
  };
  uint64_t slots[kMaxParams] = {};
  void* pointers[kMaxParams] = {};
  for (size_t i = 0; i < binary.params.size(); ++i) {
    const LaunchParam& param = binary.params[i];
    void* pointer = nullptr;
    switch (param.kind) {
      case KABI_PARAM_TENSOR_DATA: {
        const DLTensor& data = tensor(param.index);
        // An absent optional input passes NULL.
        pointer = data.data != nullptr ? static_cast<char*>(data.data) + data.byte_offset : nullptr;
        break;
      }
      case KABI_PARAM_DIM: store_integer(slots[i], dim_value(param.name, problem), param); break;
      case KABI_PARAM_STRIDE: {
        const DLTensor& strided = tensor(param.index);
        store_integer(slots[i], strided.dtype.bits == 0 ? 0 : stride_value(strided, param.dim), param);
        break;
      }
      case KABI_PARAM_ATTRIBUTE: store_attribute(slots[i], problem.attributes[param.index], param); break;
      case KABI_PARAM_WORKSPACE: pointer = args.workspace; break;
      case KABI_PARAM_CONSTANT: store_integer(slots[i], param.value, param); break;
      case KABI_PARAM_SCRATCH:
      case KABI_PARAM_ZEROED_SCRATCH:
        if (param.value > 0) {
          const size_t bytes = static_cast<size_t>(param.value) * static_cast<size_t>(blocks);
          const bool zeroed = param.kind == KABI_PARAM_ZEROED_SCRATCH;
          if (capturing < 0) capturing = stream_is_capturing(driver, stream) ? 1 : 0;
          pointer = capturing == 1 ? captured_scratch.allocate(bytes, zeroed, binary.entry)
                                   : binary.scratch(driver, problem.device_index, args.stream, i, bytes, zeroed);
        }
        break;
    }
    if (param.kind == KABI_PARAM_TENSOR_DATA || param.kind == KABI_PARAM_SCRATCH ||
        param.kind == KABI_PARAM_ZEROED_SCRATCH || param.kind == KABI_PARAM_WORKSPACE) {
      std::memcpy(&slots[i], &pointer, sizeof pointer);
    }
    pointers[i] = &slots[i];
  }

  if (binary.cluster_size == 1) {
    check_cuda(driver.cuLaunchKernel(function, static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                                     static_cast<unsigned>(grid[2]), static_cast<unsigned>(binary.block[0]),
                                     static_cast<unsigned>(binary.block[1]), static_cast<unsigned>(binary.block[2]),
                                     static_cast<unsigned>(binary.shared_memory_bytes), stream, pointers, nullptr),
               "launching ", binary.entry);
    return;
  }
  if (driver.cuLaunchKernelEx == nullptr) {
    throw Error(KABI_STATUS_UNAVAILABLE, binary.entry +
                                             " needs thread-block clusters, which this CUDA driver lacks "
                                             "(no cuLaunchKernelEx)");
  }
  cuda::CUlaunchAttribute cluster{};
  cluster.id = cuda::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = static_cast<unsigned>(binary.cluster_size);
  cluster.value.clusterDim.y = 1;
  cluster.value.clusterDim.z = 1;
  cuda::CUlaunchConfig config{};
  config.gridDimX = static_cast<unsigned>(grid[0]);
  config.gridDimY = static_cast<unsigned>(grid[1]);
  config.gridDimZ = static_cast<unsigned>(grid[2]);
  config.blockDimX = static_cast<unsigned>(binary.block[0]);
  config.blockDimY = static_cast<unsigned>(binary.block[1]);
  config.blockDimZ = static_cast<unsigned>(binary.block[2]);
  config.sharedMemBytes = static_cast<unsigned>(binary.shared_memory_bytes);
  config.hStream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  check_cuda(driver.cuLaunchKernelEx(&config, function, pointers, nullptr), "launching ", binary.entry);
}

}  // namespace kabi::core
