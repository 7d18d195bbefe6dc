#pragma once
// Shared by the libFuzzer targets: each input is written to a scratch file and read by the
// loader's own path-based entry point, so the file reading and JSON parsing are fuzzed too.
// An InputError is the expected answer to bad input; anything else that escapes (another
// exception type, a crash, a leak, undefined behaviour, a timeout) is a finding.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "meshplan/errors.h"

namespace meshplan::fuzz {

/// A file (or directory) private to this fuzzing process, in the system's temporary
/// directory; it is removed when the process exits.
inline std::string scratch_path(const std::string& name) {
  static std::vector<std::string> paths;
  static const bool registered = [] {
    std::atexit([] {
      for (const std::string& path : paths) {
        std::error_code ignored;  // best effort at exit: nothing left to report to
        std::filesystem::remove_all(path, ignored);
      }
    });
    return true;
  }();
  (void)registered;
  paths.push_back((std::filesystem::temp_directory_path() /
                   ("meshplan_fuzz_" + std::to_string(::getpid()) + "_" + name))
                      .string());
  return paths.back();
}

/// Writes the fuzzer's bytes to `path` (replacing the previous input).
inline void write_input(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

/// Runs `load`; an InputError is the loader rejecting bad input, which is what it should do.
template <typename Load>
int run_loader(Load&& load) {
  try {
    load();
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace meshplan::fuzz
