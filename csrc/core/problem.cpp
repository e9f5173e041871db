#include "problem.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>

#include "names.hpp"
#include "struct_io.hpp"

namespace kabi::core {
namespace {

constexpr int32_t kMaxRank = 16;
constexpr int32_t kMaxBatchRank = KABI_MAX_BATCH_RANK;

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

// "[M, 1]" for one shape of a schema tensor.
std::string dims_text(const Op& op, const std::vector<int32_t>& dims, bool has_batch, bool leading_dim_optional) {
  std::vector<std::string> items;
  if (has_batch) items.push_back("...");
  for (int32_t dim : dims) items.push_back(dim == KABI_DIM_ONE ? "1" : op.schema.dim_names[static_cast<size_t>(dim)]);
  if (leading_dim_optional) items[has_batch ? 1 : 0] += "?";
  return "[" + join(items, ", ") + "]";
}

// "[..., M, K]" for a schema tensor; "[M, 1] or []" for one with shape alternatives.
std::string schema_shape(const Op& op, const SchemaTensor& tensor) {
  std::string text = dims_text(op, tensor.dims, tensor.has_batch, tensor.leading_dim_optional);
  for (const std::vector<int32_t>& shape : tensor.alternative_shapes) {
    text += " or " + dims_text(op, shape, false, false);
  }
  return text;
}

// The declared shape of a tensor that a call's input matched (0: dims, i + 1: alternative i).
const std::vector<int32_t>& matched_dims(const SchemaTensor& tensor, int32_t shape) {
  return shape == 0 ? tensor.dims : tensor.alternative_shapes[static_cast<size_t>(shape - 1)];
}

std::string input_list(const Schema& schema) {
  std::vector<std::string> names;
  for (const SchemaTensor& tensor : schema.inputs) names.push_back(tensor.name + (tensor.optional ? "?" : ""));
  return join(names, ", ");
}

std::string attribute_value_text(const SchemaAttribute& attribute, const kabi_attribute_value& value) {
  switch (attribute.type) {
    case KABI_ATTRIBUTE_INT: return std::to_string(value.integer);
    case KABI_ATTRIBUTE_BOOL: return value.integer != 0 ? "true" : "false";
    case KABI_ATTRIBUTE_ENUM: return attribute.enum_values[static_cast<size_t>(value.integer)];
    case KABI_ATTRIBUTE_FLOAT: {
      char text[32];
      const auto result = std::to_chars(text, text + sizeof text, value.real);
      return std::string(text, result.ptr);
    }
  }
  return "";
}

class Binder {
 public:
  Binder(const Op& op, const kabi_args& args) : op_(op), schema_(op.schema), args_(args) {}

  kabi_problem bind(ProblemUse use) {
    const bool outputs_required = use != ProblemUse::kDescribe;
    std::memset(&problem_, 0, sizeof problem_);
    problem_.struct_size = sizeof problem_;
    problem_.num_inputs = static_cast<int32_t>(schema_.inputs.size());
    problem_.num_outputs = static_cast<int32_t>(schema_.outputs.size());
    problem_.num_type_variables = static_cast<int32_t>(schema_.type_variables.size());
    problem_.num_attributes = static_cast<int32_t>(schema_.attributes.size());
    check_outputs(outputs_required);
    find_present_inputs();
    for (int32_t i = 0; i < args_.num_outputs; ++i) check_tensor(args_.outputs[i], output_name(i));
    bind_attributes();
    check_dtypes_and_devices();
    bind_dimensions();
    check_presence_conditions();
    check_offsets();
    broadcast_batch();
    derive_outputs();
    classify_inputs();
    if (use == ProblemUse::kDescribe) format_problem_key(op_, problem_);
    return problem_;
  }

 private:
  [[noreturn]] void fail(kabi_status status, const std::string& message) const {
    throw Error(status, op_.name + ": " + message);
  }
  const std::string& input_name(int32_t i) const { return schema_.inputs[static_cast<size_t>(i)].name; }
  const std::string& output_name(int32_t i) const { return schema_.outputs[static_cast<size_t>(i)].name; }
  bool present(int32_t i) const { return input_present(problem_, i); }

  void check_outputs(bool outputs_required) const {
    const auto expected_outputs = static_cast<int32_t>(schema_.outputs.size());
    const bool outputs_given = args_.num_outputs != 0;
    if ((outputs_required || outputs_given) && args_.num_outputs != expected_outputs) {
      std::vector<std::string> names;
      for (const SchemaTensor& tensor : schema_.outputs) names.push_back(tensor.name);
      fail(KABI_STATUS_INVALID_ARGUMENT, "expected " + std::to_string(expected_outputs) + " outputs (" +
                                             join(names, ", ") + "), got " + std::to_string(args_.num_outputs));
    }
    if (outputs_given && args_.outputs == nullptr) fail(KABI_STATUS_INVALID_ARGUMENT, "args->outputs is NULL");
  }

  void find_present_inputs() {
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(i)];
      if (args_.inputs[i].dtype.bits == 0) {
        if (!schema.optional) {
          fail(KABI_STATUS_INVALID_ARGUMENT, "input " + schema.name +
                                                 " is required but was passed absent (a DLTensor with dtype.bits 0)");
        }
        continue;
      }
      check_tensor(args_.inputs[i], schema.name);
      problem_.inputs_present |= 1u << i;
    }
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

  // The dtype of one tensor against its declaration: a known dtype, in its set, and the same as every other tensor
  // of its type variable (the first one binds the variable).
  void check_dtype(const SchemaTensor& schema, const DLTensor& tensor) {
    const uint32_t bit = dtype_bit(tensor.dtype);
    if (bit == 0) {
      fail(KABI_STATUS_UNSUPPORTED_DTYPE,
           schema.name + " is " + describe_dtype(tensor.dtype) + ", a dtype kabi does not support");
    }
    if (schema.type_variable < 0) {
      if (bit != schema.dtypes) {
        fail(KABI_STATUS_UNSUPPORTED_DTYPE,
             schema.name + " is " + describe_dtype(tensor.dtype) + "; expected " + dtype_name(schema.dtypes));
      }
      return;
    }
    const auto variable = static_cast<size_t>(schema.type_variable);
    const std::string& variable_name = schema_.type_variables[variable].name;
    const uint32_t bound = problem_.type_bindings[variable];
    if (bound != 0 && bound != bit) {
      const std::string& binder = *bound_by_[variable];
      const std::string both = " (both have type " + variable_name + ")";
      if (schema.is_output) {
        fail(KABI_STATUS_UNSUPPORTED_DTYPE, schema.name + " is " + describe_dtype(tensor.dtype) + " but " + binder +
                                                " is " + dtype_name(bound) + both);
      }
      fail(KABI_STATUS_UNSUPPORTED_DTYPE,
           binder + " is " + dtype_name(bound) + " but " + schema.name + " is " + describe_dtype(tensor.dtype) + both);
    }
    if ((schema.dtypes & bit) == 0) {
      fail(KABI_STATUS_UNSUPPORTED_DTYPE, schema.name + " is " + describe_dtype(tensor.dtype) + ", which " +
                                              variable_name + " does not take (" + variable_name + ": " +
                                              describe_dtype_set(schema.dtypes) + ")");
    }
    if (bound == 0) {
      problem_.type_bindings[variable] = bit;
      bound_by_[variable] = &schema.name;
    }
  }

  void check_device(const std::string& name, const DLTensor& tensor, const std::string& first_name,
                    const DLDevice& first) const {
    if (tensor.device.device_type != first.device_type || tensor.device.device_id != first.device_id) {
      fail(KABI_STATUS_INVALID_ARGUMENT, first_name + " is on " + describe_device(first) + " but " + name + " is on " +
                                             describe_device(tensor.device));
    }
  }

  void check_dtypes_and_devices() {
    int32_t first = -1;
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      if (!present(i)) continue;
      const DLTensor& tensor = args_.inputs[i];
      if (first < 0) first = i;
      check_dtype(schema_.inputs[static_cast<size_t>(i)], tensor);
      check_device(input_name(i), tensor, input_name(first), args_.inputs[first].device);
    }
    for (int32_t i = 0; i < args_.num_outputs; ++i) {
      const DLTensor& tensor = args_.outputs[i];
      check_dtype(schema_.outputs[static_cast<size_t>(i)], tensor);
      const DLDevice& device = args_.inputs[first].device;
      if (tensor.device.device_type != device.device_type || tensor.device.device_id != device.device_id) {
        fail(KABI_STATUS_INVALID_ARGUMENT, output_name(i) + " is on " + describe_device(tensor.device) +
                                               " but the inputs are on " + describe_device(device));
      }
    }
    problem_.dtype = problem_.num_type_variables > 0 ? problem_.type_bindings[0] : 0;
    problem_.device_type = args_.inputs[first].device.device_type;
    problem_.device_index = args_.inputs[first].device.device_id;
  }

  void bind_attributes() {
    const auto declared = static_cast<int32_t>(schema_.attributes.size());
    if (args_.num_attributes < 0 || args_.num_attributes > declared) {
      std::vector<std::string> names;
      for (const SchemaAttribute& attribute : schema_.attributes) names.push_back(attribute.name);
      fail(KABI_STATUS_INVALID_ARGUMENT, "expected at most " + std::to_string(declared) + " attributes (" +
                                             join(names, ", ") + "), got " + std::to_string(args_.num_attributes));
    }
    if (args_.num_attributes > 0 && args_.attributes == nullptr) {
      fail(KABI_STATUS_INVALID_ARGUMENT, "args->attributes is NULL but num_attributes is " +
                                             std::to_string(args_.num_attributes));
    }
    for (int32_t i = 0; i < declared; ++i) {
      const SchemaAttribute& attribute = schema_.attributes[static_cast<size_t>(i)];
      if (i >= args_.num_attributes) {
        if (!attribute.has_default) {
          fail(KABI_STATUS_INVALID_ARGUMENT,
               "attribute " + attribute.name + " was not passed and has no default; every call must give it");
        }
        problem_.attributes[i] = attribute.default_value;
        continue;
      }
      const kabi_attribute_value value = args_.attributes[i];
      const std::string given = "attribute " + attribute.name + " is " + std::to_string(value.integer);
      if (attribute.type == KABI_ATTRIBUTE_BOOL && value.integer != 0 && value.integer != 1) {
        fail(KABI_STATUS_INVALID_ARGUMENT, given + "; expected 0 or 1 (a bool)");
      }
      if (attribute.type == KABI_ATTRIBUTE_ENUM &&
          (value.integer < 0 || value.integer >= static_cast<int64_t>(attribute.enum_values.size()))) {
        fail(KABI_STATUS_INVALID_ARGUMENT, given + "; expected an index below " +
                                               std::to_string(attribute.enum_values.size()) + " (" +
                                               join(attribute.enum_values, ", ") + ")");
      }
      problem_.attributes[i] = value;
    }
    for (int32_t i = 0; i < declared; ++i) bind_type_variable(i);
  }

  // An attribute typed by a type variable binds it to the dtype it names, before any tensor of that type is read.
  void bind_type_variable(int32_t index) {
    const SchemaAttribute& attribute = schema_.attributes[static_cast<size_t>(index)];
    if (attribute.type_variable < 0) return;
    const auto variable = static_cast<size_t>(attribute.type_variable);
    const std::string& dtype = attribute.enum_values[static_cast<size_t>(problem_.attributes[index].integer)];
    problem_.type_bindings[variable] = dtype_bit_from_name(dtype);
    bound_by_[variable] = &attribute.name;
  }

  void bind_dimensions() {
    const size_t dim_count = schema_.dim_names.size();
    bound_dim_by_.fill(-1);
    leading_dim_given_by_.fill(-1);
    problem_.num_dims = static_cast<int32_t>(dim_count);
    for (size_t d = 0; d < dim_count; ++d) problem_.dim_names[d] = op_.dim_name_pointers[d];
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      if (!present(i)) continue;
      const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(i)];
      const DLTensor& tensor = args_.inputs[i];
      problem_.input_shapes[i] = match_shape(schema, tensor);
      const std::vector<int32_t>& declared = matched_dims(schema, problem_.input_shapes[i]);
      const bool leading_left_out =
          schema.leading_dim_optional && tensor.ndim + 1 == static_cast<int32_t>(declared.size());
      if (schema.leading_dim_optional) record_leading_dim(i, !leading_left_out);
      const auto skipped = static_cast<int32_t>(leading_left_out);
      const auto needed = static_cast<int32_t>(declared.size()) - skipped;
      for (int32_t j = 0; j < needed; ++j) {
        const int32_t dim = declared[static_cast<size_t>(j + skipped)];
        const int64_t value = tensor.shape[tensor.ndim - needed + j];
        if (dim == KABI_DIM_ONE) {
          if (value != 1) {
            fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " has shape " + shape_of(tensor) + "; expected " +
                                                   schema_shape(op_, schema) + ": its dimension " +
                                                   std::to_string(j - needed) + " must be 1");
          }
          continue;
        }
        const int32_t owner = bound_dim_by_[static_cast<size_t>(dim)];
        if (owner < 0) {
          bound_dim_by_[static_cast<size_t>(dim)] = i;
          problem_.dims[dim] = value;
        } else if (problem_.dims[dim] != value) {
          fail(KABI_STATUS_INVALID_ARGUMENT,
               schema.name + " has shape " + shape_of(tensor) + " but " + input_name(owner) + " has shape " +
                   shape_of(args_.inputs[owner]) + ": " + schema.name + "'s dimension " +
                   schema_.dim_names[static_cast<size_t>(dim)] + " (" + std::to_string(j - needed) + ") must be " +
                   std::to_string(problem_.dims[dim]));
        }
      }
    }
  }

  // Inputs that may leave out the same first dim must agree on whether they have it: the outputs' "E?" follows them.
  void record_leading_dim(int32_t input, bool given) {
    const auto dim = static_cast<size_t>(schema_.inputs[static_cast<size_t>(input)].dims.front());
    const int32_t first = leading_dim_given_by_[dim];
    if (first < 0) {
      leading_dim_given_by_[dim] = input;
      leading_dim_given_[dim] = given;
    } else if (leading_dim_given_[dim] != given) {
      fail(KABI_STATUS_INVALID_ARGUMENT, input_name(first) + " has shape " + shape_of(args_.inputs[first]) + " but " +
                                             input_name(input) + " has shape " + shape_of(args_.inputs[input]) +
                                             ": both have the dimension " + schema_.dim_names[dim] + " or neither");
    }
  }

  // An optional input with a presence condition ("offs?(x.rank == 2)") is given exactly when the condition holds.
  void check_presence_conditions() const {
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(i)];
      if (schema.present_with_input < 0) continue;
      const DLTensor& other = args_.inputs[schema.present_with_input];
      const bool wanted = other.ndim == schema.present_with_rank;
      if (wanted == present(i)) continue;
      const std::string condition = input_name(schema.present_with_input) + " has rank " +
                                    std::to_string(schema.present_with_rank);
      fail(KABI_STATUS_INVALID_ARGUMENT,
           schema.name + (wanted ? " is required when " + condition : " must be absent unless " + condition) + " (" +
               input_name(schema.present_with_input) + " has shape " + shape_of(other) + ")");
    }
  }

  // Group end offsets ("offs: [E] int32 offsets(R)") must be non-decreasing, from 0 up to the size of R. Only host
  // memory is read: a device's offsets would cost a synchronizing copy per call (and cannot be read under CUDA-graph
  // capture), so kernels clamp them instead and never touch memory outside their tensors whatever they hold.
  void check_offsets() const {
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(i)];
      const DLTensor& tensor = args_.inputs[i];
      if (schema.offsets_of_dim < 0 || !present(i) || tensor.data == nullptr || tensor.device.device_type != kDLCPU) {
        continue;
      }
      const int64_t limit = problem_.dims[schema.offsets_of_dim];
      const std::string& dim_name = schema_.dim_names[static_cast<size_t>(schema.offsets_of_dim)];
      const char* base = static_cast<const char*>(tensor.data) + tensor.byte_offset;
      const int64_t stride = stride_of(tensor, 0) * (tensor.dtype.bits / 8);
      int64_t previous = 0;
      for (int64_t g = 0; g < tensor.shape[0]; ++g) {
        int64_t value = 0;
        if (tensor.dtype.bits == 32) {
          int32_t narrow = 0;
          std::memcpy(&narrow, base + g * stride, sizeof narrow);
          value = narrow;
        } else {
          std::memcpy(&value, base + g * stride, sizeof value);
        }
        const std::string entry = schema.name + "[" + std::to_string(g) + "] is " + std::to_string(value);
        if (value < previous) {
          fail(KABI_STATUS_INVALID_ARGUMENT, entry + ", below " + (g == 0 ? std::string("0") : schema.name + "[" +
                                                 std::to_string(g - 1) + "] = " + std::to_string(previous)) +
                                                 ": group end offsets must be sorted (non-decreasing) from 0");
        }
        if (value > limit) {
          fail(KABI_STATUS_INVALID_ARGUMENT, entry + ", past the end of " + dim_name + " (" + std::to_string(limit) +
                                                 "): group end offsets must not exceed it");
        }
        previous = value;
      }
    }
  }

  // Which declared shape a tensor has, by its rank; fails naming the tensor and every shape it may have.
  int32_t match_shape(const SchemaTensor& schema, const DLTensor& tensor) const {
    const auto needed = static_cast<int32_t>(schema.dims.size());
    if (schema.has_batch ? tensor.ndim >= needed : tensor.ndim == needed) return 0;
    if (schema.leading_dim_optional && tensor.ndim == needed - 1) return 0;
    for (size_t s = 0; s < schema.alternative_shapes.size(); ++s) {
      if (tensor.ndim == static_cast<int32_t>(schema.alternative_shapes[s].size())) return static_cast<int32_t>(s + 1);
    }
    std::string ranks = (schema.has_batch ? "rank at least " : "rank ") + std::to_string(needed);
    if (schema.leading_dim_optional) ranks = "rank " + std::to_string(needed - 1) + " or " + std::to_string(needed);
    for (const std::vector<int32_t>& shape : schema.alternative_shapes) ranks += " or " + std::to_string(shape.size());
    fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " has shape " + shape_of(tensor) + " (rank " +
                                           std::to_string(tensor.ndim) + "); expected " + schema_shape(op_, schema) +
                                           " (" + ranks + ")");
  }

  // Broadcasts the inputs' leading dims right-aligned, as torch does, into problem_.batch_shape. Uses fixed arrays:
  // this runs on every launch.
  void broadcast_batch() {
    std::array<int64_t, kMaxBatchRank> batch{};     // right-aligned: batch[kMaxBatchRank - k] is dim -k
    std::array<int32_t, kMaxBatchRank> sized_by{};  // which input gave each batch dim its size
    int32_t batch_rank = 0;
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(i)];
      if (!schema.has_batch || !present(i)) continue;
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

  // Writes the shape an output must have into shape; returns its rank.
  int32_t expected_output_shape(const SchemaTensor& schema, int64_t* shape) const {
    int32_t rank = 0;
    if (schema.has_batch) {
      for (int32_t d = 0; d < problem_.batch_rank; ++d) shape[rank++] = problem_.batch_shape[d];
    }
    for (size_t d = 0; d < schema.dims.size(); ++d) {
      const int32_t dim = schema.dims[d];
      if (d == 0 && schema.leading_dim_optional && !leading_dim_given_[static_cast<size_t>(dim)]) continue;
      shape[rank++] = dim == KABI_DIM_ONE ? 1 : problem_.dims[dim];
    }
    return rank;
  }

  void derive_outputs() {
    for (int32_t o = 0; o < problem_.num_outputs; ++o) {
      const SchemaTensor& schema = schema_.outputs[static_cast<size_t>(o)];
      int64_t* expected = problem_.output_shapes[o];
      const int32_t rank = expected_output_shape(schema, expected);
      if (rank > kMaxRank) {
        fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " would have rank " + std::to_string(rank) +
                                               ", above kabi's " + std::to_string(kMaxRank));
      }
      problem_.output_ranks[o] = rank;
      if (o >= args_.num_outputs) continue;
      const DLTensor& tensor = args_.outputs[o];
      if (tensor.ndim != rank || !std::equal(expected, expected + rank, tensor.shape)) {
        fail(KABI_STATUS_INVALID_ARGUMENT,
             schema.name + " has shape " + shape_of(tensor) + "; expected " + format_shape(expected, rank));
      }
      if (!is_contiguous(tensor)) {
        fail(KABI_STATUS_INVALID_ARGUMENT, schema.name + " must be contiguous (row-major); its strides are " +
                                               format_shape(tensor.strides, tensor.ndim));
      }
    }
  }

  // Whether an input's leading dims, broadcast to the call's batch shape, flatten to one stride: either every
  // non-unit batch dim is broadcast (stride 0) or they nest like a dense array's.
  bool batch_flattens(int32_t input) const {
    const DLTensor& tensor = args_.inputs[input];
    const SchemaTensor& schema = schema_.inputs[static_cast<size_t>(input)];
    const int32_t rank = tensor.ndim - static_cast<int32_t>(schema.dims.size());
    bool any_broadcast = false;
    bool any_materialized = false;
    int64_t next_stride = -1;  // what the next outer materialized dim's stride must be
    for (int32_t k = 1; k <= problem_.batch_rank; ++k) {
      const int64_t size = problem_.batch_shape[problem_.batch_rank - k];
      if (size == 1) continue;
      const bool has_dim = k <= rank && tensor.shape[rank - k] != 1;
      const int64_t stride = has_dim ? stride_of(tensor, rank - k) : 0;
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
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      if (present(i)) problem_.input_layouts[i] = layout_class(args_.inputs[i]);
    }
    problem_.batch_mode = KABI_BATCH_NONE;
    if (problem_.batch_rank == 0) return;
    problem_.batch_mode = KABI_BATCH_UNIFORM;
    for (int32_t i = 0; i < args_.num_inputs; ++i) {
      if (present(i) && schema_.inputs[static_cast<size_t>(i)].has_batch && !batch_flattens(i)) {
        problem_.batch_mode = KABI_BATCH_ANY;
        return;
      }
    }
  }

  const Op& op_;
  const Schema& schema_;
  const kabi_args& args_;
  kabi_problem problem_{};
  std::array<int32_t, KABI_MAX_DIMS> bound_dim_by_{};                      // the input that first bound each dim
  std::array<int32_t, KABI_MAX_DIMS> leading_dim_given_by_{};  // the first input that may leave out each dim
  std::array<bool, KABI_MAX_DIMS> leading_dim_given_{};        // and whether it has it
  std::array<const std::string*, KABI_MAX_TYPE_VARIABLES> bound_by_{};  // the tensor that bound each type variable
};

}  // namespace

CallArgs::CallArgs(const Op& op, const kabi_args* caller, const char* function) {
  constexpr size_t kNeeded = KABI_STRUCT_SIZE_THROUGH(kabi_args, outputs);
  args_ = read_input_struct(caller, (std::string(function) + ": args").c_str(), kNeeded);
  walk_extensions(args_.extensions, function);
  const auto expected = static_cast<int32_t>(op.schema.inputs.size());
  if (args_.num_inputs > 0 && args_.inputs == nullptr) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, op.name + ": args->inputs is NULL");
  }
  int32_t required = expected;
  while (required > 0 && op.schema.inputs[static_cast<size_t>(required - 1)].optional) --required;
  if (args_.num_inputs < required || args_.num_inputs > expected) {
    const std::string count =
        required == expected ? std::to_string(expected) : std::to_string(required) + " to " + std::to_string(expected);
    throw Error(KABI_STATUS_INVALID_ARGUMENT, op.name + ": expected " + count + " inputs (" + input_list(op.schema) +
                                                  "), got " + std::to_string(args_.num_inputs));
  }
  if (args_.num_inputs == expected) return;
  // Trailing optional inputs left out: absent, as if passed zero-filled.
  std::copy(args_.inputs, args_.inputs + args_.num_inputs, completed_inputs_.begin());
  args_.inputs = completed_inputs_.data();
  args_.num_inputs = expected;
}

kabi_problem describe_problem(const Op& op, const kabi_args& args, ProblemUse use) {
  return Binder(op, args).bind(use);
}

void format_problem_key(const Op& op, kabi_problem& problem) {
  const Schema& schema = op.schema;
  std::string key;
  for (const TuningKeyItem& item : op.tuning_key) {
    if (!key.empty()) key += '|';
    switch (item.kind) {
      case TuningKeyItem::Kind::kDtype:
        for (int32_t v = 0; v < problem.num_type_variables; ++v) {
          const char* name = dtype_name(problem.type_bindings[v]);
          key += (v ? "," : "");
          key += name != nullptr ? name : "absent";
        }
        break;
      case TuningKeyItem::Kind::kLayout:
        for (int32_t i = 0; i < problem.num_inputs; ++i) {
          const SchemaTensor& tensor = schema.inputs[static_cast<size_t>(i)];
          key += (i ? "," : "");
          key += input_present(problem, i) ? layout_name(problem.input_layouts[i]) : "absent";
          // Kernels differ by the shape such an input has (a per-tensor or a row-wise scale), so the key says it.
          if (!tensor.alternative_shapes.empty() && input_present(problem, i)) {
            std::string shape = dims_text(op, matched_dims(tensor, problem.input_shapes[i]), false, false);
            shape.erase(std::remove(shape.begin(), shape.end(), ' '), shape.end());
            key += shape;
          }
        }
        break;
      case TuningKeyItem::Kind::kBatch: key += std::to_string(bucket_dimension(item, problem.batch_size)); break;
      case TuningKeyItem::Kind::kDim: key += std::to_string(bucket_dimension(item, problem.dims[item.index])); break;
      case TuningKeyItem::Kind::kAttribute:
        key += attribute_value_text(schema.attributes[static_cast<size_t>(item.index)], problem.attributes[item.index]);
        break;
    }
  }
  if (key.size() >= sizeof problem.key) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, op.name + ": problem key \"" + key + "\" is longer than " +
                                                  std::to_string(sizeof problem.key - 1) + " characters");
  }
  copy_truncated(problem.key, key);
}

std::string describe_bindings(const Op& op, const kabi_problem& problem) {
  const auto& variables = op.schema.type_variables;
  std::vector<std::string> bindings;
  for (size_t v = 0; v < variables.size(); ++v) {
    const char* name = dtype_name(problem.type_bindings[v]);
    const std::string dtype = name != nullptr ? name : "absent";
    bindings.push_back(variables.size() == 1 ? dtype : variables[v].name + "=" + dtype);
  }
  return join(bindings, ", ");
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
