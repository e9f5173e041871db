#include "schema.hpp"

#include <algorithm>
#include <cctype>

#include "error.hpp"

namespace kabi::core {
namespace {

std::string trim(const std::string& text) {
  size_t begin = 0;
  size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return text.substr(begin, end - begin);
}

bool is_identifier(const std::string& text) {
  if (text.empty() || !(std::isalpha(static_cast<unsigned char>(text[0])) || text[0] == '_')) return false;
  return std::all_of(text.begin(), text.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

// Splits at top-level commas (not inside brackets).
std::vector<std::string> split_top_level(const std::string& text) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

class SchemaParser {
 public:
  SchemaParser(const std::string& op_name, const std::string& text) : op_name_(op_name), text_(text) {}

  Schema parse() {
    const size_t arrow = text_.find("->");
    if (arrow == std::string::npos) fail("expected '->' between inputs and outputs");
    if (text_.find("->", arrow + 2) != std::string::npos) fail("more than one '->'");
    parse_side(text_.substr(0, arrow), /*is_output=*/false);
    parse_side(text_.substr(arrow + 2), /*is_output=*/true);
    if (schema_.inputs.empty()) fail("no inputs");
    if (schema_.outputs.empty()) fail("no outputs");
    return schema_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "op " + op_name_ + ": schema \"" + text_ + "\": " + what);
  }

  void parse_side(const std::string& side, bool is_output) {
    for (const std::string& raw : split_top_level(side)) parse_tensor(trim(raw), is_output);
  }

  void parse_tensor(const std::string& text, bool is_output) {
    const size_t colon = text.find(':');
    if (colon == std::string::npos) fail("expected 'name: [dims]', got \"" + text + "\"");
    SchemaTensor tensor;
    tensor.name = trim(text.substr(0, colon));
    if (!is_identifier(tensor.name)) fail("\"" + tensor.name + "\" is not a valid tensor name");
    if (seen_tensor(tensor.name)) fail("tensor name \"" + tensor.name + "\" appears twice");
    const std::string dims_text = trim(text.substr(colon + 1));
    if (dims_text.size() < 2 || dims_text.front() != '[' || dims_text.back() != ']') {
      fail(tensor.name + ": expected dimensions in brackets, got \"" + dims_text + "\"");
    }
    const std::string inner = trim(dims_text.substr(1, dims_text.size() - 2));
    if (!inner.empty()) {
      const std::vector<std::string> items = split_top_level(inner);
      for (size_t i = 0; i < items.size(); ++i) {
        const std::string item = trim(items[i]);
        if (item == "...") {
          if (i != 0) fail(tensor.name + ": \"...\" must come first");
          tensor.has_batch = true;
          continue;
        }
        if (!is_identifier(item)) fail(tensor.name + ": \"" + item + "\" is not a dimension name");
        tensor.dims.push_back(dimension_index(item, tensor.name, is_output));
      }
    }
    if (is_output) {
      if (tensor.has_batch && !schema_.has_batch) fail(tensor.name + ": output has \"...\" but no input does");
      schema_.outputs.push_back(tensor);
    } else {
      schema_.has_batch = schema_.has_batch || tensor.has_batch;
      schema_.inputs.push_back(tensor);
    }
  }

  bool seen_tensor(const std::string& name) const {
    auto same = [&](const SchemaTensor& t) { return t.name == name; };
    return std::any_of(schema_.inputs.begin(), schema_.inputs.end(), same) ||
           std::any_of(schema_.outputs.begin(), schema_.outputs.end(), same);
  }

  int32_t dimension_index(const std::string& name, const std::string& tensor, bool is_output) {
    auto found = std::find(schema_.dim_names.begin(), schema_.dim_names.end(), name);
    if (found != schema_.dim_names.end()) return static_cast<int32_t>(found - schema_.dim_names.begin());
    if (is_output) fail(tensor + ": dimension " + name + " is not defined by any input");
    if (schema_.dim_names.size() == 8) fail("more than 8 named dimensions");
    schema_.dim_names.push_back(name);
    return static_cast<int32_t>(schema_.dim_names.size() - 1);
  }

  std::string op_name_;
  std::string text_;
  Schema schema_;
};

}  // namespace

Schema parse_schema(const std::string& op_name, const std::string& text) {
  Schema schema = SchemaParser(op_name, text).parse();
  if (schema.inputs.size() > 8) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "op " + op_name + ": schema has more than 8 inputs");
  }
  return schema;
}

std::vector<TuningKeyItem> parse_tuning_key(const std::string& op_name, const std::string& text, const Schema& schema) {
  auto fail = [&](const std::string& what) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "op " + op_name + ": tuning key \"" + text + "\": " + what);
  };
  std::vector<TuningKeyItem> items;
  for (const std::string& raw : split_top_level(text)) {
    const std::string token = trim(raw);
    const size_t colon = token.find(':');
    const std::string name = trim(token.substr(0, colon));
    TuningKeyItem item;
    if (name == "dtype") {
      item.kind = TuningKeyItem::Kind::kDtype;
    } else if (name == "layout") {
      item.kind = TuningKeyItem::Kind::kLayout;
    } else if (name == "batch") {
      item.kind = TuningKeyItem::Kind::kBatch;
    } else {
      auto found = std::find(schema.dim_names.begin(), schema.dim_names.end(), name);
      if (found == schema.dim_names.end()) {
        fail("\"" + name + "\" is neither dtype, layout, batch nor a dimension of the schema");
      }
      item.kind = TuningKeyItem::Kind::kDim;
      item.dim = static_cast<int32_t>(found - schema.dim_names.begin());
    }
    if (colon != std::string::npos) {
      const std::string bucket = trim(token.substr(colon + 1));
      if (item.kind != TuningKeyItem::Kind::kDim && item.kind != TuningKeyItem::Kind::kBatch) {
        fail("only dimensions and batch can be bucketed, not \"" + name + "\"");
      }
      if (bucket == "pow2") {
        item.pow2 = true;
      } else if (bucket.rfind("pow2<=", 0) == 0) {
        item.pow2 = true;
        const std::string cap = bucket.substr(6);
        if (cap.empty() ||
            !std::all_of(cap.begin(), cap.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
          fail("bucket \"" + bucket + "\" needs an integer cap, as in pow2<=4096");
        }
        item.pow2_cap = std::stoll(cap);
      } else {
        fail("unknown bucket \"" + bucket + "\" (expected pow2 or pow2<=N)");
      }
    }
    items.push_back(item);
  }
  return items;
}

std::string default_tuning_key(const Schema& schema) {
  std::string key = "dtype,layout";
  if (schema.has_batch) key += ",batch";
  for (const std::string& name : schema.dim_names) key += "," + name;
  return key;
}

int64_t bucket_dimension(const TuningKeyItem& item, int64_t value) {
  if (!item.pow2 || value <= 1) return value;
  if (item.pow2_cap > 0 && value > item.pow2_cap) return value;
  int64_t rounded = 1;
  while (rounded < value) rounded <<= 1;
  return rounded;
}

}  // namespace kabi::core
