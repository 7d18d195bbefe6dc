#include "preset_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"

namespace meshplan::models {

std::vector<std::string> preset_names(const std::vector<EmbeddedPreset>& presets) {
  std::vector<std::string> names;
  names.reserve(presets.size());
  for (const auto& preset : presets) {
    names.emplace_back(preset.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

ResolvedJson resolve_preset_or_file(const std::string& name_or_path, const std::string& kind,
                                    const std::vector<EmbeddedPreset>& presets) {
  for (const auto& preset : presets) {
    if (name_or_path == preset.name) {
      const std::string source = fmt::format("{} (preset)", preset.name);
      try {
        return {nlohmann::json::parse(preset.json), source};
      } catch (const nlohmann::json::parse_error& e) {
        // Only reachable if a shipped preset file is broken; the preset tests parse every one.
        throw InputError(fmt::format("{}: malformed JSON: {}", source, e.what()));
      }
    }
  }
  std::error_code error;
  if (!std::filesystem::exists(name_or_path, error)) {
    throw InputError(fmt::format("unknown {} preset '{}' (not a file either); presets: {}", kind,
                                 name_or_path, fmt::join(preset_names(presets), ", ")));
  }
  return {read_json_file(name_or_path), name_or_path};
}

}  // namespace meshplan::models
