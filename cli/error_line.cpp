#include "error_line.h"

#include <fmt/format.h>

#include <cstdio>

namespace meshplan::cli {
namespace {

// Length of the valid UTF-8 sequence at `text[i]` (RFC 3629: no overlong forms, no surrogates,
// at most U+10FFFF), or 0.
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    low = lead == 0xE0 ? 0xA0 : 0x80;
    high = lead == 0xED ? 0x9F : 0xBF;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    low = lead == 0xF0 ? 0x90 : 0x80;
    high = lead == 0xF4 ? 0x8F : 0xBF;
  } else {
    return 0;
  }
  if (i + length > text.size() || byte(i + 1) < low || byte(i + 1) > high) {
    return 0;
  }
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) {
      return 0;
    }
  }
  return length;
}

}  // namespace

std::string printable_line(std::string_view message) {
  std::string line;
  for (size_t i = 0; i < message.size() && line.size() < kMaxErrorBytes;) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (c >= 0x20 && c < 0x7F) {
      line += static_cast<char>(c);
      ++i;
      continue;
    }
    const size_t length = c >= 0x80 ? utf8_sequence_length(message, i) : 0;
    if (length > 0) {
      line.append(message.substr(i, length));
      i += length;
    } else {
      line += fmt::format("\\x{:02x}", c);
      ++i;
    }
  }
  if (line.size() >= kMaxErrorBytes) {
    line += "...";
  }
  return line;
}

void print_error(const char* label, std::string_view message) {
  std::fprintf(stderr, "meshplan: %s: %s\n", label, printable_line(message).c_str());
}

}  // namespace meshplan::cli
