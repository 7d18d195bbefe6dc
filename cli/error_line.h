#pragma once
// The one line every error is printed as.

#include <string>
#include <string_view>

namespace meshplan::cli {

/// `message` made one printable line: control characters (a newline in an echoed value
/// included) and bytes that are not valid UTF-8 written as \xNN, and at most kMaxErrorBytes of
/// it kept (an echoed 10 MB string is cut, with "..." after).
std::string printable_line(std::string_view message);

/// Prints "meshplan: <label>: <printable_line(message)>" and a newline to stderr.
void print_error(const char* label, std::string_view message);

inline constexpr size_t kMaxErrorBytes = 2000;

}  // namespace meshplan::cli
