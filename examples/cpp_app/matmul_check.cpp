#include "matmul_check.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

MatmulError compare_with_reference(const std::vector<float>& a, const std::vector<float>& b,
                                   const std::vector<float>& out, int64_t m, int64_t n, int64_t k) {
  double error_squares = 0.0, reference_squares = 0.0, worst_error = 0.0, largest_reference = 0.0;
  bool saw_nan = false;
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t i = 0; i < m; ++i) {
    // Row i of the reference, accumulated over k in the order that walks a and b contiguously.
    std::fill(row.begin(), row.end(), 0.0);
    for (int64_t p = 0; p < k; ++p) {
      const double a_ip = a[static_cast<size_t>(i * k + p)];
      const float* b_row = &b[static_cast<size_t>(p * n)];
      for (int64_t j = 0; j < n; ++j) row[static_cast<size_t>(j)] += a_ip * b_row[j];
    }
    for (int64_t j = 0; j < n; ++j) {
      const double reference = row[static_cast<size_t>(j)];
      const double error = double(out[static_cast<size_t>(i * n + j)]) - reference;
      saw_nan = saw_nan || std::isnan(error);
      error_squares += error * error;
      reference_squares += reference * reference;
      worst_error = std::max(worst_error, std::fabs(error));
      largest_reference = std::max(largest_reference, std::fabs(reference));
    }
  }
  if (saw_nan) {  // std::max would drop a NaN; a kernel that writes one must fail the check
    const double nan = std::numeric_limits<double>::quiet_NaN();
    return {nan, nan};
  }
  // The floor only keeps an all-zero reference from dividing by zero: any nonzero output then fails.
  return {std::sqrt(error_squares) / std::max(std::sqrt(reference_squares), 1e-30),
          worst_error / std::max(largest_reference, 1e-30)};
}
