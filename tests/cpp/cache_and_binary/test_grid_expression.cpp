// Grid expressions of device binaries: values over a matmul problem and every kind of error.
#include <cstring>

#include "device_binary.hpp"
#include "expect_error.hpp"

namespace {

using kabi::core::evaluate_grid_expression;

kabi_problem matmul_problem(int64_t m, int64_t k, int64_t n, int64_t batch) {
  kabi_problem problem;
  std::memset(&problem, 0, sizeof problem);
  problem.struct_size = sizeof problem;
  problem.num_dims = 3;
  problem.dims[0] = m;
  problem.dims[1] = k;
  problem.dims[2] = n;
  problem.dim_names[0] = "M";
  problem.dim_names[1] = "K";
  problem.dim_names[2] = "N";
  problem.batch_size = batch;
  return problem;
}

void test_values() {
  const kabi_problem problem = matmul_problem(1000, 300, 257, 6);
  KABI_CHECK_EQ(evaluate_grid_expression("1", problem), int64_t{1});
  KABI_CHECK_EQ(evaluate_grid_expression("M", problem), int64_t{1000});
  KABI_CHECK_EQ(evaluate_grid_expression("batch", problem), int64_t{6});
  KABI_CHECK_EQ(evaluate_grid_expression("cdiv(M, 128) * cdiv(N, 128)", problem), int64_t{8 * 3});
  KABI_CHECK_EQ(evaluate_grid_expression("cdiv(M,128)*cdiv(N,64)", problem), int64_t{8 * 5});
  KABI_CHECK_EQ(evaluate_grid_expression("  2 + 3 * 4 ", problem), int64_t{14});
  KABI_CHECK_EQ(evaluate_grid_expression("(2 + 3) * 4", problem), int64_t{20});
  KABI_CHECK_EQ(evaluate_grid_expression("10 - 4 - 3", problem), int64_t{3});
  KABI_CHECK_EQ(evaluate_grid_expression("100 / 7 / 2", problem), int64_t{7});
  KABI_CHECK_EQ(evaluate_grid_expression("-3 + M", problem), int64_t{997});
  KABI_CHECK_EQ(evaluate_grid_expression("--5", problem), int64_t{5});
  KABI_CHECK_EQ(evaluate_grid_expression("min(cdiv(K, 64), 4)", problem), int64_t{4});
  KABI_CHECK_EQ(evaluate_grid_expression("max(min(M, N), K)", problem), int64_t{300});
  KABI_CHECK_EQ(evaluate_grid_expression("cdiv(N, 1)", problem), int64_t{257});
  KABI_CHECK_EQ(evaluate_grid_expression("cdiv(256, 128)", problem), int64_t{2});
  KABI_CHECK_EQ(evaluate_grid_expression("cdiv(0, 128)", problem), int64_t{0});
  KABI_CHECK_EQ(evaluate_grid_expression("batch * cdiv(M, 64)", problem), int64_t{6 * 16});
  KABI_CHECK_EQ(evaluate_grid_expression("9223372036854775807", problem), INT64_MAX);

  // A parsed expression evaluates against any problem.
  const kabi::core::GridExpression tiles("cdiv(M, 16) * cdiv(N, 16)");
  KABI_CHECK_EQ(tiles.evaluate(matmul_problem(16, 1, 16, 1)), int64_t{1});
  KABI_CHECK_EQ(tiles.evaluate(matmul_problem(17, 1, 33, 1)), int64_t{6});
}

void test_errors() {
  const kabi_problem problem = matmul_problem(64, 64, 64, 1);
  const kabi_status invalid = KABI_STATUS_INVALID_ARGUMENT;
  KABI_EXPECT_ERROR(evaluate_grid_expression("", problem), invalid, "grid expression \"\": empty expression");
  KABI_EXPECT_ERROR(evaluate_grid_expression("   ", problem), invalid, "empty expression");
  KABI_EXPECT_ERROR(evaluate_grid_expression("cdiv(Q, 128)", problem), invalid,
                    "grid expression \"cdiv(Q, 128)\": unknown name Q (the problem has M, K, N, batch)");
  KABI_EXPECT_ERROR(evaluate_grid_expression("m", problem), invalid, "unknown name m");
  KABI_EXPECT_ERROR(evaluate_grid_expression("ceil(M, 2)", problem), invalid,
                    "unknown function ceil (expected cdiv, min or max) at column 1");
  KABI_EXPECT_ERROR(evaluate_grid_expression("M +", problem), invalid, "expected a number, a name or '(' at the end");
  KABI_EXPECT_ERROR(evaluate_grid_expression("(M + 1", problem), invalid, "expected ')'");
  KABI_EXPECT_ERROR(evaluate_grid_expression("M + 1)", problem), invalid, "unexpected ')' at column 6");
  KABI_EXPECT_ERROR(evaluate_grid_expression("cdiv(M)", problem), invalid, "expected ','");
  KABI_EXPECT_ERROR(evaluate_grid_expression("cdiv(M, 2, 3)", problem), invalid, "expected ')'");
  KABI_EXPECT_ERROR(evaluate_grid_expression("M N", problem), invalid, "unexpected 'N' at column 3");
  KABI_EXPECT_ERROR(evaluate_grid_expression("M % 2", problem), invalid, "unexpected '%'");
  KABI_EXPECT_ERROR(evaluate_grid_expression("99999999999999999999", problem), invalid, "integer literal too large");
  KABI_EXPECT_ERROR(evaluate_grid_expression("M / (N - 64)", problem), invalid, "division by zero");
  KABI_EXPECT_ERROR(evaluate_grid_expression("cdiv(M, 0)", problem), invalid, "division by zero");
  KABI_EXPECT_ERROR(evaluate_grid_expression("9223372036854775807 + 1", problem), invalid, "integer overflow");
  KABI_EXPECT_ERROR(evaluate_grid_expression("4294967296 * 4294967296", problem), invalid, "integer overflow");
  KABI_EXPECT_ERROR(evaluate_grid_expression(std::string(100, '(') + "1" + std::string(100, ')'), problem), invalid,
                    "nested too deeply");
}

}  // namespace

int main() {
  test_values();
  test_errors();
  return kabi_test::finish("test_grid_expression");
}
