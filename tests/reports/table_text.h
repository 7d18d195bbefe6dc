#pragma once
// Reading a report's text table in tests: its data rows and a row's fields.

#include <sstream>
#include <string>
#include <vector>

namespace meshplan::reports {

// Data rows of a table: the lines that do not start with '#'.
inline std::vector<std::string> data_rows(const std::string& table) {
  std::vector<std::string> rows;
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') {
      rows.push_back(line);
    }
  }
  return rows;
}

// The whitespace-separated fields of a line.
inline std::vector<std::string> fields(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string field; in >> field;) {
    out.push_back(field);
  }
  return out;
}

}  // namespace meshplan::reports
