#pragma once
// Helpers shared by the models tests: fixture paths, temporary files, the exact text of a thrown
// InputError, and tiny's model file.

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "input_error.h"
#include "meshplan/errors.h"
#include "meshplan/models.h"

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

/// tiny in meshplan's model format, edited per test.
inline nlohmann::json tiny_json() {
  return nlohmann::json::parse(R"({
    "name": "tiny", "num_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
    "num_kv_heads": 2, "ffn_hidden_size": 176, "vocab_size": 256, "seq_length": 32,
    "activation": "swiglu", "norm": "rmsnorm", "positions": "rope", "tied_embeddings": false,
    "qkv_bias": false, "attention_output_bias": false, "mlp_bias": false})");
}

/// model_from_json's error for `json` read as "m.json".
inline std::string model_error_for(const nlohmann::json& json) {
  return input_error([&] { model_from_json(json, "m.json"); });
}

}  // namespace meshplan::models::test
