// All-or-none output files: temporary files beside the outputs, renamed once all are written.

#include "meshplan/output_set.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cassert>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "meshplan/errors.h"

namespace meshplan::reports {
namespace {

// Whether two output paths name one file: equal once made absolute and normalised, or the
// same existing file (a hard or symbolic link).
bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  if (fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal()) {
    return true;
  }
  std::error_code error;
  return fs::equivalent(a, b, error) && !error;
}

// Writes `content` to `path` and flushes it to disk; false if any step fails.
bool write_synced(const std::string& path, const std::string& content) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return false;
  }
  const bool written = std::fwrite(content.data(), 1, content.size(), file) == content.size();
  const bool flushed = std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const bool closed = std::fclose(file) == 0;
  return written && flushed && closed;
}

}  // namespace

void OutputSet::add(const std::string& flag, const std::string& path) {
  if (path.empty()) {
    return;
  }
  for (const Output& output : outputs_) {
    if (same_file(output.path, path)) {
      throw InputError(
          fmt::format("{} and {}: the same output file ({})", output.flag, flag, path));
    }
  }
  outputs_.push_back({flag, path, "", false});
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
  std::vector<std::string> temporaries;
  auto remove_temporaries = [&] {
    for (const std::string& temporary : temporaries) {
      std::remove(temporary.c_str());
    }
  };
  for (const Output& output : outputs_) {
    assert(output.has_content);
    const std::string temporary = fmt::format("{}.tmp.{}", output.path, ::getpid());
    std::error_code error;  // a path that cannot be inspected fails below, when written
    const bool directory = std::filesystem::is_directory(output.path, error);
    if (!directory) {
      temporaries.push_back(temporary);
    }
    if (directory || !write_synced(temporary, output.content)) {
      remove_temporaries();
      throw RuntimeError(fmt::format("{}: cannot write file", output.path));
    }
  }
  for (size_t i = 0; i < outputs_.size(); ++i) {
    if (std::rename(temporaries[i].c_str(), outputs_[i].path.c_str()) != 0) {
      // Only a rename can fail here (the files are written): the earlier outputs are already
      // in place, the later ones untouched.
      for (size_t j = i; j < temporaries.size(); ++j) {
        std::remove(temporaries[j].c_str());
      }
      throw RuntimeError(fmt::format("{}: cannot write file", outputs_[i].path));
    }
  }
}

}  // namespace meshplan::reports
