#pragma once
// Private: text escaped for SVG/HTML element content and attribute values (&, <, >, ").

#include <string>

namespace meshplan::reports {

inline std::string xml_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace meshplan::reports
