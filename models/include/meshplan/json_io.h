#pragma once
// Reading JSON inputs with one-line errors, and writing outputs atomically.

#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>

namespace meshplan {

/// Parses a JSON file. Throws InputError: "<path>: cannot read file" (with " (a directory)" for
/// one) or "<path>: malformed JSON: <parser message>" (a number beyond double included).
nlohmann::json read_json_file(const std::string& path);

/// Writes `content` to a temporary file beside `path`, flushes it to disk and renames it over
/// `path`, so a reader never sees a partial file. Throws RuntimeError naming the path.
void write_file_atomic(const std::string& path, const std::string& content);

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

/// Rejects a typo instead of ignoring it: throws InputError "<source>: <prefix><key>: unknown
/// field (<value>)" for the first key of `object` that is not in `fields`. `prefix` names a
/// nested object inside the source ("gpu."), or is empty.
void reject_unknown_fields(const nlohmann::json& object, std::span<const std::string_view> fields,
                           const std::string& source, const std::string& prefix = "");

}  // namespace meshplan
