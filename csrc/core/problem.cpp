#include "problem.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#include "names.hpp"
#include "struct_io.hpp"

namespace kabi::core {
namespace {

constexpr int32_t kMaxRank = 16;
constexpr int32_t kMaxBatchRank = 8;

// The stride of dimension d in elements (DLPack's NULL strides mean compact row-major).
int64_t stride_of(const DLTensor& tensor, int32_t d) {
  if (tensor.strides != nullptr) return tensor.strides[d];
  int64_t stride = 1;
  for (int32_t i = d + 1; i < tensor.ndim; ++i) stride *= tensor.shape[i];
  return stride;
}

bool is_contiguous(const DLTensor& tensor) {
  if (tensor.strides == nullptr) return true;
  // An empty tensor addresses no memory, so any strides describe it (torch gives [5, 0] the strides [1, 1]).
  for (int32_t d = 0; d < tensor.ndim; ++d) {
    if (tensor.shape[d] == 0) return true;
  }
  int64_t expected = 1;
  for (int32_t d = tensor.ndim - 1; d >= 0; --d) {
    if (tensor.shape[d] != 1 && tensor.strides[d] != expected) return false;
    expected *= tensor.shape[d];
  }
  return true;
}

std::string shape_of(const DLTensor& tensor) {
  return format_shape(tensor.shape, tensor.ndim);
}

// "[..., M, K]" for a schema tensor.
std::string schema_shape(const Op& op, const SchemaTensor& tensor) {
  std::vector<std::string> items;
  if (tensor.has_batch) items.push_back("...");
  for (int32_t dim : tensor.dims) items.push_back(op.schema.dim_names[static_cast<size_t>(dim)]);
  return "[" + join(items, ", ") + "]";
}

class Binder {
 public:
  Binder(const Op& op, const kabi_args& args) : op_(op), args_(args) {}

  kabi_problem bind(ProblemUse use) {
    const bool outputs_required = use != ProblemUse::kDescribe;
    std::memset(&problem_, 0, sizeof problem_);
    problem_.struct_size = sizeof problem_;
    check_counts(outputs_required);
    for (int32_t i = 0; i < args_.num_inputs; ++i) check_tensor(args_.inputs[i], input_name(i));
    for (int32_t i = 0; i < args_.num_outputs; ++i) check_tensor(args_.outputs[i], output_name(i));
    check_dtypes_and_devices();
    bind_dimensions();
    broadcast_batch();
    derive_outputs();
    classify_inputs();
    if (use == ProblemUse::kDescribe) format_problem_key(op_, args_.num_inputs, problem_);
    return problem_;
  }

 private:
  [[noreturn]] void fail(kabi_status status, const std::string& message) const {
    throw Error(status, op_.name + ": " + message);
  }
  const std::string& input_name(int32_t i) const { return op_.schema.inputs[static_cast<size_t>(i)].name; }
  const std::string& output_name(int32_t i) const { return op_.schema.outputs[static_cast<size_t>(i)].name; }

  void check_counts(bool outputs_required) const {
    const auto expected_inputs = static_cast<int32_t>(op_.schema.inputs.size());
    const auto expected_outputs = static_cast<int32_t>(op_.schema.outputs.size());
    auto names = [](const std::vector<SchemaTensor>& tensors) {
      std::vector<std::string> list;
      for (const SchemaTensor& tensor : tensors) list.push_back(tensor.name);
      return join(list, ", ");
    };
    if (args_.num_inputs != expected_inputs) {
      fail(KABI_STATUS_INVALID_ARGUMENT, "expected " + std::to_string(expected_inputs) + " inputs (" +
                                             names(op_.schema.inputs) + "), got " + std::to_string(args_.num_inputs));
    }
    if (args_.inputs == nullptr) fail(KABI_STATUS_INVALID_ARGUMENT, "args->inputs is NULL");
    const bool outputs_given = args_.num_outputs != 0;
    if ((outputs_required || outputs_given) && args_.num_outputs != expected_outputs) {
      fail(KABI_STATUS_INVALID_ARGUMENT, "expected " + std::to_string(expected_outputs) + " outputs (" +
                                             names(op_.schema.outputs) + "), got " + std::to_string(args_.num_outputs));
    }
    if (outputs_given && args_.outputs == nullptr) fail(KABI_STATUS_INVALID_ARGUMENT, "args->outputs is NULL");
  }

  void check_tensor(const DLTensor& tensor, const std::string& name) const {
    if (tensor.ndim < 0 || tensor.ndim > kMaxRank) {
      fail(KABI_STATUS_INVALID_ARGUMENT,
           name + " has rank " + std::to_string(tensor.ndim) + "; kabi takes 0 to " + std::to_string(kMaxRank));
    }
    if (tensor.ndim > 0 && tensor.shape == nullptr) fail(KABI_STATUS_INVALID_ARGUMENT, name + ".shape is NULL");
    for (int32_t d = 0; d < tensor.ndim; ++d) {
      if (tensor.shape[d] < 0) {
        fail(KABI_STATUS_INVALID_ARGUMENT,
             name + " has shape " + shape_of(tensor) + " with a negative size in dimension " + std::to_string(d));
      }
    }
  }

  void check_dtypes_and_devices() {
    const DLTensor& first = args_.inputs[0];
    problem_.dtype = dtype_bit(first.dtype);
    if (problem_.dtype == 0) {
      fail(KABI_STATUS_UNSUPPORTED_DTYPE,
           input_name(0) + " has " + describe_dtype(first.dtype) + ", which kabi does not support");
    }
    for (int32_t i = 1; i < args_.num_inputs; ++i) {
      const DLTensor& tensor = args_.inputs[i];
      if (dtype_bit(tensor.dtype) != problem_.dtype) {
        fail(KABI_STATUS_UNSUPPORTED_DTYPE, input_name(0) + " is " + describe_dtype(first.dtype) + " but " +
                                                input_name(i) + " is " + describe_dtype(tensor.dtype));
      }
      if (tensor.device.device_type != first.device.device_type || tensor.device.device_id != first.device.device_id) {
        fail(KABI_STATUS_INVALID_ARGUMENT, input_name(0) + " is on " + describe_device(first.device) + " but " +
                                               input_name(i) + " is on " + describe_device(tensor.device));
      }
    }
    if ((op_.dtypes & problem_.dtype) == 0) {
      fail(KABI_STATUS_UNSUPPORTED_DTYPE, "dtype " + describe_dtype(first.dtype) +
                                              " is not supported (supported: " + describe_dtype_set(op_.dtypes) + ")");
    }
    for (int32_t i = 0; i < args_.num_outputs; ++i) {
      const DLTensor& tensor = args_.outputs[i];
      if (dtype_bit(tensor.dtype) != problem_.dtype) {
        fail(KABI_STATUS_UNSUPPORTED_DTYPE, output_name(i) + " is " + describe_dtype(tensor.dtype) +
                                                " but the inputs are " + describe_dtype(first.dtype));
      }
      if (tensor.device.device_type != first.device.device_type || tensor.device.device_id != first.device.device_id) {
        fail(KABI_STATUS_INVALID_ARGUMENT, output_name(i) + " is on " + describe_device(tensor.device) +
                                               " but the inputs are on " + describe_device(first.device));
      }
    }
    problem_.device_type = first.device.device_type;
    problem_.device_index = first.device.device_id;
  }

  void bind_dimensions() {
    const size_t dim_count = op_.schema.dim_names.size();
    bound_by_.fill(-1);
    problem_.num_dims = static_cast<int32_t>(dim_count);
    for (size_t d = 0; d < dim_count; ++d) problem_.dim_names[d] = op_.dim_name_pointers[d];
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = op_.schema.inputs[static_cast<size_t>(i)];
      const DLTensor& tensor = args_.inputs[i];
      const auto needed = static_cast<int32_t>(schema.dims.size());
      const bool rank_ok = schema.has_batch ? tensor.ndim >= needed : tensor.ndim == needed;
      if (!rank_ok) {
        fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " has shape " + shape_of(tensor) + " (rank " +
                                               std::to_string(tensor.ndim) + "); expected " +
                                               schema_shape(op_, schema) + " (rank " +
                                               (schema.has_batch ? "at least " : "") + std::to_string(needed) + ")");
      }
      for (int32_t j = 0; j < needed; ++j) {
        const int32_t dim = schema.dims[static_cast<size_t>(j)];
        const int64_t value = tensor.shape[tensor.ndim - needed + j];
        if (bound_by_[static_cast<size_t>(dim)] < 0) {
          bound_by_[static_cast<size_t>(dim)] = i;
          problem_.dims[dim] = value;
        } else if (problem_.dims[dim] != value) {
          const DLTensor& other = args_.inputs[bound_by_[static_cast<size_t>(dim)]];
          fail(KABI_STATUS_INVALID_ARGUMENT,
               schema.name + " has shape " + shape_of(tensor) + " but " +
                   input_name(bound_by_[static_cast<size_t>(dim)]) + " has shape " + shape_of(other) + ": " +
                   schema.name + "'s dimension " + op_.schema.dim_names[static_cast<size_t>(dim)] + " (" +
                   std::to_string(j - needed) + ") must be " + std::to_string(problem_.dims[dim]));
        }
      }
    }
  }

  // Broadcasts the inputs' leading dims right-aligned, as torch does, into problem_.batch_shape. Uses fixed arrays:
  // this runs on every launch.
  void broadcast_batch() {
    std::array<int64_t, kMaxBatchRank> batch{};     // right-aligned: batch[kMaxBatchRank - k] is dim -k
    std::array<int32_t, kMaxBatchRank> sized_by{};  // which input gave each batch dim its size
    int32_t batch_rank = 0;
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = op_.schema.inputs[static_cast<size_t>(i)];
      if (!schema.has_batch) continue;
      const DLTensor& tensor = args_.inputs[i];
      const int32_t rank = tensor.ndim - static_cast<int32_t>(schema.dims.size());
      if (rank > kMaxBatchRank) {
        fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " has shape " + shape_of(tensor) + " with " +
                                               std::to_string(rank) + " leading dimensions; kabi takes at most " +
                                               std::to_string(kMaxBatchRank));
      }
      for (int32_t k = batch_rank + 1; k <= rank; ++k) {
        batch[static_cast<size_t>(kMaxBatchRank - k)] = 1;
        sized_by[static_cast<size_t>(kMaxBatchRank - k)] = i;
      }
      batch_rank = std::max(batch_rank, rank);
      for (int32_t k = 1; k <= rank; ++k) {
        const int64_t size = tensor.shape[rank - k];
        const auto position = static_cast<size_t>(kMaxBatchRank - k);
        if (size == batch[position] || size == 1) continue;
        if (batch[position] != 1) {
          const int32_t other = sized_by[position];
          fail(KABI_STATUS_INVALID_ARGUMENT,
               "the leading dimensions of " + input_name(other) + " " + shape_of(args_.inputs[other]) + " and " +
                   schema.name + " " + shape_of(tensor) + " do not broadcast: batch dimension -" + std::to_string(k) +
                   " is " + std::to_string(batch[position]) + " in " + input_name(other) + " and " +
                   std::to_string(size) + " in " + schema.name);
        }
        batch[position] = size;
        sized_by[position] = i;
      }
    }
    problem_.batch_rank = batch_rank;
    problem_.batch_size = 1;
    for (int32_t d = 0; d < batch_rank; ++d) {
      problem_.batch_shape[d] = batch[static_cast<size_t>(kMaxBatchRank - batch_rank + d)];
      problem_.batch_size *= problem_.batch_shape[d];
    }
  }

  // Writes the shape an output must have into shape (at most kMaxRank values); returns its rank.
  int32_t expected_output_shape(const SchemaTensor& schema, int64_t* shape) const {
    int32_t rank = 0;
    if (schema.has_batch) {
      for (int32_t d = 0; d < problem_.batch_rank; ++d) shape[rank++] = problem_.batch_shape[d];
    }
    for (int32_t dim : schema.dims) {
      if (rank == kMaxRank) {
        fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " would have rank above " + std::to_string(kMaxRank));
      }
      shape[rank++] = problem_.dims[dim];
    }
    return rank;
  }

  void derive_outputs() {
    problem_.output_rank = expected_output_shape(op_.schema.outputs[0], problem_.output_shape);
    for (int32_t i = 0; i < args_.num_outputs; ++i) {
      const DLTensor& tensor = args_.outputs[i];
      int64_t expected[kMaxRank];
      const int32_t rank = expected_output_shape(op_.schema.outputs[static_cast<size_t>(i)], expected);
      if (tensor.ndim != rank || !std::equal(expected, expected + rank, tensor.shape)) {
        fail(KABI_STATUS_INVALID_ARGUMENT,
             output_name(i) + " has shape " + shape_of(tensor) + "; expected " + format_shape(expected, rank));
      }
      if (!is_contiguous(tensor)) {
        fail(KABI_STATUS_INVALID_ARGUMENT, output_name(i) + " must be contiguous (row-major); its strides are " +
                                               format_shape(tensor.strides, tensor.ndim));
      }
    }
  }

  // Whether an input's leading dims, broadcast to the call's batch shape, flatten to one stride: either every
  // non-unit batch dim is broadcast (stride 0) or they nest like a dense array's.
  bool batch_flattens(int32_t input) const {
    const DLTensor& tensor = args_.inputs[input];
    const SchemaTensor& schema = op_.schema.inputs[static_cast<size_t>(input)];
    const int32_t rank = tensor.ndim - static_cast<int32_t>(schema.dims.size());
    bool any_broadcast = false;
    bool any_materialized = false;
    int64_t next_stride = -1;  // what the next outer materialized dim's stride must be
    for (int32_t k = 1; k <= problem_.batch_rank; ++k) {
      const int64_t size = problem_.batch_shape[problem_.batch_rank - k];
      if (size == 1) continue;
      const bool present = k <= rank && tensor.shape[rank - k] != 1;
      const int64_t stride = present ? stride_of(tensor, rank - k) : 0;
      if (stride == 0) {
        any_broadcast = true;
        continue;
      }
      if (any_materialized && stride != next_stride) return false;
      any_materialized = true;
      next_stride = stride * size;
    }
    return !(any_broadcast && any_materialized);
  }

  void classify_inputs() {
    for (int32_t i = 0; i < args_.num_inputs && i < 8; ++i) problem_.input_layouts[i] = layout_class(args_.inputs[i]);
    problem_.batch_mode = KABI_BATCH_NONE;
    if (problem_.batch_rank == 0) return;
    problem_.batch_mode = KABI_BATCH_UNIFORM;
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      if (op_.schema.inputs[static_cast<size_t>(i)].has_batch && !batch_flattens(i)) {
        problem_.batch_mode = KABI_BATCH_ANY;
        return;
      }
    }
  }

  const Op& op_;
  const kabi_args& args_;
  kabi_problem problem_{};
  std::array<int32_t, 8> bound_by_{};  // the input that first bound each named dim
};

}  // namespace

kabi_args read_args(const kabi_args* args, const char* function) {
  constexpr size_t kNeeded = KABI_STRUCT_SIZE_THROUGH(kabi_args, outputs);
  if (args == nullptr || args->struct_size < kNeeded) {
    read_input_struct(args, (std::string(function) + ": args").c_str(), kNeeded);  // throws the message
  }
  kabi_args copy{};
  std::memcpy(&copy, args, std::min(args->struct_size, sizeof copy));
  return copy;
}

kabi_problem describe_problem(const Op& op, const kabi_args& args, ProblemUse use) {
  return Binder(op, args).bind(use);
}

void format_problem_key(const Op& op, int32_t num_inputs, kabi_problem& problem) {
  std::string key;
  for (const TuningKeyItem& item : op.tuning_key) {
    if (!key.empty()) key += '|';
    switch (item.kind) {
      case TuningKeyItem::Kind::kDtype: key += dtype_name(problem.dtype); break;
      case TuningKeyItem::Kind::kLayout:
        for (int32_t i = 0; i < num_inputs && i < 8; ++i) {
          key += (i ? "," : "");
          key += layout_name(problem.input_layouts[i]);
        }
        break;
      case TuningKeyItem::Kind::kBatch: key += std::to_string(bucket_dimension(item, problem.batch_size)); break;
      case TuningKeyItem::Kind::kDim: key += std::to_string(bucket_dimension(item, problem.dims[item.dim])); break;
    }
  }
  if (key.size() >= sizeof problem.key) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, op.name + ": problem key \"" + key + "\" is longer than " +
                                                  std::to_string(sizeof problem.key - 1) + " characters");
  }
  copy_truncated(problem.key, key);
}

uint32_t data_alignment(const kabi_args& args) {
  constexpr uintptr_t kLargest = 256;
  uintptr_t combined = 0;
  auto add = [&](const DLTensor& tensor) {
    if (tensor.data != nullptr) combined |= reinterpret_cast<uintptr_t>(tensor.data) + tensor.byte_offset;
  };
  for (int32_t i = 0; i < args.num_inputs; ++i) add(args.inputs[i]);
  for (int32_t i = 0; i < args.num_outputs; ++i) add(args.outputs[i]);
  if (combined == 0) return 0;
  combined |= kLargest;
  return static_cast<uint32_t>(combined & (~combined + 1));
}

uint32_t layout_class(const DLTensor& tensor) {
  if (is_contiguous(tensor)) return KABI_LAYOUT_CONTIGUOUS;
  if (tensor.ndim < 2) return KABI_LAYOUT_GENERAL;
  const int32_t row = tensor.ndim - 2;
  const int32_t column = tensor.ndim - 1;
  const int64_t rows = tensor.shape[row];
  const int64_t columns = tensor.shape[column];
  const int64_t row_stride = tensor.strides[row];
  const int64_t column_stride = tensor.strides[column];
  // A unit dimension's stride is never used to address memory, so it may be anything.
  if ((column_stride == 1 || columns == 1) && (row_stride >= columns || rows == 1)) return KABI_LAYOUT_ROW_STRIDED;
  if ((row_stride == 1 || rows == 1) && (column_stride >= rows || columns == 1)) return KABI_LAYOUT_COL_STRIDED;
  return KABI_LAYOUT_GENERAL;
}

bool layout_accepted(uint32_t accepted, uint32_t layout) {
  if (accepted & layout) return true;
  return layout == KABI_LAYOUT_CONTIGUOUS && (accepted & KABI_LAYOUT_ROW_STRIDED) != 0;
}

int64_t element_count(const DLTensor& tensor) {
  int64_t count = 1;
  for (int32_t d = 0; d < tensor.ndim; ++d) count *= tensor.shape[d];
  return count;
}

}  // namespace kabi::core
