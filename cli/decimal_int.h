#pragma once
// The command line's one integer reader: decimal digits with an optional leading '+' or '-',
// nothing else (std::stoll would take " 7" and read "99999999999999999999" as an error only by
// exception; CLI11 would read 0x8 as 8).

#include <charconv>
#include <cstdint>
#include <string_view>
#include <system_error>

namespace meshplan::cli {

enum class DecimalIntError { kNone, kMalformed, kOutOfRange };

struct DecimalInt {
  int64_t value = 0;
  DecimalIntError error = DecimalIntError::kNone;
};

/// `text` as a 64-bit integer, or the reason it is not one.
inline DecimalInt parse_decimal_int64(std::string_view text) {
  if (text.starts_with('+')) {
    text.remove_prefix(1);
  }
  DecimalInt parsed;
  const auto [stop, error] = std::from_chars(text.data(), text.data() + text.size(), parsed.value);
  if (error == std::errc::result_out_of_range) {
    parsed.error = DecimalIntError::kOutOfRange;
  } else if (error != std::errc() || stop != text.data() + text.size()) {
    parsed.error = DecimalIntError::kMalformed;
  }
  return parsed;
}

}  // namespace meshplan::cli
