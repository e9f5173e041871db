// The app's own answer to "is the kernel's result right": a naive matmul on the host, summed in double.
#pragma once

#include <cstdint>
#include <vector>

struct MatmulError {
  // ||out - reference|| / ||reference|| (Frobenius norms): the error over the whole output.
  double norm;
  // max |out - reference| / max |reference|: the worst single element. NaN anywhere makes both NaN.
  double extreme;
};

// Compares out (m x n) with a x b (a: m x k, b: k x n; all row-major).
MatmulError compare_with_reference(const std::vector<float>& a, const std::vector<float>& b,
                                   const std::vector<float>& out, int64_t m, int64_t n, int64_t k);
