// Rotary frequency scaling (models.h RopeScaling): the inverse frequencies against their closed
// forms, the model format's keys, and the Hugging Face loader's reading of rope_scaling and
// rope_parameters.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <numbers>
#include <string>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::model_from_json;
using meshplan::models::model_to_json;
using meshplan::models::rope_inverse_frequency;
using meshplan::models::RopeScaling;
using meshplan::models::RopeScalingType;
using meshplan::models::TransformerConfig;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;
using meshplan::models::test::model_error_for;
using meshplan::models::test::tiny_json;

namespace {

// Llama 3.1's published scaling (config.json of meta-llama/Llama-3.1-8B: rope_type llama3,
// factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192).
constexpr RopeScaling kLlama31{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};

}  // namespace

TEST_CASE("rope_inverse_frequency: RoFormer's base^(-2i/d), divided or banded as scaled") {
  // Unscaled: Su et al. 2021, Eq. 15, exactly the pow the executor always took.
  for (int64_t pair : {0, 1, 17, 63}) {
    CAPTURE(pair);
    CHECK(rope_inverse_frequency(500000.0, pair, 128, {}) ==
          std::pow(500000.0, -2.0 * static_cast<double>(pair) / 128.0));
    // Linear (Chen et al. 2023, Eq. 4): every frequency over the factor.
    const RopeScaling linear{RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
    CHECK(rope_inverse_frequency(1e6, pair, 128, linear) ==
          doctest::Approx(std::pow(1e6, -2.0 * static_cast<double>(pair) / 128.0) / 8.0)
              .epsilon(1e-15)
              .scale(0));
  }
  // Llama 3.1 at base 500000 over 128 channels: pair i turns with 500000^(-i/64), wavelength
  // 2 pi 500000^(i/64). Below 8192 / 4 = 2048 tokens (i <= 28: 2 pi 500000^(28/64) = 1956.5)
  // unchanged; above 8192 (i >= 35: 2 pi 500000^(35/64) = 8218.7) over 8; between, blended.
  CHECK(rope_inverse_frequency(500000.0, 0, 128, kLlama31) == 1.0);
  CHECK(rope_inverse_frequency(500000.0, 28, 128, kLlama31) == std::pow(500000.0, -28.0 / 64.0));
  CHECK(rope_inverse_frequency(500000.0, 35, 128, kLlama31) ==
        doctest::Approx(std::pow(500000.0, -35.0 / 64.0) / 8.0).epsilon(1e-15).scale(0));
  CHECK(rope_inverse_frequency(500000.0, 63, 128, kLlama31) ==
        doctest::Approx(std::pow(500000.0, -63.0 / 64.0) / 8.0).epsilon(1e-15).scale(0));
  // Pair 30: wavelength 2 pi 500000^(30/64) = 2948.30 tokens, s = (8192 / 2948.30 - 1) / 3 =
  // 0.592849, so the frequency keeps (1 - s) / 8 + s = 0.643743 of itself.
  const double f30 = std::pow(500000.0, -30.0 / 64.0);
  const double wavelength30 = 2.0 * std::numbers::pi / f30;
  CHECK(wavelength30 == doctest::Approx(2948.30).epsilon(1e-5).scale(0));
  const double kept30 = rope_inverse_frequency(500000.0, 30, 128, kLlama31) / f30;
  CHECK(kept30 == doctest::Approx(0.643743).epsilon(1e-5).scale(0));
  // Continuous at both band edges: s = 1 at wavelength 2048 keeps f, s = 0 at 8192 gives f / 8.
  const RopeScaling edges{RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  const double at_high_edge = 2.0 * std::numbers::pi / (2048.0 * (1.0 + 1e-12));
  const double at_low_edge = 2.0 * std::numbers::pi / (8192.0 * (1.0 - 1e-12));
  // base^(-2i/R) = f for R = 2, i = 1: base = 1 / f (a single pair of a two-channel head).
  CHECK(rope_inverse_frequency(1.0 / at_high_edge, 1, 2, edges) ==
        doctest::Approx(at_high_edge).epsilon(1e-9).scale(0));
  CHECK(rope_inverse_frequency(1.0 / at_low_edge, 1, 2, edges) ==
        doctest::Approx(at_low_edge / 8.0).epsilon(1e-9).scale(0));
}

TEST_CASE("rope_scaling in the model format: optional, round-tripped, checked") {
  nlohmann::json json = tiny_json();
  const TransformerConfig plain = model_from_json(json, "m.json");
  CHECK(plain.rope_scaling == RopeScaling{});
  CHECK_FALSE(plain.has_rope_scaling());
  CHECK_FALSE(model_to_json(plain).contains("rope_scaling"));
  json["rope_scaling"] = "none";  // as absent
  CHECK(model_from_json(json, "m.json") == plain);

  json["rope_scaling"] = "llama3";
  json["rope_scaling_factor"] = 8;
  const TransformerConfig llama31 = model_from_json(json, "m.json");
  CHECK(llama31.rope_scaling == kLlama31);  // the bands default to Llama 3.1's
  const nlohmann::json written = model_to_json(llama31);
  CHECK(written["rope_scaling"] == "llama3");
  CHECK(written["rope_scaling_factor"] == 8.0);
  CHECK(written["rope_scaling_low_freq_factor"] == 1.0);
  CHECK(written["rope_scaling_high_freq_factor"] == 4.0);
  CHECK(written["rope_scaling_original_max_positions"] == 8192);
  CHECK(model_from_json(written, "round-trip") == llama31);
  json["rope_scaling_low_freq_factor"] = 2;
  json["rope_scaling_high_freq_factor"] = 16;
  json["rope_scaling_original_max_positions"] = 4096;
  const TransformerConfig banded = model_from_json(json, "m.json");
  CHECK(banded.rope_scaling == RopeScaling{RopeScalingType::kLlama3, 8.0, 2.0, 16.0, 4096});
  CHECK(model_from_json(model_to_json(banded), "round-trip") == banded);
  for (int64_t layer = 0; layer < 4; ++layer) {
    CHECK(banded.layer_rope_scaling(layer) == banded.rope_scaling);
  }

  nlohmann::json linear = tiny_json();
  linear["rope_scaling"] = "linear";
  linear["rope_scaling_factor"] = 8;
  const TransformerConfig interpolated = model_from_json(linear, "m.json");
  CHECK(interpolated.rope_scaling.type == RopeScalingType::kLinear);
  CHECK(interpolated.rope_scaling.factor == 8.0);
  CHECK_FALSE(model_to_json(interpolated).contains("rope_scaling_low_freq_factor"));
  CHECK(model_from_json(model_to_json(interpolated), "round-trip") == interpolated);
}

TEST_CASE("rope_scaling: Gemma 3 scales its global layers; the sliding ones keep their base") {
  nlohmann::json json = tiny_json();
  json["sliding_window"] = 8;
  json["window_attn_skip_freq"] = 3;  // layers 0, 1 and 3 slide, layer 2 is global
  json["rope_theta"] = 1e6;
  json["rope_local_theta"] = 10000;
  json["rope_scaling"] = "linear";
  json["rope_scaling_factor"] = 8;
  const TransformerConfig gemma3 = model_from_json(json, "m.json");
  const RopeScaling linear8{RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
  CHECK(gemma3.layer_rope_scaling(0) == RopeScaling{});
  CHECK(gemma3.layer_rope_scaling(1) == RopeScaling{});
  CHECK(gemma3.layer_rope_scaling(2) == linear8);
  CHECK(gemma3.layer_rope_scaling(3) == RopeScaling{});
  // Without a local base every layer turns by rope_theta, scaled.
  json.erase("rope_local_theta");
  const TransformerConfig one_base = model_from_json(json, "m.json");
  CHECK(one_base.layer_rope_scaling(0) == linear8);
}

TEST_CASE("rope_scaling: bad values are refused by key") {
  nlohmann::json json = tiny_json();
  json["rope_scaling"] = "dynamic";
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling: unsupported rope_scaling (dynamic); supported: none, linear, "
        "llama3, yarn (the dynamic types are not carried)");
  json["rope_scaling"] = 8;
  CHECK(model_error_for(json) == "m.json: rope_scaling: expected a string (8)");
  json["rope_scaling"] = "llama3";
  CHECK(model_error_for(json) == "m.json: rope_scaling_factor: required with rope_scaling llama3");
  for (const double bad : {1.0, 0.5, -8.0, 1001.0}) {
    CAPTURE(bad);
    json["rope_scaling_factor"] = bad;
    CHECK(model_error_for(json) ==
          fmt::format("m.json: rope_scaling_factor: must be in (1, 1000], how many times the "
                      "original context the scaled frequencies cover ({})",
                      bad));
  }
  json["rope_scaling_factor"] = "8";
  CHECK(model_error_for(json) == "m.json: rope_scaling_factor: expected a number (\"8\")");
  json["rope_scaling_factor"] = 8;
  json["rope_scaling_high_freq_factor"] = 1;
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_high_freq_factor: must be above rope_scaling_low_freq_factor 1 and "
        "at most 1000 (1)");
  json["rope_scaling_high_freq_factor"] = 4;
  json["rope_scaling_low_freq_factor"] = 0;
  CHECK(model_error_for(json) == "m.json: rope_scaling_low_freq_factor: must be in (0, 1000] (0)");
  json["rope_scaling_low_freq_factor"] = 1;
  json["rope_scaling_original_max_positions"] = 0;
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_original_max_positions: must be in [1, 100000000], the context the "
        "model was pre-trained on (0)");
  json["rope_scaling_original_max_positions"] = 8192.5;
  CHECK(model_error_for(json).find("m.json: rope_scaling_original_max_positions: ") == 0);
  // Keys a type does not read are refused, not ignored.
  json["rope_scaling_original_max_positions"] = 8192;
  json["rope_scaling"] = "linear";
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_low_freq_factor: a llama3 frequency band; rope_scaling linear "
        "does not read it (1)");
  for (const bool none_stated : {false, true}) {
    CAPTURE(none_stated);
    nlohmann::json without_type = tiny_json();
    without_type["rope_scaling_factor"] = 8;
    if (none_stated) {
      without_type["rope_scaling"] = "none";
    }
    CHECK(model_error_for(without_type) ==
          "m.json: rope_scaling_factor: given without rope_scaling (linear, llama3 or yarn), so "
          "it would scale nothing (8)");
  }
  // Rotary positions only.
  nlohmann::json learned = tiny_json();
  learned["positions"] = "learned";
  learned["max_position_embeddings"] = 32;
  learned["rope_scaling"] = "linear";
  learned["rope_scaling_factor"] = 2;
  CHECK(model_error_for(learned) ==
        "m.json: rope_scaling: scales rotary frequencies, but the model has positions learned "
        "(linear)");
  TransformerConfig nan_factor = model_from_json(tiny_json(), "m.json");
  nan_factor.rope_scaling = {RopeScalingType::kLinear, std::nan(""), 1.0, 4.0, 8192};
  CHECK(input_error([&] { validate_model(nan_factor, "m.json"); }) ==
        "m.json: rope_scaling_factor: must be in (1, 1000], how many times the original context "
        "the scaled frequencies cover (nan)");
}

TEST_CASE("Hugging Face: Llama 3.1's and Llama 4's rope_scaling, transformers 4 and 5 forms") {
  // Llama-4-Scout's config.json states Llama 3.1's bands (rope_type llama3, factor 8).
  const TransformerConfig scout = model_from_json(
      meshplan::read_json_file(hf_fixture("Llama-4-Scout-17B-16E-text.json")), "scout.json");
  CHECK(scout.rope_scaling == kLlama31);
  // Meta-Llama-3-8B: "rope_scaling": null.
  CHECK_FALSE(
      model_from_json(meshplan::read_json_file(hf_fixture("Meta-Llama-3-8B.json")), "l3.json")
          .has_rope_scaling());
  // Llama-3.1-8B's config is Meta-Llama-3-8B's with this rope_scaling (transformers 4.x).
  nlohmann::json llama31 = meshplan::read_json_file(hf_fixture("Meta-Llama-3-8B.json"));
  llama31["rope_scaling"] = {{"factor", 8.0},
                             {"low_freq_factor", 1.0},
                             {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192},
                             {"rope_type", "llama3"}};
  CHECK(model_from_json(llama31, "l31.json").rope_scaling == kLlama31);
  // Llama 3.2 1B and 3B: factor 32.
  llama31["rope_scaling"]["factor"] = 32.0;
  CHECK(model_from_json(llama31, "l32.json").rope_scaling.factor == 32.0);
  // transformers 5 moves it with rope_theta into rope_parameters.
  nlohmann::json v5 = llama31;
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["factor"] = 8.0;
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  const TransformerConfig from_v5 = model_from_json(v5, "v5.json");
  CHECK(from_v5.rope_scaling == kLlama31);
  CHECK(from_v5.rope_theta == 500000.0);
  // rope_type "default" is none; the older "type" key names the type too.
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  CHECK_FALSE(model_from_json(v5, "v5.json").has_rope_scaling());
  nlohmann::json old_key = llama31;
  old_key["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  CHECK(model_from_json(old_key, "old.json").rope_scaling ==
        RopeScaling{RopeScalingType::kLinear, 4.0, 1.0, 4.0, 8192});
}

TEST_CASE("Hugging Face: types meshplan does not carry read as none; bad values named by key") {
  nlohmann::json config = meshplan::read_json_file(hf_fixture("Meta-Llama-3-8B.json"));
  config["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  CHECK_FALSE(model_from_json(config, "c.json").has_rope_scaling());
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", "8"}};
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling: factor: expected a number (\"8\")");
  config["rope_scaling"] = {{"rope_type", "linear"}};
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling: factor: missing");
  config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 0.5}};
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling.factor: must be in (1, 1000], how many times the original context "
        "the scaled frequencies cover (0.5)");
  config["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", 8.0},
                            {"low_freq_factor", 1.0},
                            {"high_freq_factor", 1.0},
                            {"original_max_position_embeddings", 8192}};
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling.high_freq_factor: must be above rope_scaling_low_freq_factor 1 and "
        "at most 1000 (1)");
  config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling: low_freq_factor: missing");
  config["rope_scaling"] = "llama3";
  CHECK(input_error([&] { model_from_json(config, "c.json"); }) ==
        "c.json: rope_scaling: must be an object (\"llama3\")");
}

TEST_CASE("Hugging Face: Gemma 3 4B's linear factor 8 on its global layers only") {
  // gemma-3-4b-pt's text_config states "rope_scaling": {"factor": 8.0, "rope_type": "linear"}
  // beside rope_local_base_freq 10000 and rope_theta 1e6 (transformers 4.50).
  nlohmann::json gemma3 = meshplan::read_json_file(hf_fixture("gemma-3-1b-pt.json"));
  gemma3["rope_scaling"] = {{"factor", 8.0}, {"rope_type", "linear"}};
  const TransformerConfig model = model_from_json(gemma3, "g.json");
  const RopeScaling linear8{RopeScalingType::kLinear, 8.0, 1.0, 4.0, 8192};
  CHECK(model.rope_scaling == linear8);
  CHECK(model.layer_rope_scaling(0) == RopeScaling{});  // sliding: local base, unscaled
  CHECK(model.layer_rope_scaling(5) == linear8);        // (5 + 1) % 6 == 0: global
  // One base for both layer types: the scaled global layers would be indistinguishable.
  nlohmann::json one_base = gemma3;
  one_base["rope_local_base_freq"] = 1e6;
  CHECK(input_error([&] { model_from_json(one_base, "g.json"); }) ==
        "g.json: rope_local_base_freq: equals rope_theta, so meshplan cannot tell the unscaled "
        "sliding layers from the scaled global ones (1e+06)");
  // transformers 5 nests it by layer type.
  nlohmann::json v5 = gemma3;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  v5.erase("rope_local_base_freq");
  v5["rope_parameters"] = {
      {"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1e6}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  const TransformerConfig nested = model_from_json(v5, "g5.json");
  CHECK(nested.rope_scaling == linear8);
  CHECK(nested.rope_local_theta == 10000.0);
  v5["rope_parameters"]["full_attention"]["factor"] = 0.5;
  CHECK(input_error([&] { model_from_json(v5, "g5.json"); }) ==
        "g5.json: rope_parameters.full_attention.factor: must be in (1, 1000], how many times the "
        "original context the scaled frequencies cover (0.5)");
  v5["rope_parameters"]["full_attention"]["factor"] = 8.0;
  v5["rope_parameters"]["sliding_attention"]["rope_type"] = "linear";
  v5["rope_parameters"]["sliding_attention"]["factor"] = 8.0;
  CHECK(input_error([&] { model_from_json(v5, "g5.json"); }) ==
        "g5.json: rope_parameters.sliding_attention: rope_type: meshplan scales the layers that "
        "turn by rope_theta, not the sliding ones (linear)");
}
