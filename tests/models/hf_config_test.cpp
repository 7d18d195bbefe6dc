// Hugging Face config.json files (tests/data/hf/, copies of the public configs) against their
// published parameter counts, and the loader's errors.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <vector>

#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::Activation;
using meshplan::models::count_parameters;
using meshplan::models::load_model;
using meshplan::models::model_from_json;
using meshplan::models::model_to_json;
using meshplan::models::Norm;
using meshplan::models::Positions;
using meshplan::models::TransformerConfig;
using meshplan::models::test::hf_fixture;
using meshplan::models::test::input_error;

namespace {

// A Llama-2 style config small enough to edit per test: h 64, a 4, g 2, f 176, V 256.
nlohmann::json small_llama() {
  return nlohmann::json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 176,
    "vocab_size": 256, "max_position_embeddings": 32})");
}

}  // namespace

TEST_CASE("meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters") {
  const std::string path = hf_fixture("Llama-2-7b-hf.json");
  const TransformerConfig model = load_model(path);
  CHECK(model.name == path);
  CHECK(model.num_layers == 32);
  CHECK(model.hidden_size == 4096);
  CHECK(model.num_attention_heads == 32);
  CHECK(model.num_kv_heads == 32);
  CHECK(model.head_dim == 128);  // 4096 / 32
  CHECK(model.ffn_hidden_size == 11008);
  CHECK(model.vocab_size == 32000);
  CHECK(model.seq_length == 4096);  // max_position_embeddings
  CHECK(model.activation == Activation::kSwiglu);
  CHECK(model.norm == Norm::kRmsNorm);
  CHECK(model.positions == Positions::kRope);
  CHECK_FALSE(model.tied_embeddings);
  CHECK_FALSE(model.qkv_bias);
  CHECK_FALSE(model.attention_output_bias);
  CHECK_FALSE(model.mlp_bias);
  // Published count (model card, safetensors index); derivation in parameter_count_test.cpp.
  CHECK(count_parameters(model).total == 6'738'415'616);
}

TEST_CASE("meta-llama/Meta-Llama-3-8B: 8,030,261,248 parameters") {
  const TransformerConfig model = load_model(hf_fixture("Meta-Llama-3-8B.json"));
  CHECK(model.num_kv_heads == 8);
  CHECK(model.seq_length == 8192);
  CHECK(count_parameters(model).total == 8'030'261'248);  // model card
}

TEST_CASE("openai-community/gpt2: 124,439,808 parameters") {
  const TransformerConfig model = load_model(hf_fixture("gpt2.json"));
  CHECK(model.ffn_hidden_size == 3072);  // n_inner absent (null): 4 * n_embd = 4 * 768
  CHECK(model.positions == Positions::kLearned);
  CHECK(model.max_position_embeddings == 1024);  // n_positions
  CHECK(model.norm == Norm::kLayerNorm);
  CHECK(model.activation == Activation::kGelu);
  CHECK(model.tied_embeddings);
  const auto counts = count_parameters(model);
  CHECK(counts.token_embedding == 38'597'376);  // wte: 50257 * 768
  CHECK(counts.position_embedding == 786'432);  // wpe: 1024 * 768
  CHECK(counts.per_layer == 7'087'872);         // c_attn 768 * 2304 + 2304,
                                                // attn c_proj 768 * 768 + 768,
                                                // c_fc 768 * 3072 + 3072, mlp c_proj 3072 * 768
                                                // + 768, ln_1 and ln_2 2 * 2 * 768
  CHECK(counts.final_norm == 1'536);            // ln_f: 2 * 768
  CHECK(counts.lm_head == 0);                   // tied to wte
  CHECK(counts.total == 124'439'808);           // the figure transformers reports for "gpt2"
}

TEST_CASE("EleutherAI/pythia-160m (GPTNeoX): 162,322,944 parameters") {
  const TransformerConfig model = load_model(hf_fixture("pythia-160m.json"));
  CHECK(model.positions == Positions::kRope);
  CHECK(model.norm == Norm::kLayerNorm);
  CHECK_FALSE(model.tied_embeddings);
  CHECK(model.qkv_bias);
  CHECK(model.attention_output_bias);
  CHECK(model.mlp_bias);
  // embed_in and embed_out 2 * 50304 * 768 = 77,266,944; 12 layers of the GPT-2 block
  // 12 * 7,087,872 = 85,054,464; final_layer_norm 1,536. Published: Pythia model card, 162,322,944.
  CHECK(count_parameters(model).total == 162'322'944);
  // "rotary_pct": 0.25 of head_dim 64: 16 channels rotated (GPTNeoXRotaryEmbedding's dim).
  CHECK(model.rotary_percent == 0.25);
  CHECK(model.rotary_dim() == 16);
  nlohmann::json config = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  config.erase("rotary_pct");  // GPTNeoXConfig's default, 0.25
  CHECK(model_from_json(config, "neox.json").rotary_percent == 0.25);
  config["rotary_pct"] = 1.0;
  CHECK_FALSE(model_from_json(config, "neox.json").has_partial_rotary());
  config["rotary_pct"] = 0.0;
  CHECK(input_error([&] { model_from_json(config, "neox.json"); }) ==
        "neox.json: rotary_pct: must be in (0, 1], 1 to rotate every channel of a head (0)");
}

TEST_CASE("mosaicml/mpt-7b-instruct (MPT): ALiBi, tied, no biases, GELU MLP of 4 d_model") {
  const TransformerConfig model = load_model(hf_fixture("mpt-7b-instruct.json"));
  CHECK(model.positions == Positions::kAlibi);  // attn_config.alibi
  CHECK(model.norm == Norm::kLayerNorm);
  CHECK(model.activation == Activation::kGelu);
  CHECK(model.tied_embeddings);
  CHECK_FALSE(model.qkv_bias);  // no_bias
  CHECK_FALSE(model.attention_output_bias);
  CHECK_FALSE(model.mlp_bias);
  CHECK_FALSE(model.dropout);  // resid_pdrop, emb_pdrop, attn_pdrop 0
  CHECK(model.num_kv_heads == 32);
  CHECK(model.ffn_hidden_size == 4 * 4096);
  CHECK(model.seq_length == 2048);
  // 32 layers of 12 h^2 = 6,442,450,944, the tied wte 50432 x 4096 = 206,569,472, 65 LayerNorms
  // counted with gain and bias, 65 x 2 x 4096 = 532,480. MPT's own count, 6,649,286,656, has no
  // norm biases (no_bias): 266,240 fewer, which meshplan's LayerNorm does not model.
  CHECK(count_parameters(model).total == 6'442'450'944 + 206'569'472 + 532'480);
}

TEST_CASE("MPT: attention variants, learned or rotary positions, refused features") {
  nlohmann::json json = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  json["attn_config"]["attn_type"] = "multiquery_attention";
  CHECK(model_from_json(json, "mpt.json").num_kv_heads == 1);
  json["attn_config"]["attn_type"] = "grouped_query_attention";  // llm-foundry's
  json["attn_config"]["kv_n_heads"] = 8;
  CHECK(model_from_json(json, "mpt.json").num_kv_heads == 8);
  json["attn_config"]["attn_type"] = "sliding";
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: attn_config: attn_type: expected multihead_attention, multiquery_attention or "
        "grouped_query_attention (sliding)");
  json["attn_config"]["attn_type"] = "multihead_attention";
  json["attn_config"]["alibi"] = false;
  CHECK(model_from_json(json, "mpt.json").positions == Positions::kLearned);
  json["attn_config"]["rope"] = true;
  CHECK(model_from_json(json, "mpt.json").positions == Positions::kRope);
  json["no_bias"] = false;
  json["resid_pdrop"] = 0.1;
  json["expansion_ratio"] = 2.5;
  const TransformerConfig biased = model_from_json(json, "mpt.json");
  CHECK(biased.qkv_bias);
  CHECK(biased.mlp_bias);
  CHECK(biased.dropout);
  CHECK(biased.ffn_hidden_size == 10240);  // int(2.5 x 4096)
  for (const char* field : {"qk_ln", "prefix_lm"}) {
    nlohmann::json refused = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
    refused["attn_config"][field] = true;
    CHECK(input_error([&] { model_from_json(refused, "mpt.json"); }) ==
          fmt::format("mpt.json: attn_config: {}: not modelled (true)", field));
  }
  nlohmann::json glu = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  glu["ffn_config"] = {{"ffn_type", "mptglu"}};
  CHECK(input_error([&] { model_from_json(glu, "mpt.json"); }) ==
        "mpt.json: ffn_config: ffn_type: only MPT's GELU MLP (mptmlp) is modelled (mptglu)");
  nlohmann::json huge = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  huge["d_model"] = 1'000'000'000'000'000'000;
  CHECK(input_error([&] { model_from_json(huge, "mpt.json"); }) ==
        "mpt.json: hidden_size: absurdly large, more than 1000000 (1000000000000000000)");
  huge["d_model"] = 4096;
  huge["expansion_ratio"] = 1e-9;  // under one column
  CHECK(input_error([&] {
          model_from_json(huge, "mpt.json");
        }).starts_with("mpt.json: expansion_ratio:"));
  // Absent sizes take MptConfig's defaults (d_model 2048, 16 heads, 24 layers, vocab 50368).
  const nlohmann::json bare = {{"model_type", "mpt"}};
  const TransformerConfig defaults = model_from_json(bare, "mpt.json");
  CHECK(defaults.hidden_size == 2048);
  CHECK(defaults.num_attention_heads == 16);
  CHECK(defaults.num_layers == 24);
  CHECK(defaults.vocab_size == 50368);
  CHECK(defaults.positions == Positions::kAlibi);
}

TEST_CASE("Qwen/Qwen2-0.5B: 494,032,768 parameters, tied, bias on q/k/v only") {
  const TransformerConfig model = load_model(hf_fixture("Qwen2-0.5B.json"));
  CHECK(model.head_dim == 64);  // 896 / 14
  CHECK(model.qkv_bias);
  CHECK_FALSE(model.attention_output_bias);
  CHECK_FALSE(model.mlp_bias);
  CHECK(model.tied_embeddings);
  const auto counts = count_parameters(model);
  CHECK(counts.per_layer == 14'912'384);  // q 896 * 896 + 896; k, v 2 * (128 * 896 + 128);
                                          // o 896 * 896; MLP 3 * 896 * 4864; norms 2 * 896
  CHECK(counts.total == 494'032'768);     // 24 * 14,912,384 + 151936 * 896 + 896 (model card)
}

TEST_CASE("Qwen/Qwen3-8B: 8,190,735,360 parameters, q/k norms, no biases") {
  const TransformerConfig model = load_model(hf_fixture("Qwen3-8B.json"));
  CHECK(model.head_dim == 128);  // given: 4096 / 32 would also be 128
  CHECK(model.num_kv_heads == 8);
  CHECK(model.qk_norm);
  CHECK_FALSE(model.qkv_bias);
  CHECK_FALSE(model.attention_output_bias);
  CHECK_FALSE(model.tied_embeddings);
  CHECK(model.sliding_window == 0);  // use_sliding_window false
  CHECK(model.seq_length == 40960);  // max_position_embeddings
  const auto counts = count_parameters(model);
  CHECK(counts.per_layer == 192'946'432);  // q, o 2 * 4096^2; k, v 2 * 1024 * 4096; q_norm,
                                           // k_norm 2 * 128; MLP 3 * 4096 * 12288; norms 2 * 4096
  // 36 layers, final norm 4096, untied embedding and head 2 * 151936 * 4096: the model card's
  // "8.2B, 6.95B non-embedding".
  CHECK(counts.total == 8'190'735'360);
  // attention_bias puts a bias on q, k, v and o_proj (Qwen3Attention), unlike Qwen2's q/k/v only.
  nlohmann::json biased = meshplan::read_json_file(hf_fixture("Qwen3-8B.json"));
  biased["attention_bias"] = true;
  const TransformerConfig with_bias = model_from_json(biased, "q.json");
  CHECK(with_bias.qkv_bias);
  CHECK(with_bias.attention_output_bias);
  CHECK(count_parameters(with_bias).per_layer == 192'946'432 + 4096 + 2 * 1024 + 4096);
}

TEST_CASE("mistralai/Mistral-7B-v0.1: 7,241,732,096 parameters, a 4096-token window") {
  // As published, the config attends over a 4096-token window (sliding_window) on every layer
  // while its max_position_embeddings, the default training length, is 32768: a windowed model.
  const std::string path = hf_fixture("Mistral-7B-v0.1.json");
  TransformerConfig model = load_model(path);
  CHECK(model.seq_length == 32768);
  CHECK(model.sliding_window == 4096);
  CHECK(model.is_windowed());
  CHECK(count_parameters(model).total == 7'241'732'096);
  // Training on 4096 tokens, the window is full causal attention.
  model.seq_length = 4096;
  meshplan::models::validate_model(model, "--seq-len");
  CHECK_FALSE(model.is_windowed());
  // null turns the window off (Mistral-7B-v0.2); absent means MistralConfig's default, 4096.
  nlohmann::json config = meshplan::read_json_file(path);
  config["sliding_window"] = nullptr;
  CHECK(model_from_json(config, "mistral.json").sliding_window == 0);
  config.erase("sliding_window");
  CHECK(model_from_json(config, "mistral.json").sliding_window == 4096);
}

TEST_CASE("microsoft/Phi-3-mini-4k-instruct: 3,821,079,552 parameters, a 2047-token window") {
  // Phi3ForCausalLM: Llama's layout with fused qkv_proj and gate_up_proj, no biases, untied
  // head. Per layer 4 h^2 + 3 h f + 2 h, with h 3072, f 8192: 113,252,352; 32 of them, the
  // embedding and the head (32064 x 3072 each) and the final norm: 3,821,079,552, the count
  // the Phi-3 model card rounds to 3.8B.
  const std::string path = hf_fixture("Phi-3-mini-4k-instruct.json");
  const TransformerConfig model = load_model(path);
  CHECK(model.activation == Activation::kSwiglu);
  CHECK(model.norm == Norm::kRmsNorm);
  CHECK(model.positions == Positions::kRope);
  CHECK_FALSE(model.qkv_bias);
  CHECK_FALSE(model.tied_embeddings);
  CHECK(model.num_kv_heads == 32);
  CHECK(model.dropout == false);
  CHECK(count_parameters(model).per_layer == 113'252'352);
  CHECK(count_parameters(model).total == 3'821'079'552);
  // sliding_window 2047 of max_position_embeddings 4096: every layer windowed.
  CHECK(model.seq_length == 4096);
  CHECK(model.sliding_window == 2047);
  CHECK(model.is_windowed());
  // Phi3Config: sliding_window default None (full attention); dropouts read from the config.
  nlohmann::json config = meshplan::read_json_file(path);
  config.erase("sliding_window");
  CHECK(model_from_json(config, "phi3.json").sliding_window == 0);
  config["resid_pdrop"] = 0.1;
  CHECK(model_from_json(config, "phi3.json").dropout);
  config["resid_pdrop"] = 0.0;
  // partial_rotary_factor: absent, Phi3Config's 1.0; Phi-4-mini's 0.75 rotates 72 of 96.
  CHECK(model.rotary_percent == 1.0);
  config["partial_rotary_factor"] = 0.75;
  CHECK(model_from_json(config, "phi3.json").rotary_dim() == 72);
  config.erase("partial_rotary_factor");
  config["attention_bias"] = true;
  CHECK(input_error([&] { model_from_json(config, "phi3.json"); }) ==
        "phi3.json: attention_bias: Phi-3 attention with biases is not modelled (true)");
}

TEST_CASE("google/gemma-7b: 8,537,680,896 parameters, GeGLU, (1 + w) norms, scaled embeddings") {
  // Gemma Team 2024, Table 1 (7B: d_model 3072, 28 layers, 16 heads of 256, feedforward
  // 49152 = 2 x 24576 for gate and up). Term by term: tied embedding V h = 256000 x 3072 =
  // 786,432,000; per layer q 3072 x 4096 = 12,582,912, k and v the same (16 kv heads: MHA),
  // o 4096 x 3072 = 12,582,912, so attention 50,331,648; GeGLU 3 x 3072 x 24576 = 226,492,416;
  // two RMSNorms 6,144: 276,830,208, x 28 = 7,751,245,824; final norm 3,072. Total
  // 8,537,680,896, the safetensors index of google/gemma-7b (17,075,361,792 bytes in bf16).
  const std::string path = hf_fixture("gemma-7b.json");
  const TransformerConfig model = load_model(path);
  CHECK(model.num_layers == 28);
  CHECK(model.hidden_size == 3072);
  CHECK(model.num_attention_heads == 16);
  CHECK(model.num_kv_heads == 16);
  CHECK(model.head_dim == 256);  // 16 x 256 = 4096 != h
  CHECK(model.ffn_hidden_size == 24576);
  CHECK(model.vocab_size == 256000);
  CHECK(model.activation == Activation::kGeglu);  // hidden_act "gelu", run as the tanh form
  CHECK(model.norm == Norm::kRmsNorm);
  CHECK(model.norm_unit_offset);
  CHECK(model.scale_embeddings);
  CHECK(model.positions == Positions::kRope);
  CHECK(model.tied_embeddings);
  CHECK_FALSE(model.qkv_bias);
  CHECK_FALSE(model.attention_output_bias);
  CHECK_FALSE(model.mlp_bias);
  CHECK_FALSE(model.dropout);
  CHECK(model.sliding_window == 0);
  const auto counts = count_parameters(model);
  CHECK(counts.token_embedding == 786'432'000);
  CHECK(counts.per_layer == 276'830'208);
  CHECK(counts.final_norm == 3'072);
  CHECK(counts.lm_head == 0);
  CHECK(counts.total == 8'537'680'896);
}

TEST_CASE("google/gemma-2b: 2,506,172,416 parameters, multi-query attention") {
  // Gemma Team 2024, Table 1 (2B: d_model 2048, 18 layers, 8 heads of 256, 1 kv head). Tied
  // embedding 256000 x 2048 = 524,288,000; per layer q and o 2 x 2048 x 2048 = 8,388,608, k and
  // v 2 x 256 x 2048 = 1,048,576, GeGLU 3 x 2048 x 16384 = 100,663,296, norms 4,096:
  // 110,104,576, x 18 = 1,981,882,368; final norm 2,048. Total 2,506,172,416 (safetensors index).
  const TransformerConfig model = load_model(hf_fixture("gemma-2b.json"));
  CHECK(model.num_kv_heads == 1);
  CHECK(model.head_dim == 256);
  CHECK(count_parameters(model).per_layer == 110'104'576);
  CHECK(count_parameters(model).total == 2'506'172'416);
}

TEST_CASE(
    "google/gemma-3-1b-pt: 999,885,952 parameters, sandwich norms, q/k norms, 5 of 6 windowed") {
  // Gemma Team 2025, Table 1 and Sec. 2. Term by term: tied embedding 262144 x 1152 =
  // 301,989,888; per layer q 1152 x 1024 = 1,179,648 (4 heads of 256), k and v 1152 x 256 each
  // = 589,824 (one kv head), o 1,179,648, q_norm and k_norm 2 x 256 = 512, GeGLU 3 x 1152 x
  // 6912 = 23,887,872, four RMSNorms 4 x 1152 = 4,608: 26,842,112, x 26 = 697,894,912; final
  // norm 1,152. Total 999,885,952, the safetensors index of google/gemma-3-1b-pt.
  const TransformerConfig model = load_model(hf_fixture("gemma-3-1b-pt.json"));
  CHECK(model.activation == Activation::kGeglu);
  CHECK(model.sandwich_norm);
  CHECK(model.qk_norm);
  CHECK(model.norm_unit_offset);
  CHECK(model.scale_embeddings);
  CHECK(model.tied_embeddings);
  CHECK(model.sliding_window == 512);
  CHECK(model.window_attn_skip_freq == 6);  // is_sliding = bool((layer_idx + 1) % 6)
  CHECK(model.is_windowed_layer(0));
  CHECK(model.is_windowed_layer(4));
  CHECK_FALSE(model.is_windowed_layer(5));  // layer_idx 5: (5 + 1) % 6 == 0, global
  CHECK(model.is_windowed_layer(6));
  CHECK_FALSE(model.is_windowed_layer(11));
  const auto counts = count_parameters(model);
  CHECK(counts.token_embedding == 301'989'888);
  CHECK(counts.per_layer == 26'842'112);
  CHECK(counts.total == 999'885'952);
}

TEST_CASE("Gemma 3: layer_types, the pattern's defaults, soft-caps and the attention scale") {
  nlohmann::json gemma3 = meshplan::read_json_file(hf_fixture("gemma-3-1b-pt.json"));
  gemma3["num_hidden_layers"] = 3;
  gemma3["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  CHECK(model_from_json(gemma3, "g.json").window_attn_layers == std::vector<int>{1, 0, 1});
  CHECK(model_from_json(gemma3, "g.json").window_attn_skip_freq == 0);
  gemma3["layer_types"] = {"full_attention", "full_attention", "full_attention"};
  CHECK(model_from_json(gemma3, "g.json").sliding_window == 0);
  gemma3["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
  CHECK(input_error([&] { model_from_json(gemma3, "g.json"); }) ==
        "g.json: layer_types: expected sliding_attention or full_attention "
        "(\"chunked_attention\")");
  gemma3.erase("layer_types");
  gemma3.erase("sliding_window_pattern");  // Gemma3TextConfig's default 6
  gemma3.erase("sliding_window");          // and 4096
  CHECK(model_from_json(gemma3, "g.json").window_attn_skip_freq == 6);
  CHECK(model_from_json(gemma3, "g.json").sliding_window == 4096);
  gemma3["sliding_window_pattern"] = 1;  // (layer_idx + 1) % 1 == 0: no layer windowed
  CHECK(model_from_json(gemma3, "g.json").sliding_window == 0);
  // Gemma3ForCausalLM applies the caps and the scale when a config sets them (Gemma3Attention
  // softcap, Gemma3ForCausalLM.forward): read, not refused.
  gemma3["attn_logit_softcapping"] = 50.0;
  gemma3["final_logit_softcapping"] = 30.0;
  gemma3["query_pre_attn_scalar"] = 168;  // gemma-3-27b's, head_dim 128 there
  const TransformerConfig capped = model_from_json(gemma3, "g.json");
  CHECK(capped.attn_logit_softcapping == 50.0);
  CHECK(capped.final_logit_softcapping == 30.0);
  CHECK(capped.query_pre_attn_scalar == 168.0);
  gemma3["attn_logit_softcapping"] = -50.0;
  CHECK(input_error([&] { model_from_json(gemma3, "g.json"); }) ==
        "g.json: attn_logit_softcapping: must be 0 (none) or positive and finite (-50)");
  gemma3["attn_logit_softcapping"] = "50";
  CHECK(input_error([&] { model_from_json(gemma3, "g.json"); }) ==
        "g.json: attn_logit_softcapping: expected a number (\"50\")");
  gemma3["attn_logit_softcapping"] = nullptr;  // none, as the published configs
  CHECK(model_from_json(gemma3, "g.json").attn_logit_softcapping == 0.0);
  gemma3["query_pre_attn_scalar"] = 256;  // = head_dim: the usual scale, stored as 0
  CHECK(model_from_json(gemma3, "g.json").query_pre_attn_scalar == 0.0);
}

TEST_CASE(
    "google/gemma-2-9b: 9,241,705,984 parameters, sandwich norms, caps, even layers windowed") {
  // Gemma Team 2024 ("Gemma 2"), Table 1: 9B, d_model 3584, 42 layers, 16 heads of 256, 8 kv
  // heads, feedforward 14336 x 2 (gated), vocabulary 256128 (256000 in the checkpoint). Term by
  // term: tied embedding 256000 x 3584 = 917,504,000; per layer q and o 2 x 3584 x 4096 =
  // 29,360,128, k and v 2 x 3584 x 2048 = 14,680,064, GeGLU 3 x 3584 x 14336 = 154,140,672, four
  // RMSNorms 4 x 3584 = 14,336: 198,195,200, x 42 = 8,324,198,400; final norm 3,584. Total
  // 9,241,705,984, the safetensors index of google/gemma-2-9b.
  const TransformerConfig model = load_model(hf_fixture("gemma-2-9b.json"));
  CHECK(model.activation == Activation::kGeglu);
  CHECK(model.sandwich_norm);
  CHECK_FALSE(model.qk_norm);
  CHECK(model.norm_unit_offset);
  CHECK(model.scale_embeddings);
  CHECK(model.tied_embeddings);
  CHECK(model.attn_logit_softcapping == 50.0);
  CHECK(model.final_logit_softcapping == 30.0);
  CHECK(model.query_pre_attn_scalar == 0.0);  // 256 = head_dim: the usual 1 / sqrt(256)
  CHECK(model.attention_scale() == 1.0 / 16.0);
  CHECK(model.sliding_window == 4096);
  // Gemma2DecoderLayer is_sliding = not bool(layer_idx % 2): 0-based even layers windowed,
  // window_attn_skip_freq 2 (layer number n = layer_idx + 1 windowed unless n % 2 == 0).
  CHECK(model.window_attn_skip_freq == 2);
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    CAPTURE(layer);
    CHECK(model.is_windowed_layer(layer) == (layer % 2 == 0));
  }
  const auto counts = count_parameters(model);
  CHECK(counts.token_embedding == 917'504'000);
  CHECK(counts.per_layer == 198'195'200);
  CHECK(counts.final_norm == 3'584);
  CHECK(counts.lm_head == 0);
  CHECK(counts.total == 9'241'705'984);
}

TEST_CASE("Gemma 2: Gemma2Config's defaults, null caps, layer_types and gemma-2-27b's scale") {
  nlohmann::json gemma2 = meshplan::read_json_file(hf_fixture("gemma-2-9b.json"));
  gemma2.erase("attn_logit_softcapping");  // Gemma2Config's defaults 50.0 and 30.0
  gemma2.erase("final_logit_softcapping");
  gemma2.erase("query_pre_attn_scalar");  // and 256
  gemma2.erase("sliding_window");         // and 4096
  const TransformerConfig defaults = model_from_json(gemma2, "g.json");
  CHECK(defaults.attn_logit_softcapping == 50.0);
  CHECK(defaults.final_logit_softcapping == 30.0);
  CHECK(defaults.query_pre_attn_scalar == 0.0);
  CHECK(defaults.sliding_window == 4096);
  gemma2["attn_logit_softcapping"] = nullptr;  // None: no cap
  gemma2["final_logit_softcapping"] = nullptr;
  CHECK(model_from_json(gemma2, "g.json").attn_logit_softcapping == 0.0);
  CHECK(model_from_json(gemma2, "g.json").final_logit_softcapping == 0.0);
  // gemma-2-27b: 32 heads of 128 over h 4608, query_pre_attn_scalar 144 = 4608 / 32.
  gemma2["head_dim"] = 128;
  gemma2["query_pre_attn_scalar"] = 144;
  const TransformerConfig scaled = model_from_json(gemma2, "g.json");
  CHECK(scaled.query_pre_attn_scalar == 144.0);
  CHECK(scaled.attention_scale() ==
        doctest::Approx(1.0 / 12.0).epsilon(1e-15).scale(0));  // one rounding of 1 / sqrt(144)
  gemma2["query_pre_attn_scalar"] = -144;
  CHECK(input_error([&] { model_from_json(gemma2, "g.json"); }) ==
        "g.json: query_pre_attn_scalar: must be 0 (none) or positive and finite (-144)");
  gemma2["query_pre_attn_scalar"] = 144;
  gemma2["num_hidden_layers"] = 3;
  gemma2["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
  CHECK(model_from_json(gemma2, "g.json").window_attn_layers == std::vector<int>{1, 0, 1});
  gemma2["final_logit_softcapping"] = 3e7;
  CHECK(input_error([&] { model_from_json(gemma2, "g.json"); }) ==
        "g.json: final_logit_softcapping: absurdly large, more than 1000000 (30000000)");
}

TEST_CASE("openai/gpt-oss-120b: 116,829,156,672 parameters, sinks, biased router and experts") {
  // OpenAI 2025, "gpt-oss-120b & gpt-oss-20b Model Card", Table 1: 116.83B total parameters.
  // Term by term (transformers GptOssForCausalLM): untied embedding and head 2 x 201088 x 2880 =
  // 1,158,266,880; per layer q and o 2 x 2880 x 4096 = 23,592,960, k and v 2 x 2880 x 512 =
  // 2,949,120, their biases 4096 + 512 + 512 + 2880 = 8,000, sinks 64, router 128 x 2880 + 128 =
  // 368,768, experts 128 x (3 x 2880 x 2880 + 2 x 2880 + 2880) = 3,186,155,520, two RMSNorms
  // 5,760: 3,213,080,192, x 36 = 115,670,886,912; final norm 2,880. Total 116,829,156,672.
  const TransformerConfig model = load_model(hf_fixture("gpt-oss-120b.json"));
  CHECK(model.activation == Activation::kQuickGeglu);
  CHECK(model.glu_linear_offset == 1.0);
  CHECK(model.activation_clamp_value == 7.0);
  CHECK(model.attention_sinks);
  CHECK(model.router_bias);
  CHECK_FALSE(model.router_score_bias);
  CHECK(model.qkv_bias);
  CHECK(model.attention_output_bias);
  CHECK(model.mlp_bias);
  CHECK_FALSE(model.tied_embeddings);
  CHECK_FALSE(model.dropout);
  CHECK(model.head_dim == 64);
  CHECK(model.num_experts == 128);
  CHECK(model.experts_per_token == 4);
  CHECK(model.expert_ffn_hidden_size == 2880);
  CHECK(model.first_dense_layers == 0);
  CHECK(model.sliding_window == 128);
  // layer_types: 18 x [sliding, full], 0-based even layers windowed.
  CHECK(model.window_attn_layers.size() == 36);
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    CAPTURE(layer);
    CHECK(model.is_windowed_layer(layer) == (layer % 2 == 0));
  }
  const auto counts = count_parameters(model);
  CHECK(counts.token_embedding == 579'133'440);
  CHECK(counts.lm_head == 579'133'440);
  CHECK(counts.moe_layer == 3'213'080'192);
  CHECK(counts.final_norm == 2'880);
  CHECK(counts.total == 116'829'156'672);
  // Model card: 5.13B active parameters, the input embedding not counted; meshplan's active
  // count includes it: 5,132,849,472 + 579,133,440.
  CHECK(counts.active - counts.token_embedding == 5'132'849'472);
}

TEST_CASE("the gpt-oss-120b and gpt-oss-20b presets are the Hugging Face configs at seq 4096") {
  nlohmann::json oss = meshplan::read_json_file(hf_fixture("gpt-oss-120b.json"));
  oss["seq_length"] = 4096;
  for (const char* preset : {"gpt-oss-120b", "gpt-oss-20b"}) {
    CAPTURE(preset);
    const TransformerConfig model = load_model(preset);
    if (std::string(preset) == "gpt-oss-20b") {
      oss["num_hidden_layers"] = 24;
      oss["num_local_experts"] = 32;
      oss["layer_types"] = std::vector<std::string>(24, "full_attention");
      for (size_t i = 0; i < 24; i += 2) {
        oss["layer_types"][i] = "sliding_attention";
      }
    }
    TransformerConfig loaded = model_from_json(oss, preset);
    CHECK(count_parameters(model).total == count_parameters(loaded).total);
    CHECK(count_parameters(model).active == count_parameters(loaded).active);
    for (int64_t layer = 0; layer < model.num_layers; ++layer) {
      CHECK(model.is_windowed_layer(layer) == loaded.is_windowed_layer(layer));
    }
    // The same model but for the window's spelling (N = 2 against the layer_types list).
    loaded.name = model.name;
    loaded.window_attn_layers.clear();
    loaded.window_attn_skip_freq = 2;
    // Rotary positions have no table: the preset states none (seq_length), the config 131072.
    CHECK(loaded.max_position_embeddings == 131072);
    loaded.max_position_embeddings = model.max_position_embeddings;
    CHECK(meshplan::models::model_to_json(loaded).dump() ==
          meshplan::models::model_to_json(model).dump());
    CHECK(loaded == model);
  }
}

TEST_CASE("gpt-oss: gpt-oss-20b, GptOssConfig's defaults and refusals") {
  nlohmann::json oss = meshplan::read_json_file(hf_fixture("gpt-oss-120b.json"));
  // gpt-oss-20b (model card Table 1: 20.91B, 3.61B active): 24 layers of 32 experts.
  oss["num_hidden_layers"] = 24;
  oss["num_local_experts"] = 32;
  oss.erase("layer_types");  // GptOssConfig: "sliding_attention" if bool((i + 1) % 2)
  const TransformerConfig small = model_from_json(oss, "o.json");
  CHECK(small.window_attn_skip_freq == 2);
  CHECK(small.is_windowed_layer(0));
  CHECK_FALSE(small.is_windowed_layer(1));
  const auto counts = count_parameters(small);
  CHECK(counts.total == 20'914'757'184);
  CHECK(counts.active - counts.token_embedding == 3'608'307'264);
  // Absent fields take GptOssConfig's defaults.
  for (const char* field : {"head_dim", "sliding_window", "swiglu_limit", "num_local_experts",
                            "num_experts_per_tok", "attention_bias"}) {
    oss.erase(field);
  }
  const TransformerConfig defaults = model_from_json(oss, "o.json");
  CHECK(defaults.head_dim == 64);
  CHECK(defaults.sliding_window == 128);
  CHECK(defaults.activation_clamp_value == 7.0);
  CHECK(defaults.num_experts == 128);
  CHECK(defaults.experts_per_token == 4);
  CHECK(defaults.qkv_bias);
  oss["sliding_window"] = nullptr;  // None: full causal attention on every layer
  CHECK(model_from_json(oss, "o.json").sliding_window == 0);
  CHECK_FALSE(model_from_json(oss, "o.json").has_window_pattern());
  oss.erase("sliding_window");
  oss["swiglu_alpha"] = 1.0;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: swiglu_alpha: the experts' gate is quick GELU, x sigmoid(1.702 x); another gain "
        "is not modelled (1.0)");
  oss.erase("swiglu_alpha");
  oss["swiglu_limit"] = nullptr;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: swiglu_limit: null (transformers keeps None here and cannot build the model; "
        "give a value or leave the key out for the class default)");
  // A limit of 0 or less clamps in transformers but reads as no clamp in meshplan (0 = none):
  // refused, as is a huge one, under the config's own key.
  oss["swiglu_limit"] = 0;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: swiglu_limit: must be positive, the experts' clamp (gate <= limit, up in "
        "[-limit, limit]) (0)");
  oss["swiglu_limit"] = -7.0;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: swiglu_limit: must be positive, the experts' clamp (gate <= limit, up in "
        "[-limit, limit]) (-7)");
  oss["swiglu_limit"] = 1e300;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: swiglu_limit: absurdly large, more than 1000000 (1e+300)");
  oss.erase("swiglu_limit");
  // openai's experts_per_token beside num_experts_per_tok (absent here: 4): refused when it
  // differs, not silently ignored.
  oss["experts_per_token"] = 8;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: experts_per_token: differs from num_experts_per_tok, the key transformers "
        "reads (8 != 4)");
  oss["experts_per_token"] = "4";
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: experts_per_token: expected an integer (\"4\")");
  oss["experts_per_token"] = 4;
  CHECK(model_from_json(oss, "o.json").experts_per_token == 4);
  // layer_types is checked also when sliding_window null windows no layer.
  oss["sliding_window"] = nullptr;
  oss["layer_types"] = 5;
  CHECK(input_error([&] { model_from_json(oss, "o.json"); }) ==
        "o.json: layer_types: expected one entry per layer, 24 (5)");
}

TEST_CASE("Qwen2: a malformed layer_types is refused without use_sliding_window too") {
  nlohmann::json config = meshplan::read_json_file(hf_fixture("Qwen2-0.5B.json"));
  config["layer_types"] = nlohmann::json::array({"full_attention"});
  CHECK(input_error([&] { model_from_json(config, "qwen.json"); }) ==
        "qwen.json: layer_types: expected one entry per layer, 24 ([\"full_attention\"])");
}

TEST_CASE("Gemma: activation fields, head_dim default and refusals") {
  nlohmann::json gemma = meshplan::read_json_file(hf_fixture("gemma-2b.json"));
  // hidden_activation (transformers >= 4.39) takes precedence over hidden_act.
  gemma["hidden_activation"] = "gelu_pytorch_tanh";
  gemma["hidden_act"] = "silu";
  CHECK(model_from_json(gemma, "g.json").activation == Activation::kGeglu);
  gemma["hidden_activation"] = "silu";
  CHECK(input_error([&] { model_from_json(gemma, "g.json"); }) ==
        "g.json: hidden_activation: unsupported activation (silu); supported: gelu, gelu_new, "
        "gelu_pytorch_tanh, gelu_fast");
  gemma.erase("hidden_activation");
  CHECK(input_error([&] { model_from_json(gemma, "g.json"); }) ==
        "g.json: hidden_act: unsupported activation (silu); supported: gelu, gelu_new, "
        "gelu_pytorch_tanh, gelu_fast");
  gemma.erase("hidden_act");  // GemmaConfig's default: gelu_pytorch_tanh
  CHECK(model_from_json(gemma, "g.json").activation == Activation::kGeglu);
  gemma["hidden_size"] = 1024;
  gemma.erase("head_dim");  // GemmaConfig's default 256, not h / a = 1024 / 8 = 128
  CHECK(model_from_json(gemma, "g.json").head_dim == 256);
  gemma.erase("tie_word_embeddings");
  CHECK(model_from_json(gemma, "g.json").tied_embeddings);
  gemma["attention_bias"] = true;  // GemmaAttention: q, k, v and o_proj with bias
  CHECK(model_from_json(gemma, "g.json").qkv_bias);
  CHECK(model_from_json(gemma, "g.json").attention_output_bias);
}

TEST_CASE("Qwen2: the window counts with use_sliding_window, on the layers it names") {
  // Qwen2-0.5B: sliding_window 131072 with use_sliding_window false: full attention.
  nlohmann::json config = meshplan::read_json_file(hf_fixture("Qwen2-0.5B.json"));
  CHECK(model_from_json(config, "qwen.json").sliding_window == 0);
  // max_window_layers 24 = num_hidden_layers: transformers windows layers i >= 24, none.
  config["use_sliding_window"] = true;
  config["sliding_window"] = 4096;
  CHECK(model_from_json(config, "qwen.json").sliding_window == 0);
  // max_window_layers 0: every layer windowed.
  config["max_window_layers"] = 0;
  const TransformerConfig windowed = model_from_json(config, "qwen.json");
  CHECK(windowed.sliding_window == 4096);
  CHECK(windowed.is_windowed());               // 4096 < seq_length 131072
  CHECK(windowed.window_attn_layers.empty());  // every layer: no pattern
  // In between: layers with 0-based index 12 to 23 windowed, 0 to 11 full (transformers
  // Qwen2Config layer_types: sliding_attention for i >= max_window_layers), as the list.
  config["max_window_layers"] = 12;
  const TransformerConfig half = model_from_json(config, "qwen.json");
  CHECK(half.sliding_window == 4096);
  CHECK(half.window_attn_skip_freq == 0);
  std::vector<int> expected(24, 0);
  std::fill(expected.begin() + 12, expected.end(), 1);
  CHECK(half.window_attn_layers == expected);
  CHECK(half.is_windowed());
  CHECK_FALSE(half.is_windowed_layer(11));
  CHECK(half.is_windowed_layer(12));
  CHECK(half.is_windowed_layer(23));
  // 23: only the last layer windowed.
  config["max_window_layers"] = 23;
  std::vector<int> last_only(24, 0);
  last_only[23] = 1;
  CHECK(model_from_json(config, "qwen.json").window_attn_layers == last_only);
  config["max_window_layers"] = -1;
  CHECK(input_error([&] { model_from_json(config, "qwen.json"); }) ==
        "qwen.json: max_window_layers: must be 0 or more (-1)");
  // Absent: Qwen2Config's default 28 >= 24 layers, no window.
  config.erase("max_window_layers");
  CHECK(model_from_json(config, "qwen.json").sliding_window == 0);
  // layer_types, when stated, decides instead of max_window_layers: all, none, or those named.
  config["layer_types"] = std::vector<std::string>(24, "sliding_attention");
  CHECK(model_from_json(config, "qwen.json").sliding_window == 4096);
  CHECK(model_from_json(config, "qwen.json").window_attn_layers.empty());
  config["layer_types"] = std::vector<std::string>(24, "full_attention");
  CHECK(model_from_json(config, "qwen.json").sliding_window == 0);
  CHECK(model_from_json(config, "qwen.json").window_attn_layers.empty());
  config["layer_types"][0] = "sliding_attention";
  config["layer_types"][2] = "sliding_attention";
  const TransformerConfig mixed = model_from_json(config, "qwen.json");
  CHECK(mixed.sliding_window == 4096);
  std::vector<int> first_and_third(24, 0);
  first_and_third[0] = first_and_third[2] = 1;
  CHECK(mixed.window_attn_layers == first_and_third);
  // Read as a meshplan model file reads the same list (model_to_json writes it so).
  CHECK(model_to_json(mixed).at("window_attn_skip_freq") == nlohmann::json(first_and_third));
  CHECK(model_from_json(model_to_json(mixed), "round-trip") == mixed);
  config["layer_types"] = std::vector<std::string>(23, "full_attention");
  CHECK(input_error([&] {
          model_from_json(config, "qwen.json");
        }).find("qwen.json: layer_types: expected one entry per layer, 24 (") == 0);
  config.erase("layer_types");
  config["max_window_layers"] = 0;
  config["use_sliding_window"] = "yes";
  CHECK(input_error([&] { model_from_json(config, "qwen.json"); }) ==
        "qwen.json: use_sliding_window: expected true or false (\"yes\")");
  config["use_sliding_window"] = true;
  config["sliding_window"] = 0;
  CHECK(input_error([&] { model_from_json(config, "qwen.json"); }) ==
        "qwen.json: sliding_window: must be positive (0)");
}

TEST_CASE("configs without `architectures` are read by model_type") {
  // The fixtures with `architectures` removed give the same model as with it.
  for (const char* file :
       {"Llama-2-7b-hf.json", "Qwen2-0.5B.json", "gpt2.json", "pythia-160m.json"}) {
    CAPTURE(file);
    nlohmann::json config = meshplan::read_json_file(hf_fixture(file));
    const TransformerConfig with = model_from_json(config, "c.json");
    config.erase("architectures");
    const TransformerConfig without = model_from_json(config, "c.json");
    CHECK(count_parameters(without).total == count_parameters(with).total);
    CHECK(without.qkv_bias == with.qkv_bias);
    CHECK(without.tied_embeddings == with.tied_embeddings);
    CHECK(without.positions == with.positions);
  }
  // The issue's case: Llama-3 8B saved without architectures (it has attention_dropout, which
  // meshplan's own format would call an unknown field).
  nlohmann::json llama3 = meshplan::read_json_file(hf_fixture("Meta-Llama-3-8B.json"));
  llama3.erase("architectures");
  CHECK(count_parameters(model_from_json(llama3, "llama3.json")).total == 8'030'261'248);
  // `architectures: null`, as save_pretrained writes for a bare config, is absent too.
  llama3["architectures"] = nullptr;
  CHECK(model_from_json(llama3, "llama3.json").num_kv_heads == 8);

  nlohmann::json falcon = small_llama();
  falcon.erase("architectures");
  falcon["model_type"] = "falcon";
  CHECK(input_error([&] { model_from_json(falcon, "falcon.json"); }) ==
        "falcon.json: model_type: unsupported model type (falcon); supported: llama, mistral, "
        "phi3, qwen2, qwen3, gpt2, gpt_neox, mixtral, qwen2_moe, qwen3_moe, deepseek_v3, glm4_moe, "
        "mpt, gemma, gemma2, gemma3_text, gpt_oss, llama4_text");
  nlohmann::json mismatch = small_llama();
  mismatch["model_type"] = "gpt2";
  CHECK(input_error([&] { model_from_json(mismatch, "c.json"); }) ==
        "c.json: model_type: LlamaForCausalLM is model_type llama, not gpt2");
  nlohmann::json neither = small_llama();
  neither["architectures"] = nullptr;
  CHECK(input_error([&] { model_from_json(neither, "c.json"); }) ==
        "c.json: model_type: missing (a Hugging Face config needs architectures or model_type)");
  nlohmann::json not_text = small_llama();
  not_text["model_type"] = 7;
  CHECK(input_error([&] { model_from_json(not_text, "c.json"); }) ==
        "c.json: model_type: expected a string (7)");
}

TEST_CASE("activations the MLP does not compute are rejected, naming the field") {
  nlohmann::json llama = small_llama();
  llama["hidden_act"] = "silu";
  CHECK(model_from_json(llama, "c.json").activation == Activation::kSwiglu);
  llama["hidden_act"] = "swish";  // transformers' ACT2FN: the same SiLU
  CHECK(model_from_json(llama, "c.json").activation == Activation::kSwiglu);
  llama["hidden_act"] = "gelu";  // a GeGLU MLP: not what meshplan's SwiGLU computes
  CHECK(input_error([&] { model_from_json(llama, "c.json"); }) ==
        "c.json: hidden_act: unsupported activation (gelu); supported: silu, swish");
  llama["hidden_act"] = 1;
  CHECK(input_error([&] { model_from_json(llama, "c.json"); }) ==
        "c.json: hidden_act: expected a string (1)");

  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  for (const char* gelu : {"gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_fast"}) {
    gpt2["activation_function"] = gelu;
    CHECK(model_from_json(gpt2, "gpt2.json").activation == Activation::kGelu);
  }
  gpt2["activation_function"] = "relu";
  CHECK(input_error([&] { model_from_json(gpt2, "gpt2.json"); }) ==
        "gpt2.json: activation_function: unsupported activation (relu); supported: gelu, "
        "gelu_new, gelu_pytorch_tanh, gelu_fast");

  nlohmann::json pythia = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  pythia["hidden_act"] = "quick_gelu";
  CHECK(input_error([&] { model_from_json(pythia, "pythia.json"); }) ==
        "pythia.json: hidden_act: unsupported activation (quick_gelu); supported: gelu, "
        "gelu_new, gelu_pytorch_tanh, gelu_fast");
}

TEST_CASE("GPT-2 with cross-attention blocks is rejected") {
  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt2["add_cross_attention"] = false;
  CHECK(model_from_json(gpt2, "gpt2.json").num_layers == 12);
  gpt2["add_cross_attention"] = true;  // an extra attention block per layer (GPT2Block)
  CHECK(input_error([&] { model_from_json(gpt2, "gpt2.json"); }) ==
        "gpt2.json: add_cross_attention: cross-attention blocks are not supported (true)");
}

TEST_CASE("Llama: head_dim, attention_bias and mlp_bias are honoured") {
  nlohmann::json config = small_llama();
  config["head_dim"] = 32;  // a d = 128 != h = 64, as in Mistral-Nemo
  config["attention_bias"] = true;
  config["mlp_bias"] = true;
  const TransformerConfig model = model_from_json(config, "llama.json");
  CHECK(model.head_dim == 32);
  CHECK(model.qkv_bias);
  CHECK(model.attention_output_bias);
  CHECK(model.mlp_bias);
  // Q, O 2 * (4 * 32) * 64 = 16384; K, V 2 * (2 * 32) * 64 = 8192; q/k/v biases (4 + 2*2) * 32 =
  // 256; o bias 64; MLP 3 * 64 * 176 = 33792 + biases 2 * 176 + 64 = 416; norms 2 * 64 = 128.
  CHECK(count_parameters(model).per_layer == 59'232);
}

TEST_CASE("defaults: num_key_value_heads = a, n_inner null = 4h, tie_word_embeddings per class") {
  nlohmann::json llama = small_llama();
  llama.erase("num_key_value_heads");
  CHECK(model_from_json(llama, "llama.json").num_kv_heads == 4);
  CHECK_FALSE(model_from_json(llama, "llama.json").tied_embeddings);  // LlamaConfig default

  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt2["n_inner"] = nullptr;
  CHECK(model_from_json(gpt2, "gpt2.json").ffn_hidden_size == 3072);  // 4 * 768
  gpt2["n_inner"] = 1000;
  CHECK(model_from_json(gpt2, "gpt2.json").ffn_hidden_size == 1000);

  nlohmann::json dense = small_llama();
  dense["num_local_experts"] = 1;  // one expert is a dense model
  dense["num_experts"] = 0;
  dense["moe_intermediate_size"] = nullptr;
  CHECK(model_from_json(dense, "llama.json").num_layers == 2);
}

TEST_CASE("mixture-of-experts fields on a dense architecture or in meshplan's format") {
  const std::string moe_families =
      "MoE models load as MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
      "DeepseekV3ForCausalLM, Glm4MoeForCausalLM, GptOssForCausalLM or Llama4ForCausalLM";
  nlohmann::json qwen_moe = small_llama();
  qwen_moe["num_experts"] = 60;
  CHECK(input_error([&] { model_from_json(qwen_moe, "qwen.json"); }) ==
        "qwen.json: num_experts: mixture-of-experts field in a dense architecture; " +
            moe_families + " (60)");

  nlohmann::json deepseek = small_llama();
  deepseek["n_routed_experts"] = 160;
  CHECK(input_error([&] { model_from_json(deepseek, "ds.json"); }) ==
        "ds.json: n_routed_experts: mixture-of-experts field in a dense architecture; " +
            moe_families + " (160)");

  nlohmann::json moe_field = small_llama();
  moe_field["moe_intermediate_size"] = 1408;
  CHECK(input_error([&] { model_from_json(moe_field, "m.json"); }) ==
        "m.json: moe_intermediate_size: mixture-of-experts field in a dense architecture; " +
            moe_families + " (1408)");

  // meshplan's own format spells MoE its own way (num_experts, ...): HF names are unknown.
  nlohmann::json own = meshplan::models::model_to_json(load_model("tiny"));
  own["num_local_experts"] = 8;
  CHECK(input_error([&] { model_from_json(own, "tiny.json"); }) ==
        "tiny.json: num_local_experts: unknown field (8)");
}

TEST_CASE("unsupported architectures and malformed `architectures`") {
  nlohmann::json falcon = small_llama();
  falcon["architectures"] = {"FalconForCausalLM"};
  CHECK(
      input_error([&] { model_from_json(falcon, "falcon.json"); }) ==
      "falcon.json: architectures: unsupported architecture (FalconForCausalLM); supported: "
      "LlamaForCausalLM, MistralForCausalLM, Phi3ForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, "
      "GPT2LMHeadModel, GPTNeoXForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, "
      "Qwen3MoeForCausalLM, DeepseekV3ForCausalLM, Glm4MoeForCausalLM, MptForCausalLM, "
      "MPTForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM, GptOssForCausalLM, "
      "Llama4ForCausalLM");

  nlohmann::json not_a_list = small_llama();
  not_a_list["architectures"] = "LlamaForCausalLM";
  CHECK(input_error([&] { model_from_json(not_a_list, "c.json"); }) ==
        "c.json: architectures: expected a non-empty list of strings (\"LlamaForCausalLM\")");

  nlohmann::json empty = small_llama();
  empty["architectures"] = nlohmann::json::array();
  CHECK(input_error([&] { model_from_json(empty, "c.json"); }) ==
        "c.json: architectures: expected a non-empty list of strings ([])");

  // A vision-language wrapper is refused, not planned as its language model (its other towers
  // are not costed); the error says what to do when the wrapped model is supported.
  nlohmann::json gemma3 = {
      {"architectures", {"Gemma3ForConditionalGeneration"}},
      {"model_type", "gemma3"},
      {"text_config", meshplan::read_json_file(hf_fixture("gemma-3-1b-pt.json"))},
      {"vision_config", {{"model_type", "siglip_vision_model"}}}};
  CHECK(input_error([&] { model_from_json(gemma3, "vlm.json"); })
            .ends_with("Llama4ForCausalLM; it wraps a language model in text_config (gemma3_text, "
                       "supported) beside other towers meshplan does not cost: to plan the "
                       "language model alone, save text_config as a config.json of its own"));
  // The wrapped config planned alone is the Gemma 3 model.
  CHECK(model_from_json(gemma3["text_config"], "text.json").num_layers == 26);
  gemma3.erase("architectures");
  gemma3["text_config"]["architectures"] = {"Qwen3NextForCausalLM"};
  CHECK(input_error([&] { model_from_json(gemma3, "vlm.json"); })
            .ends_with("llama4_text; the language model it wraps in text_config is not a supported "
                       "family either"));
}

TEST_CASE("HF configs: missing fields, wrong types and bad sizes") {
  nlohmann::json missing = small_llama();
  missing.erase("hidden_size");
  CHECK(input_error([&] { model_from_json(missing, "c.json"); }) == "c.json: hidden_size: missing");

  nlohmann::json wrong_type = small_llama();
  wrong_type["hidden_size"] = "4096";
  CHECK(input_error([&] { model_from_json(wrong_type, "c.json"); }) ==
        "c.json: hidden_size: expected an integer (\"4096\")");

  nlohmann::json bool_type = small_llama();
  bool_type["tie_word_embeddings"] = "false";
  CHECK(input_error([&] { model_from_json(bool_type, "c.json"); }) ==
        "c.json: tie_word_embeddings: expected true or false (\"false\")");

  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt2.erase("n_embd");
  CHECK(input_error([&] { model_from_json(gpt2, "gpt2.json"); }) == "gpt2.json: n_embd: missing");

  nlohmann::json indivisible = small_llama();
  indivisible["hidden_size"] = 66;  // 66 % 4 = 2 and no head_dim
  CHECK(input_error([&] { model_from_json(indivisible, "c.json"); }) ==
        "c.json: num_attention_heads: does not divide hidden_size and no head_dim is given "
        "(66 % 4)");

  nlohmann::json zero_layers = small_llama();
  zero_layers["num_hidden_layers"] = 0;  // named as the config spells it
  CHECK(input_error([&] { model_from_json(zero_layers, "c.json"); }) ==
        "c.json: num_hidden_layers: must be positive (0)");

  nlohmann::json negative_kv = small_llama();
  negative_kv["num_key_value_heads"] = -8;
  CHECK(input_error([&] { model_from_json(negative_kv, "c.json"); }) ==
        "c.json: num_key_value_heads: must be positive (-8)");

  nlohmann::json huge = small_llama();
  huge["num_hidden_layers"] = 1000000;  // validate_model's bound, named as the config names it
  CHECK(input_error([&] { model_from_json(huge, "c.json"); }) ==
        "c.json: num_hidden_layers: absurdly large, more than 2048 (1000000)");
}

namespace {

TEST_CASE("dropout: from the config's dropout probabilities, class defaults when absent") {
  // gpt2.json: resid_pdrop = embd_pdrop = attn_pdrop = 0.1 (and GPT2Config's defaults are 0.1).
  CHECK(load_model(hf_fixture("gpt2.json")).dropout);
  // Meta-Llama-3-8B.json: attention_dropout 0.0; Llama has no hidden dropout.
  CHECK_FALSE(load_model(hf_fixture("Meta-Llama-3-8B.json")).dropout);
  // Llama-2-7b-hf.json gives none: LlamaConfig's attention_dropout defaults to 0.0.
  CHECK_FALSE(load_model(hf_fixture("Llama-2-7b-hf.json")).dropout);
  // GPTNeoXConfig: attention_dropout and hidden_dropout default 0.0.
  nlohmann::json neox = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  CHECK_FALSE(model_from_json(neox, "neox.json").dropout);
  neox["hidden_dropout"] = 0.1;
  CHECK(model_from_json(neox, "neox.json").dropout);
  nlohmann::json gpt = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt["resid_pdrop"] = gpt["embd_pdrop"] = gpt["attn_pdrop"] = 0.0;
  CHECK_FALSE(model_from_json(gpt, "gpt2.json").dropout);
  gpt["attn_pdrop"] = 1.5;
  CHECK(input_error([&] { model_from_json(gpt, "gpt2.json"); }) ==
        "gpt2.json: attn_pdrop: dropout probability must be in [0, 1) (1.5)");
}

TEST_CASE("parallel_residual: GPTNeoXConfig.use_parallel_residual, default true") {
  nlohmann::json neox = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  CHECK(model_from_json(neox, "neox.json").parallel_residual);  // the file says true
  neox.erase("use_parallel_residual");
  CHECK(model_from_json(neox, "neox.json").parallel_residual);  // the class default
  neox["use_parallel_residual"] = false;
  CHECK_FALSE(model_from_json(neox, "neox.json").parallel_residual);
  neox["use_parallel_residual"] = "yes";
  CHECK(input_error([&] { model_from_json(neox, "neox.json"); }).find("use_parallel_residual") !=
        std::string::npos);
  // The other families are sequential blocks.
  CHECK_FALSE(load_model(hf_fixture("gpt2.json")).parallel_residual);
  CHECK_FALSE(load_model(hf_fixture("Meta-Llama-3-8B.json")).parallel_residual);
}

}  // namespace

TEST_CASE("partial rotary: transformers 5's rope_parameters, and whole-head classes refuse it") {
  // transformers 5 (RotaryEmbeddingConfigMixin.convert_rope_params_to_dict) keeps the factor in
  // rope_parameters; the 4.x top-level key is only that dict's default.
  nlohmann::json phi = meshplan::read_json_file(hf_fixture("Phi-3-mini-4k-instruct.json"));
  phi["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}};
  CHECK(model_from_json(phi, "phi.json").rotary_percent == 1.0);  // Phi3Config's default
  phi["rope_parameters"]["partial_rotary_factor"] = 0.75;         // Phi-4-mini, saved by 5.x
  CHECK(model_from_json(phi, "phi.json").rotary_dim() == 72);     // int(96 x 0.75)
  phi["partial_rotary_factor"] = 0.5;  // the dict's value wins over the top-level key
  CHECK(model_from_json(phi, "phi.json").rotary_percent == 0.75);
  phi["rope_parameters"]["partial_rotary_factor"] = 0;
  CHECK(input_error([&] { model_from_json(phi, "phi.json"); }) ==
        "phi.json: rope_parameters.partial_rotary_factor: must be in (0, 1], 1 to rotate every "
        "channel of a head (0)");
  phi["rope_parameters"]["partial_rotary_factor"] = "half";
  CHECK(input_error([&] { model_from_json(phi, "phi.json"); }) ==
        "phi.json: rope_parameters: partial_rotary_factor: expected a number (\"half\")");
  phi["rope_parameters"] = "default";
  CHECK(input_error([&] { model_from_json(phi, "phi.json"); }) ==
        "phi.json: rope_parameters: must be an object (\"default\")");

  // GPTNeoXConfig 5.x: rope_parameters' factor, else rotary_pct, else 0.25.
  nlohmann::json neox = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  neox.erase("rotary_pct");
  neox["rope_parameters"] = {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  CHECK(model_from_json(neox, "neox.json").rotary_dim() == 32);  // int(64 x 0.5)

  // Nested by layer type (Gemma 3's layout in 5.x): one value across types, or refused.
  nlohmann::json glm = meshplan::read_json_file(hf_fixture("GLM-4.5-Air.json"));
  glm.erase("partial_rotary_factor");
  glm["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}},
                            {"sliding_attention", {{"rope_theta", 1e4}}}};
  CHECK(model_from_json(glm, "glm.json").rotary_percent == 0.5);  // Glm4MoeConfig's default
  glm["rope_parameters"]["full_attention"]["partial_rotary_factor"] = 0.25;
  CHECK(input_error([&] { model_from_json(glm, "glm.json"); }) ==
        "glm.json: rope_parameters: partial_rotary_factor: differs between layer types (0.25 and "
        "0.5); meshplan rotates one fraction of every head");
  glm["rope_parameters"]["sliding_attention"]["partial_rotary_factor"] = 0.25;
  CHECK(model_from_json(glm, "glm.json").rotary_percent == 0.25);

  // Llama's apply_rotary_pos_emb multiplies the whole head by cos and sin, which a factor below
  // 1 narrows: transformers cannot build that model, so it is refused, not read at full rotary.
  nlohmann::json llama = small_llama();
  llama["partial_rotary_factor"] = 1.0;
  CHECK_FALSE(model_from_json(llama, "l.json").has_partial_rotary());
  const std::string whole_heads =
      "LlamaForCausalLM rotates whole heads (its apply_rotary_pos_emb has no partial path, so "
      "transformers cannot build this model); a partial factor is read for Phi-3, GLM-4.5 and "
      "GPT-NeoX (0.5)";
  llama["partial_rotary_factor"] = 0.5;
  CHECK(input_error([&] { model_from_json(llama, "l.json"); }) ==
        "l.json: partial_rotary_factor: " + whole_heads);
  llama.erase("partial_rotary_factor");
  llama["rope_parameters"] = {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}};
  CHECK(input_error([&] { model_from_json(llama, "l.json"); }) ==
        "l.json: rope_parameters.partial_rotary_factor: " + whole_heads);
  // The same for the other whole-head families; GPT-2 and MPT have no rotary positions and
  // ignore the key, as transformers does.
  nlohmann::json qwen = meshplan::read_json_file(hf_fixture("Qwen3-30B-A3B.json"));
  qwen["partial_rotary_factor"] = 0.5;
  CHECK(input_error([&] {
          model_from_json(qwen, "q.json");
        }).starts_with("q.json: partial_rotary_factor: Qwen3MoeForCausalLM rotates whole heads"));
  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt2["partial_rotary_factor"] = 0.5;
  CHECK(model_from_json(gpt2, "g.json").positions == Positions::kLearned);
}

TEST_CASE("rope_theta: the config's base, transformers 5's rope_parameters, class defaults") {
  // As the checked-in configs state it (their config.json rope_theta).
  CHECK(load_model(hf_fixture("Meta-Llama-3-8B.json")).rope_theta == 500000.0);
  CHECK(load_model(hf_fixture("Mixtral-8x7B-v0.1.json")).rope_theta == 1e6);
  CHECK(load_model(hf_fixture("gpt-oss-120b.json")).rope_theta == 150000.0);
  CHECK(load_model(hf_fixture("Llama-4-Scout-17B-16E-text.json")).rope_theta == 500000.0);
  CHECK(load_model(hf_fixture("gemma-3-1b-pt.json")).rope_theta == 1e6);  // the global base
  CHECK(load_model(hf_fixture("DeepSeek-V3.json")).rope_theta == 10000.0);
  // Llama-2-7b-hf states none: LlamaConfig's default.
  CHECK(load_model(hf_fixture("Llama-2-7b-hf.json")).rope_theta == 10000.0);
  // Absent, each class's default_theta (configuration_<model>.py).
  nlohmann::json mixtral = meshplan::read_json_file(hf_fixture("Mixtral-8x7B-v0.1.json"));
  mixtral.erase("rope_theta");
  CHECK(model_from_json(mixtral, "m.json").rope_theta == 1e6);
  nlohmann::json oss = meshplan::read_json_file(hf_fixture("gpt-oss-120b.json"));
  oss.erase("rope_theta");
  CHECK(model_from_json(oss, "o.json").rope_theta == 150000.0);
  nlohmann::json scout = meshplan::read_json_file(hf_fixture("Llama-4-Scout-17B-16E-text.json"));
  scout.erase("rope_theta");
  CHECK(model_from_json(scout, "s.json").rope_theta == 500000.0);
  // transformers 5 keeps it in rope_parameters, which wins over a top-level key.
  nlohmann::json llama = small_llama();
  llama["rope_theta"] = 10000.0;
  llama["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 500000.0}};
  CHECK(model_from_json(llama, "l.json").rope_theta == 500000.0);
  llama["rope_parameters"]["rope_theta"] = "big";
  CHECK(input_error([&] { model_from_json(llama, "l.json"); }) ==
        "l.json: rope_parameters: rope_theta: expected a number (\"big\")");
  llama["rope_parameters"]["rope_theta"] = 1.0;
  CHECK(input_error([&] { model_from_json(llama, "l.json"); }) ==
        "l.json: rope_parameters.rope_theta: must be in (1, 1e+12], the rotary base (1)");
  llama.erase("rope_parameters");
  llama["rope_theta"] = -5;
  CHECK(input_error([&] { model_from_json(llama, "l.json"); }) ==
        "l.json: rope_theta: must be in (1, 1e+12], the rotary base (-5)");
  // Nested by layer type (Gemma3TextConfig in 5.x): the full-attention layers' base.
  nlohmann::json gemma3 = meshplan::read_json_file(hf_fixture("gemma-3-1b-pt.json"));
  gemma3.erase("rope_theta");
  gemma3.erase("rope_local_base_freq");
  gemma3["rope_parameters"] = {{"full_attention", {{"rope_theta", 2e6}}},
                               {"sliding_attention", {{"rope_theta", 1e4}}}};
  CHECK(model_from_json(gemma3, "g.json").rope_theta == 2e6);
  // The sliding layers' (local) base is never taken for the model's: absent a full_attention
  // entry, Gemma3TextConfig's global default.
  gemma3["rope_parameters"].erase("full_attention");
  CHECK(model_from_json(gemma3, "g.json").rope_theta == 1e6);
  // Other layer types must agree.
  gemma3["rope_parameters"]["chunked_attention"] = {{"rope_theta", 5e5}};
  CHECK(model_from_json(gemma3, "g.json").rope_theta == 5e5);
  gemma3["rope_parameters"]["global_attention"] = {{"rope_theta", 6e5}};
  CHECK(input_error([&] { model_from_json(gemma3, "g.json"); })
            .starts_with("g.json: rope_parameters.global_attention.rope_theta: differs between "
                         "layer types without a full_attention entry"));
  // GPTNeoXConfig reads rotary_emb_base, and in 5.x no top-level rope_theta.
  nlohmann::json neox = meshplan::read_json_file(hf_fixture("pythia-160m.json"));
  neox["rotary_emb_base"] = 25000;
  neox["rope_theta"] = 7;
  CHECK(model_from_json(neox, "n.json").rope_theta == 25000.0);
  // llm-foundry's MPT with rotary positions: attn_config.rope_theta, default 10000.
  nlohmann::json mpt = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  mpt["attn_config"]["alibi"] = false;
  mpt["attn_config"]["rope"] = true;
  CHECK(model_from_json(mpt, "p.json").rope_theta == 10000.0);
  mpt["attn_config"]["rope_theta"] = 500000;
  CHECK(model_from_json(mpt, "p.json").rope_theta == 500000.0);
  // A written model file keeps it, a read one gets it back.
  const TransformerConfig scout_model = load_model(hf_fixture("Llama-4-Scout-17B-16E-text.json"));
  CHECK(meshplan::models::model_to_json(scout_model)["rope_theta"] == 500000.0);
}

TEST_CASE("rope_local_theta: Gemma 3's sliding layers' base, 4.x and transformers 5") {
  // gemma-3-1b-pt's config.json: rope_theta 1e6, rope_local_base_freq 10000, pattern 6.
  const TransformerConfig gemma3 = load_model(hf_fixture("gemma-3-1b-pt.json"));
  CHECK(gemma3.rope_theta == 1e6);
  CHECK(gemma3.rope_local_theta == 10000.0);
  CHECK(gemma3.layer_rope_theta(0) == 10000.0);  // sliding (layer_idx 0)
  CHECK(gemma3.layer_rope_theta(5) == 1e6);      // full attention (layer_idx 5)
  CHECK(meshplan::models::model_to_json(gemma3)["rope_local_theta"] == 10000.0);
  nlohmann::json json = meshplan::read_json_file(hf_fixture("gemma-3-1b-pt.json"));
  // Gemma3TextConfig's default when absent.
  json.erase("rope_local_base_freq");
  CHECK(model_from_json(json, "g.json").rope_local_theta == 10000.0);
  json["rope_local_base_freq"] = 1e6;  // the same as the global base: no second base
  CHECK(model_from_json(json, "g.json").rope_local_theta == 0.0);
  for (const double bad : {0.0, 1.0, 1e13}) {  // in a config 0 is no "none"
    CAPTURE(bad);
    json["rope_local_base_freq"] = bad;
    CHECK(input_error([&] { model_from_json(json, "g.json"); }) ==
          fmt::format("g.json: rope_local_base_freq: must be in (1, 1e+12], the sliding layers' "
                      "rotary base ({})",
                      bad));
  }
  json["rope_local_base_freq"] = "10k";
  CHECK(input_error([&] { model_from_json(json, "g.json"); }) ==
        "g.json: rope_local_base_freq: expected a number (\"10k\")");
  // transformers 5: rope_parameters nested by layer type, the sliding_attention entry's.
  json.erase("rope_local_base_freq");
  json.erase("rope_theta");
  json["rope_parameters"] = {{"full_attention", {{"rope_theta", 1e6}}},
                             {"sliding_attention", {{"rope_theta", 20000.0}}}};
  CHECK(model_from_json(json, "g.json").rope_local_theta == 20000.0);
  json["rope_parameters"]["sliding_attention"]["rope_theta"] = -1;
  CHECK(input_error([&] { model_from_json(json, "g.json"); }) ==
        "g.json: rope_parameters.sliding_attention.rope_theta: must be in (1, 1e+12], the "
        "sliding layers' rotary base (-1)");
  // No sliding layer (sliding_window_pattern 1), no second base.
  json["rope_parameters"]["sliding_attention"]["rope_theta"] = 20000.0;
  json["sliding_window_pattern"] = 1;
  CHECK(model_from_json(json, "g.json").rope_local_theta == 0.0);
  // Gemma 2 rotates every layer with its one base.
  CHECK(load_model(hf_fixture("gemma-2-9b.json")).rope_local_theta == 0.0);
}

// Fields an audit of real configs found read wrongly or ignored (session 36).
TEST_CASE("MPT: llm-foundry's ffn_config and attention fields are read or refused") {
  const nlohmann::json base = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  // llm-foundry ffn.py resolve_ffn_hidden_size: ffn_hidden_size replaces expansion_ratio x d.
  nlohmann::json json = base;
  json["ffn_config"] = {{"ffn_type", "mptmlp"}, {"ffn_hidden_size", 11008}};
  const TransformerConfig narrow = model_from_json(json, "mpt.json");
  CHECK(narrow.ffn_hidden_size == 11008);
  // 32 layers of 4 h^2 + 2 h f = 67,108,864 + 90,177,536, the tied wte and the 65 LayerNorms
  // (the mpt-7b-instruct case above).
  CHECK(count_parameters(narrow).total ==
        32 * (4 * 4096LL * 4096 + 2 * 4096LL * 11008) + 206'569'472 + 532'480);
  json["ffn_config"] = {{"ffn_act_fn", {{"name", "gelu"}, {"approximate", "none"}}}};
  CHECK(model_from_json(json, "mpt.json").ffn_hidden_size == 4 * 4096);  // the default act
  json["ffn_config"] = {{"ffn_act_fn", {{"name", "relu"}}}};
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: ffn_config: ffn_act_fn: only GELU ({\"name\": \"gelu\"}) is modelled "
        "({\"name\":\"relu\"})");
  json["ffn_config"] = "mptglu";
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: ffn_config: not an object (\"mptglu\")");
  json = base;
  json["attn_config"]["sliding_window_size"] = -1;  // llm-foundry's default: full attention
  CHECK_NOTHROW(model_from_json(json, "mpt.json"));
  CHECK(model_from_json(json, "mpt.json").sliding_window == 0);
  // n keys before the query and the query itself (llm-foundry triu(diagonal=-n)): w = n + 1.
  json["attn_config"]["sliding_window_size"] = 511;
  CHECK(model_from_json(json, "mpt.json").sliding_window == 512);
  json["attn_config"]["sliding_window_size"] = -2;
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: attn_config: sliding_window_size: must be -1 (full attention) or a window of "
        "n keys before the query, n >= 0 (-2)");
  json = base;
  json["attn_config"]["qk_gn"] = true;
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: attn_config: qk_gn: not modelled (true)");
  json = base;
  json["attn_config"]["attn_logit_softcapping"] = 30.0;
  CHECK(input_error([&] { model_from_json(json, "mpt.json"); }) ==
        "mpt.json: attn_config: attn_logit_softcapping: logit soft-capping is not modelled "
        "(30.0)");
  json = base;
  json["block_overrides"] = {{"order", nlohmann::json::array()}};
  CHECK(input_error([&] {
          model_from_json(json, "mpt.json");
        }).starts_with("mpt.json: block_overrides: per-layer block overrides are not modelled"));
}

TEST_CASE("an explicit null is not the class default, except where transformers maps None") {
  nlohmann::json mpt = {{"model_type", "mpt"}, {"d_model", nullptr}};
  CHECK(input_error([&] { model_from_json(mpt, "mpt.json"); }) ==
        "mpt.json: d_model: null (transformers keeps None here and cannot build the model; give "
        "a value or leave the key out for the class default)");
  nlohmann::json llama = small_llama();
  llama["hidden_act"] = nullptr;
  CHECK(input_error([&] {
          model_from_json(llama, "c.json");
        }).starts_with("c.json: hidden_act: null"));
  // LlamaConfig: num_key_value_heads None = num_attention_heads.
  llama = small_llama();
  llama["num_key_value_heads"] = nullptr;
  CHECK(model_from_json(llama, "c.json").num_kv_heads == 4);
}

TEST_CASE("Qwen2-MoE: a negative shared expert width is refused, 0 means none") {
  nlohmann::json json = {{"architectures", {"Qwen2MoeForCausalLM"}},
                         {"hidden_size", 64},
                         {"num_hidden_layers", 2},
                         {"num_attention_heads", 4},
                         {"intermediate_size", 176},
                         {"vocab_size", 256},
                         {"max_position_embeddings", 32},
                         {"num_experts", 4},
                         {"num_experts_per_tok", 2},
                         {"moe_intermediate_size", 32},
                         {"shared_expert_intermediate_size", 0}};
  CHECK(model_from_json(json, "q.json").num_shared_experts == 0);
  json["shared_expert_intermediate_size"] = -5632;
  CHECK(input_error([&] { model_from_json(json, "q.json"); }) ==
        "q.json: shared_expert_intermediate_size: must not be negative (-5632)");
}

TEST_CASE("HF config errors name the config's own keys; wrong types are malformed, not options") {
  nlohmann::json llama = small_llama();
  llama["num_key_value_heads"] = 3;
  CHECK(input_error([&] { model_from_json(llama, "c.json"); }) ==
        "c.json: num_key_value_heads: does not divide num_attention_heads (4 % 3)");
  llama = small_llama();
  llama["num_hidden_layers"] = 5000;
  CHECK(input_error([&] { model_from_json(llama, "c.json"); }) ==
        "c.json: num_hidden_layers: absurdly large, more than 2048 (5000)");
  nlohmann::json gpt2 = meshplan::read_json_file(hf_fixture("gpt2.json"));
  gpt2["n_inner"] = 20'000'000;
  CHECK(input_error([&] { model_from_json(gpt2, "g.json"); }) ==
        "g.json: n_inner: absurdly large, more than 10000000 (20000000)");
  nlohmann::json qwen = meshplan::read_json_file(hf_fixture("Qwen3-30B-A3B.json"));
  qwen["num_experts_per_tok"] = 129;
  CHECK(input_error([&] { model_from_json(qwen, "q.json"); }) ==
        "q.json: num_experts_per_tok: must be in [1, num_experts] (129 of 128)");
  qwen = meshplan::read_json_file(hf_fixture("Qwen3-30B-A3B.json"));
  qwen["decoder_sparse_step"] = "1";
  CHECK(input_error([&] { model_from_json(qwen, "q.json"); }) ==
        "q.json: decoder_sparse_step: expected an integer (\"1\")");
  nlohmann::json mpt = meshplan::read_json_file(hf_fixture("mpt-7b-instruct.json"));
  mpt["attn_config"]["alibi"] = false;
  mpt["learned_pos_emb"] = false;  // llm-foundry's NoPE
  CHECK(input_error([&] {
          model_from_json(mpt, "mpt.json");
        }).starts_with("mpt.json: learned_pos_emb: a model without position encoding"));
}
