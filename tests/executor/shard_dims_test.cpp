#include "shard_dims.h"

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <vector>

#include "meshplan/errors.h"
#include "tiny_plan.h"

namespace meshplan::executor {
namespace {

using testing::make_layout;
using testing::tiny_plan;

std::string rejection(const planner::Plan& plan) {
  try {
    validate_plan_for_executor(plan, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("the executor refuses multi-token prediction, naming the field") {
  planner::Plan plan = tiny_plan(make_layout(2, 1, 1));
  plan.model.mtp_num_layers = 1;
  CHECK(rejection(plan) ==
        "p.json: model.mtp_num_layers: meshplan's executors do not build the "
        "multi-token-prediction module; run the plan with Megatron-LM (--emit megatron) (1)");
}

TEST_CASE("the executor rejects what it cannot run, naming the field") {
  planner::Plan plan = tiny_plan(make_layout(2, 1, 1));
  CHECK(rejection(plan) == "");

  planner::Plan bf16 = plan;
  bf16.cluster = models::load_cluster("dgx-a100-80gb");
  CHECK(rejection(bf16) ==
        "p.json: cluster.precision: the CPU executor runs fp32 only (bf16); plan with --cluster "
        "local-cpu");

  planner::Plan alibi = plan;
  alibi.model.positions = models::Positions::kAlibi;
  CHECK(rejection(alibi) ==
        "p.json: model.positions: the CPU executor implements learned and rope positions (alibi)");

  // Mixture-of-experts runs (tp 1, ZeRO 0, routed experts); what is not built is named.
  planner::Plan moe = tiny_plan(make_layout(1, 1, 1));
  moe.model = models::load_model("tiny-moe");
  CHECK(rejection(moe) == "");
  planner::Plan moe_tp = moe;
  moe_tp.layout = make_layout(2, 1, 1);
  moe_tp.layout.sequence_parallel = true;
  moe_tp.num_gpus = 2;
  CHECK(rejection(moe_tp) ==
        "p.json: layout.tp: the CPU executor's mixture-of-experts runs tp 1 only; expert tensor "
        "parallelism is not built (2)");
  planner::Plan moe_etp = moe_tp;  // tp 2 with the experts unsplit: named before tp
  planner::set_expert_tensor_parallel(moe_etp.layout, 1);
  CHECK(rejection(moe_etp) ==
        "p.json: layout.etp: the CPU executor's mixture-of-experts runs etp = tp only (1)");
  planner::Plan moe_zero = tiny_plan(make_layout(1, 1, 2));
  moe_zero.model = moe.model;
  moe_zero.layout.zero = 1;
  CHECK(rejection(moe_zero) ==
        "p.json: layout.zero: the CPU executor's mixture-of-experts runs ZeRO 0 only; experts "
        "are not ZeRO-sharded (1)");
  // Megatron-Core's flex dispatcher (DeepEP) is costed, not run: the executor's MoE layers
  // dispatch with an MPI all-to-all.
  planner::Plan moe_flex = tiny_plan(make_layout(1, 1, 2));
  moe_flex.model = moe.model;
  moe_flex.layout.ep = 2;
  CHECK(rejection(moe_flex) == "");
  moe_flex.options.moe_dispatcher = planner::MoeDispatcher::kFlex;
  CHECK(rejection(moe_flex) ==
        "p.json: options.moe_dispatcher: the CPU executor dispatches MoE tokens with an MPI "
        "all-to-all (alltoall), not DeepEP's flex kernels (flex)");
  planner::Plan moe_shared = moe;
  moe_shared.model.num_shared_experts = 1;
  moe_shared.model.shared_expert_ffn_hidden_size = 96;
  CHECK(rejection(moe_shared) == "");
  moe_shared.model.shared_expert_gate = true;
  CHECK(rejection(moe_shared) ==
        "p.json: model.shared_expert_gate: the CPU executor's mixture-of-experts has no "
        "shared-expert gate (true)");
  planner::Plan moe_bias = moe;
  moe_bias.model.router_score_bias = true;
  CHECK(rejection(moe_bias) ==
        "p.json: model.router_score_bias: the CPU executor's mixture-of-experts routes by "
        "softmax without a score bias (true)");
  planner::Plan moe_groups = moe;  // tiny-moe's 4 experts in 2 groups, 1 per token
  moe_groups.model.router_num_groups = 2;
  moe_groups.model.router_group_topk = 1;
  CHECK(rejection(moe_groups) ==
        "p.json: model.router_num_groups: the CPU executor's mixture-of-experts routes over all "
        "experts, without group-limited routing (2)");
  // gpt-oss's parts run (equivalence_test.cpp): quick GeGLU with its offset and clamp, sinks,
  // the router's bias, the experts' biases.
  planner::Plan oss = moe;
  oss.model.activation = models::Activation::kQuickGeglu;
  oss.model.glu_linear_offset = 1.0;
  oss.model.activation_clamp_value = 7.0;
  oss.model.attention_sinks = true;
  oss.model.router_bias = true;
  oss.model.mlp_bias = true;
  oss.model.qkv_bias = true;
  oss.model.attention_output_bias = true;
  CHECK(rejection(oss) == "");
  planner::Plan sinks_tp = plan;  // tp 2: each rank holds its heads' sinks
  sinks_tp.model.attention_sinks = true;
  CHECK(rejection(sinks_tp) == "");
  // Llama 4's router runs, with its load-balancing loss; its NoPE layers and q/k L2 norm run.
  planner::Plan llama4_router = tiny_plan(make_layout(1, 1, 1));
  llama4_router.model = models::load_model("tiny-moe");
  llama4_router.model.experts_per_token = 1;
  llama4_router.model.router_probs_on_input = true;
  llama4_router.options.moe_aux_loss_coeff = 0.01;
  CHECK(rejection(llama4_router) == "");
  planner::Plan llama4_attention = plan;
  llama4_attention.model.no_rope_freq = {0, 0, 0, 1};
  llama4_attention.model.qk_l2_norm = true;
  CHECK(rejection(llama4_attention) == "");
  // The context-parallel ring and MLA's kernel refuse sinks by name.
  planner::Plan sinks_cp = tiny_plan(make_layout(1, 1, 1));
  sinks_cp.model.attention_sinks = true;
  sinks_cp.layout.cp = 2;
  sinks_cp.num_gpus = 2;
  CHECK(rejection(sinks_cp) ==
        "p.json: model.attention_sinks: the CPU executor adds the sinks to the softmax of "
        "standard attention without context parallelism only, not with cp 2 (true)");
  // Multi-head latent attention runs (tp with and without sequence parallelism, cp, pp, dp);
  // what is not built is named.
  planner::Plan mla = plan;
  mla.model = models::load_model("tiny-mla");
  CHECK(rejection(mla) == "");
  mla.layout.sequence_parallel = true;
  CHECK(rejection(mla) == "");
  planner::Plan mla_cp = mla;
  mla_cp.layout.cp = 2;
  mla_cp.num_gpus = 4;
  CHECK(rejection(mla_cp) == "");
  planner::Plan mla_wide_v = mla;
  mla_wide_v.model.v_head_dim = 32;
  CHECK(rejection(mla_wide_v) ==
        "p.json: model.v_head_dim: the CPU executor's multi-head latent attention pads value "
        "heads to qk_nope_head_dim + qk_rope_head_dim, so needs v_head_dim no larger (32 > 24)");
  planner::Plan mla_learned = mla;
  mla_learned.model.positions = models::Positions::kLearned;
  mla_learned.model.max_position_embeddings = 32;
  CHECK(rejection(mla_learned) ==
        "p.json: model.positions: the CPU executor's multi-head latent attention needs rope "
        "positions (its shared rotary key) (learned)");
  // q/k norms and sandwich norms run (equivalence_test.cpp, trainer_test.cpp).
  planner::Plan gemma3 = plan;
  gemma3.model.qk_norm = true;
  gemma3.model.sandwich_norm = true;
  CHECK(rejection(gemma3) == "");
  // Gemma 2's soft-caps and attention scale run in standard attention (equivalence_test.cpp);
  // MLA's kernel and the context-parallel ring refuse them by name.
  planner::Plan capped = plan;
  capped.model.attn_logit_softcapping = 50.0;
  capped.model.final_logit_softcapping = 30.0;
  capped.model.query_pre_attn_scalar = 2.0 * static_cast<double>(plan.model.head_dim);
  CHECK(rejection(capped) == "");
  planner::Plan capped_cp = capped;
  capped_cp.layout.cp = 2;
  CHECK(rejection(capped_cp) ==
        "p.json: model.attn_logit_softcapping: the CPU executor soft-caps and rescales the scores "
        "of standard attention without context parallelism only, not with cp 2 (50)");
  planner::Plan capped_mla = mla;
  capped_mla.model.query_pre_attn_scalar = 100.0;
  CHECK(rejection(capped_mla) ==
        "p.json: model.query_pre_attn_scalar: the CPU executor soft-caps and rescales the scores "
        "of standard attention without context parallelism only, not with MLA (kv_lora_rank) "
        "(100)");
  planner::Plan sinks_mla = mla;  // MLA with sinks the model validation refuses too
  sinks_mla.model.attention_sinks = true;
  CHECK(rejection(sinks_mla) ==
        "p.json: model.attention_sinks: the CPU executor adds the sinks to the softmax of "
        "standard attention without context parallelism only, not with MLA (kv_lora_rank) (true)");
  planner::Plan final_cap_mla = mla;
  final_cap_mla.model.final_logit_softcapping = 30.0;  // the final cap runs with any attention
  CHECK(rejection(final_cap_mla) == "");

  planner::Plan zero2 = tiny_plan(make_layout(1, 1, 2));
  zero2.layout.zero = 2;
  CHECK(rejection(zero2) == "");

  // A ZeRO bucket holds at least one fp32 element per dp rank: 4 B x dp = 8 B.
  planner::Plan tiny_buckets = zero2;
  tiny_buckets.options.bucket_bytes = 7;
  CHECK(rejection(tiny_buckets) ==
        "p.json: options.bucket_bytes: smaller than one fp32 element per data-parallel rank "
        "(7 < 8)");
  tiny_buckets.options.bucket_bytes = 8;
  CHECK(rejection(tiny_buckets) == "");
  planner::Plan zero3 = tiny_plan(make_layout(1, 2, 2));
  zero3.layout.zero = 3;
  CHECK(rejection(zero3) == "");
  zero3.layout.schedule = planner::ScheduleKind::kInterleaved;
  zero3.layout.vpp = 2;
  CHECK(rejection(zero3) ==
        "p.json: layout.vpp: the CPU executor's ZeRO 3 gathers a stage's parameters whole, not "
        "per interleaved chunk (2)");

  planner::Plan overlap = plan;
  overlap.options.overlap_tp_comm = true;
  CHECK(rejection(overlap) ==
        "p.json: options.overlap_tp_comm: the CPU executor does not "
        "overlap tensor-parallel communication with GEMMs (true)");

  planner::Plan fp8_gather = plan;
  fp8_gather.options.fp8_param_gather = true;
  CHECK(rejection(fp8_gather) ==
        "p.json: options.fp8_param_gather: the CPU executor keeps no fp8 weights (true)");

  planner::Plan merged = plan;
  merged.options.overlap_moe_expert_parallel_comm = true;
  CHECK(rejection(merged) ==
        "p.json: options.overlap_moe_expert_parallel_comm: the CPU executor runs each "
        "micro-batch's forward and backward in turn, never merged (true)");
  merged.options.delay_wgrad_compute = true;
  CHECK(rejection(merged) ==
        "p.json: options.delay_wgrad_compute: the CPU executor computes each layer's weight "
        "gradients inside its backward (true)");

  planner::Plan whole_grads = plan;
  whole_grads.options.scatter_gather_pipeline = true;
  whole_grads.options.pipeline_grad_scatter_gather = false;
  CHECK(rejection(whole_grads) ==
        "p.json: options.pipeline_grad_scatter_gather: the CPU executor splits both directions "
        "(false)");

  // overlap_p2p_comm, a megatron plan's default, runs on either schedule: the executor's
  // sends are isends and each receive is waited for where the tensor is needed.
  planner::Plan p2p_overlap = tiny_plan(make_layout(1, 2, 2));
  p2p_overlap.options.overlap_p2p_comm = true;
  CHECK(rejection(p2p_overlap) == "");
  p2p_overlap.layout.schedule = planner::ScheduleKind::kInterleaved;
  p2p_overlap.layout.vpp = 2;
  CHECK(rejection(p2p_overlap) == "");

  // A vocabulary tp does not divide, or one a divisor pads, is built padded (shard dims below).
  planner::Plan odd_vocab = plan;
  odd_vocab.model.vocab_size = 255;
  CHECK(rejection(odd_vocab) == "");
  planner::Plan megatron_padded = plan;
  megatron_padded.options.make_vocab_size_divisible_by = 128;
  megatron_padded.model.vocab_size = 50257;
  CHECK(rejection(megatron_padded) == "");

  planner::Plan heads = tiny_plan(make_layout(8, 1, 1));  // 4 heads over 8 ranks
  CHECK(rejection(heads) == "p.json: layout: num_attention_heads not divisible by tp (4 % 8)");

  planner::Plan learned = tiny_plan(make_layout(1, 1, 1));
  learned.layout.cp = 2;
  learned.num_gpus = 2;
  learned.model.positions = models::Positions::kLearned;
  learned.model.max_position_embeddings = 32;
  planner::Plan ulysses = tiny_plan(make_layout(1, 1, 1));
  ulysses.layout.cp = 2;
  ulysses.num_gpus = 2;
  ulysses.options.cp_comm = planner::CpComm::kA2a;
  CHECK(rejection(ulysses) ==
        "p.json: options.cp_comm: the CPU executor runs the p2p ring only (a2a)");
  CHECK(rejection(learned) ==
        "p.json: layout.cp: the CPU executor's context parallelism needs rope positions "
        "(learned, cp 2)");
}

TEST_CASE("context parallel: each cp rank holds chunks r and 2 cp - 1 - r") {
  // s 32, cp 2: 4 chunks of 8; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
  std::vector<int> rank0, rank1;
  for (int i = 0; i < 8; i++) {
    rank0.push_back(i);
    rank1.push_back(8 + i);
  }
  for (int i = 0; i < 8; i++) {
    rank0.push_back(24 + i);
    rank1.push_back(16 + i);
  }
  CHECK(cp_positions(32, 2, 0) == rank0);
  CHECK(cp_positions(32, 2, 1) == rank1);
  planner::Layout layout = make_layout(2, 1, 1, 2, 16);
  layout.cp = 2;
  const ShardDims d = make_shard_dims(tiny_plan(layout), 1, 1);
  CHECK(d.T == 16);  // 32 / cp
  CHECK(d.S == 32);
  CHECK(d.N == 32);  // 16 positions x 2 sequences
  CHECK(d.positions == rank1);
}

TEST_CASE("shard dims of tiny on tp 2 with sequence parallel, rank 1") {
  planner::Layout layout = make_layout(2, 1, 1, 2, 16);
  layout.sequence_parallel = true;
  const ShardDims d = make_shard_dims(tiny_plan(layout), 1);
  CHECK(d.NH == 2);                  // 4 heads / 2
  CHECK(d.KVH == 1);                 // 2 kv heads / 2
  CHECK(d.QKV == (2 + 2 * 1) * 16);  // (NH + 2 KVH) HS
  CHECK(d.F == 88);                  // 176 / 2
  CHECK(d.FC1 == 176);               // SwiGLU: gate and up
  CHECK(d.V == 128);                 // 256 / 2
  CHECK(d.vocab_start == 128);       // rank 1's shard
  CHECK(d.N == 64);                  // 32 positions x 2 sequences
  CHECK(d.N_local == 32);            // half the sequence
  CHECK(d.t0 == 16);                 // rank 1 holds positions 16..31
}

TEST_CASE("shard dims of a padded vocabulary: ceil(V / (d tp)) d tp rows over tp") {
  planner::Plan plan = tiny_plan(make_layout(2, 1, 1, 2, 16));
  plan.model.vocab_size = 255;  // divisor 1 (make_plan's): 256 rows, 128 a rank
  CHECK(make_shard_dims(plan, 1).V == 128);
  CHECK(make_shard_dims(plan, 1).vocab_start == 128);
  // GPT-2's 50,257 under Megatron-LM's default 128 at tp 2: 50,432 rows (Megatron-LM's
  // functional tests log padded_vocab_size 50432 at tp 2), 25,216 a rank.
  plan.model.vocab_size = 50257;
  plan.options.make_vocab_size_divisible_by = 128;
  const ShardDims rank1 = make_shard_dims(plan, 1);
  CHECK(rank1.V == 25216);
  CHECK(rank1.vocab_start == 25216);  // rank 1 holds 25,216..50,431; 50,257.. are padding
}

}  // namespace
}  // namespace meshplan::executor
