// meshplan's model format: presets, round trip, validation and every error message.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshplan/models.h"
#include "model_test_util.h"
#include "presets.h"

using meshplan::models::Activation;
using meshplan::models::count_parameters;
using meshplan::models::load_model;
using meshplan::models::model_from_json;
using meshplan::models::model_preset_names;
using meshplan::models::model_to_json;
using meshplan::models::Norm;
using meshplan::models::Positions;
using meshplan::models::TransformerConfig;
using meshplan::models::validate_model;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;
using meshplan::models::test::model_error_for;
using meshplan::models::test::tiny_json;
using meshplan::models::test::write_temp_file;

namespace {

// The brief's preset list, sorted by std::sort's byte order.
const std::vector<std::string> kExpectedPresets = {
    "deepseek-v3",   "glm-4.5",        "glm-4.5-air",     "gpt-oss-120b",    "gpt-oss-20b",
    "gpt2-124m",     "gpt3-1.3b",      "gpt3-13b",        "gpt3-175b",       "gpt3-2.7b",
    "gpt3-6.7b",     "llama2-13b",     "llama2-70b",      "llama2-7b",       "llama3-405b",
    "llama3-70b",    "llama3-8b",      "megatron-1.7b",   "megatron-145.6b", "megatron-18.4b",
    "megatron-1t",   "megatron-3.6b",  "megatron-310.1b", "megatron-39.1b",  "megatron-529.6b",
    "megatron-7.5b", "megatron-76.1b", "mistral-7b",      "mixtral-8x7b",    "qwen3-30b-a3b",
    "tiny",          "tiny-mla",       "tiny-moe"};

void check_same(const TransformerConfig& a, const TransformerConfig& b) {
  CHECK(a.name == b.name);
  CHECK(a.num_layers == b.num_layers);
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.num_attention_heads == b.num_attention_heads);
  CHECK(a.num_kv_heads == b.num_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.ffn_hidden_size == b.ffn_hidden_size);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.seq_length == b.seq_length);
  CHECK(a.max_position_embeddings == b.max_position_embeddings);
  CHECK(a.activation == b.activation);
  CHECK(a.norm == b.norm);
  CHECK(a.positions == b.positions);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.attention_output_bias == b.attention_output_bias);
  CHECK(a.mlp_bias == b.mlp_bias);
  CHECK(a.dropout == b.dropout);
  CHECK(a.parallel_residual == b.parallel_residual);
  CHECK(a.sliding_window == b.sliding_window);
  CHECK(a.window_attn_skip_freq == b.window_attn_skip_freq);
  CHECK(a.window_attn_layers == b.window_attn_layers);
  CHECK(a.rotary_percent == b.rotary_percent);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope_local_theta == b.rope_local_theta);
}

}  // namespace

TEST_CASE("model presets: the full list, sorted") {
  CHECK(model_preset_names() == kExpectedPresets);
}

TEST_CASE("every model preset loads, validates, names itself and cites a source") {
  for (const auto& preset : meshplan::models::embedded_model_presets()) {
    const std::string name = preset.name;
    CAPTURE(name);
    const nlohmann::json json = nlohmann::json::parse(preset.json);
    CHECK(json.at("name") == name);
    REQUIRE(json.contains("source"));
    CHECK(json.at("source").get<std::string>().size() > 20);  // a real citation, not "x"
    const TransformerConfig model = load_model(name);
    CHECK(model.name == name);
    validate_model(model, name);
    CHECK(count_parameters(model).total > 0);
  }
}

TEST_CASE("presets: the architecture families") {
  const TransformerConfig gpt3 = load_model("gpt3-175b");
  CHECK(gpt3.head_dim == 128);           // Brown et al. Table 2.1: d_head 128 = 12288 / 96
  CHECK(gpt3.ffn_hidden_size == 49152);  // 4h
  CHECK(gpt3.vocab_size == 50257);
  CHECK(gpt3.max_position_embeddings == 2048);  // defaults to seq_length
  CHECK(gpt3.positions == Positions::kLearned);
  CHECK(gpt3.tied_embeddings);
  CHECK(gpt3.qkv_bias);

  CHECK(load_model("gpt3-1.3b").num_attention_heads == 16);  // 2048 / d_head 128
  CHECK(load_model("gpt3-2.7b").head_dim == 80);             // Table 2.1: d_head 80
  CHECK(load_model("gpt3-13b").hidden_size == 5120);         // 40 heads * 128, not 5140

  const TransformerConfig llama = load_model("llama2-70b");
  CHECK(llama.num_kv_heads == 8);
  CHECK(llama.activation == Activation::kSwiglu);
  CHECK(llama.norm == Norm::kRmsNorm);
  CHECK_FALSE(llama.tied_embeddings);

  const TransformerConfig tiny = load_model("tiny");
  CHECK(tiny.head_dim == 16);  // 64 / 4
  for (int tp : {2, 4, 8}) {
    CHECK(tiny.ffn_hidden_size % tp == 0);  // the CPU executor shards the MLP by tp
  }
  CHECK(load_model("mistral-7b").seq_length == 8192);      // Jiang et al. Table 1 context_len
  CHECK(load_model("mistral-7b").sliding_window == 4096);  // ... and window_size
}

TEST_CASE("round trip: model_to_json -> model_from_json gives the same model") {
  for (const auto& name : model_preset_names()) {
    CAPTURE(name);
    const TransformerConfig model = load_model(name);
    check_same(model_from_json(model_to_json(model), "round-trip"), model);
  }
  // HF-loaded models, whose head_dim and max_position_embeddings come from other fields.
  for (const char* file : {"gpt2.json", "Qwen2-0.5B.json", "pythia-160m.json"}) {
    const TransformerConfig model = load_model(hf_fixture(file));
    check_same(model_from_json(model_to_json(model), "round-trip"), model);
  }
  // head_dim given with a d != h, and alibi positions.
  nlohmann::json json = tiny_json();
  json["head_dim"] = 32;
  json["positions"] = "alibi";
  const TransformerConfig model = model_from_json(json, "m.json");
  CHECK(model.head_dim == 32);
  check_same(model_from_json(model_to_json(model), "round-trip"), model);
}

TEST_CASE("dropout: per preset, optional in the model format (absent = Megatron's 0.1)") {
  // Llama-style models train without dropout (their HF configs: attention_dropout 0.0); GPT-3
  // and Narayanan et al.'s Megatron models with it (GPT-2's 0.1, Megatron-LM's default 0.1).
  for (const char* name : {"llama2-7b", "llama3-8b", "llama3-405b", "mistral-7b", "tiny"}) {
    CAPTURE(name);
    CHECK_FALSE(load_model(name).dropout);
  }
  for (const char* name : {"gpt3-175b", "gpt3-1.3b", "megatron-1t", "megatron-7.5b"}) {
    CAPTURE(name);
    CHECK(load_model(name).dropout);
  }
  nlohmann::json json = tiny_json();
  json.erase("dropout");
  CHECK(model_from_json(json, "m.json").dropout);
  json["dropout"] = false;
  CHECK_FALSE(model_from_json(json, "m.json").dropout);
  CHECK(model_to_json(model_from_json(json, "m.json")).at("dropout") == false);
  json["dropout"] = 0.1;
  CHECK(input_error([&] { model_from_json(json, "m.json"); }).find("m.json: dropout") == 0);
}

TEST_CASE("parallel_residual: optional (absent = sequential), written only when set") {
  nlohmann::json json = tiny_json();
  CHECK_FALSE(model_from_json(json, "m.json").parallel_residual);
  CHECK_FALSE(model_to_json(model_from_json(json, "m.json")).contains("parallel_residual"));
  json["parallel_residual"] = true;
  const TransformerConfig parallel = model_from_json(json, "m.json");
  CHECK(parallel.parallel_residual);
  check_same(model_from_json(model_to_json(parallel), "round-trip"), parallel);
  json["parallel_residual"] = 1;
  CHECK(model_error_for(json).find("m.json: parallel_residual") == 0);
  // Not modelled with experts or latent attention: refused by name.
  TransformerConfig moe = load_model("tiny-moe");
  moe.parallel_residual = true;
  CHECK(input_error([&] { validate_model(moe, "m.json"); }) ==
        "m.json: parallel_residual: parallel attention and MLP is modelled for dense layers with "
        "standard attention, not with experts (num_experts) (true)");
  TransformerConfig mla = load_model("tiny-mla");
  mla.parallel_residual = true;
  CHECK(input_error([&] { validate_model(mla, "m.json"); }).find("not with MLA (kv_lora_rank)") !=
        std::string::npos);
}

TEST_CASE("soft-caps and query_pre_attn_scalar: optional (absent = none), written when set") {
  nlohmann::json json = tiny_json();
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.attn_logit_softcapping == 0.0);
  CHECK(plain.final_logit_softcapping == 0.0);
  CHECK(plain.query_pre_attn_scalar == 0.0);
  const nlohmann::json written = model_to_json(plain);
  CHECK_FALSE(written.contains("attn_logit_softcapping"));
  CHECK_FALSE(written.contains("final_logit_softcapping"));
  CHECK_FALSE(written.contains("query_pre_attn_scalar"));
  // tiny's head_dim: the scale is 1 / sqrt(head_dim) without the scalar.
  CHECK(plain.attention_scale() ==
        doctest::Approx(1.0 / std::sqrt(plain.head_dim)).epsilon(1e-15).scale(0));  // same formula
  json["attn_logit_softcapping"] = 50.0;  // Gemma 2's caps
  json["final_logit_softcapping"] = 30.0;
  json["query_pre_attn_scalar"] = 144;  // gemma-2-27b: 1 / sqrt(144) = 1 / 12
  const TransformerConfig capped = model_from_json(json, "m.json");
  CHECK(capped.attn_logit_softcapping == 50.0);
  CHECK(capped.final_logit_softcapping == 30.0);
  CHECK(capped.query_pre_attn_scalar == 144.0);
  CHECK(capped.attention_scale() ==
        doctest::Approx(1.0 / 12.0).epsilon(1e-15).scale(0));  // one rounding of 1 / sqrt(144)
  check_same(model_from_json(model_to_json(capped), "round-trip"), capped);
  CHECK(model_from_json(model_to_json(capped), "round-trip") == capped);
  json["attn_logit_softcapping"] = -50.0;
  CHECK(model_error_for(json) ==
        "m.json: attn_logit_softcapping: must be 0 (none) or positive and finite (-50)");
  json["attn_logit_softcapping"] = 50.0;
  json["final_logit_softcapping"] = 3e7;
  CHECK(model_error_for(json) ==
        "m.json: final_logit_softcapping: absurdly large, more than 1000000 (30000000)");
  json["final_logit_softcapping"] = "30";
  CHECK(model_error_for(json) == "m.json: final_logit_softcapping: expected a number (\"30\")");
  json["final_logit_softcapping"] = 30.0;
  json["query_pre_attn_scalar"] = -1;
  CHECK(model_error_for(json) ==
        "m.json: query_pre_attn_scalar: must be 0 (none) or positive and finite (-1)");
  // NaN cannot come from JSON; a model built in code is refused the same way.
  TransformerConfig nan_cap = plain;
  nan_cap.attn_logit_softcapping = std::numeric_limits<double>::quiet_NaN();
  CHECK(input_error([&] { validate_model(nan_cap, "m.json"); }) ==
        "m.json: attn_logit_softcapping: must be 0 (none) or positive and finite (nan)");
  TransformerConfig inf_scalar = plain;
  inf_scalar.query_pre_attn_scalar = std::numeric_limits<double>::infinity();
  CHECK(input_error([&] { validate_model(inf_scalar, "m.json"); }) ==
        "m.json: query_pre_attn_scalar: must be 0 (none) or positive and finite (inf)");
}

TEST_CASE("rotary_percent: optional (absent = 1, every channel), written when below 1, checked") {
  nlohmann::json json = tiny_json();  // head_dim 16
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.rotary_percent == 1.0);
  CHECK(plain.rotary_dim() == 16);
  CHECK_FALSE(plain.has_partial_rotary());
  CHECK_FALSE(model_to_json(plain).contains("rotary_percent"));
  json["rotary_percent"] = 0.5;  // GLM-4.5's partial_rotary_factor
  const TransformerConfig half = model_from_json(json, "m.json");
  CHECK(half.rotary_dim() == 8);
  CHECK(model_to_json(half)["rotary_percent"] == 0.5);
  check_same(model_from_json(model_to_json(half), "round-trip"), half);
  CHECK(model_from_json(model_to_json(half), "round-trip") == half);
  json["rotary_percent"] = 0.25;  // GPT-NeoX's rotary_pct: int(16 x 0.25) = 4 channels
  CHECK(model_from_json(json, "m.json").rotary_dim() == 4);
  for (const double bad : {0.0, -0.5, 1.5}) {
    CAPTURE(bad);
    json["rotary_percent"] = bad;
    CHECK(model_error_for(json) ==
          fmt::format("m.json: rotary_percent: must be in (0, 1], 1 to rotate every channel of a "
                      "head ({})",
                      bad));
  }
  json["rotary_percent"] = "0.5";
  CHECK(model_error_for(json) == "m.json: rotary_percent: expected a number (\"0.5\")");
  json["rotary_percent"] = 0.1;  // int(16 x 0.1) = 1 channel: no pair to turn
  CHECK(model_error_for(json) ==
        "m.json: rotary_percent: rotates int(head_dim 16 x 0.1) = 1 channels, not an even number "
        "of 2 or more");
  json["rotary_percent"] = 0.5;
  json["positions"] = "learned";
  json["max_position_embeddings"] = 32;
  CHECK(model_error_for(json) ==
        "m.json: rotary_percent: partial rotary needs rotary positions and standard attention, "
        "not positions learned (0.5)");
  TransformerConfig mla = load_model("tiny-mla");
  mla.rotary_percent = 0.5;
  CHECK(input_error([&] { validate_model(mla, "m.json"); }) ==
        "m.json: rotary_percent: partial rotary needs rotary positions and standard attention, "
        "not MLA (kv_lora_rank) (0.5)");
  TransformerConfig nan_percent = plain;
  nan_percent.rotary_percent = std::numeric_limits<double>::quiet_NaN();
  CHECK(input_error([&] { validate_model(nan_percent, "m.json"); }) ==
        "m.json: rotary_percent: must be in (0, 1], 1 to rotate every channel of a head (nan)");
}

TEST_CASE("rope_theta: optional (absent = 10000), written when another, checked") {
  nlohmann::json json = tiny_json();
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.rope_theta == 10000.0);  // Su et al. 2021, Eq. 15; Megatron-LM's --rotary-base
  CHECK_FALSE(model_to_json(plain).contains("rope_theta"));
  json["rope_theta"] = 500000;  // Llama 3 (Dubey et al. 2024, Table 3)
  const TransformerConfig llama3 = model_from_json(json, "m.json");
  CHECK(llama3.rope_theta == 500000.0);
  CHECK(model_to_json(llama3)["rope_theta"] == 500000.0);
  check_same(model_from_json(model_to_json(llama3), "round-trip"), llama3);
  CHECK(model_from_json(model_to_json(llama3), "round-trip") == llama3);
  CHECK_FALSE(llama3 == plain);
  // The presets state their models' bases.
  CHECK(load_model("llama3-70b").rope_theta == 500000.0);
  CHECK(load_model("mixtral-8x7b").rope_theta == 1e6);
  CHECK(load_model("gpt-oss-120b").rope_theta == 150000.0);
  CHECK(load_model("llama2-7b").rope_theta == 10000.0);
  for (const double bad : {1.0, 0.0, -10000.0, 1e13}) {
    CAPTURE(bad);
    json["rope_theta"] = bad;
    CHECK(model_error_for(json) ==
          fmt::format("m.json: rope_theta: must be in (1, 1e+12], the rotary base ({})", bad));
  }
  json["rope_theta"] = "500000";
  CHECK(model_error_for(json) == "m.json: rope_theta: expected a number (\"500000\")");
  json["rope_theta"] = 500000;
  json["positions"] = "learned";
  json["max_position_embeddings"] = 32;
  CHECK(model_error_for(json) ==
        "m.json: rope_theta: a rotary base needs rotary positions, not positions learned "
        "(500000)");
  TransformerConfig nan_base = plain;
  nan_base.rope_theta = std::numeric_limits<double>::quiet_NaN();
  CHECK(input_error([&] { validate_model(nan_base, "m.json"); }) ==
        "m.json: rope_theta: must be in (1, 1e+12], the rotary base (nan)");
}

TEST_CASE("rope_local_theta: the sliding layers' base; optional, per layer, checked") {
  nlohmann::json json = tiny_json();
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.rope_local_theta == 0.0);
  CHECK_FALSE(model_to_json(plain).contains("rope_local_theta"));
  // Gemma 3's layout on tiny's 4 layers: window_attn_skip_freq 3 slides layers 0, 1 and 3
  // (numbers 1, 2, 4), layer 2 attends to all; the global base 1e6, the local 10000 (Gemma
  // Team 2025, Sec. 2.2).
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = 3;
  json["rope_theta"] = 1e6;
  json["rope_local_theta"] = 10000;
  const TransformerConfig gemma3 = model_from_json(json, "m.json");
  CHECK(gemma3.rope_local_theta == 10000.0);
  const std::vector<double> expected_bases = {1e4, 1e4, 1e6, 1e4};
  for (int64_t layer = 0; layer < 4; ++layer) {
    CAPTURE(layer);
    CHECK(gemma3.layer_rope_theta(layer) == expected_bases[static_cast<size_t>(layer)]);
  }
  CHECK(model_to_json(gemma3)["rope_local_theta"] == 10000.0);
  check_same(model_from_json(model_to_json(gemma3), "round-trip"), gemma3);
  CHECK(model_from_json(model_to_json(gemma3), "round-trip") == gemma3);
  // A layer slides by the pattern even where the window covers the sequence (32 of 32 tokens:
  // full causal attention, still the local base, as transformers' layer_types decides it).
  json["sliding_window"] = 32;
  const TransformerConfig covering = model_from_json(json, "m.json");
  CHECK_FALSE(covering.is_windowed());
  CHECK_FALSE(covering.is_windowed_layer(0));
  CHECK(covering.is_sliding_layer(0));
  CHECK(covering.layer_rope_theta(0) == 1e4);
  CHECK(covering.layer_rope_theta(2) == 1e6);
  // The list form: the 1 entries slide.
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = {0, 1, 0, 0};
  const TransformerConfig listed = model_from_json(json, "m.json");
  CHECK(listed.layer_rope_theta(0) == 1e6);
  CHECK(listed.layer_rope_theta(1) == 1e4);
  // The same base as the other layers is no second base.
  json["window_attn_skip_freq"] = 3;
  json["rope_local_theta"] = 1e6;
  CHECK(model_from_json(json, "m.json").rope_local_theta == 0.0);
  CHECK_FALSE(model_to_json(model_from_json(json, "m.json")).contains("rope_local_theta"));
  json["rope_local_theta"] = 0;  // 0: none, as absent
  CHECK(model_from_json(json, "m.json").rope_local_theta == 0.0);
  for (const double bad : {1.0, -10000.0, 1e13}) {
    CAPTURE(bad);
    json["rope_local_theta"] = bad;
    CHECK(model_error_for(json) ==
          fmt::format("m.json: rope_local_theta: must be 0 (none) or in (1, 1e+12], the sliding "
                      "layers' rotary base ({})",
                      bad));
  }
  json["rope_local_theta"] = "10000";
  CHECK(model_error_for(json) == "m.json: rope_local_theta: expected a number (\"10000\")");
  // Only where some layer slides: no window, or a list that slides none.
  json["rope_local_theta"] = 10000;
  json.erase("sliding_window");
  json.erase("window_attn_skip_freq");
  CHECK(model_error_for(json) ==
        "m.json: rope_local_theta: the sliding layers' rotary base, but no layer is sliding "
        "(sliding_window 0) (10000)");
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = {0, 0, 0, 0};
  CHECK(model_error_for(json) ==
        "m.json: rope_local_theta: the sliding layers' rotary base, but no layer is sliding "
        "(sliding_window 8) (10000)");
  json["window_attn_skip_freq"] = 3;
  json["positions"] = "learned";
  json["max_position_embeddings"] = 32;
  json.erase("rope_theta");
  CHECK(model_error_for(json) ==
        "m.json: rope_local_theta: a rotary base needs rotary positions, not positions learned "
        "(10000)");
  TransformerConfig nan_base = gemma3;
  nan_base.rope_local_theta = std::numeric_limits<double>::quiet_NaN();
  CHECK(input_error([&] { validate_model(nan_base, "m.json"); }) ==
        "m.json: rope_local_theta: must be 0 (none) or in (1, 1e+12], the sliding layers' rotary "
        "base (nan)");
}

TEST_CASE("gpt-oss's fields: quick_geglu, offset, clamp, sinks, router bias; optional, checked") {
  nlohmann::json json = tiny_json();
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.glu_linear_offset == 0.0);
  CHECK(plain.activation_clamp_value == 0.0);
  CHECK_FALSE(plain.attention_sinks);
  CHECK_FALSE(plain.router_bias);
  const nlohmann::json written = model_to_json(plain);
  for (const char* field :
       {"glu_linear_offset", "activation_clamp_value", "attention_sinks", "router_bias"}) {
    CAPTURE(field);
    CHECK_FALSE(written.contains(field));
  }
  nlohmann::json moe = model_to_json(load_model("tiny-moe"));
  moe["activation"] = "quick_geglu";
  moe["glu_linear_offset"] = 1.0;  // gpt-oss's (up + 1) and clamp 7
  moe["activation_clamp_value"] = 7.0;
  moe["attention_sinks"] = true;
  moe["router_bias"] = true;
  const TransformerConfig oss = model_from_json(moe, "m.json");
  CHECK(oss.activation == Activation::kQuickGeglu);
  CHECK(meshplan::models::is_gated(oss.activation));
  CHECK(oss.glu_linear_offset == 1.0);
  CHECK(oss.activation_clamp_value == 7.0);
  CHECK(oss.attention_sinks);
  CHECK(oss.router_bias);
  CHECK(model_from_json(model_to_json(oss), "round-trip") == oss);
  // Parameters: + a sinks per layer, + E router biases per MoE layer (tiny-moe's first layer is
  // dense), nothing else.
  const TransformerConfig base = load_model("tiny-moe");
  CHECK(count_parameters(oss).total - count_parameters(base).total ==
        base.num_layers * base.num_attention_heads + base.num_moe_layers() * base.num_experts);
  // Errors name the field.
  json["glu_linear_offset"] = 1.0;
  json["activation"] = "gelu";
  CHECK(model_error_for(json) ==
        "m.json: glu_linear_offset: needs a gated activation (swiglu, geglu, quick_geglu), not "
        "gelu (1)");
  json.erase("glu_linear_offset");
  json["activation_clamp_value"] = 7.0;
  CHECK(model_error_for(json) ==
        "m.json: activation_clamp_value: needs a gated activation (swiglu, geglu, quick_geglu), "
        "not gelu (7)");
  json["activation"] = "swiglu";
  json["activation_clamp_value"] = -7.0;
  CHECK(model_error_for(json) ==
        "m.json: activation_clamp_value: must be 0 (none) or positive and finite (-7)");
  json["activation_clamp_value"] = 7.0;
  json["glu_linear_offset"] = 1e4;
  CHECK(model_error_for(json) ==
        "m.json: glu_linear_offset: must be finite, within +-1000 (10000)");
  json.erase("glu_linear_offset");
  json["router_bias"] = true;  // tiny is dense
  CHECK(model_error_for(json) ==
        "m.json: router_bias: must be 0 when num_experts is 0 (a dense model) (1)");
  json.erase("router_bias");
  json["attention_sinks"] = 1;
  CHECK(model_error_for(json) == "m.json: attention_sinks: expected true or false (1)");
  TransformerConfig nan_offset = plain;
  nan_offset.glu_linear_offset = std::numeric_limits<double>::quiet_NaN();
  CHECK(input_error([&] { validate_model(nan_offset, "m.json"); }) ==
        "m.json: glu_linear_offset: must be finite, within +-1000 (nan)");
  TransformerConfig mla_sinks = load_model("tiny-mla");
  mla_sinks.attention_sinks = true;
  CHECK(input_error([&] { validate_model(mla_sinks, "m.json"); }) ==
        fmt::format("m.json: kv_lora_rank: MLA with attention biases, qk_norm or "
                    "attention_sinks is not modelled ({})",
                    mla_sinks.kv_lora_rank));
}

TEST_CASE("sliding_window: optional (absent = full attention), written only when set") {
  nlohmann::json json = tiny_json();
  CHECK(model_from_json(json, "m.json").sliding_window == 0);
  CHECK_FALSE(model_to_json(model_from_json(json, "m.json")).contains("sliding_window"));
  json["sliding_window"] = 8;  // shorter than seq_length 32: windowed
  const TransformerConfig windowed = model_from_json(json, "m.json");
  CHECK(windowed.sliding_window == 8);
  CHECK(windowed.is_windowed());
  check_same(model_from_json(model_to_json(windowed), "round-trip"), windowed);
  json["sliding_window"] = 32;  // covers the sequence: full causal attention
  CHECK_FALSE(model_from_json(json, "m.json").is_windowed());
  json["sliding_window"] = -1;
  CHECK(model_error_for(json) ==
        "m.json: sliding_window: must be 0 (full attention) or a window in [1, 100000000] "
        "tokens (-1)");
  json["sliding_window"] = 4.5;
  CHECK(model_error_for(json).find("m.json: sliding_window: ") == 0);
  json["sliding_window"] = "4096";
  CHECK(model_error_for(json).find("m.json: sliding_window: ") == 0);
}

// The 0-based layers of `model` that attend over its window.
std::vector<int64_t> windowed_layers(const TransformerConfig& model) {
  std::vector<int64_t> layers;
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    if (model.is_windowed_layer(layer)) {
      layers.push_back(layer);
    }
  }
  return layers;
}

TEST_CASE("window_attn_skip_freq: Megatron's N or a per-layer list, written as given") {
  nlohmann::json json = tiny_json();  // 4 layers, seq 32
  json["sliding_window"] = 8;
  CHECK(windowed_layers(model_from_json(json, "m.json")) == std::vector<int64_t>{0, 1, 2, 3});
  // Megatron-Core is_layer_window_attention: layer number n = layer + 1 windowed iff n % N != 0.
  // N 2: numbers 1, 3 windowed, 2, 4 full (Gemma 2's alternation).
  json["window_attn_skip_freq"] = 2;
  const TransformerConfig every_other = model_from_json(json, "m.json");
  CHECK(every_other.window_attn_skip_freq == 2);
  CHECK(every_other.is_windowed());
  CHECK(windowed_layers(every_other) == std::vector<int64_t>{0, 2});
  CHECK(model_to_json(every_other).at("window_attn_skip_freq") == 2);  // an int stays an int
  check_same(model_from_json(model_to_json(every_other), "round-trip"), every_other);
  // N 3: number 3 full, 1, 2 and 4 windowed.
  json["window_attn_skip_freq"] = 3;
  CHECK(windowed_layers(model_from_json(json, "m.json")) == std::vector<int64_t>{0, 1, 3});
  // N 5 > 4 layers: no number is a multiple, every layer windowed; kept as written.
  json["window_attn_skip_freq"] = 5;
  CHECK(windowed_layers(model_from_json(json, "m.json")) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(model_from_json(json, "m.json").window_attn_skip_freq == 5);
  // The list: entry n - 1 for layer number n, 1 windowed.
  json["window_attn_skip_freq"] = {1, 0, 0, 1};
  const TransformerConfig listed = model_from_json(json, "m.json");
  CHECK(listed.window_attn_layers == std::vector<int>{1, 0, 0, 1});
  CHECK(listed.window_attn_skip_freq == 0);
  CHECK(windowed_layers(listed) == std::vector<int64_t>{0, 3});
  CHECK(model_to_json(listed).at("window_attn_skip_freq") == nlohmann::json({1, 0, 0, 1}));
  check_same(model_from_json(model_to_json(listed), "round-trip"), listed);
  // A window covering the sequence is full attention on every layer, whatever the pattern.
  json["sliding_window"] = 32;
  CHECK_FALSE(model_from_json(json, "m.json").is_windowed());
  CHECK(windowed_layers(model_from_json(json, "m.json")).empty());
}

TEST_CASE("window_attn_skip_freq: a list of all 1 is no list, one of all 0 full attention") {
  nlohmann::json json = tiny_json();
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = {1, 1, 1, 1};
  const TransformerConfig all = model_from_json(json, "m.json");
  CHECK(all.window_attn_layers.empty());
  CHECK(all.sliding_window == 8);
  CHECK_FALSE(model_to_json(all).contains("window_attn_skip_freq"));
  json["window_attn_skip_freq"] = {0, 0, 0, 0};
  const TransformerConfig none = model_from_json(json, "m.json");
  CHECK(none.window_attn_layers.empty());
  CHECK(none.sliding_window == 0);
  CHECK_FALSE(none.is_windowed());
  CHECK_FALSE(model_to_json(none).contains("sliding_window"));
  CHECK_FALSE(model_to_json(none).contains("window_attn_skip_freq"));
  // Built in code, unnormalised: a list without a 1 windows nothing either.
  TransformerConfig unnormalised = all;
  unnormalised.window_attn_layers = {0, 0, 0, 0};
  CHECK_FALSE(unnormalised.is_windowed());
  CHECK(windowed_layers(unnormalised).empty());
}

TEST_CASE("window_attn_skip_freq: each error names the field and the value") {
  nlohmann::json json = tiny_json();
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = 1;  // Megatron: every number % 1 == 0, no layer windowed
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: must be 2 or more, one full-attention layer every N (1)");
  json["window_attn_skip_freq"] = 0;
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: must be 2 or more, one full-attention layer every N (0)");
  json["window_attn_skip_freq"] = -2;
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: must be 2 or more, one full-attention layer every N (-2)");
  json["window_attn_skip_freq"] = 2.5;
  CHECK(model_error_for(json) == "m.json: window_attn_skip_freq: expected an integer (2.5)");
  // Megatron's command line takes a Python list expression; the model file takes the list.
  json["window_attn_skip_freq"] = "[1,0]*2";
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: expected an integer N >= 2 or a list of 0 and 1, one per "
        "layer (\"[1,0]*2\")");
  json["window_attn_skip_freq"] = true;
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: expected an integer N >= 2 or a list of 0 and 1, one per "
        "layer (true)");
  json["window_attn_skip_freq"] = {1, 0, 1};
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: expected one entry per layer, 4 (3 entries: [1,0,1])");
  json["window_attn_skip_freq"] = {1, 2, 1, 0};
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq[1]: must be 1 (windowed) or 0 (full attention) (2)");
  json["window_attn_skip_freq"] = {1, 0, true, 0};
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq[2]: must be 1 (windowed) or 0 (full attention) (true)");
  json["window_attn_skip_freq"] = 2;
  json.erase("sliding_window");
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: chooses windowed layers, but sliding_window is 0 (full "
        "attention) (2)");
  json["window_attn_skip_freq"] = {1, 0, 1, 0};
  CHECK(model_error_for(json) ==
        "m.json: window_attn_skip_freq: chooses windowed layers, but sliding_window is 0 (full "
        "attention) ([1,0,1,0])");
  // Built in code: the two forms at once.
  TransformerConfig both = load_model("tiny");
  both.sliding_window = 8;
  both.window_attn_skip_freq = 2;
  both.window_attn_layers = {1, 0, 1, 0};
  CHECK(input_error([&] { validate_model(both, "m.json"); }) ==
        "m.json: window_attn_skip_freq: an integer or a list, not both (2)");
}

TEST_CASE("load_model reads a meshplan model file by path") {
  nlohmann::json json = tiny_json();
  json["name"] = "my-tiny";
  const std::string path = write_temp_file("my-tiny.json", json.dump());
  const TransformerConfig model = load_model(path);
  CHECK(model.name == "my-tiny");
  CHECK(count_parameters(model).total == 217'664);  // same as the tiny preset (see parameter_count)
}

TEST_CASE("unknown preset names the presets") {
  const std::string expected =
      fmt::format("unknown model preset 'gpt5' (not a file either); presets: {}",
                  fmt::join(kExpectedPresets, ", "));
  CHECK(input_error([] { load_model("gpt5"); }) == expected);
}

TEST_CASE("malformed JSON file") {
  const std::string path = write_temp_file("broken.json", "{\"name\": \"x\",\n");
  const std::string message = input_error([&] { load_model(path); });
  // nlohmann's parser: the input ends on line 2, column 1, where a key was expected.
  CHECK(message.rfind(path + ": malformed JSON: parse error at line 2, column 1: ", 0) == 0);
  CHECK(message.find("unexpected end of input") != std::string::npos);
}

TEST_CASE("a directory given as a model file is not read as an empty file") {
  const std::string dir =
      std::filesystem::path(write_temp_file("beside.json", "{}")).parent_path().string();
  CHECK(input_error([&] { load_model(dir); }) == dir + ": cannot read file (a directory)");
}

TEST_CASE("missing fields, wrong types, unknown fields and values") {
  nlohmann::json json = tiny_json();
  json.erase("hidden_size");
  CHECK(model_error_for(json) == "m.json: hidden_size: missing");

  json = tiny_json();
  json.erase("num_kv_heads");  // required in meshplan's format (no silent MHA default)
  CHECK(model_error_for(json) == "m.json: num_kv_heads: missing");

  json = tiny_json();
  json["hidden_size"] = "64";
  CHECK(model_error_for(json) == "m.json: hidden_size: expected an integer (\"64\")");

  json = tiny_json();
  json["num_layers"] = 4.5;
  CHECK(model_error_for(json) == "m.json: num_layers: expected an integer (4.5)");

  json = tiny_json();
  json["tied_embeddings"] = 1;
  CHECK(model_error_for(json) == "m.json: tied_embeddings: expected true or false (1)");

  json = tiny_json();
  json["activation"] = "relu";
  CHECK(model_error_for(json) ==
        "m.json: activation: unsupported activation (relu); supported: gelu, "
        "swiglu, geglu, quick_geglu");

  json = tiny_json();
  json["activation"] = "geglu";  // Shazeer 2020's GEGLU, Gemma's MLP
  CHECK(model_from_json(json, "m.json").activation == Activation::kGeglu);

  json = tiny_json();
  json["norm"] = "batchnorm";
  CHECK(model_error_for(json) ==
        "m.json: norm: unsupported norm (batchnorm); supported: layernorm, rmsnorm");

  json = tiny_json();
  json["positions"] = "sinusoidal";
  CHECK(model_error_for(json) ==
        "m.json: positions: unsupported positions (sinusoidal); supported: learned, rope, alibi");

  json = tiny_json();
  json["num_layer"] = 4;  // typo of num_layers: rejected, not ignored
  CHECK(model_error_for(json) == "m.json: num_layer: unknown field (4)");

  json = tiny_json();
  json["source"] = 3;
  CHECK(model_error_for(json) == "m.json: source: expected a string (3)");

  CHECK(input_error([] { model_from_json(nlohmann::json::array(), "m.json"); }) ==
        "m.json: expected a JSON object ([])");
}

TEST_CASE("zero, negative, absurd and inconsistent sizes") {
  const auto with = [](const char* field, nlohmann::json value) {
    nlohmann::json json = tiny_json();
    json["head_dim"] = 16;  // keeps h / a out of the way for hidden_size and heads
    json[field] = value;
    return model_error_for(json);
  };
  CHECK(with("num_layers", 0) == "m.json: num_layers: must be positive (0)");
  CHECK(with("vocab_size", -1) == "m.json: vocab_size: must be positive (-1)");
  CHECK(with("ffn_hidden_size", 0) == "m.json: ffn_hidden_size: must be positive (0)");
  CHECK(with("head_dim", 0) == "m.json: head_dim: must be positive (0)");
  CHECK(with("num_layers", 200000) ==
        "m.json: num_layers: absurdly large, more than 2048 (200000)");
  CHECK(with("hidden_size", 2000000) ==
        "m.json: hidden_size: absurdly large, more than 1000000 (2000000)");
  CHECK(with("vocab_size", 200000000) ==
        "m.json: vocab_size: absurdly large, more than 100000000 (200000000)");
  CHECK(with("seq_length", 200000000) ==
        "m.json: seq_length: absurdly large, more than 100000000 (200000000)");
  CHECK(with("num_kv_heads", 3) ==
        "m.json: num_kv_heads: does not divide num_attention_heads "
        "(4 % 3)");

  // Beyond int64 (nlohmann keeps it unsigned; it must not wrap to -1) and beyond any integer.
  CHECK(with("hidden_size", std::numeric_limits<uint64_t>::max()) ==
        "m.json: hidden_size: out of range, more than 2^63 - 1 (18446744073709551615)");
  CHECK(with("vocab_size", 1e30) == "m.json: vocab_size: expected an integer (1e+30)");
  // Products of bounded sizes: l * 12 h^2 for l = 2,048, h = 1e6 is 2.5e16, in 64 bits (the
  // other bounds keep every term below 2^63 even at 1e5 layers).
  nlohmann::json largest = tiny_json();
  largest["num_layers"] = 2'048;
  largest["hidden_size"] = 1'000'000;
  largest["num_attention_heads"] = 1'000;
  largest["num_kv_heads"] = 1'000;
  largest["ffn_hidden_size"] = 4'000'000;
  largest["vocab_size"] = 100'000'000;
  // Per layer Q, K, V, O 4 h^2 (g = a, d = h / a), SwiGLU 3 h f, two RMSNorms 2 h; untied
  // embedding and head 2 V h; final norm h: 2,048 * (4e12 + 1.2e13 + 2e6) + 2e14 + 1e6.
  CHECK(count_parameters(model_from_json(largest, "m.json")).total == 32'968'004'097'000'000);

  nlohmann::json wide = tiny_json();
  wide["num_attention_heads"] = 16;
  wide["head_dim"] = 100000;  // each within its bound, but a d = 1.6e6 > 1e6
  CHECK(model_error_for(wide) ==
        "m.json: head_dim: num_attention_heads * head_dim absurdly large, more than 1000000 "
        "(16 * 100000)");

  nlohmann::json indivisible = tiny_json();
  indivisible["num_attention_heads"] = 3;  // 64 % 3 = 1 and no head_dim
  indivisible["num_kv_heads"] = 3;
  CHECK(model_error_for(indivisible) ==
        "m.json: num_attention_heads: does not divide hidden_size and no head_dim is given "
        "(64 % 3)");

  nlohmann::json learned = tiny_json();
  learned["positions"] = "learned";
  learned["max_position_embeddings"] = 16;  // table of 16 rows, sequence of 32
  CHECK(model_error_for(learned) ==
        "m.json: seq_length: longer than the learned position table, max_position_embeddings "
        "(32 > 16)");

  nlohmann::json unnamed = tiny_json();
  unnamed["name"] = "";
  CHECK(model_error_for(unnamed) == "m.json: name: must not be empty (\"\")");

  TransformerConfig model = load_model("tiny");
  model.num_kv_heads = -2;
  CHECK(input_error([&] { validate_model(model, "tiny"); }) ==
        "tiny: num_kv_heads: must be positive (-2)");
}

TEST_CASE("to_string of the enums matches the JSON vocabulary") {
  using meshplan::models::to_string;
  CHECK(to_string(Activation::kGelu) == "gelu");
  CHECK(to_string(Activation::kSwiglu) == "swiglu");
  CHECK(to_string(Activation::kGeglu) == "geglu");
  CHECK(to_string(Activation::kQuickGeglu) == "quick_geglu");
  CHECK(to_string(Norm::kLayerNorm) == "layernorm");
  CHECK(to_string(Norm::kRmsNorm) == "rmsnorm");
  CHECK(to_string(Positions::kLearned) == "learned");
  CHECK(to_string(Positions::kRope) == "rope");
  CHECK(to_string(Positions::kAlibi) == "alibi");
}
