#include "meshplan/json_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <vector>

#include "meshplan/errors.h"
#include "meshplan/temporary_files.h"

namespace meshplan {

std::string read_input_file(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {  // opens, then reads as an empty file
    throw InputError(fmt::format("{}: cannot read file (a directory)", path));
  }
  // Opened without blocking: a named pipe nobody writes to would otherwise wait forever in
  // open(); it now reads as empty (and is refused as such). Reads block again afterwards, so a
  // pipe with a writer (<(...), /dev/stdin) is read to its end.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0 || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
    if (fd >= 0) {
      ::close(fd);
    }
    throw InputError(fmt::format("{}: cannot read file", path));
  }
  // In chunks, so that a device or pipe without end (/dev/zero) stops at the bound.
  std::string text;
  std::array<char, 1 << 16> chunk{};
  for (;;) {
    const ssize_t got = ::read(fd, chunk.data(), chunk.size());
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0) {
      ::close(fd);
      throw InputError(fmt::format("{}: cannot read file", path));
    }
    if (got == 0) {
      break;
    }
    text.append(chunk.data(), static_cast<size_t>(got));
    if (static_cast<int64_t>(text.size()) > kMaxInputFileBytes) {
      ::close(fd);
      throw InputError(fmt::format("{}: larger than 256 MiB, not a meshplan input", path));
    }
  }
  ::close(fd);
  return text;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& source) {
  // The parser's callback sees each object or array as it opens, at its depth (0 for the
  // outermost): refusing there keeps every later recursion over the document (dump,
  // destruction, comparison) shallow.
  // A key given twice in one object is refused too: the parser would keep the last silently.
  using Event = nlohmann::json::parse_event_t;
  std::vector<std::set<std::string>> keys_of_open_objects;
  const nlohmann::json::parser_callback_t input_checks = [&](int depth, Event event,
                                                             nlohmann::json& parsed) {
    if (depth >= kMaxJsonDepth && (event == Event::object_start || event == Event::array_start)) {
      throw InputError(
          fmt::format("{}: malformed JSON: nested deeper than {} levels", source, kMaxJsonDepth));
    }
    if (event == Event::object_start) {
      keys_of_open_objects.emplace_back();
    } else if (event == Event::object_end) {
      keys_of_open_objects.pop_back();
    } else if (event == Event::key &&
               !keys_of_open_objects.back().insert(parsed.get<std::string>()).second) {
      throw InputError(fmt::format("{}: malformed JSON: key \"{}\" given twice in one object",
                                   source, parsed.get<std::string>().substr(0, 60)));
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, input_checks);
  } catch (const nlohmann::json::exception& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line 3, column 5: ..." or,
    // for a number beyond double (1e400), "[json.exception.out_of_range.406] number overflow
    // parsing '1e400'".
    std::string message = e.what();
    const auto pos = message.find("] ");
    if (pos != std::string::npos) {
      message = message.substr(pos + 2);
    }
    throw InputError(fmt::format("{}: malformed JSON: {}", source, message));
  }
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json_text(read_input_file(path), path);
}

bool is_special_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  return !error && std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
         !std::filesystem::is_directory(status);
}

bool writes_through(const std::string& path) {
  std::error_code error;
  return is_special_file(path) || std::filesystem::is_symlink(path, error);
}

void require_name(const std::string& name, const std::string& field, const std::string& source) {
  if (name.empty()) {
    throw InputError(fmt::format("{}: {}: must not be empty (\"\")", source, field));
  }
  for (const char c : name) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      throw InputError(
          fmt::format("{}: {}: control character (U+{:04X}) in the name", source, field, byte));
    }
  }
}

bool write_file_synced(const std::string& path, const std::string& content) {
  const bool special = is_special_file(path);
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return false;
  }
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  // A device or pipe has no disk copy to sync (fsync on /dev/null fails with EINVAL); its
  // flush still reports a full device (/dev/full: ENOSPC).
  const bool flushed = std::fflush(file) == 0 && (special || ::fsync(::fileno(file)) == 0);
  const bool closed = std::fclose(file) == 0;
  return written && flushed && closed;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  if (writes_through(path)) {
    if (!write_file_synced(path, content)) {
      throw RuntimeError(fmt::format("{}: cannot write file", path));
    }
    return;
  }
  const std::string temporary = fmt::format("{}.tmp.{}", path, ::getpid());
  register_temporary(temporary);  // removed if a signal stops the process before the rename
  const bool written =
      write_file_synced(temporary, content) && std::rename(temporary.c_str(), path.c_str()) == 0;
  if (!written) {
    std::remove(temporary.c_str());
  }
  unregister_temporary(temporary);
  if (!written) {
    throw RuntimeError(fmt::format("{}: cannot write file", path));
  }
}

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal()) {
    return true;
  }
  std::error_code error;
  return fs::equivalent(a, b, error) && !error;
}

namespace {

std::string shorten(const nlohmann::json& value) {
  std::string text = value.dump();
  return text.size() > 60 ? text.substr(0, 57) + "..." : text;
}

const nlohmann::json& require_field(const nlohmann::json& object, const std::string& field,
                                    const std::string& source) {
  if (!object.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({})", source, shorten(object)));
  }
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) {
    throw InputError(fmt::format("{}: {}: missing", source, field));
  }
  return *it;
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
