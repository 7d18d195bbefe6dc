#include "meshplan/json_io.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "meshplan/errors.h"

namespace meshplan {

nlohmann::json read_json_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {  // opens, then reads as an empty file
    throw InputError(fmt::format("{}: cannot read file (a directory)", path));
  }
  std::ifstream in(path);
  if (!in) {
    throw InputError(fmt::format("{}: cannot read file", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    throw InputError(fmt::format("{}: cannot read file", path));
  }
  try {
    return nlohmann::json::parse(buffer.str());
  } catch (const nlohmann::json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..." or,
    // for a number beyond double (1e400), "[json.exception.out_of_range.406] number overflow
    // parsing '1e400'".
    std::string message = e.what();
    const auto pos = message.find("] ");
    if (pos != std::string::npos) {
      message = message.substr(pos + 2);
    }
    throw InputError(fmt::format("{}: malformed JSON: {}", path, message));
  }
}

void write_file_atomic(const std::string& path, const std::string& content) {
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "wb");
  if (file == nullptr) {
    throw RuntimeError(fmt::format("{}: cannot write file", path));
  }
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const bool flushed = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const bool closed = std::fclose(file) == 0;
  if (!written || !flushed || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    throw RuntimeError(fmt::format("{}: cannot write file", path));
  }
}

namespace {

const nlohmann::json& require_field(const nlohmann::json& object, const std::string& field,
                                    const std::string& source) {
  if (!object.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({})", source, object.dump()));
  }
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) {
    throw InputError(fmt::format("{}: {}: missing", source, field));
  }
  return *it;
}

std::string shorten(const nlohmann::json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

}  // namespace

int64_t require_int(const nlohmann::json& object, const std::string& field,
                    const std::string& source) {
  const auto& value = require_field(object, field, source);
  // nlohmann keeps integers above 2^63 - 1 as unsigned; converting them would wrap negative.
  if (value.is_number_unsigned() &&
      value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    throw InputError(fmt::format("{}: {}: out of range, more than 2^63 - 1 ({})", source, field,
                                 shorten(value)));
  }
  if (value.is_number_integer()) {
    return value.get<int64_t>();
  }
  if (value.is_number_float()) {
    const double number = value.get<double>();
    // Range first: converting an out-of-range double to int64_t is undefined behaviour.
    if (number < 9.2e18 && number > -9.2e18 &&
        number == static_cast<double>(static_cast<int64_t>(number))) {
      return static_cast<int64_t>(number);
    }
  }
  throw InputError(fmt::format("{}: {}: expected an integer ({})", source, field, shorten(value)));
}

double require_number(const nlohmann::json& object, const std::string& field,
                      const std::string& source) {
  const auto& value = require_field(object, field, source);
  if (!value.is_number()) {
    throw InputError(fmt::format("{}: {}: expected a number ({})", source, field, shorten(value)));
  }
  return value.get<double>();
}

std::string require_string(const nlohmann::json& object, const std::string& field,
                           const std::string& source) {
  const auto& value = require_field(object, field, source);
  if (!value.is_string()) {
    throw InputError(fmt::format("{}: {}: expected a string ({})", source, field, shorten(value)));
  }
  return value.get<std::string>();
}

bool require_bool(const nlohmann::json& object, const std::string& field,
                  const std::string& source) {
  const auto& value = require_field(object, field, source);
  if (!value.is_boolean()) {
    throw InputError(
        fmt::format("{}: {}: expected true or false ({})", source, field, shorten(value)));
  }
  return value.get<bool>();
}

void reject_unknown_fields(const nlohmann::json& object, std::span<const std::string_view> fields,
                           const std::string& source, const std::string& prefix) {
  if (!object.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({})", source, shorten(object)));
  }
  for (const auto& [key, value] : object.items()) {
    bool known = false;
    for (const std::string_view field : fields) {
      known = known || key == field;
    }
    if (!known) {
      throw InputError(
          fmt::format("{}: {}{}: unknown field ({})", source, prefix, key, shorten(value)));
    }
  }
}

}  // namespace meshplan
