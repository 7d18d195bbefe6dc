// What the GPU executor cannot run but the CPU executor can, refused by name before any GPU
// work (refuse_model_for_gpu_executor, compiled without CUDA so it is tested everywhere).

#include <doctest/doctest.h>

#include "execute_parts.h"
#include "input_error.h"
#include "meshplan/models.h"

namespace meshplan::executor {
namespace {

using meshplan::test::input_error;

TEST_CASE("the GPU executor refuses a sliding window shorter than the sequence") {
  models::TransformerConfig model = models::load_model("tiny");  // seq_length 32
  CHECK_NOTHROW(refuse_model_for_gpu_executor(model, "p.json"));
  model.sliding_window = 32;  // covers the sequence: full causal attention, runs
  CHECK_NOTHROW(refuse_model_for_gpu_executor(model, "p.json"));
  model.sliding_window = 8;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.sliding_window: sliding-window attention is not implemented in the GPU "
        "executor yet; its flash kernel masks causally only (8 < seq_length 32)");
}

TEST_CASE("the GPU executor refuses GeGLU and Gemma's norm and embedding scales") {
  models::TransformerConfig model = models::load_model("tiny");  // SwiGLU: runs
  CHECK_NOTHROW(refuse_model_for_gpu_executor(model, "p.json"));
  model.activation = models::Activation::kGeglu;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.activation: the gated GELU MLPs (geglu, quick_geglu) are not implemented in "
        "the GPU executor yet; it has GELU and SwiGLU kernels (geglu)");
  model.activation = models::Activation::kSwiglu;
  model.norm_unit_offset = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.norm_unit_offset: Gemma's (1 + weight) RMSNorm is not implemented in the "
        "GPU executor yet (true)");
  model.norm_unit_offset = false;
  model.scale_embeddings = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.scale_embeddings: Gemma's sqrt(h) embedding scale is not implemented in "
        "the GPU executor yet (true)");
}

TEST_CASE("the GPU executor refuses q/k norms and sandwich norms, which the CPU executor runs") {
  models::TransformerConfig model = models::load_model("tiny");
  model.qk_norm = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.qk_norm: per-head q/k RMSNorms are not implemented in the GPU executor yet "
        "(true)");
  model.qk_norm = false;
  model.sandwich_norm = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.sandwich_norm: Gemma 2/3's post-attention and post-MLP norms are not "
        "implemented in the GPU executor yet (true)");
}

TEST_CASE("the GPU executor refuses scaled rotary frequencies, which the CPU executor runs") {
  models::TransformerConfig model = models::load_model("tiny");
  model.rope_scaling = {models::RopeScalingType::kLlama3, 8.0, 1.0, 4.0, 8192};
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.rope_scaling: scaled rotary frequencies are not implemented in the GPU "
        "executor yet (llama3 x8)");
}

TEST_CASE("the GPU executor refuses gpt-oss's quick GeGLU, its offset and clamp, and sinks") {
  models::TransformerConfig model = models::load_model("tiny");
  model.activation = models::Activation::kQuickGeglu;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.activation: the gated GELU MLPs (geglu, quick_geglu) are not implemented in "
        "the GPU executor yet; it has GELU and SwiGLU kernels (quick_geglu)");
  model.activation = models::Activation::kSwiglu;
  model.glu_linear_offset = 1.0;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.glu_linear_offset: gpt-oss's gated-unit offset is not implemented in the "
        "GPU executor yet (1)");
  model.glu_linear_offset = 0.0;
  model.activation_clamp_value = 7.0;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.activation_clamp_value: gpt-oss's gated-unit clamp is not implemented in "
        "the GPU executor yet (7)");
  model.activation_clamp_value = 0.0;
  model.attention_sinks = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.attention_sinks: learned attention sinks are not implemented in the GPU "
        "executor yet (true)");
}

TEST_CASE("the GPU executor refuses partial rotary") {
  models::TransformerConfig model = models::load_model("tiny");
  model.rotary_percent = 0.5;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.rotary_percent: partial rotary is not implemented in the GPU executor yet "
        "(0.5)");
}

TEST_CASE("the GPU executor refuses Llama 4's NoPE layers and q/k L2 norm") {
  models::TransformerConfig model = models::load_model("tiny");
  model.no_rope_freq = {0, 1, 0, 1};
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.no_rope_freq: NoPE layers are not implemented in the GPU executor yet (2 of "
        "4 layers)");
  model.no_rope_freq.clear();
  model.qk_l2_norm = true;
  CHECK(input_error([&] { refuse_model_for_gpu_executor(model, "p.json"); }) ==
        "p.json: model.qk_l2_norm: the q/k L2 norm is not implemented in the GPU executor yet "
        "(true)");
}

TEST_CASE("the GPU executor refuses mixture-of-experts models, at ep 1 too") {
  const models::TransformerConfig moe = models::load_model("tiny-moe");
  CHECK(input_error([&] { refuse_model_for_gpu_executor(moe, "p.json"); }) ==
        "p.json: model.num_experts: mixture-of-experts layers are not implemented in the GPU "
        "executor yet; they run on the CPU executor (4)");
}

}  // namespace
}  // namespace meshplan::executor
