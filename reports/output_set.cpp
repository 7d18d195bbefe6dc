// All-or-none output files: temporary files beside the outputs, renamed once all are written.

#include "meshplan/output_set.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cassert>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "meshplan/temporary_files.h"

namespace meshplan::reports {

void OutputSet::add(const std::string& flag, const std::string& path) {
  if (path.empty()) {
    return;
  }
  for (const Input& input : inputs_) {
    if (same_file(input.path, path)) {
      throw InputError(fmt::format("{}: the same file as {} ({})", flag, input.what, path));
    }
  }
  // Two outputs on one device (/dev/null twice) are harmless; on one regular file they clash.
  if (!is_special_file(path)) {
    for (const Output& output : outputs_) {
      if (same_file(output.path, path)) {
        throw InputError(
            fmt::format("{} and {}: the same output file ({})", output.flag, flag, path));
      }
    }
  }
  outputs_.push_back({flag, path, "", false});
}

void OutputSet::add_input(const std::string& what, const std::string& path) {
  std::error_code error;
  if (path.empty() || !std::filesystem::exists(path, error) || is_special_file(path)) {
    return;  // a preset name, or a stream read once: nothing an output could overwrite
  }
  for (const Output& output : outputs_) {
    if (same_file(output.path, path)) {
      throw InputError(fmt::format("{}: the same file as {} ({})", output.flag, what, path));
    }
  }
  inputs_.push_back({what, path});
}

bool OutputSet::wants(const std::string& flag) const {
  for (const Output& output : outputs_) {
    if (output.flag == flag) {
      return true;
    }
  }
  return false;
}

void OutputSet::set(const std::string& flag, std::string content) {
  for (Output& output : outputs_) {
    if (output.flag == flag) {
      output.content = std::move(content);
      output.has_content = true;
      return;
    }
  }
  assert(false && "OutputSet::set: flag not registered");
}

void OutputSet::commit() {
  // Regular files: a temporary beside each, renamed once all are written. Devices, pipes and
  // symbolic links (writes_through) are written through after that, never replaced.
  std::vector<std::string> temporaries(outputs_.size());
  auto remove_temporaries = [&] {
    for (const std::string& temporary : temporaries) {
      if (!temporary.empty()) {
        std::remove(temporary.c_str());
        unregister_temporary(temporary);
      }
    }
  };
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const Output& output = outputs_[i];
    assert(output.has_content);
    if (writes_through(output.path)) {
      continue;
    }
    std::error_code error;  // a path that cannot be inspected fails below, when written
    const bool directory = std::filesystem::is_directory(output.path, error);
    if (!directory) {
      temporaries[i] = fmt::format("{}.tmp.{}", output.path, ::getpid());
      register_temporary(temporaries[i]);  // removed if a signal stops the process first
    }
    if (directory || !write_file_synced(temporaries[i], output.content)) {
      remove_temporaries();
      throw RuntimeError(fmt::format("{}: cannot write file", output.path));
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    const bool written = temporaries[i].empty()
                             ? write_file_synced(outputs_[i].path, outputs_[i].content)
                             : std::rename(temporaries[i].c_str(), outputs_[i].path.c_str()) == 0;
    if (!written) {
      // The files are written: the earlier outputs are already in place, the later ones
      // untouched.
      for (size_t j = i; j < temporaries.size(); ++j) {
        if (!temporaries[j].empty()) {
          std::remove(temporaries[j].c_str());
          unregister_temporary(temporaries[j]);
        }
      }
      throw RuntimeError(fmt::format("{}: cannot write file", outputs_[i].path));
    }
    if (!temporaries[i].empty()) {
      unregister_temporary(temporaries[i]);
    }
  }
}

}  // namespace meshplan::reports
