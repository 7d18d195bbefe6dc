// Llama 4 text configs (transformers Llama4TextConfig; tests/data/hf/ holds Llama-4-Scout's
// text_config as published with meta-llama/Llama-4-Scout-17B-16E) against closed-form counts and
// the model cards' "17B active", and the model format's no_rope_freq, qk_l2_norm and
// attention_chunk_size.

#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::count_layer_parameters;
using meshplan::models::count_parameters;
using meshplan::models::load_model;
using meshplan::models::load_training_model;
using meshplan::models::model_from_json;
using meshplan::models::model_to_json;
using meshplan::models::TransformerConfig;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;

namespace {

nlohmann::json scout() {
  return meshplan::read_json_file(hf_fixture("Llama-4-Scout-17B-16E-text.json"));
}

// Llama-4-Maverick-17B-128E's text_config differs from Scout's in 128 experts on every other
// layer (interleave_moe_layer_step 2), no q/k norm and a longer position range.
nlohmann::json maverick() {
  nlohmann::json json = scout();
  json["num_local_experts"] = 128;
  json["interleave_moe_layer_step"] = 2;
  json.erase("moe_layers");
  json["use_qk_norm"] = false;
  json["max_position_embeddings"] = 1048576;
  return json;
}

// h 5120; attention q and o 5120 x 5120, k and v 5120 x 1024 (8 kv heads of 128); two RMSNorms.
constexpr int64_t kH = 5120;
constexpr int64_t kAttention = 2 * kH * kH + 2 * kH * 1024;
constexpr int64_t kNorms = 2 * kH;
constexpr int64_t kExpert = 3 * kH * 8192;  // a SwiGLU expert (and the shared one) of 8192
constexpr int64_t kEmbeddings = 2 * int64_t{202'048} * kH + kH;  // untied, and the final norm

}  // namespace

TEST_CASE("meta-llama/Llama-4-Scout-17B-16E text: 107,769,861,120 parameters, 17B active") {
  const TransformerConfig model = load_model(hf_fixture("Llama-4-Scout-17B-16E-text.json"));
  CHECK(model.num_layers == 48);
  CHECK(model.num_experts == 16);
  CHECK(model.experts_per_token == 1);
  CHECK(model.expert_ffn_hidden_size == 8192);
  CHECK(model.num_shared_experts == 1);
  CHECK(model.shared_expert_ffn_hidden_size == 8192);
  CHECK(model.ffn_hidden_size == 16384);  // intermediate_size_mlp: no dense layer in Scout
  CHECK(model.num_moe_layers() == 48);    // moe_layers 0..47
  CHECK(model.moe_layers.empty());        // normalised: every layer MoE
  CHECK(model.qk_l2_norm);                // use_qk_norm
  CHECK_FALSE(model.qk_norm);             // no gains
  CHECK(model.attention_chunk_size == 8192);
  CHECK(model.router_probs_on_input);  // sigmoid(top-1 logit) scales the expert's input
  CHECK_FALSE(model.tied_embeddings);
  CHECK_FALSE(model.dropout);
  // no_rope_layers [1, 1, 1, 0] x 12 (1 = rotary): layers 3, 7, ..., 47 NoPE.
  CHECK(model.no_rope_freq.size() == 48);
  CHECK(std::count(model.no_rope_freq.begin(), model.no_rope_freq.end(), 1) == 12);
  CHECK(model.is_rotary_layer(2));
  CHECK_FALSE(model.is_rotary_layer(3));
  // Term by term (transformers Llama4TextMoe: 16 experts, the shared Llama4TextMLP, a
  // bias-free router 5120 -> 16; the L2 norm has no weights).
  const auto layer = count_layer_parameters(model, true);
  CHECK(layer.attention == kAttention);
  CHECK(layer.router == 16 * kH);
  CHECK(layer.routed_experts == 16 * kExpert);
  CHECK(layer.shared_experts == kExpert);
  const int64_t moe_layer = kAttention + kNorms + 16 * kH + 17 * kExpert;
  const auto counts = count_parameters(model);
  CHECK(counts.total == 48 * moe_layer + kEmbeddings);
  CHECK(counts.total == 107'769'861'120);
  // The model card's 109B total counts the vision encoder too; its "17B active" is the text
  // model's one routed and one shared expert per layer.
  CHECK(counts.active == 48 * (kAttention + kNorms + 16 * kH + 2 * kExpert) + kEmbeddings);
  CHECK(counts.active == 17'172'894'720);
}

TEST_CASE("Llama-4-Maverick-17B-128E text: MoE every other layer, 400,711,848,960, 17B active") {
  const TransformerConfig model = model_from_json(maverick(), "maverick.json");
  CHECK(model.num_moe_layers() == 24);  // interleave_moe_layer_step 2: layers 1, 3, ..., 47
  CHECK_FALSE(model.is_moe_layer(0));
  CHECK(model.is_moe_layer(1));
  CHECK_FALSE(model.qk_l2_norm);
  const int64_t moe_layer = kAttention + kNorms + 128 * kH + 129 * kExpert;
  const int64_t dense_layer = kAttention + kNorms + 3 * kH * 16384;  // intermediate_size_mlp
  const auto counts = count_parameters(model);
  CHECK(counts.total == 24 * moe_layer + 24 * dense_layer + kEmbeddings);
  CHECK(counts.total == 400'711'848'960);  // the model card's "400B"
  CHECK(counts.active ==
        24 * (kAttention + kNorms + 128 * kH + 2 * kExpert) + 24 * dense_layer + kEmbeddings);
  CHECK(counts.active == 17'184'691'200);  // "17B"
}

TEST_CASE("Llama 4: Llama4TextConfig's defaults, the NoPE interval, and what is refused") {
  nlohmann::json json = scout();
  for (const char* key : {"moe_layers", "no_rope_layers", "use_qk_norm", "attention_chunk_size",
                          "num_local_experts", "num_experts_per_tok", "intermediate_size_mlp"}) {
    json.erase(key);
  }
  const TransformerConfig defaults = model_from_json(json, "d.json");
  CHECK(defaults.num_moe_layers() == 48);  // interleave_moe_layer_step 1
  CHECK(defaults.num_experts == 16);
  CHECK(defaults.experts_per_token == 1);
  CHECK(defaults.ffn_hidden_size == 16384);
  CHECK(defaults.qk_l2_norm);
  CHECK(defaults.attention_chunk_size == 8192);
  CHECK(defaults.no_rope_freq == model_from_json(scout(), "s.json").no_rope_freq);  // interval 4
  json["no_rope_layer_interval"] = 6;
  const std::vector<int> every_sixth = model_from_json(json, "d.json").no_rope_freq;
  CHECK(std::count(every_sixth.begin(), every_sixth.end(), 1) == 8);  // layers 5, 11, ..., 47
  CHECK(every_sixth[5] == 1);
  json["attention_chunk_size"] = nullptr;  // None: no chunking
  CHECK(model_from_json(json, "d.json").attention_chunk_size == 0);

  // Errors name the config's keys.
  nlohmann::json bad = scout();
  bad["moe_layers"] = {0, 48};
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: moe_layers[1]: expected a layer index in [0, 48) (48)");
  bad = scout();
  bad["moe_layers"] = nlohmann::json::array();
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: moe_layers: no MoE layer (a dense model has num_experts 0)");
  bad = scout();
  bad["no_rope_layers"] = {1, 0};
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: no_rope_layers: expected an entry per layer, 48 (2 entries)");
  bad["no_rope_layers"] = std::vector<int>(48, 0);
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: no_rope_layers: every layer NoPE is a model without positions, not modelled");
  bad = scout();
  bad["num_hidden_layers"] = 5000;  // the count is refused before the per-layer lists
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: num_hidden_layers: absurdly large, more than 2048 (5000)");
  bad = scout();
  bad["partial_rotary_factor"] = 0.5;  // Llama 4 rotates whole heads
  CHECK(input_error([&] {
          model_from_json(bad, "b.json");
        }).starts_with("b.json: partial_rotary_factor: Llama4ForCausalLM rotates whole heads"));
}

TEST_CASE(
    "attention_chunk_size: refused for sequences longer than the chunk, at the length planned") {
  const std::string path = hf_fixture("Llama-4-Scout-17B-16E-text.json");
  std::string note;
  // Without --seq-len a Hugging Face config plans at min(max_position_embeddings, 4096).
  CHECK(load_training_model(path, std::nullopt, &note).seq_length == 4096);
  CHECK(load_training_model(path, 8192, &note).seq_length == 8192);
  CHECK(input_error([&] { load_training_model(path, 16384, &note); }) ==
        "--seq-len: attention_chunk_size: chunked attention is not modelled; sequences of at most "
        "8192 tokens attend as without it (seq_length 16384)");
}

TEST_CASE("no_rope_freq, qk_l2_norm, attention_chunk_size in meshplan's format") {
  nlohmann::json json = model_to_json(load_model("tiny"));  // 4 layers, rope
  json["no_rope_freq"] = 2;  // Megatron-Core's integer: every second layer NoPE
  TransformerConfig model = model_from_json(json, "m.json");
  CHECK(model.no_rope_freq == std::vector<int>{0, 1, 0, 1});
  json["no_rope_freq"] = {1, 0, 0, 0};
  json["qk_l2_norm"] = true;
  json["attention_chunk_size"] = 32;
  model = model_from_json(json, "m.json");
  CHECK(model.no_rope_freq == std::vector<int>{1, 0, 0, 0});
  CHECK(model_from_json(model_to_json(model), "round.json") == model);
  json["no_rope_freq"] = {0, 0, 0, 0};  // no NoPE layer: read as no list
  CHECK(model_from_json(json, "m.json").no_rope_freq.empty());
  CHECK_FALSE(model_to_json(model_from_json(json, "m.json")).contains("no_rope_freq"));
  // router_probs_on_input: an MoE model routing one expert per token only.
  nlohmann::json moe = model_to_json(load_model("tiny-moe"));  // top-2
  moe["router_probs_on_input"] = true;
  CHECK(input_error([&] { model_from_json(moe, "moe.json"); }) ==
        "moe.json: router_probs_on_input: scaling the expert's input works with one expert per "
        "token (Megatron-Core moe_apply_probs_on_input needs top-1; experts_per_token 2)");
  moe["experts_per_token"] = 1;
  const TransformerConfig top1 = model_from_json(moe, "moe.json");
  CHECK(top1.router_probs_on_input);
  CHECK(model_from_json(model_to_json(top1), "round.json") == top1);
  nlohmann::json dense = json;
  dense["router_probs_on_input"] = true;
  CHECK(input_error([&] {
          model_from_json(dense, "m.json");
        }).starts_with("m.json: router_probs_on_input: must be"));
  // Parameters: none added (the L2 norm has no gain, NoPE layers none).
  CHECK(count_parameters(model).total == count_parameters(load_model("tiny")).total);

  const auto error = [&json](const nlohmann::json& value, const char* key) {
    nlohmann::json edited = json;
    edited[key] = value;
    return input_error([&] { model_from_json(edited, "m.json"); });
  };
  CHECK(error(3, "no_rope_freq") ==
        "m.json: no_rope_freq: must divide num_layers, as Megatron-Core asserts (4 % 3)");
  CHECK(error(1, "no_rope_freq") ==
        "m.json: no_rope_freq: an integer N makes every N-th layer NoPE; must be 2 or more (1)");
  CHECK(error("4", "no_rope_freq") ==
        "m.json: no_rope_freq: expected an integer N (every N-th layer NoPE) or a list of 0 and 1, "
        "one per layer (\"4\")");
  CHECK(error({0, 2, 0, 0}, "no_rope_freq") ==
        "m.json: no_rope_freq[1]: must be 1 (NoPE) or 0 (rotary) (2)");
  CHECK(error({0, 1}, "no_rope_freq") ==
        "m.json: no_rope_freq: expected one entry per layer, 4 (2 entries)");
  CHECK(error(-1, "attention_chunk_size") ==
        "m.json: attention_chunk_size: must be in [0, 100000000], 0 for none (-1)");
  CHECK(error("yes", "qk_l2_norm") == "m.json: qk_l2_norm: expected true or false (\"yes\")");
  nlohmann::json both = json;
  both["qk_norm"] = true;
  CHECK(input_error([&] { model_from_json(both, "m.json"); }) ==
        "m.json: qk_l2_norm: one per-head norm, qk_norm (RMSNorm with gains) or qk_l2_norm (none), "
        "not both");
  nlohmann::json learned = model_to_json(load_model("gpt2-124m"));
  learned["no_rope_freq"] = 2;
  CHECK(input_error([&] { model_from_json(learned, "g.json"); }) ==
        "g.json: no_rope_freq: NoPE layers need rotary positions and standard attention, not "
        "positions learned");
}
