// libkabi's messages do not depend on the process's C++ locale: a caller (or a library loaded beside kabi) may set a
// global locale with another decimal point and digit grouping, and kabi must still print "1234.500 us".
#include <locale>
#include <string>
#include <vector>

#include "check.hpp"
#include "names.hpp"

namespace {

// A numpunct that a German-style locale would install: "1.234,5".
class CommaDecimalPoint : public std::numpunct<char> {
 protected:
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

void test_numbers_ignore_the_global_locale() {
  std::locale::global(std::locale(std::locale::classic(), new CommaDecimalPoint));
  KABI_CHECK_EQ(kabi::core::format_fixed(1234.5, 3), std::string("1234.500"));
  KABI_CHECK_EQ(kabi::core::format_fixed(0.0123456, 3), std::string("0.012"));
  const std::vector<int64_t> shape = {4096, 1, 14336};
  KABI_CHECK_EQ(kabi::core::format_shape(shape), std::string("[4096, 1, 14336]"));
  std::locale::global(std::locale::classic());
}

void test_split_keeps_empty_pieces() {
  using Pieces = std::vector<std::string>;
  KABI_CHECK(kabi::core::split("", ',') == Pieces{});
  KABI_CHECK(kabi::core::split("a", ',') == Pieces{"a"});
  KABI_CHECK(kabi::core::split("a,,b", ',') == (Pieces{"a", "", "b"}));
  KABI_CHECK(kabi::core::split("a,b,", ',') == (Pieces{"a", "b", ""}));
}

}  // namespace

int main() {
  test_numbers_ignore_the_global_locale();
  test_split_keeps_empty_pieces();
  return kabi_test::finish("test_formatting");
}
