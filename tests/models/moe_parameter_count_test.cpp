// Mixture-of-experts and multi-head-latent-attention models: the Hugging Face configs
// (tests/data/hf/, copies of the public config.json files) against their published total and
// active parameter counts, term by term, and the loaders' and validation's errors.
//
// Sources of the configs:
//   Mixtral-8x7B-v0.1.json https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
//   Qwen3-30B-A3B.json      https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
//   DeepSeek-V3.json        https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json
//   GLM-4.5-Air.json        https://huggingface.co/zai-org/GLM-4.5-Air/blob/main/config.json (as
//                           Glm4MoeConfig prints it: ms-swift's training log of the model)

#include <doctest/doctest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::count_layer_parameters;
using meshplan::models::count_parameters;
using meshplan::models::load_model;
using meshplan::models::model_from_json;
using meshplan::models::model_to_json;
using meshplan::models::TransformerConfig;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;

namespace {

// Truncates a count to one decimal of billions, the way the model cards print "3.3B".
double billions_truncated(int64_t count) {
  return std::floor(static_cast<double>(count) / 1e8) / 10.0;
}

// GLM-4.5-Air's config without its MTP layer (the paper's counts are of the main model).
nlohmann::json glm_air_without_mtp() {
  nlohmann::json json = meshplan::read_json_file(hf_fixture("GLM-4.5-Air.json"));
  json["num_nextn_predict_layers"] = 0;
  return json;
}

nlohmann::json deepseek_without_mtp() {
  nlohmann::json json = meshplan::read_json_file(hf_fixture("DeepSeek-V3.json"));
  json["num_nextn_predict_layers"] = 0;
  return json;
}

}  // namespace

TEST_CASE("mistralai/Mixtral-8x7B-v0.1: 46,702,792,704 total, 12,879,925,248 active") {
  const TransformerConfig model = load_model(hf_fixture("Mixtral-8x7B-v0.1.json"));
  CHECK(model.num_experts == 8);
  CHECK(model.experts_per_token == 2);
  CHECK(model.expert_ffn_hidden_size == 14336);
  CHECK(model.num_moe_layers() == 32);
  CHECK(model.sliding_window == 0);  // "sliding_window": null
  const auto layer = count_layer_parameters(model, true);
  CHECK(layer.attention == 41'943'040);          // 4096 * (4096 + 2 * 1024 + 4096)
  CHECK(layer.router == 32'768);                 // E h = 8 * 4096
  CHECK(layer.routed_experts == 1'409'286'144);  // 8 * 3 * 4096 * 14336
  CHECK(layer.mlp == 0);
  const auto counts = count_parameters(model);
  // 32 * (41,943,040 + 32,768 + 1,409,286,144 + 8,192) + 2 * 32000 * 4096 + 4096. Published:
  // the safetensors index of mistralai/Mixtral-8x7B-v0.1 (total_size 93,405,585,408 bytes of
  // bf16 = 46,702,792,704 parameters).
  CHECK(counts.total == 46'702'792'704);
  // Two of eight experts: 32 * (41,943,040 + 32,768 + 2 * 176,160,768 + 8,192) + 262,148,096.
  // Jiang et al. 2024, Sec. 2.1: "13B active parameters"; Mistral AI's announcement: 12.9B.
  CHECK(counts.active == 12'879'925'248);
  CHECK(std::round(static_cast<double>(counts.active) / 1e8) / 10 == 12.9);
}

TEST_CASE("Qwen/Qwen3-30B-A3B: 30,532,122,624 total, 3,353,032,704 active") {
  const TransformerConfig model = load_model(hf_fixture("Qwen3-30B-A3B.json"));
  CHECK(model.qk_norm);
  CHECK(model.head_dim == 128);
  CHECK(model.num_experts == 128);
  CHECK(model.experts_per_token == 8);
  CHECK(model.expert_ffn_hidden_size == 768);
  CHECK(model.num_shared_experts == 0);
  const auto layer = count_layer_parameters(model, true);
  CHECK(layer.attention == 18'874'624);  // 2 * 2048 * 4096 + 2 * 2048 * 512 + q/k norms 2 * 128
  CHECK(layer.router == 262'144);        // 128 * 2048
  CHECK(layer.routed_experts == 603'979'776);  // 128 * 3 * 2048 * 768
  const auto counts = count_parameters(model);
  // 48 * (18,874,624 + 4,096 + 262,144 + 603,979,776) + 2 * 151936 * 2048 + 2048.
  CHECK(counts.total == 30'532'122'624);
  // 48 * (18,874,624 + 4,096 + 262,144 + 8 * 4,718,592) + 622,331,904.
  CHECK(counts.active == 3'353'032'704);
  // Model card: "Number of Parameters: 30.5B in total and 3.3B activated; Number of Parameters
  // (Non-Embedding): 29.9B" (figures truncated to one decimal).
  CHECK(billions_truncated(counts.total) == 30.5);
  CHECK(billions_truncated(counts.active) == 3.3);
  CHECK(billions_truncated(counts.total - counts.token_embedding - counts.lm_head) == 29.9);
}

TEST_CASE("deepseek-ai/DeepSeek-V3 with its MTP module: 682,636,487,424; Hugging Face's 685B") {
  const TransformerConfig model = load_model(hf_fixture("DeepSeek-V3.json"));
  CHECK(model.mtp_num_layers == 1);  // "num_nextn_predict_layers": 1
  CHECK(model.mtp_layer_is_moe());   // the last of the 61 layers is an MoE layer
  // The MTP depth, term by term (DeepSeek-V3 report Sec. 2.2; Megatron-Core
  // MultiTokenPredictionLayer): enorm, hnorm and final_layernorm 3 x 7168, eh_proj
  // 2 x 7168 x 7168, and one MoE layer: MLA attention 187,107,328, its two norms 2 x 7168, router
  // 256 x 7168 + 256, 256 routed and 1 shared expert of 3 x 7168 x 2048.
  const int64_t h = 7168;
  const int64_t moe_layer = 187'107'328 + 2 * h + (256 * h + 256) + 257 * 3 * h * 2048;
  CHECK(moe_layer == 11'507'286'272);
  const int64_t mtp = 3 * h + 2 * h * h + moe_layer;
  const auto counts = count_parameters(model);
  CHECK(counts.mtp == mtp);
  CHECK(counts.mtp == 11'610'068'224);
  CHECK(counts.total == 671'026'419'200 + mtp);
  // Active: the depth's layer with 8 of 256 routed experts.
  CHECK(counts.active == 37'552'297'472 + mtp - 248 * 3 * h * 2048);
  // Hugging Face's checkpoint (deepseek-ai/DeepSeek-V3, "685B") = 671B main model + 14B MTP
  // module (DeepSeek-V3 README), its MTP weights storing their own embed_tokens and shared_head
  // (2 x 129,280 x 7,168 = 1,853,358,080) that Megatron-Core shares with the main model:
  // 684,489,845,504. The checkpoint's FP8 weight_scale_inv tensors (one fp32 per 128 x 128
  // block, about 1/16384 of the ~680B quantized weights: ~0.04B) are the rest of "685B"; the
  // rounding leaves +-0.5B, so the check is within 0.6B (0.09%).
  const int64_t hf_copies = 2 * int64_t{129'280} * h;
  CHECK(hf_copies == 1'853'358'080);
  CHECK(std::abs(static_cast<double>(counts.total + hf_copies) - 685e9) < 0.6e9);
}

TEST_CASE("mtp_num_layers: read from meshplan's format and num_nextn_predict_layers, validated") {
  nlohmann::json deepseek = meshplan::read_json_file(hf_fixture("DeepSeek-V3.json"));
  deepseek.erase("num_nextn_predict_layers");
  CHECK(model_from_json(deepseek, "ds.json").mtp_num_layers == 0);  // absent: no MTP
  deepseek["num_nextn_predict_layers"] = 2;
  const TransformerConfig two = model_from_json(deepseek, "ds.json");
  CHECK(two.mtp_num_layers == 2);
  CHECK(count_parameters(two).mtp == 2 * 11'610'068'224);
  // Round trip through meshplan's format.
  const nlohmann::json written = model_to_json(two);
  CHECK(written.at("mtp_num_layers") == 2);
  TransformerConfig back = model_from_json(written, "m.json");
  back.name = two.name;
  CHECK(back == two);
  CHECK_FALSE(
      model_to_json(model_from_json(deepseek_without_mtp(), "ds.json")).contains("mtp_num_layers"));
  // Bad values name the key the file gave.
  deepseek["num_nextn_predict_layers"] = -1;
  CHECK(input_error([&] { model_from_json(deepseek, "ds.json"); }) ==
        "ds.json: num_nextn_predict_layers: must be in [0, 8], 0 for no multi-token prediction "
        "(-1)");
  deepseek["num_nextn_predict_layers"] = 9;
  CHECK(input_error([&] { model_from_json(deepseek, "ds.json"); }) ==
        "ds.json: num_nextn_predict_layers: must be in [0, 8], 0 for no multi-token prediction "
        "(9)");
  deepseek["num_nextn_predict_layers"] = "1";
  CHECK(input_error([&] { model_from_json(deepseek, "ds.json"); }) ==
        "ds.json: num_nextn_predict_layers: expected an integer (\"1\")");
  nlohmann::json own = model_to_json(load_model("tiny-moe"));
  own["mtp_num_layers"] = 100;
  CHECK(input_error([&] { model_from_json(own, "m.json"); }) ==
        "m.json: mtp_num_layers: must be in [0, 8], 0 for no multi-token prediction (100)");
  own["mtp_num_layers"] = 1;
  CHECK(model_from_json(own, "m.json").mtp_num_layers == 1);
  // Megatron-LM arguments.py asserts rope (or no) positions with MTP.
  nlohmann::json learned = model_to_json(load_model("tiny"));
  learned["positions"] = "learned";
  learned["mtp_num_layers"] = 1;
  CHECK(input_error([&] { model_from_json(learned, "m.json"); }) ==
        "m.json: mtp_num_layers: multi-token prediction needs rotary positions (Megatron-LM "
        "arguments.py asserts position_embedding_type rope or none) (1 with positions learned)");
}

TEST_CASE("a DeepSeek-V3 config without some keys reads DeepseekV3Config's defaults, null none") {
  // transformers configuration_deepseek_v3.py: n_shared_experts 1, n_group 8, topk_group 4,
  // first_k_dense_replace 3, q_lora_rank 1536: deepseek-ai's own values, so the fixture without
  // them is the same model.
  const nlohmann::json full = meshplan::read_json_file(hf_fixture("DeepSeek-V3.json"));
  nlohmann::json absent = full;
  for (const char* key :
       {"n_shared_experts", "n_group", "topk_group", "first_k_dense_replace", "q_lora_rank"}) {
    absent.erase(key);
  }
  CHECK(model_from_json(absent, "ds.json") == model_from_json(full, "ds.json"));
  // null: no shared expert, no group limit, no dense prefix, no query compression.
  nlohmann::json none = full;
  for (const char* key :
       {"n_shared_experts", "n_group", "topk_group", "first_k_dense_replace", "q_lora_rank"}) {
    none[key] = nullptr;
  }
  const TransformerConfig bare = model_from_json(none, "ds.json");
  CHECK(bare.num_shared_experts == 0);
  CHECK(bare.shared_expert_ffn_hidden_size == 0);
  CHECK(bare.router_num_groups == 0);
  CHECK(bare.router_group_topk == 0);
  CHECK(bare.first_dense_layers == 0);
  CHECK(bare.q_lora_rank == 0);
  // n_group 1 is no limit, whatever topk_group says.
  nlohmann::json one = full;
  one["n_group"] = 1;
  CHECK(model_from_json(one, "ds.json").router_num_groups == 0);
  // A rank of 0 is not "none": null is.
  nlohmann::json zero = full;
  zero["q_lora_rank"] = 0;
  CHECK(input_error([&] { model_from_json(zero, "ds.json"); }) ==
        "ds.json: q_lora_rank: must be positive, or null for none (0)");
}

TEST_CASE("deepseek-ai/DeepSeek-V3 main model: 671,026,419,200 total, 37,552,297,472 active") {
  const TransformerConfig model = model_from_json(deepseek_without_mtp(), "ds.json");
  CHECK(model.is_mla());
  CHECK(model.head_dim == 192);  // 128 + 64
  CHECK(model.num_kv_heads == 128);
  CHECK(model.first_dense_layers == 3);
  CHECK(model.num_moe_layers() == 58);
  CHECK(model.router_score_bias);
  CHECK(model.router_num_groups == 8);  // n_group, node-limited routing (Sec. 2.1.2)
  CHECK(model.router_group_topk == 4);  // topk_group
  CHECK_FALSE(model.is_moe_layer(2));
  CHECK(model.is_moe_layer(3));
  const auto dense = count_layer_parameters(model, false);
  // q_a 7168*1536 + q_a_norm 1536 + q_b 1536*128*192 + kv_a 7168*576 + kv_a_norm 512
  // + kv_b 512*128*256 + o 128*128*7168.
  CHECK(dense.attention == 187'107'328);
  CHECK(dense.mlp == 396'361'728);  // 3 * 7168 * 18432
  const auto moe = count_layer_parameters(model, true);
  CHECK(moe.router == 1'835'264);               // 256 * 7168 + 256 score-correction biases
  CHECK(moe.routed_experts == 11'274'289'152);  // 256 * 3 * 7168 * 2048
  CHECK(moe.shared_experts == 44'040'192);      // 1 * 3 * 7168 * 2048
  const auto counts = count_parameters(model);
  // 3 * 583,483,392 + 58 * 11,507,286,272 + 2 * 129280 * 7168 + 7168. DeepSeek-V3 README:
  // 685B on Hugging Face = 671B main model + 14B multi-token-prediction module; the report's
  // abstract: 671B total, 37B activated per token.
  CHECK(counts.total == 671'026'419'200);
  // 3 * 583,483,392 + 58 * (187,121,664 + 1,835,264 + 9 * 44,040,192) + 1,853,365,248.
  CHECK(counts.active == 37'552'297'472);
  CHECK(billions_truncated(counts.active) == 37.5);
}

TEST_CASE("MoE and MLA fields round-trip through meshplan's format; presets match the configs") {
  const TransformerConfig deepseek = model_from_json(deepseek_without_mtp(), "ds.json");
  TransformerConfig back = model_from_json(model_to_json(deepseek), "ds.json");
  back.name = deepseek.name;
  CHECK(back == deepseek);
  CHECK(count_parameters(load_model("deepseek-v3")).total == 671'026'419'200);
  CHECK(count_parameters(load_model("mixtral-8x7b")).total == 46'702'792'704);
  CHECK(count_parameters(load_model("qwen3-30b-a3b")).total == 30'532'122'624);
  // Dense models' files keep their keys: no MoE or MLA field is written.
  CHECK_FALSE(model_to_json(load_model("tiny")).contains("num_experts"));
  CHECK_FALSE(model_to_json(load_model("tiny")).contains("kv_lora_rank"));
}

TEST_CASE("tiny-moe: a dense first layer and three MoE layers, counted by hand") {
  const auto counts = count_parameters(load_model("tiny-moe"));
  // Dense layer: attention 64 * (64 + 2 * 32 + 64) = 12,288, MLP 3 * 64 * 176 = 33,792, norms
  // 128: 46,208. MoE layer: 12,288 + router 4 * 64 = 256 + 4 * 3 * 64 * 96 = 73,728 + 128 =
  // 86,400; active 12,288 + 256 + 2 * 18,432 + 128 = 49,536.
  CHECK(counts.per_layer == 46'208);
  CHECK(counts.moe_layer == 86'400);
  CHECK(counts.total == 46'208 + 3 * 86'400 + 2 * 256 * 64 + 64);
  CHECK(counts.active == 46'208 + 3 * 49'536 + 2 * 256 * 64 + 64);
}

TEST_CASE("Qwen2-MoE: a gated shared expert and attention biases") {
  // Qwen1.5-MoE-A2.7B's shape at a small size: h 64, 4 heads, 4 experts of 32, top-2, a shared
  // expert of 128 behind an h -> 1 gate.
  const nlohmann::json json = nlohmann::json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 4, "intermediate_size": 176,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 128, "num_experts": 4,
    "num_experts_per_tok": 2, "vocab_size": 256, "max_position_embeddings": 32})");
  const TransformerConfig model = model_from_json(json, "q2.json");
  CHECK(model.qkv_bias);
  CHECK_FALSE(model.attention_output_bias);
  CHECK(model.shared_expert_gate);
  const auto layer = count_layer_parameters(model, true);
  CHECK(layer.attention == 4 * 64 * 64 + 3 * 64);    // Q, K, V, O + q, k, v biases
  CHECK(layer.shared_experts == 3 * 64 * 128 + 64);  // shared expert + gate
  CHECK(layer.routed_experts == 4 * 3 * 64 * 32);
  CHECK(layer.router == 4 * 64);

  // Qwen2MoeDecoderLayer: MoE where the layer is not in mlp_only_layers and (layer + 1) %
  // decoder_sparse_step == 0; a dense MLP of intermediate_size elsewhere.
  nlohmann::json skipping = json;
  skipping["num_hidden_layers"] = 6;
  skipping["decoder_sparse_step"] = 2;  // layers 1, 3, 5 (0-based) are MoE
  const TransformerConfig alternate = model_from_json(skipping, "q2.json");
  CHECK(alternate.moe_layers == std::vector<int>{0, 1, 0, 1, 0, 1});
  CHECK(alternate.num_moe_layers() == 3);
  CHECK_FALSE(alternate.is_moe_layer(0));
  CHECK(alternate.is_moe_layer(5));
  const auto moe_layer = count_layer_parameters(alternate, true).total();
  const auto dense_layer = count_layer_parameters(alternate, false).total();
  CHECK(count_parameters(alternate).total ==
        3 * moe_layer + 3 * dense_layer + 2 * 256 * 64 + 64);  // untied head, final norm
  nlohmann::json mlp_only = skipping;
  mlp_only["mlp_only_layers"] = {3};
  CHECK(model_from_json(mlp_only, "q2.json").moe_layers == std::vector<int>{0, 1, 0, 0, 0, 1});
  // A dense prefix read from the list is the prefix rule: one form per meaning.
  mlp_only["decoder_sparse_step"] = 1;
  mlp_only["mlp_only_layers"] = {0, 1};
  const TransformerConfig prefix = model_from_json(mlp_only, "q2.json");
  CHECK(prefix.moe_layers.empty());
  CHECK(prefix.first_dense_layers == 2);
  mlp_only["mlp_only_layers"] = {6};
  CHECK(input_error([&] { model_from_json(mlp_only, "q2.json"); }) ==
        "q2.json: mlp_only_layers[0]: expected a layer index in [0, 6) (6)");
  mlp_only["mlp_only_layers"] = {0, 1, 2, 3, 4, 5};
  CHECK(input_error([&] { model_from_json(mlp_only, "q2.json"); }) ==
        "q2.json: decoder_sparse_step: no MoE layer (a dense model has num_experts 0)");
  skipping["decoder_sparse_step"] = 0;
  CHECK(input_error([&] { model_from_json(skipping, "q2.json"); }) ==
        "q2.json: decoder_sparse_step: must be positive (0)");
}

TEST_CASE("moe_layers: a per-layer MoE pattern in meshplan's format, checked and normalised") {
  nlohmann::json moe = model_to_json(load_model("tiny-moe"));  // 4 layers, the first dense
  CHECK_FALSE(moe.contains("moe_layers"));
  moe["first_dense_layers"] = 0;
  moe["moe_layers"] = {1, 0, 1, 0};  // MoE every other layer (GShard, Switch)
  const TransformerConfig alternate = model_from_json(moe, "m.json");
  CHECK(alternate.num_moe_layers() == 2);
  CHECK(alternate.is_moe_layer(0));
  CHECK_FALSE(alternate.is_moe_layer(3));
  CHECK(model_to_json(alternate)["moe_layers"] == nlohmann::json({1, 0, 1, 0}));
  CHECK(model_from_json(model_to_json(alternate), "m.json") == alternate);
  moe["moe_layers"] = {0, 0, 1, 1};  // a dense prefix: read as first_dense_layers
  const TransformerConfig prefix = model_from_json(moe, "m.json");
  CHECK(prefix.moe_layers.empty());
  CHECK(prefix.first_dense_layers == 2);
  const auto error_with = [&](const nlohmann::json& layers, int64_t first_dense) {
    nlohmann::json edited = moe;
    edited["moe_layers"] = layers;
    edited["first_dense_layers"] = first_dense;
    return input_error([&] { model_from_json(edited, "m.json"); });
  };
  CHECK(error_with({1, 0, 1}, 0) ==
        "m.json: moe_layers: expected one entry per layer, 4 (3 entries)");
  CHECK(error_with({1, 0, 2, 0}, 0) == "m.json: moe_layers[2]: must be 1 (MoE) or 0 (dense) (2)");
  CHECK(error_with({0, 0, 0, 0}, 0) ==
        "m.json: moe_layers: no MoE layer (a dense model has num_experts 0)");
  CHECK(error_with({1, 0, 1, 0}, 1) ==
        "m.json: first_dense_layers: with moe_layers the list gives the dense layers; 0 expected "
        "(1)");
  CHECK(error_with(2, 0) == "m.json: moe_layers: expected a list of 0 and 1, one per layer (2)");
  nlohmann::json dense = model_to_json(load_model("tiny"));
  dense["moe_layers"] = {1, 0, 1, 0};
  CHECK(input_error([&] { model_from_json(dense, "m.json"); }) ==
        "m.json: moe_layers: must be absent when num_experts is 0 (a dense model) (4 entries)");
}

TEST_CASE(
    "DeepSeek's moe_layer_freq: MoE where layer >= first_k_dense_replace and layer % N == 0") {
  // deepseek-ai's remote modeling_deepseek.py DeepseekV3DecoderLayer; 1 in every published
  // config (DeepSeek-V3's fixture), read as the prefix rule.
  nlohmann::json json = deepseek_without_mtp();
  json["num_hidden_layers"] = 8;
  json["first_k_dense_replace"] = 3;
  json["moe_layer_freq"] = 2;
  const TransformerConfig model = model_from_json(json, "ds.json");
  CHECK(model.moe_layers == std::vector<int>{0, 0, 0, 0, 1, 0, 1, 0});
  CHECK(model.first_dense_layers == 0);
  json["moe_layer_freq"] = 1;
  const TransformerConfig every = model_from_json(json, "ds.json");
  CHECK(every.moe_layers.empty());
  CHECK(every.first_dense_layers == 3);
  json["moe_layer_freq"] = 9;  // layer 0 alone, inside the dense prefix: no MoE layer
  CHECK(input_error([&] { model_from_json(json, "ds.json"); }) ==
        "ds.json: moe_layer_freq: no MoE layer (a dense model has num_experts 0)");
}

TEST_CASE("MoE and MLA validation names the field") {
  nlohmann::json moe = model_to_json(load_model("tiny-moe"));
  const auto error_with = [&](const char* field, const nlohmann::json& value) {
    nlohmann::json edited = moe;
    edited[field] = value;
    return input_error([&] { model_from_json(edited, "m.json"); });
  };
  CHECK(error_with("experts_per_token", 5) ==
        "m.json: experts_per_token: must be in [1, num_experts] (5 of 4)");
  CHECK(error_with("first_dense_layers", 4) ==
        "m.json: first_dense_layers: must be in [0, num_layers) (4 of 4)");
  CHECK(error_with("expert_ffn_hidden_size", 0) ==
        "m.json: expert_ffn_hidden_size: must be positive (0)");
  CHECK(error_with("shared_expert_ffn_hidden_size", 8) ==
        "m.json: shared_expert_ffn_hidden_size: must be 0 without shared experts (8)");
  CHECK(error_with("num_experts", 0) ==
        "m.json: experts_per_token: must be 0 when num_experts is 0 (a dense model) (2)");
  // Group-limited routing: G divides E, 1 <= M <= G, M <= k, k <= M E / G; both or neither.
  CHECK(
      error_with("router_num_groups", 3) ==
      "m.json: router_num_groups: must be a positive divisor of the routed expert count (3 of 4)");
  CHECK(error_with("router_group_topk", 1) ==
        "m.json: router_num_groups: must be a positive divisor of the routed expert count (0 of "
        "4)");
  nlohmann::json grouped = moe;
  grouped["router_num_groups"] = 2;
  grouped["router_group_topk"] = 3;
  CHECK(input_error([&] { model_from_json(grouped, "m.json"); }) ==
        "m.json: router_group_topk: must be between 1 and the group count (3 of 2)");
  grouped["router_num_groups"] = 4;
  CHECK(input_error([&] { model_from_json(grouped, "m.json"); }) ==
        "m.json: router_group_topk: must not exceed the experts per token, each chosen group "
        "being scored by its top k / M experts (3 of 2)");
  grouped["router_group_topk"] = 1;
  CHECK(input_error([&] { model_from_json(grouped, "m.json"); }) ==
        "m.json: experts_per_token: more than the 1 experts of the chosen groups (2)");
  grouped["router_group_topk"] = 2;
  const TransformerConfig limited = model_from_json(grouped, "m.json");
  CHECK(limited.router_num_groups == 4);
  CHECK(limited.router_group_topk == 2);
  CHECK(model_to_json(limited).at("router_num_groups") == 4);  // written back
  CHECK_FALSE(model_to_json(load_model("tiny-moe")).contains("router_num_groups"));
  nlohmann::json dense_grouped = model_to_json(load_model("tiny"));
  dense_grouped["router_num_groups"] = 2;
  CHECK(input_error([&] { model_from_json(dense_grouped, "t.json"); }) ==
        "t.json: router_num_groups: must be 0 when num_experts is 0 (a dense model) (2)");

  nlohmann::json mla = model_to_json(load_model("deepseek-v3"));
  mla["head_dim"] = 128;
  CHECK(input_error([&] { model_from_json(mla, "ds.json"); }) ==
        "ds.json: head_dim: must be qk_nope_head_dim + qk_rope_head_dim with MLA (128 != 192)");
  nlohmann::json no_mla = model_to_json(load_model("tiny"));
  no_mla["v_head_dim"] = 16;
  CHECK(input_error([&] { model_from_json(no_mla, "t.json"); }) ==
        "t.json: v_head_dim: must be 0 without multi-head latent attention (kv_lora_rank 0) (16)");
}

TEST_CASE("zai-org/GLM-4.5-Air: 106,852,251,264 parameters, the report's 106B total, 12B active") {
  // GLM-4.5 Team 2025, "GLM-4.5: Agentic, Reasoning, and Coding (ARC) Foundation Models",
  // Table 1: GLM-4.5-Air 106B total, 12B activated, 1 dense and 45 MoE layers, 1 MTP layer.
  const TransformerConfig model = load_model(hf_fixture("GLM-4.5-Air.json"));
  CHECK(model.num_layers == 46);
  CHECK(model.num_attention_heads == 96);
  CHECK(model.num_kv_heads == 8);
  CHECK(model.head_dim == 128);  // 96 x 128 = 12,288 query channels over h 4,096
  CHECK(model.ffn_hidden_size == 10944);
  CHECK(model.num_experts == 128);
  CHECK(model.experts_per_token == 8);
  CHECK(model.expert_ffn_hidden_size == 1408);
  CHECK(model.num_shared_experts == 1);
  CHECK(model.shared_expert_ffn_hidden_size == 1408);
  CHECK(model.first_dense_layers == 1);
  CHECK(model.num_moe_layers() == 45);
  CHECK(model.router_score_bias);
  CHECK(model.router_num_groups == 0);       // n_group 1: no group limit
  CHECK(model.qkv_bias);                     // attention_bias: q, k, v_proj
  CHECK_FALSE(model.attention_output_bias);  // o_proj has no bias
  CHECK_FALSE(model.qk_norm);                // use_qk_norm false
  CHECK(model.rotary_percent == 0.5);        // partial_rotary_factor: 64 of 128 channels
  CHECK(model.rotary_dim() == 64);
  CHECK_FALSE(model.tied_embeddings);
  CHECK_FALSE(model.dropout);
  CHECK(model.mtp_num_layers == 1);
  // Term by term (transformers Glm4MoeAttention, DeepseekV3MLP, DeepseekV3MoE): attention
  // q and o 2 x 4096 x 12288, k and v 2 x 4096 x 1024, biases 12288 + 2 x 1024.
  const int64_t h = 4096;
  const int64_t attention = 2 * h * 12288 + 2 * h * 1024 + 12288 + 2 * 1024;
  CHECK(attention == 109'066'240);
  const int64_t expert = 3 * h * 1408;
  const auto moe = count_layer_parameters(model, true);
  CHECK(moe.attention == attention);
  CHECK(moe.router == 128 * h + 128);  // weight and e_score_correction_bias
  CHECK(moe.routed_experts == 128 * expert);
  CHECK(moe.shared_experts == expert);
  CHECK(count_layer_parameters(model, false).mlp == 3 * h * 10944);
  const int64_t moe_layer = attention + 2 * h + (128 * h + 128) + 129 * expert;
  const int64_t dense_layer = attention + 2 * h + 3 * h * 10944;
  const int64_t embeddings = 2 * int64_t{151'552} * h;  // untied embedding and LM head
  const auto counts = count_parameters(model_from_json(glm_air_without_mtp(), "air.json"));
  CHECK(counts.total == dense_layer + 45 * moe_layer + embeddings + h);
  CHECK(counts.total == 106'852'251'264);
  CHECK(billions_truncated(counts.total) == 106.8);  // "106B"
  // Active: 8 of 128 routed experts; the report's 12B leaves out both vocabulary matrices.
  const int64_t active = counts.total - 45 * 120 * expert;
  CHECK(counts.active == active);
  CHECK(counts.active - counts.token_embedding - counts.lm_head == 12'182'615'680);  // "12B"
  // The MTP layer: enorm, hnorm and final norm 3h, eh_proj 2 h h and one MoE layer.
  CHECK(count_parameters(model).mtp == 3 * h + 2 * h * h + moe_layer);
}

TEST_CASE("GLM-4.5 (Table 1 of the GLM-4.5 report): 352.8B in the main model, 32B active") {
  // The report's Table 1 sizes on the Air config: h 5120, 92 layers (3 dense, 89 MoE), dense
  // intermediate 12288, 160 experts of 1536, QK-Norm; heads, kv heads, head dim, routed and
  // shared experts and vocabulary as GLM-4.5-Air's.
  nlohmann::json json = glm_air_without_mtp();
  json["hidden_size"] = 5120;
  json["num_hidden_layers"] = 92;
  json["first_k_dense_replace"] = 3;
  json["intermediate_size"] = 12288;
  json["n_routed_experts"] = 160;
  json["moe_intermediate_size"] = 1536;
  json["use_qk_norm"] = true;
  const TransformerConfig model = model_from_json(json, "glm-4.5.json");
  CHECK(model.qk_norm);
  const int64_t h = 5120;
  // q_norm and k_norm: 2 x 128.
  const int64_t attention = 2 * h * 12288 + 2 * h * 1024 + 12288 + 2 * 1024 + 2 * 128;
  CHECK(count_layer_parameters(model, true).attention == attention);
  const int64_t expert = 3 * h * 1536;
  const int64_t moe_layer = attention + 2 * h + (160 * h + 160) + 161 * expert;
  const int64_t dense_layer = attention + 2 * h + 3 * h * 12288;
  const auto counts = count_parameters(model);
  CHECK(counts.total == 3 * dense_layer + 89 * moe_layer + 2 * int64_t{151'552} * h + h);
  CHECK(counts.total == 352'797'829'024);
  CHECK(counts.active - counts.token_embedding - counts.lm_head == 32'080'373'664);  // "32B"
  // Table 1's 355B total lies between the main model and the main model with its MTP layer
  // (3h + 2 h h + one MoE layer: 356.8B); what else it counts is not stated.
  const int64_t mtp = 3 * h + 2 * h * h + moe_layer;
  CHECK(counts.total < int64_t{355'000'000'000});
  CHECK(counts.total + mtp > int64_t{355'000'000'000});
  // The glm-4.5 preset is this model at the pre-training length.
  json["seq_length"] = 4096;
  TransformerConfig at_4096 = model_from_json(json, "glm-4.5");
  at_4096.max_position_embeddings = load_model("glm-4.5").max_position_embeddings;
  CHECK(at_4096 == load_model("glm-4.5"));
}

TEST_CASE("the glm-4.5-air preset is GLM-4.5-Air's config at seq 4096 without its MTP layer") {
  nlohmann::json json = glm_air_without_mtp();
  json["seq_length"] = 4096;  // the report's pre-training length
  TransformerConfig loaded = model_from_json(json, "glm-4.5-air");
  const TransformerConfig preset = load_model("glm-4.5-air");
  // Rotary positions have no table: the preset states none (seq_length), the config 131072.
  CHECK(loaded.max_position_embeddings == 131072);
  loaded.max_position_embeddings = preset.max_position_embeddings;
  CHECK(meshplan::models::model_to_json(loaded).dump() ==
        meshplan::models::model_to_json(preset).dump());
  CHECK(loaded == preset);
  CHECK(count_parameters(preset).total == 106'852'251'264);
}

TEST_CASE("GLM-4.5: Glm4MoeConfig's defaults for absent keys, null as none") {
  // Llama's required keys only: n_routed_experts 128, num_experts_per_tok 8,
  // moe_intermediate_size 1408, n_shared_experts 1, n_group 1, first_k_dense_replace 1,
  // attention_bias and use_qk_norm false, no MTP.
  nlohmann::json json = nlohmann::json::parse(R"({
    "architectures": ["Glm4MoeForCausalLM"], "hidden_size": 64, "num_hidden_layers": 4,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "intermediate_size": 176, "vocab_size": 256, "max_position_embeddings": 32})");
  const TransformerConfig defaults = model_from_json(json, "glm.json");
  CHECK(defaults.num_experts == 128);
  CHECK(defaults.experts_per_token == 8);
  CHECK(defaults.expert_ffn_hidden_size == 1408);
  CHECK(defaults.num_shared_experts == 1);
  CHECK(defaults.first_dense_layers == 1);
  CHECK(defaults.router_num_groups == 0);
  CHECK(defaults.mtp_num_layers == 0);
  CHECK_FALSE(defaults.qkv_bias);
  CHECK_FALSE(defaults.qk_norm);
  CHECK(defaults.head_dim == 32);
  CHECK(defaults.rotary_percent == 0.5);  // Glm4MoeConfig partial_rotary_factor
  json["n_shared_experts"] = nullptr;
  json["n_group"] = 8;
  json["topk_group"] = 4;
  json["first_k_dense_replace"] = 0;
  const TransformerConfig edited = model_from_json(json, "glm.json");
  CHECK(edited.num_shared_experts == 0);
  CHECK(edited.shared_expert_ffn_hidden_size == 0);
  CHECK(edited.router_num_groups == 8);
  CHECK(edited.router_group_topk == 4);
  CHECK(edited.first_dense_layers == 0);
  json["n_routed_experts"] = nullptr;
  CHECK(input_error([&] { model_from_json(json, "glm.json"); }) ==
        "glm.json: n_routed_experts: null (transformers keeps None here and cannot build the "
        "model; give a value or leave the key out for the class default)");
}

TEST_CASE("Kimi K2: DeepseekV3ForCausalLM under model_type kimi_k2, 1,026,408,232,448 parameters") {
  // moonshotai/Kimi-K2 README, "Model Summary": 1T total, 32B activated; 61 layers, 1 dense,
  // hidden 7168, MLA with 64 heads, 384 experts of 2048, 8 selected and 1 shared, vocabulary
  // 160K (163,840 in its config.json); DeepSeek-V3's q/kv ranks and head dims, no MTP, no group
  // limit (n_group 1).
  nlohmann::json json = deepseek_without_mtp();
  json["model_type"] = "kimi_k2";
  const TransformerConfig as_deepseek = model_from_json(deepseek_without_mtp(), "k.json");
  CHECK(model_from_json(json, "k.json") == as_deepseek);
  json["num_attention_heads"] = 64;
  json["num_key_value_heads"] = 64;
  json["n_routed_experts"] = 384;
  json["first_k_dense_replace"] = 1;
  json["n_group"] = 1;
  json["topk_group"] = 1;
  json["vocab_size"] = 163840;
  const TransformerConfig kimi = model_from_json(json, "kimi.json");
  CHECK(kimi.num_experts == 384);
  CHECK(kimi.router_num_groups == 0);
  CHECK(kimi.first_dense_layers == 1);
  // MLA term by term (DeepSeek-V3 report Sec. 2.1.1): q down 7168 x 1536 and its norm, q up
  // 1536 x 64 x (128 + 64), kv down 7168 x (512 + 64) and its norm, kv up 512 x 64 x (128 + 128),
  // output 64 x 128 x 7168.
  const int64_t h = 7168;
  const int64_t attention =
      h * 1536 + 1536 + 1536 * 64 * 192 + h * 576 + 512 + 512 * 64 * 256 + 64 * 128 * h;
  CHECK(count_layer_parameters(kimi, true).attention == attention);
  const int64_t expert = 3 * h * 2048;
  const int64_t moe_layer = attention + 2 * h + (384 * h + 384) + 385 * expert;
  const int64_t dense_layer = attention + 2 * h + 3 * h * 18432;
  const auto counts = count_parameters(kimi);
  CHECK(counts.total == dense_layer + 60 * moe_layer + 2 * int64_t{163'840} * h + h);
  CHECK(counts.total == 1'026'408'232'448);                  // "1T"
  CHECK(counts.active == counts.total - 60 * 376 * expert);  // 8 of 384 routed experts
  CHECK(billions_truncated(counts.active) == 32.8);          // "32B activated"
  // kimi_k2 names DeepSeek-V3's class only beside its architecture.
  json.erase("architectures");
  CHECK(input_error([&] {
          model_from_json(json, "kimi.json");
        }).find("kimi.json: model_type: unsupported model type (kimi_k2); supported: ") == 0);
  json["architectures"] = {"LlamaForCausalLM"};
  CHECK(input_error([&] { model_from_json(json, "kimi.json"); }) ==
        "kimi.json: model_type: LlamaForCausalLM is model_type llama, not kimi_k2");
}
