// An op's shape schema ("a: [..., M, K], b: [..., K, N] -> out: [..., M, N]") and tuning key
// ("dtype,layout,batch,M:pow2<=4096,N,K"), parsed once when the op is registered.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kabi::core {

// One tensor of a schema: its name, whether it starts with the "..." broadcast group, and its named trailing dims
// as indices into Schema::dim_names.
struct SchemaTensor {
  std::string name;
  bool has_batch = false;
  std::vector<int32_t> dims;
};

struct Schema {
  std::vector<SchemaTensor> inputs;
  std::vector<SchemaTensor> outputs;
  // Named dimensions in order of first appearance.
  std::vector<std::string> dim_names;
  bool has_batch = false;  // some input carries "..."
};

// Throws Error(KABI_STATUS_INVALID_ARGUMENT) naming the op and the problem on a syntax error, a repeated tensor
// name, an output dimension no input defines, or an output "..." without an input one.
Schema parse_schema(const std::string& op_name, const std::string& text);

// One item of a tuning key.
struct TuningKeyItem {
  enum class Kind { kDtype, kLayout, kBatch, kDim };
  Kind kind = Kind::kDim;
  int32_t dim = -1;      // index into Schema::dim_names for kDim
  bool pow2 = false;     // round up to the next power of two
  int64_t pow2_cap = 0;  // with pow2: values above this stay exact (0: no cap)
};

// Throws Error(KABI_STATUS_INVALID_ARGUMENT) on an unknown item or a malformed bucket.
std::vector<TuningKeyItem> parse_tuning_key(const std::string& op_name, const std::string& text, const Schema& schema);

// The default key when an op gives none: "dtype,layout,batch," then every dimension.
std::string default_tuning_key(const Schema& schema);

// The bucketed value of a dimension under an item ("M:pow2<=4096": 100 -> 128, 5000 -> 5000).
int64_t bucket_dimension(const TuningKeyItem& item, int64_t value);

}  // namespace kabi::core
