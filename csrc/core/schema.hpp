// An op's schema ("x: [..., K] T, w: [N, K] T, bias?: [N] T, activation: enum(none, relu) = none -> out: [..., N] T"),
// its type variables ("T: float16, bfloat16; F8: float8_e4m3fn", also the syntax of a kernel's type_constraints) and
// its tuning key ("dtype,layout,batch,M:pow2<=4096,N,K,activation"), parsed once when the op is registered. The one
// parser of each: everything else (the Python package included) reads the parsed form.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kabi/kabi.h"

namespace kabi::core {

// One tensor of a schema: its name, whether it is an optional input or starts with the "..." broadcast group, its
// named trailing dims as indices into Schema::dim_names (KABI_DIM_ONE for a literal 1), the other shapes an input
// may have instead ("scale: [M, 1] | [] float32": a row-wise or a per-tensor scale; each of its own rank), and its
// dtype (a type variable or one concrete dtype).
// Three rules for ops whose inputs come in forms (grouped_mm's x[T, K] with offsets, or x[E, M, K] without):
// - a first dim written "E?" may be left out (the tensor then has one dim less); an output's "E?" is there exactly
//   when the inputs that may leave it out have it;
// - an optional input written "offs?(x.rank == 2)" is given exactly when that input has that rank;
// - an int32/int64 tensor written "[E] int32 offsets(R)" holds group end offsets along R: non-decreasing, from 0 to
//   the size of R. The values are checked where the host can read them (CPU tensors).
struct SchemaTensor {
  std::string name;
  bool is_output = false;
  bool optional = false;
  bool has_batch = false;
  bool leading_dim_optional = false;
  std::vector<int32_t> dims;
  std::vector<std::vector<int32_t>> alternative_shapes;
  int32_t type_variable = -1;  // index into Schema::type_variables, or -1 for a concrete dtype
  uint32_t dtypes = 0;         // the variable's set, or the concrete dtype's bit
  int32_t present_with_input = -1;  // an optional input's condition: given exactly when this input ...
  int32_t present_with_rank = 0;    // ... has this rank
  int32_t offsets_of_dim = -1;      // the dim (index into Schema::dim_names) whose group ends the values are
};

struct TypeVariable {
  std::string name;
  uint32_t dtypes = 0;
};

struct SchemaAttribute {
  std::string name;
  kabi_attribute_type type = KABI_ATTRIBUTE_INT;
  bool has_default = false;
  kabi_attribute_value default_value{};
  std::vector<std::string> enum_values;
  bool in_tuning_key = false;
  // For an attribute typed by a type variable ("out_dtype: O = bfloat16"): the variable its value binds; it is then
  // an enum of the variable's dtype names. -1 otherwise.
  int32_t type_variable = -1;
};

struct Schema {
  std::vector<SchemaTensor> inputs;
  std::vector<SchemaTensor> outputs;
  std::vector<SchemaAttribute> attributes;
  std::vector<TypeVariable> type_variables;
  // Named dimensions in order of first appearance.
  std::vector<std::string> dim_names;
  bool has_batch = false;  // some input carries "..."
  bool has_optional_inputs = false;
};

// "T: float16, bfloat16; F8: float8_e4m3fn" -> its variables in order. `context` starts every error message ("op
// linear: type_variables", "kernel linear/x: type_constraints"). Throws Error(KABI_STATUS_INVALID_ARGUMENT) naming the
// part on a malformed entry, a repeated or invalid name, an empty list or an unknown dtype. "" gives none.
std::vector<TypeVariable> parse_type_variables(const std::string& context, const std::string& text);

// Throws Error(KABI_STATUS_INVALID_ARGUMENT) naming the op and the part on a syntax error, an undeclared type variable
// or unknown dtype, a repeated name, an attribute without a type or enum values, a default its type cannot take, an
// optional output, an output dimension no required input defines, shape alternatives on an output, with "..." or
// of one rank twice, or a limit of kabi.h exceeded.
Schema parse_schema(const std::string& op_name, const std::string& text, const std::string& type_variables);

// One item of a tuning key.
struct TuningKeyItem {
  enum class Kind { kDtype, kLayout, kBatch, kDim, kAttribute };
  Kind kind = Kind::kDim;
  int32_t index = -1;    // into Schema::dim_names for kDim, Schema::attributes for kAttribute
  bool pow2 = false;     // round up to the next power of two
  int64_t pow2_cap = 0;  // with pow2: values above this stay exact (0: no cap)
};

// Throws Error(KABI_STATUS_INVALID_ARGUMENT) on an unknown item, a malformed bucket, a bucketed item that is not a
// dimension or batch, and a key without "layout" for an op with optional inputs. Marks the attributes it names.
std::vector<TuningKeyItem> parse_tuning_key(const std::string& op_name, const std::string& text, Schema& schema);

// The default key when an op gives none: "dtype,layout,batch," then every dimension and every attribute.
std::string default_tuning_key(const Schema& schema);

// The bucketed value of a dimension under an item ("M:pow2<=4096": 100 -> 128, 5000 -> 5000).
int64_t bucket_dimension(const TuningKeyItem& item, int64_t value);

}  // namespace kabi::core
