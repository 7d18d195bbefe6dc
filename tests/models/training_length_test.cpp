// load_training_model (models/training_length.cpp): a Hugging Face config's
// max_position_embeddings is not a training length; without --seq-len meshplan trains at
// min(max_position_embeddings, 4096) and says so; --seq-len, presets and meshplan model files
// (which state seq_length) are taken as given.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::kHfDefaultSeqLength;
using meshplan::models::load_training_model;
using meshplan::models::TransformerConfig;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;
using meshplan::models::test::write_temp_file;

namespace {

std::string note_for(const std::string& path, int64_t seq, int64_t max_positions) {
  return fmt::format(
      "{}: no --seq-len: training sequences of {} tokens = min(max_position_embeddings {}, "
      "4096); a Hugging Face config states no training length (--seq-len to choose)",
      path, seq, max_positions);
}

}  // namespace

TEST_CASE("HF configs without seq_length train at min(max_position_embeddings, 4096), noted") {
  CHECK(kHfDefaultSeqLength == 4096);  // Llama 2's pretraining context (Touvron et al. Table 1)
  std::string note;
  // Qwen2-0.5B: 131,072 positions (its config), 4,096 trained.
  const std::string qwen = hf_fixture("Qwen2-0.5B.json");
  CHECK(load_training_model(qwen, std::nullopt, &note).seq_length == 4096);
  CHECK(note == note_for(qwen, 4096, 131072));
  // Meta-Llama-3-8B: 8,192 positions.
  const std::string llama3 = hf_fixture("Meta-Llama-3-8B.json");
  CHECK(load_training_model(llama3, std::nullopt, &note).seq_length == 4096);
  CHECK(note == note_for(llama3, 4096, 8192));
  // GPT-2: 1,024 learned positions, shorter than the cap: 1,024, and still said.
  const std::string gpt2 = hf_fixture("gpt2.json");
  CHECK(load_training_model(gpt2, std::nullopt, &note).seq_length == 1024);
  CHECK(note == note_for(gpt2, 1024, 1024));
  // Mistral-7B-v0.1: 32,768 positions, window 4,096: trains at 4,096 like any config without a
  // length (the window is no reason to choose another).
  const std::string mistral = hf_fixture("Mistral-7B-v0.1.json");
  CHECK(load_training_model(mistral, std::nullopt, &note).seq_length == 4096);
  CHECK(note == note_for(mistral, 4096, 32768));
}

TEST_CASE("--seq-len, presets, meshplan files and an HF seq_length are taken as given") {
  std::string note = "stale";
  const std::string qwen = hf_fixture("Qwen2-0.5B.json");
  CHECK(load_training_model(qwen, 2048, &note).seq_length == 2048);
  CHECK(note.empty());
  CHECK(load_training_model("llama3-8b", std::nullopt, &note).seq_length == 8192);  // preset
  CHECK(note.empty());
  const std::string stated = write_temp_file(
      "hf_seq_length.json",
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
          "vocab_size": 256, "max_position_embeddings": 65536, "seq_length": 8192})");
  CHECK(load_training_model(stated, std::nullopt, &note).seq_length == 8192);
  CHECK(note.empty());
  // Beyond Mistral's window: a windowed model (sliding-window attention is modelled).
  const std::string mistral = hf_fixture("Mistral-7B-v0.1.json");
  const auto windowed = load_training_model(mistral, 8192, &note);
  CHECK(windowed.seq_length == 8192);
  CHECK(windowed.sliding_window == 4096);
  CHECK(windowed.is_windowed());
}

TEST_CASE("a seq_length key is the training length in every family, GPT-2 and GPT-NeoX too") {
  std::string note;
  for (const char* fixture : {"gpt2.json", "pythia-160m.json"}) {
    nlohmann::json json = meshplan::read_json_file(hf_fixture(fixture));
    json["seq_length"] = 512;
    const std::string path = write_temp_file(std::string("seq_") + fixture, json.dump());
    CHECK(load_training_model(path, std::nullopt, &note).seq_length == 512);
    CHECK(note.empty());
  }
}
