// Grid expressions of device binaries: a recursive-descent parser producing a postfix program, and its evaluator.
#include <cctype>
#include <cstdint>

#include "device_binary.hpp"
#include "error.hpp"

namespace kabi::core {
namespace {

using Operation = GridExpression::Operation;
using Step = GridExpression::Step;

Error expression_error(const std::string& text, const std::string& problem) {
  return Error(KABI_STATUS_INVALID_ARGUMENT, "grid expression \"" + text + "\": " + problem);
}

class Parser {
 public:
  Parser(const std::string& text, std::vector<Step>& program) : text_(text), program_(program) {}

  void parse() {
    skip_spaces();
    if (at_end()) fail("empty expression");
    parse_sum();
    if (!at_end()) fail("unexpected '" + std::string(1, text_[position_]) + "'");
  }

 private:
  // sum := product (('+' | '-') product)*
  void parse_sum() {
    if (++nesting_ > kMaxNesting) fail("nested too deeply");
    parse_product();
    while (!at_end() && (peek() == '+' || peek() == '-')) {
      const Operation operation = take() == '+' ? Operation::kAdd : Operation::kSubtract;
      parse_product();
      emit(operation);
    }
    --nesting_;
  }

  // product := unary (('*' | '/') unary)*
  void parse_product() {
    parse_unary();
    while (!at_end() && (peek() == '*' || peek() == '/')) {
      const Operation operation = take() == '*' ? Operation::kMultiply : Operation::kDivide;
      parse_unary();
      emit(operation);
    }
  }

  // unary := '-' unary | primary
  void parse_unary() {
    if (!at_end() && peek() == '-') {
      take();
      if (++nesting_ > kMaxNesting) fail("nested too deeply");
      parse_unary();
      --nesting_;
      emit(Operation::kNegate);
      return;
    }
    parse_primary();
  }

  // primary := integer | name | function '(' sum ',' sum ')' | '(' sum ')'
  void parse_primary() {
    if (at_end()) fail("expected a number, a name or '(' at the end");
    const char c = peek();
    if (c == '(') {
      take();
      parse_sum();
      expect(')');
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      parse_number();
      return;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = position_;
      std::string name;
      while (position_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[position_])) || text_[position_] == '_')) {
        name += text_[position_++];
      }
      skip_spaces();
      if (!at_end() && peek() == '(') {
        parse_call(name, start);
      } else {
        program_.push_back(Step{Operation::kPushName, 0, name});
      }
      return;
    }
    fail("unexpected '" + std::string(1, c) + "'");
  }

  void parse_number() {
    int64_t value = 0;
    while (position_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[position_]))) {
      if (__builtin_mul_overflow(value, 10, &value) || __builtin_add_overflow(value, text_[position_] - '0', &value)) {
        fail("integer literal too large");
      }
      ++position_;
    }
    skip_spaces();
    program_.push_back(Step{Operation::kPushNumber, value, {}});
  }

  void parse_call(const std::string& function, size_t start) {
    Operation operation;
    if (function == "cdiv") {
      operation = Operation::kCdiv;
    } else if (function == "min") {
      operation = Operation::kMin;
    } else if (function == "max") {
      operation = Operation::kMax;
    } else {
      position_ = start;
      fail("unknown function " + function + " (expected cdiv, min or max)");
    }
    take();  // '('
    parse_sum();
    expect(',');
    parse_sum();
    expect(')');
    emit(operation);
  }

  void emit(Operation operation) { program_.push_back(Step{operation, 0, {}}); }

  bool at_end() const { return position_ >= text_.size(); }
  char peek() const { return text_[position_]; }
  char take() {
    const char c = text_[position_++];
    skip_spaces();
    return c;
  }
  void expect(char wanted) {
    if (at_end() || peek() != wanted) fail("expected '" + std::string(1, wanted) + "'");
    take();
  }
  void skip_spaces() {
    while (position_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[position_]))) ++position_;
  }
  [[noreturn]] void fail(const std::string& problem) const {
    throw expression_error(text_, problem + " at column " + std::to_string(position_ + 1));
  }

  static constexpr int kMaxNesting = 32;  // keeps both the parser's recursion and the evaluator's stack small

  const std::string& text_;
  std::vector<Step>& program_;
  size_t position_ = 0;
  int nesting_ = 0;
};

int64_t resolve_name(const std::string& text, const std::string& name, const kabi_problem& problem) {
  if (name == "batch") return problem.batch_size;
  const int32_t count = problem.num_dims < 0 ? 0 : (problem.num_dims > 8 ? 8 : problem.num_dims);
  std::string known;
  for (int32_t i = 0; i < count; ++i) {
    const char* dim_name = problem.dim_names[i];
    if (dim_name == nullptr) continue;
    if (name == dim_name) return problem.dims[i];
    known += std::string(known.empty() ? "" : ", ") + dim_name;
  }
  known += std::string(known.empty() ? "" : ", ") + "batch";
  throw expression_error(text, "unknown name " + name + " (the problem has " + known + ")");
}

}  // namespace

GridExpression::GridExpression(const std::string& text) : text_(text) { Parser(text_, program_).parse(); }

std::vector<std::string> GridExpression::names() const {
  std::vector<std::string> names;
  for (const Step& step : program_) {
    if (step.operation == Operation::kPushName) names.push_back(step.name);
  }
  return names;
}

int64_t GridExpression::evaluate(const kabi_problem& problem) const {
  int64_t stack[128];
  size_t depth = 0;
  for (const Step& step : program_) {
    if (step.operation == Operation::kPushNumber || step.operation == Operation::kPushName) {
      if (depth == sizeof(stack) / sizeof(stack[0])) throw expression_error(text_, "nested too deeply");
      stack[depth++] = step.operation == Operation::kPushNumber ? step.number : resolve_name(text_, step.name, problem);
      continue;
    }
    if (step.operation == Operation::kNegate) {
      if (stack[depth - 1] == INT64_MIN) throw expression_error(text_, "integer overflow");
      stack[depth - 1] = -stack[depth - 1];
      continue;
    }
    const int64_t right = stack[--depth];
    int64_t& left = stack[depth - 1];
    bool overflow = false;
    switch (step.operation) {
      case Operation::kAdd: overflow = __builtin_add_overflow(left, right, &left); break;
      case Operation::kSubtract: overflow = __builtin_sub_overflow(left, right, &left); break;
      case Operation::kMultiply: overflow = __builtin_mul_overflow(left, right, &left); break;
      case Operation::kDivide:
      case Operation::kCdiv:
        if (right == 0) throw expression_error(text_, "division by zero");
        if (left == INT64_MIN && right == -1) throw expression_error(text_, "integer overflow");
        if (step.operation == Operation::kDivide) {
          left /= right;
        } else {
          // Rounds toward +infinity for every sign combination.
          const int64_t quotient = left / right;
          left = quotient + ((left % right != 0 && ((left < 0) == (right < 0))) ? 1 : 0);
        }
        break;
      case Operation::kMin: left = left < right ? left : right; break;
      case Operation::kMax: left = left > right ? left : right; break;
      case Operation::kPushNumber:
      case Operation::kPushName:
      case Operation::kNegate: break;
    }
    if (overflow) throw expression_error(text_, "integer overflow");
  }
  return stack[0];
}

int64_t evaluate_grid_expression(const std::string& expression, const kabi_problem& problem) {
  return GridExpression(expression).evaluate(problem);
}

}  // namespace kabi::core
