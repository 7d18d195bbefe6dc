// Megatron-Core's --recompute-modules, module by module (module_recompute_cost.h), and the
// element-wise bytes of the modules that are not GEMMs (selective_module_recompute_bytes).

#include "module_recompute_cost.h"

#include "compute_cost.h"
#include "fp8_cast_cost.h"
#include "linear_gemms.h"
#include "model_shape.h"

namespace meshplan::planner {
namespace {

// Transformer Engine's FP8 casts of recomputed GEMMs' inputs (fp8_cast_cost.cpp, the forward's
// share): a recomputed forward casts its inputs again as the first forward did (the weights stay
// cached for the step). None outside TE's FP8 (modules are Megatron-Core's and the executor's).
double recomputed_fp8_cast_seconds(const models::ClusterConfig& cluster, const Layout& layout,
                                   const PlanOptions& options, const Shape& x,
                                   const LinearGemms& gemms) {
  if (options.gemm_precision != GemmPrecision::kFp8 || torchao_float8(options)) {
    return 0.0;
  }
  const double norm_tokens = layout.sequence_parallel ? x.tokens / x.t : x.tokens;
  return memory_seconds(
      cluster,
      fp8_cast_bytes(gemms, layout.sequence_parallel, norm_tokens, options.fp8_recipe).forward);
}

// A checkpointed MLP's forward again, per micro-batch on one rank: both projections in the
// linear layers' precision (f columns after the activation, fc1_columns before it; per tp
// rank / t), the activation (SwiGLU reads 2f and writes f, GELU f and f), `norm_bytes` of
// element-wise work before it, and its tp collectives: the input's all-gather and the output's
// reduce-scatter under sequence parallelism, else the output's all-reduce, and Transformer
// Engine's FP8 casts of the two GEMMs' inputs (fc1's written by the norm when it has one).
ModuleRecompute mlp_forward_again(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options, const Shape& x, double fc1_columns,
                                  double f, double norm_bytes) {
  ModuleRecompute recompute;
  const bool swiglu = models::is_gated(model.activation);
  recompute.flops = 2.0 * x.tokens * x.h * (fc1_columns + f) / x.t;
  LinearGemms gemms;
  gemms.add({x.tokens, fc1_columns / x.t, x.h, 1.0, norm_bytes > 0});
  gemms.add({x.tokens, x.h, f / x.t, 1.0, false, false, true});
  recompute.compute_seconds =
      one_linear_gemm_seconds(cluster, options, x.tokens, fc1_columns / x.t, x.h) +
      one_linear_gemm_seconds(cluster, options, x.tokens, x.h, f / x.t) +
      memory_seconds(cluster, norm_bytes + (swiglu ? 3.0 : 2.0) * x.tokens * f / x.t * x.e) +
      recomputed_fp8_cast_seconds(cluster, layout, options, x, gemms);
  if (layout.tp > 1) {
    const auto hidden_bytes = [&](double element_bytes) {
      return static_cast<int64_t>(x.tokens * x.h * element_bytes);
    };
    recompute.tp_seconds =
        layout.sequence_parallel
            ? collective_seconds(
                  cluster, CollectiveKind::kAllGather,
                  hidden_bytes(static_cast<double>(tp_all_gather_element_bytes(cluster, options))),
                  layout.tp, 1) +
                  collective_seconds(cluster, CollectiveKind::kReduceScatter, hidden_bytes(x.e),
                                     layout.tp, 1)
            : collective_seconds(cluster, CollectiveKind::kAllReduce, hidden_bytes(x.e), layout.tp,
                                 1);
  }
  return recompute;
}

}  // namespace

// Megatron-Core's --recompute-modules mla_up_proj (multi_latent_attention.py
// qkv_up_proj_and_rope_apply under CheckpointWithoutOutput, d98e8a64), per layer and micro-batch
// on one rank: before the attention's backward the q projection (up from the query latent, or
// from the hidden state without one) and the kv up projection run again in the linear layers'
// precision (add_attention in linear_gemms.cpp has their shapes), Q, K and V are written again
// (read and write them, rope and the concatenations), and under sequence parallelism the two
// column-parallel projections gather their latents over tp again; the rotary key is gathered
// before the checkpointed function and not again.
ModuleRecompute mla_up_projection_recompute(const models::TransformerConfig& model,
                                            const models::ClusterConfig& cluster,
                                            const Layout& layout, const PlanOptions& options) {
  ModuleRecompute recompute;
  if (!model.is_mla() || !recomputes_module(layout, kRecomputeMlaUpProj)) {
    return recompute;
  }
  const Shape x = shape_of(model, cluster, layout);
  const MlaLatentWidths widths = mla_latent_widths(model);
  const double q_in = static_cast<double>(widths.query);
  const double kv_in = static_cast<double>(widths.kv);
  const double q_out = x.a * x.d / x.t;
  const double kv_out = x.a * static_cast<double>(model.qk_nope_head_dim + model.v_head_dim) / x.t;
  recompute.flops = 2.0 * x.tokens * (q_out * q_in + kv_out * kv_in);
  recompute.compute_seconds =
      one_linear_gemm_seconds(cluster, options, x.tokens, q_out, q_in) +
      one_linear_gemm_seconds(cluster, options, x.tokens, kv_out, kv_in) +
      memory_seconds(cluster, 2.0 * x.tokens * (x.a + 2.0 * x.g) * x.d * x.e / x.t);
  LinearGemms up_projections;
  up_projections.add({x.tokens, q_out, q_in});
  up_projections.add({x.tokens, kv_out, kv_in});
  recompute.compute_seconds +=
      recomputed_fp8_cast_seconds(cluster, layout, options, x, up_projections);
  if (layout.sequence_parallel && layout.tp > 1) {
    for (const double width : {q_in, kv_in}) {
      recompute.tp_seconds +=
          collective_seconds(cluster, CollectiveKind::kAllGather,
                             static_cast<int64_t>(x.tokens * width * x.e), layout.tp, 1);
    }
  }
  return recompute;
}

// Megatron-Core's --recompute-modules mlp (transformer_layer.py recompute_mlp: the dense MLP
// under tensor_parallel.checkpoint, d98e8a64), per dense layer and micro-batch on one rank:
// before the MLP's backward its forward runs again, the fused norm (read and write T h / sp)
// and the MLP (mlp_forward_again, linear_gemms.cpp's MLP shapes).
ModuleRecompute dense_mlp_recompute(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool moe_layer) {
  if (moe_layer || !recomputes_module(layout, kRecomputeMlp)) {
    return {};
  }
  const Shape x = shape_of(model, cluster, layout);
  return mlp_forward_again(model, cluster, layout, options, x, x.fc1, x.f,
                           2.0 * x.tokens * x.h * x.e / x.sp);
}

// --recompute-modules shared_experts (moe_layer.py shared_experts_compute under
// tensor_parallel.checkpoint, d98e8a64), per MoE layer and micro-batch on one rank: the shared
// experts' MLP runs again from its kept input (the pre-MLP norm's output, which the router
// reads too), S f_s wide (linear_gemms.cpp's shared-expert shapes), with its tp collectives.
ModuleRecompute shared_experts_recompute(const models::TransformerConfig& model,
                                         const models::ClusterConfig& cluster, const Layout& layout,
                                         const PlanOptions& options, bool moe_layer) {
  // Beside moe this is a third run: the block's rebuild (moe_block_recompute) runs the shared
  // experts under their own checkpoint, whose backward runs them again (moe_block_recompute,
  // nested checkpoints).
  if (!moe_layer || !recomputes_module(layout, kRecomputeSharedExperts)) {
    return {};
  }
  const Shape x = shape_of(model, cluster, layout);
  const double f_shared = static_cast<double>(model.num_shared_experts) *
                          static_cast<double>(model.shared_expert_ffn_hidden_size);
  const bool swiglu = models::is_gated(model.activation);
  return mlp_forward_again(model, cluster, layout, options, x, (swiglu ? 2.0 : 1.0) * f_shared,
                           f_shared, 0.0);
}

// --recompute-modules moe (moe_layer.py MoELayer.forward under tensor_parallel.checkpoint,
// d98e8a64), per MoE layer and micro-batch on one rank: before the layer's backward its MoE
// block runs again from its kept input: the router and the experts' and shared experts' GEMMs
// (mlp_linear_gemms), the token permutation and the activations (as layer_time counts them),
// and the block's tp collectives (the routed tokens over etp, the shared experts' pair). Its
// dispatch and combine all-to-alls run again too; chunk_cost adds them with the forward's.
// Nested checkpoints: beside moe, moe_act and shared_experts still apply inside the rebuilt
// block (experts.py's CheckpointWithoutOutput, moe_layer.py's tensor_parallel.checkpoint of the
// shared experts; tensor_parallel/random.py): the rebuild runs them once and they run once more
// in the rebuilt block's backward, a third forward that drops nothing more. Their own functions
// (selective_module_recompute_bytes, shared_experts_recompute) charge that third run, as the
// executor runs it (executor/transformer_layer.cpp recompute_module_activations).
ModuleRecompute moe_block_recompute(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, bool moe_layer) {
  ModuleRecompute recompute;
  if (!moe_layer || !recomputes_module(layout, kRecomputeMoe)) {
    return recompute;
  }
  const Shape x = shape_of(model, cluster, layout, moe_layer);
  const bool swiglu = models::is_gated(model.activation);
  const double permute_bytes = moe_permute_bytes(model, cluster, layout, options);
  const LinearGemms gemms = mlp_linear_gemms(model, layout, options, x, moe_layer);
  recompute.compute_seconds =
      linear_gemm_seconds(model, cluster, options, x, gemms, moe_layer) +
      memory_seconds(cluster, permute_bytes + (swiglu ? 3.0 : 2.0) * x.tokens * x.f / x.t * x.e) +
      recomputed_fp8_cast_seconds(cluster, layout, options, x, gemms);
  // The MLP and router FLOPs, which no window changes.
  const LayerFlops flops = layer_forward_flops(model, x.tokens, LayerKind{moe_layer, false});
  recompute.flops = (flops.mlp + flops.router) / x.t;
  if (layout.tp > 1) {
    recompute.tp_seconds =
        moe_expert_tp_seconds(model, cluster, layout, CollectiveKind::kAllReduce);
    if (model.num_shared_experts > 0) {
      const double f_shared = static_cast<double>(model.num_shared_experts) *
                              static_cast<double>(model.shared_expert_ffn_hidden_size);
      recompute.tp_seconds +=
          mlp_forward_again(model, cluster, layout, options, x, f_shared, f_shared, 0.0).tp_seconds;
    }
  }
  return recompute;
}

double selective_module_recompute_bytes(const models::TransformerConfig& model,
                                        const models::ClusterConfig& cluster, const Layout& layout,
                                        bool moe_layer) {
  const Shape x = shape_of(model, cluster, layout, moe_layer);
  double bytes = 0;
  // Beside moe the activation runs a third time: the block's rebuild (moe_block_recompute)
  // runs it under its own CheckpointWithoutOutput again, which discards it after fc2 and
  // rebuilds it in fc2's backward (moe_block_recompute, nested checkpoints).
  if (moe_layer && recomputes_module(layout, kRecomputeMoeAct)) {
    // The routed experts' activation (experts.py bias_act_func under CheckpointWithoutOutput):
    // SwiGLU reads 2 k f_e and writes k f_e per token, GELU reads and writes k f_e, split as
    // layer_time splits the MLP's element-wise work (over t).
    const double routed = x.tokens * static_cast<double>(model.experts_per_token) *
                          static_cast<double>(model.expert_ffn_hidden_size) / x.t;
    bytes += (models::is_gated(model.activation) ? 3.0 : 2.0) * routed * x.e;
  }
  if (recomputes_module(layout, kRecomputeLayernorm)) {
    // Each norm that is a module of its own runs again: read and write T h / sp (as the fused
    // norms' count in layer_time).
    bytes += static_cast<double>(separate_norms_per_layer(model, moe_layer)) * 2.0 * x.tokens *
             x.h * x.e / x.sp;
  }
  return bytes;
}

}  // namespace meshplan::planner
