#pragma once
// Helpers shared by the models tests: fixture paths, temporary files, and the exact text of a
// thrown InputError.

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "input_error.h"
#include "meshplan/errors.h"

namespace meshplan::models::test {

/// tests/data/hf/<file>, from the source tree.
inline std::string hf_fixture(const std::string& file) {
  return std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/hf/" + file;
}

/// A per-process directory under the temp directory, removed when the test binary exits.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("meshplan_models_test_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

/// Writes `content` to a fresh file under the temp directory and returns its path.
inline std::string write_temp_file(const std::string& name, const std::string& content) {
  static const TempDir dir;
  const auto path = dir.path / name;
  std::ofstream(path) << content;
  return path.string();
}

using meshplan::test::input_error;

}  // namespace meshplan::models::test
