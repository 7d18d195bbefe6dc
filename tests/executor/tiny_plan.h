#pragma once
// Plans built directly for the executor tests: the `tiny` preset (4 layers, hidden 64, 4 heads,
// 2 kv heads, ffn 176, vocab 256, seq 32; SwiGLU, RMSNorm, RoPE, untied) on `local-cpu` (fp32).

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/plan_file.h"

namespace meshplan::executor::testing {

inline planner::Layout make_layout(int64_t tp, int64_t pp, int64_t dp, int64_t micro_batch = 2,
                                   int64_t global_batch = 16) {
  planner::Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.micro_batch = micro_batch;
  layout.global_batch = global_batch;
  layout.schedule = planner::ScheduleKind::kOneFOneB;
  return layout;
}

/// `layout` under selective recompute of Megatron-Core's --recompute-modules `modules`
/// (planner::RecomputeModule flags).
inline planner::Layout with_modules(planner::Layout layout, uint32_t modules) {
  layout.recompute = planner::Recompute::kSelective;
  layout.recompute_modules = modules;
  return layout;
}

inline planner::Plan make_plan(const models::TransformerConfig& model,
                               const planner::Layout& layout) {
  planner::Plan plan;
  plan.model = model;
  plan.cluster = models::load_cluster("local-cpu");
  plan.layout = layout;
  plan.num_gpus = layout.num_gpus();
  // The executor builds the vocabulary unpadded (planner::vocab_padding_error: meshplan's
  // divisor is 1); these plans keep the default framework, whose divisor is 128.
  plan.options.make_vocab_size_divisible_by = 1;
  return plan;
}

inline planner::Plan tiny_plan(const planner::Layout& layout) {
  return make_plan(models::load_model("tiny"), layout);
}

/// A GPT-2-style model as small as the finite-difference tests need: GELU, LayerNorm, learned
/// positions, tied embeddings, every bias on.
inline models::TransformerConfig small_gpt2_model() {
  models::TransformerConfig m;
  m.name = "small-gpt2";
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 2;
  m.num_kv_heads = 2;
  m.head_dim = 8;
  m.ffn_hidden_size = 32;
  m.vocab_size = 32;
  m.seq_length = 8;
  m.max_position_embeddings = 12;
  m.activation = models::Activation::kGelu;
  m.norm = models::Norm::kLayerNorm;
  m.positions = models::Positions::kLearned;
  m.tied_embeddings = true;
  m.qkv_bias = true;
  m.attention_output_bias = true;
  m.mlp_bias = true;
  return m;
}

/// The tiny preset's layout (SwiGLU, RMSNorm, RoPE, GQA, untied) at the finite-difference size.
inline models::TransformerConfig small_llama_model() {
  models::TransformerConfig m = models::load_model("tiny");
  m.name = "small-llama";
  m.num_layers = 2;
  m.hidden_size = 16;
  m.num_attention_heads = 4;
  m.num_kv_heads = 2;
  m.head_dim = 4;
  m.ffn_hidden_size = 24;
  m.vocab_size = 32;
  m.seq_length = 8;
  return m;
}

/// small_llama_model with mixture-of-experts blocks as tiny-moe has them: layer 0 dense, layer 1
/// of 4 experts of ffn 8, top-2.
inline models::TransformerConfig small_moe_model() {
  models::TransformerConfig m = small_llama_model();
  m.name = "small-moe";
  m.num_experts = 4;
  m.experts_per_token = 2;
  m.expert_ffn_hidden_size = 8;
  m.first_dense_layers = 1;
  return m;
}

/// small_llama_model with multi-head latent attention as tiny-mla has it, at the
/// finite-difference size: 4 heads, q_lora_rank 8, kv_lora_rank 16, qk_nope 4, qk_rope 4 (even,
/// for RoPE), v_head 2 (narrower than the 8-wide query/key heads, so the padding is exercised).
/// A 6-wide kv latent was tried: some rows' latents sat near zero, where RMSNorm curves so
/// much that the central difference at eps 1e-3 was off by 4% (converging to the analytic
/// gradient as eps shrank: 0.2% at 3e-4); 16 channels keep every row's RMS away from zero.
inline models::TransformerConfig small_mla_model() {
  models::TransformerConfig m = small_llama_model();
  m.name = "small-mla";
  m.num_kv_heads = m.num_attention_heads;
  m.q_lora_rank = 8;
  m.kv_lora_rank = 16;
  m.qk_nope_head_dim = 4;
  m.qk_rope_head_dim = 4;
  m.v_head_dim = 2;
  m.head_dim = 8;
  return m;
}

}  // namespace meshplan::executor::testing
