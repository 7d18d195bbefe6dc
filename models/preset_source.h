#pragma once
// Resolving a `--model` / `--cluster` argument: an embedded preset name first, else a file path.
// Private to models/.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "presets.h"

namespace meshplan::models {

/// The JSON behind a preset name or a file, and the source name errors should use.
struct ResolvedJson {
  nlohmann::json json;
  std::string source;  // "<name> (preset)" for presets, the path as given for files
};

/// `kind` is "model" or "cluster" (used in the error text). Throws InputError:
/// "unknown <kind> preset '<name>' (not a file either); presets: a, b, c" when `name_or_path`
/// is neither a preset nor an existing file, or read_json_file's errors for a bad file.
ResolvedJson resolve_preset_or_file(const std::string& name_or_path, const std::string& kind,
                                    const std::vector<EmbeddedPreset>& presets);

/// Preset names, sorted.
std::vector<std::string> preset_names(const std::vector<EmbeddedPreset>& presets);

}  // namespace meshplan::models
