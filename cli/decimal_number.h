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

struct DecimalInt {
  int64_t value = 0;
  DecimalError error = DecimalError::kNone;
};

/// `text` as a 64-bit integer, or the reason it is not one.
inline DecimalInt parse_decimal_int64(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  DecimalInt parsed;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), parsed.value);
  if (error == std::errc::result_out_of_range) {
    parsed.error = DecimalError::kOutOfRange;
  } else if (error != std::errc() || stop != text.data() + text.size()) {
    parsed.error = DecimalError::kMalformed;
  }
  return parsed;
}

struct DecimalReal {
  double value = 0;
  DecimalError error = DecimalError::kNone;
};

/// `text` as a double ("1e-3", "inf" and "nan" included: each caller checks its own range), or
/// the reason it is not one.
inline DecimalReal parse_decimal_real(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  DecimalReal parsed;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), parsed.value);
  if (error == std::errc::result_out_of_range) {
    parsed.error = DecimalError::kOutOfRange;
  } else if (error != std::errc() || stop != text.data() + text.size()) {
    parsed.error = DecimalError::kMalformed;
  }
  return parsed;
}

}  // namespace meshplan::cli
