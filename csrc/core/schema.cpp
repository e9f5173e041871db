#include "schema.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>

#include "error.hpp"
#include "names.hpp"

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

// Splits at `separator` outside brackets and parentheses.
std::vector<std::string> split_top_level(const std::string& text, char separator) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string current;
  for (char c : text) {
    if (c == '[' || c == '(') ++depth;
    if (c == ']' || c == ')') --depth;
    if (c == separator && depth == 0) {
      parts.push_back(current);
      current.clear();
    } else {
      current += c;
    }
  }
  parts.push_back(current);
  return parts;
}

bool parse_int64(const std::string& text, int64_t& value) {
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && result.ec == std::errc() && result.ptr == text.data() + text.size();
}

bool parse_double(const std::string& text, double& value) {
  if (text.empty()) return false;
  char* end = nullptr;
  value = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size();
}

class SchemaParser {
 public:
  SchemaParser(const std::string& op_name, const std::string& text, const std::string& type_variables)
      : op_name_(op_name), text_(text) {
    schema_.type_variables = parse_type_variables("op " + op_name + ": type_variables", type_variables);
  }

  Schema parse() {
    const size_t arrow = text_.find("->");
    if (arrow == std::string::npos) fail("expected '->' between inputs and outputs");
    if (text_.find("->", arrow + 2) != std::string::npos) fail("more than one '->'");
    for (const std::string& raw : split_top_level(text_.substr(0, arrow), ',')) parse_input(trim(raw));
    for (const std::string& raw : split_top_level(text_.substr(arrow + 2), ',')) parse_output(trim(raw));
    if (std::none_of(schema_.inputs.begin(), schema_.inputs.end(),
                     [](const SchemaTensor& input) { return !input.optional; })) {
      fail("no required input tensor (a call's device comes from its inputs)");
    }
    if (schema_.outputs.empty()) fail("no outputs");
    check_limits();
    check_type_variables_bound();
    return schema_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "op " + op_name_ + ": schema \"" + text_ + "\": " + what);
  }

  // Splits "name: rest" (or "name?: rest", "name?(condition): rest"); returns rest.
  std::string split_name(const std::string& text, std::string& name, bool& optional, std::string& condition) const {
    const size_t colon = text.find(':');
    if (colon == std::string::npos) fail("expected 'name: [dims] dtype' or 'name: type', got \"" + text + "\"");
    name = trim(text.substr(0, colon));
    const size_t open = name.find('(');
    if (open != std::string::npos) {
      if (name.back() != ')') fail("\"" + name + "\": a presence condition is written name?(input.rank == N)");
      condition = trim(name.substr(open + 1, name.size() - open - 2));
      name = trim(name.substr(0, open));
      if (name.empty() || name.back() != '?') {
        fail("\"" + name + "\": only an optional input (\"name?\") takes a presence condition");
      }
    }
    optional = !name.empty() && name.back() == '?';
    if (optional) name = trim(name.substr(0, name.size() - 1));
    if (!is_identifier(name)) fail("\"" + name + "\" is not a valid name");
    if (name_taken(name)) fail("the name \"" + name + "\" appears twice");
    return trim(text.substr(colon + 1));
  }

  void parse_input(const std::string& text) {
    std::string name;
    bool optional = false;
    std::string condition;
    const std::string rest = split_name(text, name, optional, condition);
    if (!rest.empty() && rest.front() == '[') {
      if (!schema_.attributes.empty()) {
        fail(name + ": tensor after attribute " + schema_.attributes.back().name + "; tensors come first");
      }
      SchemaTensor tensor = parse_tensor(name, rest, /*is_output=*/false);
      tensor.optional = optional;
      if (!condition.empty()) parse_presence_condition(tensor, condition);
      schema_.has_optional_inputs = schema_.has_optional_inputs || optional;
      schema_.has_batch = schema_.has_batch || tensor.has_batch;
      schema_.inputs.push_back(std::move(tensor));
      return;
    }
    if (optional) fail("attribute " + name + " is marked optional; give it a default instead (\"= value\")");
    parse_attribute(name, rest);
  }

  // "x.rank == 2": the optional input is given exactly when the required input x, declared before it, has rank 2.
  void parse_presence_condition(SchemaTensor& tensor, const std::string& condition) {
    const std::string where = tensor.name + "'s presence condition \"" + condition + "\"";
    const size_t equals = condition.find("==");
    const size_t dot = condition.find('.');
    if (equals == std::string::npos || dot == std::string::npos || dot > equals ||
        trim(condition.substr(dot + 1, equals - dot - 1)) != "rank") {
      fail(where + ": expected input.rank == N");
    }
    const std::string input = trim(condition.substr(0, dot));
    const auto found = std::find_if(schema_.inputs.begin(), schema_.inputs.end(),
                                    [&](const SchemaTensor& other) { return other.name == input; });
    if (found == schema_.inputs.end() || found->optional) {
      fail(where + ": " + input + " is not a required input tensor declared before " + tensor.name);
    }
    int64_t rank = 0;
    if (!parse_int64(trim(condition.substr(equals + 2)), rank) || rank < 0 || rank > KABI_MAX_DIMS) {
      fail(where + ": the rank must be an integer from 0 to " + std::to_string(KABI_MAX_DIMS));
    }
    tensor.present_with_input = static_cast<int32_t>(found - schema_.inputs.begin());
    tensor.present_with_rank = static_cast<int32_t>(rank);
  }

  void parse_output(const std::string& text) {
    std::string name;
    bool optional = false;
    std::string condition;
    const std::string rest = split_name(text, name, optional, condition);
    if (optional) fail("output " + name + " is marked optional; every output is written");
    if (rest.empty() || rest.front() != '[') fail("output " + name + ": expected '[dims] dtype', got \"" + rest + "\"");
    SchemaTensor tensor = parse_tensor(name, rest, /*is_output=*/true);
    if (tensor.has_batch && !schema_.has_batch) fail("output " + name + " has \"...\" but no input does");
    if (tensor.leading_dim_optional && optional_leading_dim_of(tensor.dims.front()) == nullptr) {
      fail("output " + name + ": " + schema_.dim_names[static_cast<size_t>(tensor.dims.front())] +
           "? is no required input's optional first dimension");
    }
    schema_.outputs.push_back(std::move(tensor));
  }

  const SchemaTensor* optional_leading_dim_of(int32_t dim) const {
    for (const SchemaTensor& input : schema_.inputs) {
      if (!input.optional && input.leading_dim_optional && input.dims.front() == dim) return &input;
    }
    return nullptr;
  }

  SchemaTensor parse_tensor(const std::string& name, const std::string& text, bool is_output) {
    SchemaTensor tensor;
    tensor.name = name;
    tensor.is_output = is_output;
    const size_t close = text.rfind(']');
    if (close == std::string::npos) fail(name + ": expected dimensions in brackets, got \"" + text + "\"");
    const std::vector<std::string> shapes = split_top_level(text.substr(0, close + 1), '|');
    for (size_t s = 0; s < shapes.size(); ++s) {
      const std::string shape = trim(shapes[s]);
      if (shape.size() < 2 || shape.front() != '[' || shape.back() != ']') {
        fail(name + ": expected dimensions in brackets, got \"" + shape + "\"");
      }
      std::vector<int32_t> dims = parse_dims(tensor, trim(shape.substr(1, shape.size() - 2)));
      if (s == 0) {
        tensor.dims = std::move(dims);
      } else {
        tensor.alternative_shapes.push_back(std::move(dims));
      }
    }
    check_alternative_shapes(tensor);
    std::string dtype = trim(text.substr(close + 1));
    if (dtype.empty()) fail(name + ": expected a type variable or dtype after its dimensions");
    const size_t space = dtype.find_first_of(" \t");
    if (space != std::string::npos) {
      parse_value_rule(tensor, trim(dtype.substr(space)));
      dtype = dtype.substr(0, space);
    }
    const uint32_t offset_dtypes = dtype_bit_from_name("int32") | dtype_bit_from_name("int64");
    if (tensor.offsets_of_dim >= 0 && (dtype_bit_from_name(dtype) & offset_dtypes) == 0) {
      fail(name + ": offsets are int32 or int64, not \"" + dtype + "\"");
    }
    const int32_t variable = type_variable_index(dtype);
    if (variable >= 0) {
      tensor.type_variable = variable;
      tensor.dtypes = schema_.type_variables[static_cast<size_t>(variable)].dtypes;
      return tensor;
    }
    tensor.dtypes = dtype_bit_from_name(dtype);
    if (tensor.dtypes == 0) {
      fail(name + ": \"" + dtype + "\" is neither a declared type variable (" + variable_names() +
           ") nor a dtype kabi knows");
    }
    return tensor;
  }

  // "offsets(R)" after an integer input's dtype: its values are group end offsets along the dimension R.
  void parse_value_rule(SchemaTensor& tensor, const std::string& rule) {
    const std::string where = tensor.name + ": value rule \"" + rule + "\"";
    if (tensor.is_output) fail(where + ": only inputs take a value rule");
    if (rule.rfind("offsets(", 0) != 0 || rule.back() != ')') fail(where + ": expected offsets(DIM)");
    const std::string dim = trim(rule.substr(8, rule.size() - 9));
    const auto found = std::find(schema_.dim_names.begin(), schema_.dim_names.end(), dim);
    if (found == schema_.dim_names.end()) fail(where + ": " + dim + " is no dimension of an earlier tensor");
    if (tensor.has_batch || tensor.dims.size() != 1) fail(where + ": offsets are a 1-D tensor");
    tensor.offsets_of_dim = static_cast<int32_t>(found - schema_.dim_names.begin());
  }

  // The dims of one bracketed shape ("..., M, 1" or "E?, M, K"): names, a literal 1, a leading "...", and a first
  // name that may be left out.
  std::vector<int32_t> parse_dims(SchemaTensor& tensor, const std::string& inner) {
    std::vector<int32_t> dims;
    if (inner.empty()) return dims;
    const std::vector<std::string> items = split_top_level(inner, ',');
    for (size_t i = 0; i < items.size(); ++i) {
      const std::string item = trim(items[i]);
      const bool may_be_left_out = !item.empty() && item.back() == '?';
      const std::string dim = may_be_left_out ? trim(item.substr(0, item.size() - 1)) : item;
      if (may_be_left_out && (i != 0 || items.size() < 2)) {
        fail(tensor.name + ": only the first of two or more dimensions may be left out (\"" + item + "\")");
      }
      tensor.leading_dim_optional = tensor.leading_dim_optional || may_be_left_out;
      if (item == "...") {
        if (i != 0) fail(tensor.name + ": \"...\" must come first");
        tensor.has_batch = true;
      } else if (item == "1") {
        dims.push_back(KABI_DIM_ONE);
      } else if (is_identifier(dim)) {
        dims.push_back(dimension_index(dim, tensor.name, tensor.is_output && !may_be_left_out));
      } else {
        fail(tensor.name + ": \"" + item + "\" is not a dimension name (a name, or 1)");
      }
    }
    if (dims.size() > KABI_MAX_DIMS) fail(tensor.name + ": more than " + std::to_string(KABI_MAX_DIMS) + " dimensions");
    return dims;
  }

  // A call picks a tensor's shape by its rank, so each alternative has a rank of its own and no "...".
  void check_alternative_shapes(const SchemaTensor& tensor) const {
    if (tensor.alternative_shapes.empty()) return;
    if (tensor.is_output) {
      fail("output " + tensor.name + " has several shapes; an output's shape follows from the inputs");
    }
    if (tensor.has_batch) fail(tensor.name + ": a tensor with several shapes cannot have \"...\"");
    if (tensor.leading_dim_optional) {
      fail(tensor.name + ": a tensor with several shapes cannot leave out its first dimension");
    }
    if (tensor.alternative_shapes.size() + 1 > KABI_MAX_SHAPE_ALTERNATIVES) {
      fail(tensor.name + ": more than " + std::to_string(KABI_MAX_SHAPE_ALTERNATIVES) + " shapes");
    }
    std::vector<size_t> ranks{tensor.dims.size()};
    for (const std::vector<int32_t>& shape : tensor.alternative_shapes) {
      if (std::find(ranks.begin(), ranks.end(), shape.size()) != ranks.end()) {
        fail(tensor.name + ": two of its shapes have rank " + std::to_string(shape.size()) +
             "; a call's rank must pick one");
      }
      ranks.push_back(shape.size());
    }
  }

  int32_t type_variable_index(const std::string& name) const {
    for (size_t v = 0; v < schema_.type_variables.size(); ++v) {
      if (schema_.type_variables[v].name == name) return static_cast<int32_t>(v);
    }
    return -1;
  }

  void parse_attribute(const std::string& name, const std::string& text) {
    SchemaAttribute attribute;
    attribute.name = name;
    const size_t equals = text.find('=');
    const std::string type = trim(text.substr(0, equals));
    if (type == "int") {
      attribute.type = KABI_ATTRIBUTE_INT;
    } else if (type == "float") {
      attribute.type = KABI_ATTRIBUTE_FLOAT;
    } else if (type == "bool") {
      attribute.type = KABI_ATTRIBUTE_BOOL;
    } else if (const int32_t variable = type_variable_index(type); variable >= 0) {
      // A dtype chosen by the caller: an enum of the variable's dtype names, whose value binds the variable.
      attribute.type = KABI_ATTRIBUTE_ENUM;
      attribute.type_variable = variable;
      const uint32_t dtypes = schema_.type_variables[static_cast<size_t>(variable)].dtypes;
      for (uint32_t bit = 1; bit != 0; bit <<= 1) {
        if (dtypes & bit) attribute.enum_values.emplace_back(dtype_name(bit));
      }
    } else if (type.rfind("enum", 0) == 0) {
      attribute.type = KABI_ATTRIBUTE_ENUM;
      const std::string values = trim(type.substr(4));
      if (values.size() < 2 || values.front() != '(' || values.back() != ')') {
        fail("attribute " + name + ": enum needs its values, as in enum(none, relu)");
      }
      const std::string inner = trim(values.substr(1, values.size() - 2));
      if (inner.empty()) fail("attribute " + name + ": enum() has no values");
      for (const std::string& raw : split_top_level(inner, ',')) {
        const std::string value = trim(raw);
        if (!is_identifier(value)) fail("attribute " + name + ": enum value \"" + value + "\" is not a name");
        if (std::find(attribute.enum_values.begin(), attribute.enum_values.end(), value) !=
            attribute.enum_values.end()) {
          fail("attribute " + name + ": enum value " + value + " appears twice");
        }
        attribute.enum_values.push_back(value);
      }
    } else {
      fail("attribute " + name + ": \"" + type + "\" is not int, float, bool, enum(...) or a type variable (" +
           variable_names() + ")");
    }
    if (equals != std::string::npos) {
      attribute.has_default = true;
      attribute.default_value = parse_default(attribute, trim(text.substr(equals + 1)));
    }
    schema_.attributes.push_back(std::move(attribute));
  }

  kabi_attribute_value parse_default(const SchemaAttribute& attribute, const std::string& text) const {
    kabi_attribute_value value{};
    const std::string what = "attribute " + attribute.name + ": default \"" + text + "\"";
    switch (attribute.type) {
      case KABI_ATTRIBUTE_INT:
        if (!parse_int64(text, value.integer)) fail(what + " is not an integer");
        break;
      case KABI_ATTRIBUTE_FLOAT:
        if (!parse_double(text, value.real)) fail(what + " is not a number");
        break;
      case KABI_ATTRIBUTE_BOOL:
        if (text != "true" && text != "false") fail(what + " is not true or false");
        value.integer = text == "true" ? 1 : 0;
        break;
      case KABI_ATTRIBUTE_ENUM: {
        const auto& values = attribute.enum_values;
        const auto found = std::find(values.begin(), values.end(), text);
        if (found == values.end()) fail(what + " is not one of its values (" + join(values, ", ") + ")");
        value.integer = found - values.begin();
        break;
      }
    }
    return value;
  }

  bool name_taken(const std::string& name) const {
    auto same = [&](const auto& item) { return item.name == name; };
    return std::any_of(schema_.inputs.begin(), schema_.inputs.end(), same) ||
           std::any_of(schema_.outputs.begin(), schema_.outputs.end(), same) ||
           std::any_of(schema_.attributes.begin(), schema_.attributes.end(), same) ||
           std::find(schema_.dim_names.begin(), schema_.dim_names.end(), name) != schema_.dim_names.end();
  }

  int32_t dimension_index(const std::string& name, const std::string& tensor, bool is_output) {
    auto found = std::find(schema_.dim_names.begin(), schema_.dim_names.end(), name);
    if (found != schema_.dim_names.end()) {
      if (is_output && !bound_by_required_input(found - schema_.dim_names.begin())) {
        fail("output " + tensor + ": dimension " + name +
             " is defined only by optional inputs or inputs of several shapes");
      }
      return static_cast<int32_t>(found - schema_.dim_names.begin());
    }
    if (is_output) fail("output " + tensor + ": dimension " + name + " is not defined by any input");
    if (name_taken(name)) fail("dimension " + name + " has the name of a tensor or attribute");
    if (schema_.dim_names.size() == KABI_MAX_DIMS) {
      fail("more than " + std::to_string(KABI_MAX_DIMS) + " named dimensions");
    }
    schema_.dim_names.push_back(name);
    return static_cast<int32_t>(schema_.dim_names.size() - 1);
  }

  // Whether every call binds the dimension: a required input of one shape names it.
  bool bound_by_required_input(std::ptrdiff_t dim) const {
    return std::any_of(schema_.inputs.begin(), schema_.inputs.end(), [&](const SchemaTensor& input) {
      return !input.optional && input.alternative_shapes.empty() &&
             std::find(input.dims.begin(), input.dims.end(), dim) != input.dims.end();
    });
  }

  std::string variable_names() const {
    std::vector<std::string> names;
    for (const TypeVariable& variable : schema_.type_variables) names.push_back(variable.name);
    return names.empty() ? std::string("none declared") : join(names, ", ");
  }

  void check_limits() const {
    if (schema_.inputs.size() + schema_.outputs.size() > KABI_MAX_TENSORS) {
      fail("more than " + std::to_string(KABI_MAX_TENSORS) + " tensors");
    }
    if (schema_.outputs.size() > KABI_MAX_OUTPUTS) fail("more than " + std::to_string(KABI_MAX_OUTPUTS) + " outputs");
    if (schema_.attributes.size() > KABI_MAX_ATTRIBUTES) {
      fail("more than " + std::to_string(KABI_MAX_ATTRIBUTES) + " attributes");
    }
  }

  // Every declared variable types some tensor, and one that types an output is bound by a required input or an
  // attribute, so a call always knows each output's dtype.
  void check_type_variables_bound() const {
    for (size_t v = 0; v < schema_.type_variables.size(); ++v) {
      const auto typed = [&](const SchemaTensor& tensor) { return tensor.type_variable == static_cast<int32_t>(v); };
      const std::string& name = schema_.type_variables[v].name;
      const bool bound = std::any_of(schema_.inputs.begin(), schema_.inputs.end(),
                                     [&](const SchemaTensor& input) { return typed(input) && !input.optional; }) ||
                         std::any_of(schema_.attributes.begin(), schema_.attributes.end(),
                                     [&](const SchemaAttribute& attribute) {
                                       return attribute.type_variable == static_cast<int32_t>(v);
                                     });
      const bool types_input = std::any_of(schema_.inputs.begin(), schema_.inputs.end(), typed);
      const bool types_output = std::any_of(schema_.outputs.begin(), schema_.outputs.end(), typed);
      if (!types_input && !types_output) fail("type variable " + name + " types no tensor");
      if (types_output && !bound) {
        fail("type variable " + name + " types an output but no required input or attribute");
      }
    }
  }

  std::string op_name_;
  std::string text_;
  Schema schema_;
};

}  // namespace

std::vector<TypeVariable> parse_type_variables(const std::string& context, const std::string& text) {
  std::vector<TypeVariable> variables;
  if (trim(text).empty()) return variables;
  auto fail = [&](const std::string& what) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, context + " \"" + text + "\": " + what);
  };
  for (const std::string& raw : split_top_level(text, ';')) {
    const std::string entry = trim(raw);
    const size_t colon = entry.find(':');
    if (colon == std::string::npos) fail("\"" + entry + "\" is not 'NAME: dtype, dtype'");
    TypeVariable variable;
    variable.name = trim(entry.substr(0, colon));
    if (!is_identifier(variable.name)) fail("\"" + variable.name + "\" is not a valid type variable name");
    if (dtype_bit_from_name(variable.name) != 0) fail("type variable " + variable.name + " has the name of a dtype");
    for (const TypeVariable& other : variables) {
      if (other.name == variable.name) fail("type variable " + variable.name + " is declared twice");
    }
    for (const std::string& item : split_top_level(entry.substr(colon + 1), ',')) {
      const std::string dtype = trim(item);
      const uint32_t bit = dtype_bit_from_name(dtype);
      if (bit == 0) fail("type variable " + variable.name + ": unknown dtype \"" + dtype + "\"");
      variable.dtypes |= bit;
    }
    variables.push_back(std::move(variable));
  }
  if (variables.size() > KABI_MAX_TYPE_VARIABLES) {
    fail("more than " + std::to_string(KABI_MAX_TYPE_VARIABLES) + " type variables");
  }
  return variables;
}

Schema parse_schema(const std::string& op_name, const std::string& text, const std::string& type_variables) {
  return SchemaParser(op_name, text, type_variables).parse();
}

std::vector<TuningKeyItem> parse_tuning_key(const std::string& op_name, const std::string& text, Schema& schema) {
  auto fail = [&](const std::string& what) {
    throw Error(KABI_STATUS_INVALID_ARGUMENT, "op " + op_name + ": tuning key \"" + text + "\": " + what);
  };
  std::vector<TuningKeyItem> items;
  bool has_layout = false;
  for (const std::string& raw : split_top_level(text, ',')) {
    const std::string token = trim(raw);
    const size_t colon = token.find(':');
    const std::string name = trim(token.substr(0, colon));
    TuningKeyItem item;
    const auto dim = std::find(schema.dim_names.begin(), schema.dim_names.end(), name);
    const auto attribute = std::find_if(schema.attributes.begin(), schema.attributes.end(),
                                        [&](const SchemaAttribute& candidate) { return candidate.name == name; });
    if (name == "dtype") {
      item.kind = TuningKeyItem::Kind::kDtype;
    } else if (name == "layout") {
      item.kind = TuningKeyItem::Kind::kLayout;
      has_layout = true;
    } else if (name == "batch") {
      item.kind = TuningKeyItem::Kind::kBatch;
    } else if (dim != schema.dim_names.end()) {
      item.kind = TuningKeyItem::Kind::kDim;
      item.index = static_cast<int32_t>(dim - schema.dim_names.begin());
    } else if (attribute != schema.attributes.end()) {
      item.kind = TuningKeyItem::Kind::kAttribute;
      item.index = static_cast<int32_t>(attribute - schema.attributes.begin());
      attribute->in_tuning_key = true;
    } else {
      fail("\"" + name + "\" is neither dtype, layout, batch, a dimension nor an attribute of the schema");
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
        if (!parse_int64(cap, item.pow2_cap) || item.pow2_cap <= 0) {
          fail("bucket \"" + bucket + "\" needs a positive integer cap, as in pow2<=4096");
        }
      } else {
        fail("unknown bucket \"" + bucket + "\" (expected pow2 or pow2<=N)");
      }
    }
    items.push_back(item);
  }
  if (schema.has_optional_inputs && !has_layout) {
    fail("the op has optional inputs, so its key must name \"layout\" (kernels differ by which inputs are given)");
  }
  return items;
}

std::string default_tuning_key(const Schema& schema) {
  std::string key = "dtype,layout,batch";
  for (const std::string& name : schema.dim_names) key += "," + name;
  for (const SchemaAttribute& attribute : schema.attributes) key += "," + attribute.name;
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
