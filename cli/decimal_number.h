#pragma once
// The command line's number readers: decimal digits (a real number: std::from_chars' general
// format) with an optional leading '+' or '-', nothing else. std::stoll and std::stod would take
// " 7" and std::stod "0x10" (16); CLI11 would read 0x8 as 8.

#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace meshplan::cli {

enum class DecimalError { kNone, kMalformed, kOutOfRange };

template <typename Number>
struct Decimal {
  Number value = 0;
  DecimalError error = DecimalError::kNone;
};
using DecimalInt = Decimal<int64_t>;
using DecimalReal = Decimal<double>;

/// `text` as a Number (int64_t, or double with "1e-3", "inf" and "nan" included: each caller
/// checks its own range), or the reason it is not one.
template <typename Number>
Decimal<Number> parse_decimal(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  Decimal<Number> parsed;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), parsed.value);
  if (error == std::errc::result_out_of_range) {
    parsed.error = DecimalError::kOutOfRange;
  } else if (error != std::errc() || stop != text.data() + text.size()) {
    parsed.error = DecimalError::kMalformed;
  }
  return parsed;
}

inline DecimalInt parse_decimal_int64(std::string_view text) {
  return parse_decimal<int64_t>(text);
}

inline DecimalReal parse_decimal_real(std::string_view text) {
  return parse_decimal<double>(text);
}

}  // namespace meshplan::cli
