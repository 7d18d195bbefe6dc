#pragma once
// Reading JSON inputs with one-line errors, and writing outputs atomically.

#include <algorithm>
#include <array>
#include <cstddef>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace meshplan {

/// The most bytes an input file (model, cluster, plan, runs, log) may hold: far above any real
/// one (the largest shipped, validation/public_runs.json, is under 1 MB), and a bound on what
/// /dev/zero or a runaway pipe can make meshplan read.
inline constexpr int64_t kMaxInputFileBytes = int64_t{256} << 20;
/// The deepest nesting a JSON input may have (plans and runs files nest 4 levels): deeper is
/// refused before anything recurses over it.
inline constexpr int kMaxJsonDepth = 64;

/// The bytes of an input file, read to its end. Throws InputError "<path>: cannot read file"
/// (" (a directory)" for one) or "<path>: larger than 256 MiB, not a meshplan input".
std::string read_input_file(const std::string& path);

/// Parses JSON text from `source`. Throws InputError "<source>: malformed JSON: <parser
/// message>" (a number beyond double included), "<source>: malformed JSON: nested deeper than
/// 64 levels" or "<source>: malformed JSON: key "<key>" given twice in one object".
nlohmann::json parse_json_text(const std::string& text, const std::string& source);

/// read_input_file, then parse_json_text.
nlohmann::json read_json_file(const std::string& path);

/// Writes `content` to a temporary file beside `path`, flushes it to disk and renames it over
/// `path`, so a reader never sees a partial file. A path that names an existing device, FIFO or
/// socket (/dev/null, a named pipe) or a symbolic link (/dev/stdout, a user's link) is written
/// through instead (writes_through): renaming over it would replace it with a regular file.
/// Throws RuntimeError naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

/// Whether `path` names an existing file that is neither regular nor a directory (a character
/// or block device, a FIFO, a socket): such an output is written through, not replaced.
bool is_special_file(const std::string& path);
/// Whether an output at `path` is written through rather than replaced by a renamed temporary:
/// a special file (is_special_file), or a symbolic link, which a rename would replace with a
/// plain file, leaving its target unwritten (`--json /dev/stdout` as root would replace
/// /dev/stdout itself).
bool writes_through(const std::string& path);

/// Throws InputError "<source>: <field>: must not be empty" or "...: control character (U+000A)"
/// for a name printed into tables, traces and SVG, where a newline or NUL would break them.
void require_name(const std::string& name, const std::string& field, const std::string& source);

/// Writes `content` to `path` (opened for writing, truncated) and, for a regular file, flushes
/// it to disk; false if any step fails. The building block of the atomic writers.
bool write_file_synced(const std::string& path, const std::string& content);

/// Whether two paths name one file: equal once made absolute and normalised, or the same
/// existing file (a hard or symbolic link).
bool same_file(const std::string& a, const std::string& b);

/// Typed field access for loaders: throws InputError "<source>: <field>: missing" or
/// "<source>: <field>: expected <type> (<value>)".
int64_t require_int(const nlohmann::json& object, const std::string& field,
                    const std::string& source);
double require_number(const nlohmann::json& object, const std::string& field,
                      const std::string& source);
std::string require_string(const nlohmann::json& object, const std::string& field,
                           const std::string& source);
bool require_bool(const nlohmann::json& object, const std::string& field,
                  const std::string& source);

/// Key lists concatenated at compile time, so a format's full list is built from the lists its
/// parts already name (a key is written in one list only).
template <size_t... N>
constexpr auto joined_fields(const std::array<std::string_view, N>&... parts) {
  std::array<std::string_view, (N + ...)> all{};
  size_t i = 0;
  ((std::copy(parts.begin(), parts.end(), all.begin() + static_cast<std::ptrdiff_t>(i)), i += N),
   ...);
  return all;
}

/// Rejects a typo instead of ignoring it: throws InputError "<source>: <prefix><key>: unknown
/// field (<value>)" for the first key of `object` that is not in `fields`. `prefix` names a
/// nested object inside the source ("gpu."), or is empty.
void reject_unknown_fields(const nlohmann::json& object, std::span<const std::string_view> fields,
                           const std::string& source, const std::string& prefix = "");

}  // namespace meshplan
