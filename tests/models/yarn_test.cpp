// YaRN rotary scaling (models.h RopeScalingType::kYarn): the inverse frequencies against the
// correction range worked by hand, the cos/sin amplitude and MLA's softmax scale, the model
// format's keys, and the Hugging Face loader's reading of DeepSeek-V3's and gpt-oss's configs.

#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::model_from_json;
using meshplan::models::model_to_json;
using meshplan::models::rope_attention_factor;
using meshplan::models::rope_inverse_frequency;
using meshplan::models::RopeScaling;
using meshplan::models::RopeScalingType;
using meshplan::models::TransformerConfig;
using meshplan::models::yarn_mscale;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;
using meshplan::models::test::model_error_for;
using meshplan::models::test::tiny_json;

namespace {

RopeScaling yarn(double factor, int64_t original, bool truncate, double mscale = 1.0,
                 double mscale_all_dim = 0.0) {
  RopeScaling scaling;
  scaling.type = RopeScalingType::kYarn;
  scaling.factor = factor;
  scaling.original_max_positions = original;
  scaling.truncate = truncate;
  scaling.mscale = mscale;
  scaling.mscale_all_dim = mscale_all_dim;
  return scaling;
}

double unscaled(double base, int64_t pair, int64_t channels) {
  return std::pow(base, -2.0 * static_cast<double>(pair) / static_cast<double>(channels));
}

}  // namespace

TEST_CASE("YaRN: kept below the correction range, divided above it, a linear ramp across") {
  // DeepSeek-V3's rotary part: 64 channels at base 10000, factor 40 over 4096 tokens. The pair
  // turning r times over 4096 tokens is 64 ln(4096 / (2 pi r)) / (2 ln 10000): 10.47 for
  // beta_fast 32, 22.51 for beta_slow 1; truncated to pairs 10 and 23.
  const RopeScaling deepseek = yarn(40.0, 4096, true, 1.0, 1.0);
  for (int64_t pair : {0, 5, 10}) {
    CAPTURE(pair);
    CHECK(rope_inverse_frequency(10000.0, pair, 64, deepseek) == unscaled(10000.0, pair, 64));
  }
  for (int64_t pair : {23, 31}) {
    CAPTURE(pair);
    CHECK(rope_inverse_frequency(10000.0, pair, 64, deepseek) ==
          doctest::Approx(unscaled(10000.0, pair, 64) / 40.0).epsilon(1e-15).scale(0));
  }
  // Pair 16 sits 6/13 of the way: 6/13 of f / 40 and 7/13 of f.
  CHECK(rope_inverse_frequency(10000.0, 16, 64, deepseek) ==
        doctest::Approx(unscaled(10000.0, 16, 64) * (6.0 / 13.0 / 40.0 + 7.0 / 13.0))
            .epsilon(1e-15)
            .scale(0));
  // gpt-oss: base 150000, factor 32 over 4096, truncate false: the range is 8.0928 to 17.3980
  // unrounded, so pair 8 is kept, pair 18 divided, and pair 12 ramps by
  // (12 - 8.0928) / (17.3980 - 8.0928) = 0.41990.
  const RopeScaling oss = yarn(32.0, 4096, false);
  CHECK(rope_inverse_frequency(150000.0, 8, 64, oss) == unscaled(150000.0, 8, 64));
  CHECK(rope_inverse_frequency(150000.0, 18, 64, oss) ==
        doctest::Approx(unscaled(150000.0, 18, 64) / 32.0).epsilon(1e-15).scale(0));
  const double ramp12 = (12.0 - 8.092779) / (17.398025 - 8.092779);
  CHECK(rope_inverse_frequency(150000.0, 12, 64, oss) ==
        doctest::Approx(unscaled(150000.0, 12, 64) * (ramp12 / 32.0 + 1.0 - ramp12))
            .epsilon(1e-6)
            .scale(0));
  // Truncated, the same range is pairs 8 to 18: pair 12 ramps by 4/10.
  CHECK(rope_inverse_frequency(150000.0, 12, 64, yarn(32.0, 4096, true)) ==
        doctest::Approx(unscaled(150000.0, 12, 64) * (0.4 / 32.0 + 0.6)).epsilon(1e-15).scale(0));
}

TEST_CASE("YaRN: the cos/sin amplitude and multi-head latent attention's softmax scale") {
  // Peng et al. 2023, Sec. 3.4: sqrt(1/t) = 0.1 ln(s) + 1.
  CHECK(yarn_mscale(32.0, 1.0) == doctest::Approx(1.3465736).epsilon(1e-7).scale(0));
  CHECK(yarn_mscale(1.0, 1.0) == 1.0);
  CHECK(yarn_mscale(40.0, 0.0) == 1.0);
  CHECK(rope_attention_factor(yarn(32.0, 4096, false)) == yarn_mscale(32.0, 1.0));
  // DeepSeek-V3's mscale and mscale_all_dim are both 1: no amplitude, the softmax carries it.
  CHECK(rope_attention_factor(yarn(40.0, 4096, true, 1.0, 1.0)) == 1.0);
  // DeepSeek-V2-Lite's 0.707 / 0.707 too; another pair gives their ratio.
  CHECK(rope_attention_factor(yarn(40.0, 4096, true, 0.707, 0.707)) == 1.0);
  CHECK(rope_attention_factor(yarn(40.0, 4096, true, 1.0, 0.5)) ==
        doctest::Approx((0.1 * std::log(40.0) + 1.0) / (0.05 * std::log(40.0) + 1.0))
            .epsilon(1e-15)
            .scale(0));
  RopeScaling linear;
  linear.type = RopeScalingType::kLinear;
  linear.factor = 8.0;
  CHECK(rope_attention_factor(linear) == 1.0);

  const TransformerConfig deepseek =
      model_from_json(meshplan::read_json_file(hf_fixture("DeepSeek-V3.json")), "ds.json");
  // (0.1 ln 40 + 1)^2 / sqrt(192) = 1.873854 / 13.856406.
  CHECK(deepseek.attention_scale() ==
        doctest::Approx(1.8738542 / std::sqrt(192.0)).epsilon(1e-7).scale(0));
  // A dense model under YaRN keeps 1 / sqrt(d): its amplitude is in cos and sin.
  const TransformerConfig oss =
      model_from_json(meshplan::read_json_file(hf_fixture("gpt-oss-120b.json")), "oss.json");
  CHECK(oss.attention_scale() == 1.0 / std::sqrt(64.0));
}

TEST_CASE("YaRN in the model format: the original context required, round-tripped, checked") {
  nlohmann::json json = tiny_json();
  json["rope_scaling"] = "yarn";
  json["rope_scaling_factor"] = 32;
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_original_max_positions: required with rope_scaling yarn");
  json["rope_scaling_original_max_positions"] = 4096;
  const TransformerConfig defaults = model_from_json(json, "m.json");
  CHECK(defaults.rope_scaling == yarn(32.0, 4096, true));  // beta 32 / 1, mscale 1 / 0
  const nlohmann::json written = model_to_json(defaults);
  CHECK(written["rope_scaling"] == "yarn");
  CHECK(written["rope_scaling_beta_fast"] == 32.0);
  CHECK(written["rope_scaling_beta_slow"] == 1.0);
  CHECK(written["rope_scaling_mscale"] == 1.0);
  CHECK(written["rope_scaling_mscale_all_dim"] == 0.0);
  CHECK(written["rope_scaling_truncate"] == true);
  CHECK(written["rope_scaling_original_max_positions"] == 4096);
  CHECK_FALSE(written.contains("rope_scaling_low_freq_factor"));
  CHECK(model_from_json(written, "round-trip") == defaults);
  json["rope_scaling_beta_fast"] = 16;
  json["rope_scaling_beta_slow"] = 2;
  json["rope_scaling_mscale"] = 0.707;
  json["rope_scaling_mscale_all_dim"] = 0.707;
  json["rope_scaling_truncate"] = false;
  const TransformerConfig stated = model_from_json(json, "m.json");
  RopeScaling expected = yarn(32.0, 4096, false, 0.707, 0.707);
  expected.beta_fast = 16.0;
  expected.beta_slow = 2.0;
  CHECK(stated.rope_scaling == expected);
  CHECK(model_from_json(model_to_json(stated), "round-trip") == stated);

  // Ranges and keys a type does not read, by key.
  json["rope_scaling_beta_fast"] = 2;
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_beta_fast: must be above rope_scaling_beta_slow 2 and at most 1000 "
        "(2)");
  json["rope_scaling_beta_fast"] = 32;
  json["rope_scaling_beta_slow"] = 0;
  CHECK(model_error_for(json) == "m.json: rope_scaling_beta_slow: must be in (0, 1000] (0)");
  json["rope_scaling_beta_slow"] = 1;
  json["rope_scaling_mscale"] = -1;
  CHECK(model_error_for(json) == "m.json: rope_scaling_mscale: must be in [0, 1000] (-1)");
  json["rope_scaling_mscale"] = 1;
  json["rope_scaling_truncate"] = 1;
  CHECK(model_error_for(json) == "m.json: rope_scaling_truncate: expected true or false (1)");
  json["rope_scaling_truncate"] = true;
  json["rope_scaling_low_freq_factor"] = 1;
  CHECK(model_error_for(json) ==
        "m.json: rope_scaling_low_freq_factor: a llama3 frequency band; rope_scaling yarn does "
        "not read it (1)");
  nlohmann::json llama3 = tiny_json();
  llama3["rope_scaling"] = "llama3";
  llama3["rope_scaling_factor"] = 8;
  llama3["rope_scaling_beta_fast"] = 32;
  CHECK(model_error_for(llama3) ==
        "m.json: rope_scaling_beta_fast: a YaRN ramp end; rope_scaling llama3 does not read it "
        "(32)");
  nlohmann::json linear = tiny_json();
  linear["rope_scaling"] = "linear";
  linear["rope_scaling_factor"] = 8;
  linear["rope_scaling_original_max_positions"] = 4096;
  CHECK(model_error_for(linear) ==
        "m.json: rope_scaling_original_max_positions: the pre-training context of llama3 or yarn; "
        "rope_scaling linear does not read it (4096)");
}

TEST_CASE("Hugging Face: DeepSeek-V3's and gpt-oss's YaRN, transformers 4 and 5 forms") {
  // DeepSeek-V3's config.json: type yarn, factor 40, original 4096, beta 32 / 1, mscale and
  // mscale_all_dim 1.
  const nlohmann::json deepseek_json = meshplan::read_json_file(hf_fixture("DeepSeek-V3.json"));
  CHECK(model_from_json(deepseek_json, "ds.json").rope_scaling == yarn(40.0, 4096, true, 1.0, 1.0));
  // gpt-oss-120b's: rope_type yarn, factor 32, original 4096, truncate false.
  nlohmann::json oss = meshplan::read_json_file(hf_fixture("gpt-oss-120b.json"));
  CHECK(model_from_json(oss, "oss.json").rope_scaling == yarn(32.0, 4096, false));
  // transformers 5: the same dict as rope_parameters, with rope_theta.
  nlohmann::json v5 = oss;
  v5["rope_parameters"] = v5["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 150000.0;
  v5.erase("rope_scaling");
  v5.erase("rope_theta");
  CHECK(model_from_json(v5, "v5.json").rope_scaling == yarn(32.0, 4096, false));
  // Without a factor, max_position_embeddings over the original (131072 / 4096 = 32); without
  // an original, max_position_embeddings itself; a stated 0 beta is the default (`or 32`).
  nlohmann::json derived = oss;
  derived["rope_scaling"].erase("factor");
  derived["rope_scaling"]["beta_fast"] = 0;
  CHECK(model_from_json(derived, "d.json").rope_scaling == yarn(32.0, 4096, false));
  derived["rope_scaling"]["factor"] = 4.0;
  derived["rope_scaling"].erase("original_max_position_embeddings");
  CHECK(model_from_json(derived, "d.json").rope_scaling == yarn(4.0, 131072, false));
  // A stated attention factor must be the one meshplan derives.
  nlohmann::json stated = oss;
  stated["rope_scaling"]["attention_factor"] = 0.1 * std::log(32.0) + 1.0;
  CHECK(model_from_json(stated, "s.json").rope_scaling == yarn(32.0, 4096, false));
  stated["rope_scaling"]["attention_factor"] = 1.0;
  CHECK(input_error([&] { model_from_json(stated, "s.json"); }) ==
        "s.json: rope_scaling: attention_factor: 1 differs from YaRN's 1.34657 for factor 32 "
        "(mscale 1, mscale_all_dim 0); meshplan derives it and cannot carry another");
  // One of mscale / mscale_all_dim alone: transformers ignores it for cos and sin.
  nlohmann::json alone = deepseek_json;
  alone["rope_scaling"].erase("mscale");
  CHECK(input_error([&] { model_from_json(alone, "a.json"); }) ==
        "a.json: rope_scaling: mscale_all_dim: given without mscale, which transformers and "
        "Megatron-Core read differently (1)");
  alone["rope_scaling"]["mscale"] = 1.0;
  alone["rope_scaling"].erase("mscale_all_dim");
  CHECK(model_from_json(alone, "a.json").rope_scaling == yarn(40.0, 4096, true));
  // Errors name the config's key.
  nlohmann::json bad = oss;
  bad["rope_scaling"]["beta_slow"] = 64.0;
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: rope_scaling.beta_fast: must be above rope_scaling_beta_slow 64 and at most 1000 "
        "(32)");
  bad["rope_scaling"]["beta_slow"] = 1.0;
  bad["rope_scaling"]["truncate"] = "no";
  CHECK(input_error([&] { model_from_json(bad, "b.json"); }) ==
        "b.json: rope_scaling: truncate: expected true or false (\"no\")");
}
