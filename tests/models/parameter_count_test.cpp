// count_parameters against published parameter counts and Narayanan et al. 2021's formula.

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "meshplan/models.h"

using meshplan::models::count_parameters;
using meshplan::models::load_model;

namespace {

int64_t total(const std::string& preset) {
  return count_parameters(load_model(preset)).total;
}

// Rounds a count to `decimals` digits of billions, the way papers print "70.6B".
double billions(int64_t count, int decimals) {
  const double scale = std::pow(10.0, decimals);
  return std::round(static_cast<double>(count) / 1e9 * scale) / scale;
}

}  // namespace

TEST_CASE("Llama-2 7B: 6,738,415,616 parameters, term by term") {
  // Published: the Hugging Face model card / safetensors index of meta-llama/Llama-2-7b-hf.
  const auto counts = count_parameters(load_model("llama2-7b"));
  CHECK(counts.token_embedding == 131'072'000);  // V h = 32000 * 4096
  CHECK(counts.position_embedding == 0);         // RoPE: no table
  CHECK(counts.per_layer == 202'383'360);        // 4 h^2 = 67,108,864 (Q, K, V, O)
                                                 // + 3 h f = 3 * 4096 * 11008 = 135,266,304
                                                 // + 2 RMSNorm gains 2 * 4096 = 8,192
  CHECK(counts.final_norm == 4'096);             // one RMSNorm gain of h
  CHECK(counts.lm_head == 131'072'000);          // untied: V h
  CHECK(counts.total == 6'738'415'616);          // 2 * 131,072,000 + 32 * 202,383,360 + 4096
}

TEST_CASE("Llama-3 8B: 8,030,261,248 parameters") {
  // Published: meta-llama/Meta-Llama-3-8B model card ("8B", safetensors total 8,030,261,248).
  // Per layer: Q, O 2 * 4096^2 = 33,554,432; K, V 2 * (8 * 128) * 4096 = 8,388,608;
  // MLP 3 * 4096 * 14336 = 176,160,768; norms 8,192; sum 218,112,000.
  // Total: 32 * 218,112,000 + 2 * 128256 * 4096 + 4096 = 8,030,261,248.
  CHECK(total("llama3-8b") == 8'030'261'248);
}

TEST_CASE("Llama-2 13B and 70B, Mistral 7B: exact published counts") {
  // Llama-2-13b-hf: 40 * (4 * 5120^2 + 3 * 5120 * 13824 + 2 * 5120) + 2 * 32000 * 5120 + 5120.
  CHECK(total("llama2-13b") == 13'015'864'320);
  // Llama-2-70b-hf: 80 * (2 * 8192^2 + 2 * 1024 * 8192 + 3 * 8192 * 28672 + 2 * 8192)
  //   + 2 * 32000 * 8192 + 8192.
  CHECK(total("llama2-70b") == 68'976'648'192);
  // Mistral-7B-v0.1: the Llama-3 8B layer stack with V = 32000:
  //   32 * 218,112,000 + 2 * 32000 * 4096 + 4096.
  CHECK(total("mistral-7b") == 7'241'732'096);
}

TEST_CASE("GPT-3, Llama-3 70B and 405B: published rounded counts") {
  // Brown et al. 2020, Table 2.1: "175.0B". Our exact count is 174.6e9 (the paper rounds up);
  // 0.5% of 175e9 is 0.875e9.
  const int64_t gpt3 = total("gpt3-175b");
  CHECK(std::abs(static_cast<double>(gpt3) - 175e9) < 0.005 * 175e9);
  CHECK(billions(gpt3, 1) == 174.6);  // 12*96*12288^2 + 13*96*12288 + (50257+2048)*12288 + 2*12288
  // Dubey et al. 2024 / model cards: Llama-3 70B "70.6B", Llama-3.1 405B "405.9B" (rounded).
  CHECK(billions(total("llama3-70b"), 1) == 70.6);
  CHECK(billions(total("llama3-405b"), 1) == 405.9);
}

TEST_CASE("GPT-2 124M preset: 124,439,808 parameters, the closed form with tied embeddings") {
  // Narayanan et al. 2021, Sec. 5.1, expanded: P = 12 l h^2 + 13 l h + (V + s) h, plus the final
  // LayerNorm 2h; tied head, so V h once. l 12, h 768, V 50257, s 1024:
  //   12 * 12 * 768^2 = 84,934,656; 13 * 12 * 768 = 119,808; (50257 + 1024) * 768 = 39,383,808;
  //   2 * 768 = 1,536; sum 124,439,808 = what transformers reports for openai-community/gpt2.
  const auto counts = count_parameters(load_model("gpt2-124m"));
  CHECK(counts.lm_head == 0);  // tied to the token embedding
  CHECK(counts.total == 124'439'808);
}

TEST_CASE("Megatron SC21 Table 1: the presets match P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh))") {
  // Narayanan et al. 2021, Sec. 5.1 and Table 1. Expanded: P = 12 l h^2 + 13 l h + (V + s) h.
  // Our count adds the final LayerNorm (2h), which the formula omits.
  struct Row {
    const char* preset;
    int64_t l, h;
    double published_billions;  // Table 1, "Number of parameters (billion)"
  };
  const Row rows[] = {
      {"megatron-1.7b", 24, 2304, 1.7},       {"megatron-3.6b", 30, 3072, 3.6},
      {"megatron-7.5b", 36, 4096, 7.5},       {"megatron-18.4b", 40, 6144, 18.4},
      {"megatron-39.1b", 48, 8192, 39.1},     {"megatron-76.1b", 60, 10240, 76.1},
      {"megatron-145.6b", 80, 12288, 145.6},  {"megatron-310.1b", 96, 16384, 310.1},
      {"megatron-529.6b", 105, 20480, 529.6}, {"megatron-1t", 128, 25600, 1008.0},
  };
  const int64_t V = 51200;  // Table 1 caption: vocabulary 51,200
  const int64_t s = 2048;   // sequence length 2048
  for (const Row& row : rows) {
    const std::string preset = row.preset;
    CAPTURE(preset);
    const auto model = load_model(row.preset);
    CHECK(model.num_layers == row.l);
    CHECK(model.hidden_size == row.h);
    const int64_t formula = 12 * row.l * row.h * row.h + 13 * row.l * row.h + (V + s) * row.h;
    const int64_t counted = count_parameters(model).total;
    CHECK(counted == formula + 2 * row.h);
    CHECK(billions(counted, 1) == row.published_billions);
  }
}

TEST_CASE("tiny: every term by hand") {
  // l 4, h 64, a 4, g 2, d 16, f 176, V 256, SwiGLU, RMSNorm, untied, no biases.
  const auto counts = count_parameters(load_model("tiny"));
  CHECK(counts.token_embedding == 16'384);  // 256 * 64
  CHECK(counts.per_layer == 46'208);        // Q, O 2 * 64 * 64 = 8192; K, V 2 * 32 * 64 = 4096;
                                            // MLP 3 * 64 * 176 = 33792; norms 2 * 64 = 128
  CHECK(counts.final_norm == 64);
  CHECK(counts.lm_head == 16'384);
  CHECK(counts.total == 217'664);  // 4 * 46208 + 2 * 16384 + 64
}
