// Memory per rank of one pipeline stage: model states per ZeRO stage, activations per
// Korthikanti et al. 2022, and the per-GPU reserve.

#include "memory.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "estimate_internal.h"
#include "meshplan/dp_buckets.h"
#include "model_shape.h"

namespace meshplan::planner {

namespace {

// What torchtitan's op-level selective activation checkpointing keeps per dense block and
// micro-batch (torchtitan parallelize_llama.py `_save_list` and `_custom_policy`, at the
// benchmark's commit 9dec370 as at 1ea476e9f): the checkpointed block's input, and the outputs
// of the ops it must save, every other recomputed in the backward (see compute_cost.cpp,
// op_sac_recompute, for the mm order wq, wk, wv, wo, w1, w3, w2):
//   odd mms: wq (T a d / t), wv (T g d / t), w1 or fc1 (T f / t) and, for SwiGLU, w2, whose
//     output under tp is the local partial sum before its reduce-scatter (T h);
//   flash attention: its output (T a d / t) and fp32 log-sum-exp (4 T a / t);
//   with sequence parallelism the two reduce-scatter outputs (2 T h / t).
// Everything else (norms, rotary, K, the SwiGLU product, wo and w3's outputs) is rebuilt when
// the block's backward runs (stage_memory adds that one block's rebuild).
double op_sac_saved_bytes_per_layer(const models::TransformerConfig& model, const Shape& x) {
  const bool swiglu = models::is_gated(model.activation);
  const double block_input = x.tokens * x.h * x.e / x.sp;
  const double saved_mm_outputs =
      x.tokens * x.e * ((x.a * x.d + x.g * x.d + x.f) / x.t + (swiglu ? x.h : 0.0));
  const double attention = x.tokens * x.a * x.d * x.e / x.t + 4.0 * x.tokens * x.a / x.t;
  const double reduce_scatter_outputs = x.t > 1 ? 2.0 * x.tokens * x.h * x.e / x.sp : 0.0;
  return block_input + saved_mm_outputs + attention + reduce_scatter_outputs;
}

// Change in one layer's stored activations (per micro-batch, one rank; negative = fewer bytes)
// when Transformer Engine's linear layers run in FP8 under Megatron-Core (--precision fp8, any
// framework but fsdp, whose torchao float8 keeps bf16 activations: fp8_state_bytes), from the
// tensors TE saves for the backward (TransformerEngine v1.8 = 3ec998e, the NeMo 24.07 era, and
// v2.8 the same in effect):
//   LayerNormLinear (QKV, and MLP in: Megatron-Core's TELayerNormColumnParallelLinear) saves
//     its bf16 norm input and its norm output cast to fp8 (layernorm_linear.py save_for_backward
//     `inputmat, ..., ln_out`, ln_out_dtype uint8 under fp8; v2.8 update_usage keeps one of the
//     row/column-wise copies): the QKV and MLP inputs take 1 byte, not e (2 T h / sp);
//   Linear (attention output and MLP out: TERowParallelLinear) saves its input cast to fp8 or
//     its fp8 transpose, never both (linear.py saved_inputmat / saved_inputmat_t; v2.8
//     update_usage(rowwise_usage=False)): the second MLP projection's input takes 1 byte (T f
//     / t; Megatron's activation function saves its own input, unchanged). The attention
//     output is saved in bf16 by flash attention as its `out` (Dao 2022, Alg. 2 needs O), so
//     there the fp8 copy is 1 byte more (T a d / t); without flash attention, or under
//     selective recompute (the checkpointed core attention keeps only q, k, v), nothing else
//     keeps it and it takes 1 byte instead of e.
// MoE layers: the attention part only (expert GEMMs are not modelled here); MLA: 0 (its QKV
// input is the latent path, not modelled).
double te_fp8_activation_delta_bytes_per_layer(const models::TransformerConfig& model,
                                               const Shape& x, const Layout& layout,
                                               const PlanOptions& options, bool moe_layer) {
  if (options.gemm_precision != GemmPrecision::kFp8 || options.framework == Framework::kFsdp ||
      model.is_mla()) {
    return 0.0;
  }
  const double saved_per_element = x.e - 1.0;  // bytes one element saves in fp8
  const double qkv_input = x.tokens * x.h / x.sp * saved_per_element;
  const bool flash_keeps_output =
      options.flash_attention && !recomputes_module(layout, kRecomputeCoreAttn);
  const double attention_output = flash_keeps_output
                                      ? -x.tokens * x.a * x.d / x.t
                                      : x.tokens * x.a * x.d / x.t * saved_per_element;
  // --recompute-modules mlp keeps none of the dense MLP's inputs (activation_bytes_per_layer
  // drops their whole 16-bit size): nothing to cast down there.
  const bool mlp_dropped = recomputes_module(layout, kRecomputeMlp);
  const double mlp_inputs =
      moe_layer || mlp_dropped ? 0.0
                               : (x.tokens * x.h / x.sp + x.tokens * x.f / x.t) * saved_per_element;
  return -(qkv_input + attention_output + mlp_inputs);
}

}  // namespace

double activation_bytes_per_layer(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options, bool moe_layer) {
  // Korthikanti et al. 2022, Sec. 4.1, eq. 1: one layer stores s b h (34 + 5 a s / h) bytes in
  // 16-bit precision; the tp-split terms are divided by t (eq. 2) and with sequence
  // parallelism the rest too (eq. 3). Generalised tensor by tensor to any element size e,
  // grouped-query K and V (g d instead of h) and SwiGLU (2f stored before the activation):
  //   split by t always: Q, K, V (T (a + 2g) d e), output-projection input (T a d e),
  //     activation input (T f e, 2 T f e for SwiGLU), second-projection input (T f e);
  //   split by t only with sequence parallelism: two norm inputs, QKV and MLP inputs
  //     (4 T h e) and two dropout masks (2 T h bytes);
  //   attention scores: softmax output, its dropout mask and output (a s T (2e + 1)) / t,
  //     which selective recompute and flash attention do not store (ibid. Sec. 5).
  // MoE layer: f is the routed and shared width a token goes through (k f_e + S f_s), plus the
  // dispatched tokens gathered over the etp ranks (k T h e at etp = tp) and the router's fp32
  // probabilities (4 T E / sp). MLA is costed with g = a and d = d_nope + d_rope, which counts
  // V and the output-projection input at d_qk instead of d_v and omits the latents (r_q + r_kv
  // per token): within a few per cent of the layer for DeepSeek-V3.
  const Shape x = shape_of(model, cluster, layout, moe_layer);
  const auto [t, tokens, h, d, a, g, f, s, e, sequence_split, fc1_columns] = x;
  if (layout.recompute == Recompute::kFull) {
    // Only the layer input is kept: 2 s b h bytes (ibid. Sec. 4.3), / t with sequence parallel
    // or with distributed saved activations (Megatron-LM tensor_parallel/random.py
    // CheckpointFunction keeps split_tensor_into_1d_equal_chunks of it; DeepSpeed's
    // partition_activations the same 1/t; check_distribute_saved_activations: never both).
    const double input_split = options.distribute_saved_activations ? t : sequence_split;
    return tokens * h * e / input_split;
  }
  if (op_level_selective_recompute(layout, options)) {
    return op_sac_saved_bytes_per_layer(model, x);
  }
  const double activation_input = (models::is_gated(model.activation) ? 2.0 : 1.0) * tokens * f * e;
  // Per-head q/k norms (Qwen3, Gemma 3; Megatron-Core's q_layernorm and k_layernorm, TENorm;
  // Llama 4's L2 norm, counted on every layer) keep their inputs, the projected Q and K before
  // the norm: T (a + g) d e more, split by t.
  const double qk_norm_inputs = model.has_qk_normalization() ? tokens * (a + g) * d * e : 0.0;
  const double split = (tokens * (a + 2.0 * g) * d * e + qk_norm_inputs + tokens * a * d * e +
                        activation_input + tokens * f * e) /
                       t;
  // Dropout masks (1 byte per element) exist only where the model trains with dropout.
  const double mask = model.dropout ? 1.0 : 0.0;
  // A parallel block's second norm reads the layer input, which the first norm already keeps:
  // one T h e less (GPT-NeoX: input_layernorm(x) and post_attention_layernorm(x)).
  // Sandwich norms (Gemma 2/3) keep their inputs too, the two branch outputs: two T h e more.
  const double norm_and_linear_inputs =
      (model.parallel_residual ? 3.0 : 4.0) + (model.sandwich_norm ? 2.0 : 0.0);
  const double replicated =
      (norm_and_linear_inputs * tokens * h * e + 2.0 * mask * tokens * h) / sequence_split;
  double scores = 0;
  // recompute is none or selective here; selective keeps the scores unless it names core_attn.
  const bool attention_core_kept = !recomputes_module(layout, kRecomputeCoreAttn);
  if (attention_core_kept && !options.flash_attention) {
    // Softmax output e; with dropout also its mask (1) and output (e): 5 a s / h at e = 2.
    // The full s x s even under a sliding window: the unfused path masks a full score matrix
    // (Megatron-Core FusedScaleMaskSoftmax with window_size, d98e8a64), it stores no less.
    scores = a * s * tokens * (e + mask * (e + 1.0)) / t;
    // Gemma 2's attention soft-cap, eager (transformers eager_attention_forward: `/ c`,
    // torch.tanh, `* c` on the scores): TanhBackward0 keeps tanh's output, one more a s^2 b
    // score tensor in e (the compiled pass is not modelled apart: blocks are costed as eager).
    scores += model.attn_logit_softcapping > 0.0 ? a * s * tokens * e / t : 0.0;
  } else if (options.flash_attention) {
    scores = 4.0 * tokens * a / t;  // fp32 log-sum-exp per query row (Dao 2022, Alg. 1)
  }
  double moe = 0;
  if (moe_layer) {
    // The routed tokens the rank's experts take in: k T h e gathered over the etp group
    // (moe_tp_gather_bytes; k T h e at etp = tp), and the router's fp32 probabilities.
    moe = static_cast<double>(moe_tp_gather_bytes(model, cluster, layout)) +
          4.0 * tokens * static_cast<double>(model.num_experts) / sequence_split;
  }
  // Megatron-Core's --recompute-modules beyond the attention core drop what they rebuild:
  // moe_act the routed experts' activation output (the second expert GEMM's input, k T f_e e / t
  // of the fc2-input term above), layernorm each separate norm's output (T h e / sp),
  // mla_up_proj Q, K and V, shared_experts the shared experts' activations, moe all of an MoE
  // layer's MLP but its input (moe_act's and shared_experts' drops among them).
  double rebuilt = 0;
  const bool whole_moe = moe_layer && recomputes_module(layout, kRecomputeMoe);
  if (whole_moe) {
    // moe: the checkpointed MoE block keeps its input (the pre-MLP norm's output, counted
    // above) and drops the routed and shared activations (the f = k f_e + S f_s terms of the
    // split above), the dispatched tokens and the router's probabilities.
    rebuilt += (activation_input + tokens * f * e) / t + moe;
  }
  if (moe_layer && !whole_moe && recomputes_module(layout, kRecomputeMoeAct)) {
    rebuilt += tokens * static_cast<double>(model.experts_per_token) *
               static_cast<double>(model.expert_ffn_hidden_size) * e / t;
  }
  if (recomputes_module(layout, kRecomputeLayernorm)) {
    rebuilt += static_cast<double>(separate_norms_per_layer(model, moe_layer)) * tokens * h * e /
               sequence_split;
  }
  if (moe_layer && !whole_moe && recomputes_module(layout, kRecomputeSharedExperts)) {
    // shared_experts: the checkpointed shared experts' MLP keeps its input (the router's too)
    // and drops its activation input and second projection's input (the S f_s share of the
    // split term above).
    const double shared = tokens * static_cast<double>(model.num_shared_experts) *
                          static_cast<double>(model.shared_expert_ffn_hidden_size) * e;
    rebuilt += ((models::is_gated(model.activation) ? 2.0 : 1.0) + 1.0) * shared / t;
  }
  if (!moe_layer && recomputes_module(layout, kRecomputeMlp)) {
    // mlp (dense layers): the checkpointed MLP keeps its input, the pre-norm hidden state the
    // fused norm reads (counted above); it drops the norm's output (T h e / sp), the activation
    // input and the second projection's input.
    rebuilt += tokens * h * e / sequence_split + (activation_input + tokens * f * e) / t;
  }
  if (model.is_mla() && recomputes_module(layout, kRecomputeMlaUpProj)) {
    // mla_up_proj: Q, K and V, rebuilt from the latents before the attention's backward (the
    // Q, K, V term above); the rotary key, an input of the checkpointed function
    // (qkv_up_proj_and_rope_apply's k_pos_emb, gathered, one head for all), stays: T d_rope e.
    rebuilt += tokens * (a + 2.0 * g) * d * e / t -
               tokens * static_cast<double>(model.qk_rope_head_dim) * e;
  }
  return split + replicated + scores + moe - rebuilt +
         te_fp8_activation_delta_bytes_per_layer(model, x, layout, options, moe_layer);
}

double weight_gradient_bytes_per_layer(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout,
                                       bool moe_layer) {
  // W of a linear Y = X A needs X and dY (dA = X^T dY). Inputs: QKV and first MLP projection
  // take the (sequence-sharded under SP) normed hidden states, the output projection the
  // attention output (T a d / t), the second MLP projection the activation (T f / t). Output
  // gradients: QKV (T (a + 2g) d / t), attention output and second MLP projection (T h, / t
  // under SP), first MLP projection (T f or 2 T f for SwiGLU, / t); MoE: f = k f_e + S f_s.
  const Shape x = shape_of(model, cluster, layout, moe_layer);
  const auto [t, tokens, h, d, a, g, f, s, e, sequence_split, fc1_columns] = x;
  const double inputs = 2.0 * tokens * h / sequence_split + tokens * a * d / t + tokens * f / t;
  const double output_gradients =
      tokens * (a + 2.0 * g) * d / t + 2.0 * tokens * h / sequence_split + tokens * fc1_columns / t;
  return (inputs + output_gradients) * e;
}

namespace {

// (held, waiting-for-W) counts after every op of `stage`, keeping the Pareto-maximal ones.
std::vector<std::pair<int64_t, int64_t>> held_and_waiting(const PipelineSchedule& schedule,
                                                          int64_t stage) {
  std::vector<std::pair<int64_t, int64_t>> points;
  int64_t held = 0, waiting = 0;
  for (const PipelineOp& op : schedule.stages[static_cast<size_t>(stage)]) {
    if (op.kind == OpKind::kForward) {
      ++held;
    } else if (op.kind == OpKind::kBackward) {
      --held;
    } else if (op.kind == OpKind::kBackwardInput) {
      --held;
      ++waiting;
    } else if (op.kind == OpKind::kBackwardWeight) {
      --waiting;
    } else {
      continue;
    }
    const bool dominated = std::any_of(points.begin(), points.end(), [&](const auto& p) {
      return p.first >= held && p.second >= waiting;
    });
    if (!dominated) {
      std::erase_if(points, [&](const auto& p) { return p.first <= held && p.second <= waiting; });
      points.emplace_back(held, waiting);
    }
  }
  return points;
}

}  // namespace

int64_t reserve_bytes(const models::ClusterConfig& cluster, int64_t allocated_bytes) {
  // Fixed part: the cluster's reserved_bytes_per_gpu (CUDA context + NCCL communicator
  // buffers; NVIDIA/nccl#964 measured 688 MB per communicator of > 2 GPUs). Fragmentation:
  // kAllocatorFragmentation of the allocated bytes (see memory.h for its source).
  return cluster.reserved_bytes_per_gpu +
         static_cast<int64_t>(kAllocatorFragmentation * static_cast<double>(allocated_bytes));
}

InFlight peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                        int64_t stage, int64_t microbatch_group, bool ep_overlap) {
  // Counted from the schedule's own op list; memoised because the search asks for the same
  // (schedule, pp, vpp, m) many times. One memo per thread: sweep's parallel searches
  // (planner/sweep.cpp) each keep their own, with no lock on this hot path.
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool>;
  static thread_local std::map<Key, std::vector<InFlight>> cache;
  const Key key{static_cast<int>(kind), pp, vpp, num_micro_batches, microbatch_group, ep_overlap};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const PipelineSchedule schedule =
        generate_schedule(kind, pp, vpp, num_micro_batches,
                          /*with_transfers=*/false, microbatch_group, ep_overlap);
    std::vector<InFlight> peaks(static_cast<size_t>(pp));
    for (int64_t s = 0; s < pp; ++s) {
      InFlight& peak = peaks[static_cast<size_t>(s)];
      peak.all_chunks = peak_in_flight_micro_batches(schedule, s);
      peak.first_chunk = vpp == 1 ? peak.all_chunks : peak_in_flight_micro_batches(schedule, s, 0);
      peak.last_chunk =
          vpp == 1 ? peak.all_chunks : peak_in_flight_micro_batches(schedule, s, vpp - 1);
      peak.held_and_waiting = held_and_waiting(schedule, s);
    }
    it = cache.emplace(key, std::move(peaks)).first;
  }
  return it->second[static_cast<size_t>(stage)];
}

int64_t peak_in_flight_layers(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                              int64_t microbatch_group, int64_t stage,
                              const std::vector<int64_t>& chunk_layers, bool ep_overlap) {
  // Memoised as peak_in_flight; only stages whose chunks differ ask (a few keys per search).
  using Key =
      std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, std::vector<int64_t>, bool>;
  static thread_local std::map<Key, int64_t> cache;
  Key key{static_cast<int>(kind), pp,    vpp,          num_micro_batches,
          microbatch_group,       stage, chunk_layers, ep_overlap};
  auto it = cache.find(key);
  if (it != cache.end()) {
    return it->second;
  }
  const PipelineSchedule schedule =
      generate_schedule(kind, pp, vpp, num_micro_batches,
                        /*with_transfers=*/false, microbatch_group, ep_overlap);
  int64_t held = 0, peak = 0;
  for (const PipelineOp& op : schedule.stages[static_cast<size_t>(stage)]) {
    const int64_t layers = chunk_layers.at(static_cast<size_t>(op.chunk));
    if (op.kind == OpKind::kForward) {
      held += layers;
      peak = std::max(peak, held);
    } else if (op.kind == OpKind::kBackward || op.kind == OpKind::kBackwardInput) {
      held -= layers;
    }
  }
  cache.emplace(std::move(key), peak);
  return peak;
}

namespace {

// Bytes per parameter a rank holds for weights, gradients and optimizer states, after the
// framework's sharding over d = dp * cp, the gradient group, or under hybrid sharding its shard
// group dp_shard * cp (bf16 mixed precision, Adam; docs/research/framework-memory.md).
struct BytesPerParameter {
  double weights = 0, gradients = 0, optimizer = 0;
};

BytesPerParameter bytes_per_parameter(const PlanOptions& options,
                                      const models::ClusterConfig& cluster, const Layout& layout) {
  const double d = static_cast<double>(zero_shard_group_size(layout));
  const double w_shard = zero_shards_parameters(layout) ? d : 1.0;
  const double g_shard = zero_shards_gradients(layout) ? d : 1.0;
  const double o_shard = zero_shards_optimizer(layout) ? d : 1.0;
  if (cluster.precision == models::Precision::kFp32) {
    // No master copy in fp32: (4 + 4 + 8) psi (ZeRO, Rajbhandari et al. 2020, Fig. 1).
    return {4.0 / w_shard, 4.0 / g_shard, 8.0 / o_shard};
  }
  switch (options.framework) {
    case Framework::kMegatron:
      if (layout.zero <= 1) {
        // Megatron-LM docs dist_optimizer.md table and NVIDIA/Megatron-LM#654: bf16 weight 2 +
        // fp32 main_grad 4, neither sharded by the distributed optimizer, + fp32 master 4 and
        // Adam 8 (sharded at ZeRO-1): 18, or 6 + 12/d. main_grad is fp32 because arguments.py
        // forces accumulate_allreduce_grads_in_fp32 with --bf16 (lines 1204-1217); the buffer
        // takes the reduce dtype (param_and_grad_buffer.py line 924: grad_dtype = fp32 if
        // grad_reduce_in_fp32 else the param dtype), so --grad-reduce-in-bf16 (and 2021's fp16
        // runs) keep 2 bytes: grad_reduce_element_bytes.
        return {2.0, static_cast<double>(grad_reduce_element_bytes(cluster, layout, options)),
                12.0 / o_shard};
      }
      // Megatron-FSDP optim_grads / optim_grads_params: main grads dtype "auto" = bf16
      // (arguments.py lines 3687-3694): (2 + 2 + 12)/d sharded as ZeRO stage 2 or 3.
      return {2.0 / w_shard, 2.0 / g_shard, 12.0 / o_shard};
    case Framework::kDeepSpeed:
      // DeepSpeed 0.19.6: grad_accum_dtype = model dtype bf16 (engine.py line 1485); ZeRO-1/2
      // stage_1_and_2.py, ZeRO-3 stage3.py lines 741-744. Under the pipeline engine ZeRO-0 runs
      // BF16_Optimizer, which always shards the fp32 master and Adam (PR #1801).
      return {2.0 / w_shard, 2.0 / g_shard,
              12.0 / (layout.zero == 0 && layout.pp > 1 ? d : o_shard)};
    case Framework::kFsdp:
      // torchtitan FSDP2: fp32 sharded parameters (mixed_precision_param only casts the
      // all-gather), fp32 gradients (mixed_precision_reduce = float32) and Adam: 16/d, no
      // persistent unsharded copy (docs/research/framework-memory.md, Sec. 3.1).
      return {4.0 / w_shard, 4.0 / w_shard, 8.0 / w_shard};
    case Framework::kMeshplan:
      break;
  }
  // meshplan's executor: ZeRO (Rajbhandari et al. 2020), Fig. 1: (2 + 2 + K) psi, K = 12.
  return {2.0 / w_shard, 2.0 / g_shard, 12.0 / o_shard};
}

// Attention's linear (GEMM) weights of one layer on one tp rank: QKV and output projection.
double attention_linear_weights_per_layer(const Shape& x) {
  return (x.h * (x.a + 2.0 * x.g) * x.d + x.a * x.d * x.h) / x.t;
}

// Linear (GEMM) weights of one layer on one tp rank: attention's, MLP in and out.
double linear_weights_per_layer(const Shape& x) {
  return attention_linear_weights_per_layer(x) + (x.h * x.fc1 + x.f * x.h) / x.t;
}

}  // namespace

// Bytes per gathered layer that torchao's float8 all-gather saves under --framework fsdp
// --precision fp8 (torchtitan's float8 recipe, docs/float8.md: --float8.enable_float8_linear
// --float8.enable_fsdp_float8_all_gather --float8.precompute_float8_dynamic_scale_for_fsdp):
// WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather (torchao/float8/fsdp_utils.py; the Dec
// 2024 benchmark ran torchao eab345c) casts each Float8Linear weight shard to fp8 before
// the all-gather, so a gathered layer holds 1 byte per linear weight instead of e; its
// per-tensor fp32 scale is negligible. Norms, the embedding and the output layer (excluded by
// torchtitan's float8 module filter, fqn != "output") stay in e bytes. torchao converts
// nn.Linear only, so an MoE model's grouped experts stay in e: only attention is counted there.
// 0 for any other framework or precision.
double fsdp_float8_gather_saving_bytes(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout,
                                       const PlanOptions& options) {
  if (options.framework != Framework::kFsdp || options.gemm_precision != GemmPrecision::kFp8) {
    return 0.0;
  }
  const Shape x = shape_of(model, cluster, layout);
  return (x.e - 1.0) *
         (model.is_moe() ? attention_linear_weights_per_layer(x) : linear_weights_per_layer(x));
}

namespace {

// Unsharded fp32 gradients a pipeline stage accumulates under --framework fsdp with pp > 1:
// torch.distributed.pipelining (stage.py, backward_maybe_with_nosync) runs every micro-batch's
// backward with set_requires_gradient_sync(False) and set_reshard_after_backward(False), and
// reduce-scatters only in the last one (run_post_backward); until then FSDP2 keeps each
// parameter's unsharded gradient, upcast to reduce_dtype = fp32 (torchtitan's
// mixed_precision_reduce default; FSDPParam.to_accumulated_grad_if_needed in _fsdp_param.py):
// 4 bytes per parameter the rank holds before data-parallel sharding, `stage_parameters`.
// 0 for any other framework, at pp 1 (torchtitan 9dec370 has no gradient accumulation without
// PP), without FSDP (ZeRO 0 is DDP, whose fp32 gradients bytes_per_parameter counts whole) and
// in fp32 training (no upcast; the gradient is already counted whole there).
double fsdp_pp_accumulated_gradient_bytes(const PlanOptions& options,
                                          const models::ClusterConfig& cluster,
                                          const Layout& layout, double stage_parameters) {
  if (options.framework != Framework::kFsdp || layout.pp == 1 || !zero_shards_parameters(layout) ||
      cluster.precision == models::Precision::kFp32) {
    return 0.0;
  }
  // Upcast to reduce_dtype: 4 bytes (fp32, the default), 2 under reduce_dtype bf16.
  return static_cast<double>(grad_reduce_element_bytes(cluster, layout, options)) *
         stage_parameters;
}

// Transient and working-set bytes beyond the persistent states: gathered parameters and
// unsharded gradients of ZeRO-3/FSDP units, DeepSpeed's reduce buckets. Returns {weights,
// gradients}; `step_bytes` gets what exists only during the optimizer step.
std::pair<double, double> working_set_bytes(const PlanOptions& options,
                                            const models::TransformerConfig& model,
                                            const models::ClusterConfig& cluster,
                                            const Layout& layout, int64_t stage,
                                            double stage_parameters, double* step_bytes) {
  *step_bytes = 0;
  const Framework framework = options.framework;
  const double e = static_cast<double>(element_bytes(cluster));
  const double t = static_cast<double>(layout.tp);
  const double d = static_cast<double>(zero_shard_group_size(layout));
  // The largest layer: an MoE layer's experts usually outweigh a dense layer.
  LayerParameters layer_count = layer_parameters(model, layout.tp);
  if (model.is_moe()) {
    const LayerParameters moe = layer_parameters(model, layout.tp, true, layout.ep, layout.etp);
    if (moe.sharded + moe.replicated + moe.expert > layer_count.sharded + layer_count.replicated) {
      layer_count = moe;
    }
  }
  const double layer =
      static_cast<double>(layer_count.sharded + layer_count.replicated + layer_count.expert);
  // Embedding and LM head are gathered like any unit (one unit each, V h / t per rank).
  const double vocab_unit =
      static_cast<double>(padded_vocab_size(model, layout.tp, options)) * model.hidden_size / t;
  const double largest_unit = std::max(layer, vocab_unit);
  const bool sharded = zero_shards_parameters(layout);
  if (framework == Framework::kFsdp && cluster.precision != models::Precision::kFp32) {
    // FSDP2 (_fsdp_param_group.py): the current and the prefetched unit's bf16 parameters, the
    // previous unit's reduce-scatter input in reduce_dtype (fp32 by default, bf16 under
    // reduce_dtype bf16: grad_reduce_element_bytes) and the current unit's bf16 gradient
    // (FSDP1: _max_num_inflight_all_gathers = 2). With pp > 1 torchtitan does not reshard after
    // forward: the whole stage stays gathered in bf16 from forward to backward.
    const double reduce_bytes =
        static_cast<double>(grad_reduce_element_bytes(cluster, layout, options));
    const double gradients = (reduce_bytes + e) * largest_unit;
    const double fp8_saved_per_layer =
        fsdp_float8_gather_saving_bytes(model, cluster, layout, options);
    if (layout.pp > 1) {
      const double layers = static_cast<double>(stage_layer_count(model, layout, stage));
      return {e * stage_parameters - layers * fp8_saved_per_layer,
              gradients +
                  fsdp_pp_accumulated_gradient_bytes(options, cluster, layout, stage_parameters)};
    }
    const double gathered_layers = largest_unit > layer ? 1.0 : 2.0;
    return {e * (largest_unit + layer) - gathered_layers * fp8_saved_per_layer, gradients};
  }
  if (framework == Framework::kMegatron && layout.zero >= 2 && grad_group_size(layout) > 1) {
    // Megatron-FSDP (megatron_fsdp.md lines 381-382): two units of unsharded weights (ZeRO-3)
    // and two units of unsharded gradients to overlap all-gather and reduce-scatter.
    return {sharded ? e * (largest_unit + layer) : 0.0, e * (largest_unit + layer)};
  }
  if (framework == Framework::kDeepSpeed && layout.zero >= 1 && grad_group_size(layout) > 1) {
    // DeepSpeed config.py defaults: reduce_bucket_size 5e8 elements (line 113), one bf16
    // bucket (overlap_comm off for stage 2; stage 3's contiguous_gradients bucket, stage3.py
    // lines 731-735); at the step an fp32 copy of the gradient partition
    // (stage_1_and_2.py line 2361; stage 3 per sub_group_size 1e9 elements, line 2401).
    const double reduce_bucket =
        layout.zero >= 2 ? static_cast<double>(kDeepSpeedBucketElements) * e : 0.0;
    const double partition = stage_parameters / d;
    *step_bytes = 4.0 * (layout.zero >= 3 ? std::min(partition, 1e9) : partition);
    if (layout.zero < 3) {
      return {0.0, reduce_bucket};
    }
    // ZeRO-3: the most parameters the coordinator holds gathered at once, replayed module by
    // module (deepspeed_zero3_trace: the current module, the prefetched ones, and those kept
    // for a reuse within stage3_max_reuse_distance). The module's unsharded gradient lives
    // until it reaches the bucket.
    const DeepSpeedZero3Trace trace = deepspeed_zero3_trace(model, layout, stage, options);
    return {e * static_cast<double>(trace.peak_gathered_elements),
            reduce_bucket + e * static_cast<double>(trace.largest_gradient_elements)};
  }
  if (framework == Framework::kMeshplan && layout.zero >= 2 && d > 1) {
    // meshplan's executor (executor/gradient_sync.h): the backward writes one full-size gradient
    // buffer, reused every micro-batch, whose blocks are reduce-scattered into the N / dp
    // accumulator that bytes_per_parameter counts. Under ZeRO 3 (parameter_gather.h) the whole
    // stage is gathered around each op, since an op's layer buckets all complete before it runs
    // (vpp 1: validate_plan_for_executor).
    return {layout.zero >= 3 ? e * stage_parameters : 0.0, e * stage_parameters};
  }
  if (layout.zero >= 3) {
    // Any other framework without a model of its own here: the layer computing and the next one
    // prefetched (ZeRO, Rajbhandari et al. 2020, Sec. 7.2.2).
    return {2.0 * e * static_cast<double>(layer_count.sharded), 0.0};
  }
  return {0.0, 0.0};
}

// Transformer Engine's FP8 state of one rank's layers on a stage (--precision fp8 under any
// framework but fsdp, else 0):
// each linear weight cached in FP8 with its transpose, 1 + 1 bytes per element, kept across
// the micro-batches of a step (transformer_engine/pytorch/module/base.py,
// get_weight_workspace, reused while is_first_microbatch is false; Hopper's FP8 GEMMs take
// only the TN layout, so the backward needs the transposed copy), plus the delayed-scaling
// amax history: DelayedScaling.amax_history_len = 1024 fp32 entries for each of 3 forward
// (input, weight, output) and 2 backward (output gradient, input gradient) tensors of each of
// the layer's 4 GEMMs. Under ZeRO-3 the caches are counted whole (an upper bound).
double fp8_state_bytes(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                       const Layout& layout, const PlanOptions& options, int64_t stage) {
  if (options.gemm_precision != GemmPrecision::kFp8 || options.framework == Framework::kFsdp) {
    // torchao's Float8Linear (FSDP2/torchtitan) keeps no persistent FP8 state: tensorwise
    // dynamic scaling (Float8LinearConfig default) casts weight and input in each forward and
    // keeps no amax history; manual_float8_matmul_with_args_in_float8 saves its fp8 input and
    // weight for the backward only (torchao/float8/float8_linear.py of the v0.7 period, read in the
    // code index at an unpinned commit; the Dec 2024 benchmark ran torchao eab345c). Under
    // torchtitan's op-level SAC the fp8 matmul is torch.mm on Float8Tensors, which the policy
    // sees as aten.mm and saves as in bf16 (its output is bf16), and the fp8 casts are
    // recomputed; under full AC only the block input is kept: activations are unchanged.
    return 0.0;
  }
  // DelayedScaling's default history; current scaling keeps none (Float8CurrentScalingQuantizer
  // holds one scale and amax per tensor).
  const double amax_history_length = options.fp8_recipe == Fp8Recipe::kDelayed ? 1024 : 1;
  constexpr double kScaledTensorsPerLayer = 4 * (3 + 2);
  const Shape x = shape_of(model, cluster, layout);
  // The MTP depths' layers (stage_mtp_layer_count) are Transformer Engine layers like the others.
  const double layers = static_cast<double>(stage_layer_count(model, layout, stage) +
                                            stage_mtp_layer_count(model, layout, stage));
  return layers *
         (2.0 * linear_weights_per_layer(x) + amax_history_length * kScaledTensorsPerLayer * 4.0);
}

// Whether the fsdp loss keeps the 16-bit logits for its backward and writes a 16-bit gradient
// (compiled, or llm-foundry's xentropy) rather than torchtitan's eager fp32 copy.
bool loss_saves_logits(const PlanOptions& options) {
  return loss_compiled(options) ||
         options.cross_entropy_loss_fusion == CrossEntropyFusion::kXentropy;
}

// Bytes per logit (token x vocabulary entry) of the last stage's loss: held per micro-batch in
// flight until its backward, and transient once during the loss's backward.
struct LossBytes {
  double held = 4.0;
  double transient = 0.0;
};

// The loss's bytes per logit, eager or compiled (loss_compiled(options), fsdp only):
//   eager (Korthikanti et al. 2022 Sec. 4.4: the fp32 logits 4 s b v / t; torchtitan's
//     cross_entropy(pred.float()), train.py at 9dec370 line 131, whose log_softmax backward
//     holds its saved fp32 output with two fp32 gradients, nll_loss's and its own): held 4,
//     transient 8 under fsdp (other frameworks' transients are stage_memory's);
//   compiled (torchtitan bbb1b616e+ components/loss.py build_cross_entropy_loss wraps the loss in
//     torch.compile): AOTAutograd's min-cut partitioner (torch/_functorch/partitioners.py
//     min_cut_rematerialization_partition) saves the graph's bf16 input, the logits, rather than
//     the fp32 cast and log-softmax it can recompute pointwise, and the fused backward writes
//     one gradient in the input's dtype: held e, transient e. Inferred from the partitioner's
//     rules, not checked on a trace (framework-memory.md Sec. 3.6).
//   xentropy (cross_entropy_loss_fusion, llm-foundry's FlashAttention loss; compute_cost.cpp
//     xentropy_bytes_per_logit): SoftmaxCrossEntropyLossFn saves its input, the 16-bit logits,
//     with one fp32 log-sum-exp per row, and its backward writes one gradient in the logits'
//     dtype (xentropy_kernel.cu host_softmax_xentropy_backward: at::empty_like(logits)): held e,
//     transient e, as compiled. (Composer's train metrics recompute the loss in fp32 from the
//     logits after the backward, when the layers' activations are freed: not the peak.)
LossBytes loss_bytes_per_token_vocab(const models::ClusterConfig& cluster,
                                     const PlanOptions& options) {
  if (options.framework != Framework::kFsdp) {
    return {4.0, 0.0};
  }
  if (!loss_saves_logits(options)) {
    return {4.0, 8.0};
  }
  const double e = static_cast<double>(element_bytes(cluster));
  return {e, e};
}

// What torchtitan's tensor-parallel LM head and loss hold beyond the last stage's terms in
// stage_memory, under --framework fsdp with tp > 1 (0 otherwise). Returns {held per last-chunk
// micro-batch in flight, extra loss transient}, T = the rank's micro-batch tokens:
//   held: the output layer is ColwiseParallel(input_layouts=Shard(1)) (torchtitan 9dec370
//     parallelize_llama.py apply_tp), so its nn.Linear saves the all-gathered, replicated
//     final-norm output, T h e, where stage_memory counts the sequence-sharded T h e / t;
//   transient: under loss_parallel (train.py, on with tp) the cross-entropy backward is
//     torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward,
//     `(grad_input + torch.exp(x)) * grad_output` with grad_input = zeros_like(x): beside the
//     saved fp32 log-probabilities x, three fp32 tensors of the logits' size live at once
//     (zeros, exp or sum, and the product), one more than aten's fused log_softmax backward
//     that stage_memory's 8 T V / t counts: 4 T V / t.
std::pair<double, double> fsdp_tp_loss_extra_bytes(const models::TransformerConfig& model,
                                                   const models::ClusterConfig& cluster,
                                                   const Layout& layout,
                                                   const PlanOptions& options) {
  if (options.framework != Framework::kFsdp || layout.tp == 1) {
    return {0.0, 0.0};
  }
  const double tokens = static_cast<double>(rank_micro_batch_tokens(model, layout));
  const double t = static_cast<double>(layout.tp);
  const double e = static_cast<double>(element_bytes(cluster));
  const double sequence_split = layout.sequence_parallel ? t : 1.0;
  const double held =
      tokens * static_cast<double>(model.hidden_size) * e * (1.0 - 1.0 / sequence_split);
  const double vocab = static_cast<double>(padded_vocab_size(model, layout.tp, options)) / t;
  return {held, 4.0 * tokens * vocab};
}

// Bytes PyTorch's caching allocator keeps reserved but unallocated at the loss's peak on
// torchtitan's last stage (--framework fsdp; else 0), beyond the allocated bytes and
// kAllocatorFragmentation. The allocator (pytorch c10/cuda/CUDACachingAllocator.cpp, its header
// notes and Note [Expandable Segments]; expandable segments are off by default) serves a large
// request from the smallest cached free block that fits and otherwise cudaMallocs a new segment
// of the request's own size; free blocks merge only within their segment, and cached segments
// go back to the driver only when a cudaMalloc fails or on empty_cache. So a segment freed
// before a larger request stays reserved beside the new one. At the loss:
//   the bf16 logits (e T V / t; pp 1: train.py at 9dec370 `del pred` before `loss.backward()`,
//     "to avoid peaking memory") are freed before the backward, whose fp32 logits-sized tensors
//     (4 T V / t, stage_memory's loss_bytes) do not fit in their segment; under pipelining the
//     stage keeps its output until its backward, so pp > 1 adds nothing here;
//   the segments of a layer's transients (`rebuild_bytes`, the layer a recompute rebuilds, of
//     which stage_memory counts only the larger of it and the loss) stay cached beside the
//     loss's, as long as a layer's widest tensor per token, e max(h, fc1 / t, (a + 2g) d / t)
//     (the all-gathered input, the first MLP projection, QKV), is narrower than the loss's
//     4 V / t: the smaller of the two transients is reserved.
double fsdp_loss_cached_bytes(const models::TransformerConfig& model,
                              const models::ClusterConfig& cluster, const Layout& layout,
                              const PlanOptions& options, double rebuild_bytes, double loss_bytes) {
  if (options.framework != Framework::kFsdp || loss_bytes <= 0) {
    return 0.0;
  }
  const Shape x = shape_of(model, cluster, layout);
  const double vocab = static_cast<double>(padded_vocab_size(model, layout.tp, options)) / x.t;
  // Compiled (loss_compiled(options)), the graph saves the bf16 logits, and so does llm-foundry's
  // xentropy loss (loss_saves_logits): nothing is freed before the backward, and the loss's
  // widest tensor is the 16-bit gradient (loss_bytes_per_token_vocab).
  const bool saves_logits = loss_saves_logits(options);
  const double logits_bf16 =
      layout.pp == 1 && x.e < 4.0 && !saves_logits ? x.e * x.tokens * vocab : 0.0;
  const double loss_width = saves_logits ? x.e * vocab : 4.0 * vocab;
  const double widest_layer_tensor =
      x.e * std::max({x.h, x.fc1 / x.t, (x.a + 2.0 * x.g) * x.d / x.t});
  const double layer_pool =
      widest_layer_tensor < loss_width ? std::min(rebuild_bytes, loss_bytes) : 0.0;
  return logits_bf16 + layer_pool;
}

// What torch.distributed.pipelining keeps besides the layers' activations on one rank, under
// --framework fsdp with pp > 1 (torchtitan's pipelined path; 0 otherwise), at the stage's peak
// (the held micro-batches at their steady count), per virtual stage, u = T h e / sp being the
// sequence-sharded layer output torchtitan's tensor parallelism passes between stages. torch
// stage.py (read at a 2025 commit; the framework table's PyTorch and torchtitan 018740b7):
//   forward_one_chunk keeps each micro-batch's output in fwd_cache until its backward (the
//     output is stage_backward's root): held u on a non-last virtual stage, held bf16 logits
//     e T V / t on the last (the loss's fp32 tensors are stage_memory's). torchtitan 018740b7
//     steps with return_outputs=False, so output_chunks keeps none; the Dec 2024 torch kept
//     every micro-batch's output there until the step ended (on every stage until
//     pytorch#153383, May 2025; on the last, detached, per #138504): not modelled;
//   _prepare_backward_infra allocates one gradient receive buffer per micro-batch for each
//     non-last virtual stage, kept across steps: m u;
//   _prepare_forward_infra one activation receive buffer per micro-batch for each non-first
//     virtual stage, m u, of which the chunk's in-flight ones are its first layer's saved input
//     (counted with the layer): m u less held u (a middle chunk, vpp > 2, takes the last
//     chunk's count).
// Virtual stages per rank in torchtitan's "loop" order: chunk c of rank s is stage c pp + s.
double fsdp_pipelining_buffer_bytes(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, int64_t stage,
                                    const InFlight& in_flight) {
  if (options.framework != Framework::kFsdp || layout.pp == 1) {
    return 0.0;
  }
  const Shape x = shape_of(model, cluster, layout);
  const double m = static_cast<double>(layout.num_micro_batches());
  const double boundary = x.tokens * x.h * x.e / x.sp;
  const double logits =
      x.e * x.tokens * static_cast<double>(padded_vocab_size(model, layout.tp, options)) / x.t;
  double bytes = 0;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    const bool first = stage == 0 && chunk == 0;
    const bool last = stage == layout.pp - 1 && chunk == layout.vpp - 1;
    const int64_t held = layout.vpp == 1 ? in_flight.all_chunks
                         : chunk == 0    ? in_flight.first_chunk
                                         : in_flight.last_chunk;
    const double kept = static_cast<double>(held);
    bytes += last ? kept * logits : (kept + m) * boundary;
    if (!first) {
      bytes += std::max(0.0, m - kept) * boundary;
    }
  }
  return bytes;
}

// GEMM library workspaces a PyTorch-based framework keeps in the caching allocator for the
// whole run, counted with the activations (0 under --framework meshplan, not PyTorch):
//   PyTorch's cuBLAS workspace (aten/src/ATen/cuda/CublasHandlePool.cpp: parseChosenWorkspaceSize
//     32 MiB on sm90, ":4096:2:16:8" = 8,519,680 bytes otherwise, allocated by
//     CUDACachingAllocator in getNewWorkspace; one per handle and stream running GEMMs, the
//     compute stream here; cuBLASLt shares it);
//   Transformer Engine's under --framework megatron (Megatron-LM's default transformer_impl;
//     transformer_engine/pytorch/module/base.py get_workspace: 32 MiB on sm90 and later, 4 MiB
//     before), which initialize_ub, with --tp-comm-overlap, replaces by _NUM_MAX_UB_STREAMS = 3
//     copies.
// sm90 stands for a GPU with FP8 tensor cores (GpuSpec::peak_fp8_flops_per_second > 0: the
// H100 and H200 presets).
double gemm_workspace_bytes(const models::ClusterConfig& cluster, const PlanOptions& options) {
  if (options.framework == Framework::kMeshplan) {
    return 0.0;
  }
  // The sources' figures, in bytes.
  constexpr int64_t kPytorchSm90WorkspaceBytes = 32 * kBytesPerMiB;
  constexpr int64_t kPytorchDefaultWorkspaceBytes = 8'519'680;  // ":4096:2:16:8"
  constexpr int64_t kTeSm90WorkspaceBytes = 32 * kBytesPerMiB;
  constexpr int64_t kTeDefaultWorkspaceBytes = 4 * kBytesPerMiB;
  constexpr int64_t kTeUbStreams = 3;  // _NUM_MAX_UB_STREAMS
  const bool sm90 = cluster.gpu.peak_fp8_flops_per_second > 0;
  const int64_t pytorch = sm90 ? kPytorchSm90WorkspaceBytes : kPytorchDefaultWorkspaceBytes;
  if (options.framework != Framework::kMegatron) {
    return static_cast<double>(pytorch);
  }
  const int64_t transformer_engine = sm90 ? kTeSm90WorkspaceBytes : kTeDefaultWorkspaceBytes;
  return static_cast<double>(pytorch +
                             transformer_engine * (options.overlap_tp_comm ? kTeUbStreams : 1));
}

// The (held, waiting) in-flight points of a dense stage, in units of *layers_per_unit layers:
// one chunk's when the stage's chunks hold the same number of layers, else one layer, each held
// (micro-batch, chunk) counted by its own chunk's layers from the op list
// (peak_in_flight_layers): the embedding/loss-accounted split's first chunk of stage 0 and last
// chunk of the last stage hold one layer fewer (none at one layer per chunk). Outputs sent to the
// next stage are not counted: Megatron-Core frees them once sent (schedules.py
// deallocate_output_tensor, on with deallocate_pipeline_outputs, which Megatron-LM sets:
// training/argument_utils.py line 305), and Korthikanti et al.'s per-layer terms hold no layer
// output (the next layer's input is).
std::vector<std::pair<int64_t, int64_t>> dense_held_and_waiting(
    const models::TransformerConfig& model, const Layout& layout, int64_t stage,
    const InFlight& in_flight, double* layers_per_unit, bool ep_overlap) {
  std::vector<int64_t> chunk_counts;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    chunk_counts.push_back(chunk_layers(model, layout, stage, chunk).count());
  }
  const auto [fewest, most] = std::minmax_element(chunk_counts.begin(), chunk_counts.end());
  if (*fewest == *most) {
    *layers_per_unit = static_cast<double>(*most);
    return in_flight.held_and_waiting;
  }
  *layers_per_unit = 1.0;
  return {{peak_in_flight_layers(layout.schedule, layout.pp, layout.vpp, layout.num_micro_batches(),
                                 layout.microbatch_group, stage, chunk_counts, ep_overlap),
           0}};
}

}  // namespace

MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, const InFlight& in_flight) {
  MemoryBreakdown memory;
  const StageParameters parameters = stage_parameters(model, layout, stage, options);
  const double n = static_cast<double>(parameters.sharded + parameters.replicated);
  const BytesPerParameter per = bytes_per_parameter(options, cluster, layout);
  // Expert parameters: sharded over ep already; ZeRO shards them over dp / ep.
  const double n_expert = static_cast<double>(parameters.expert);
  const BytesPerParameter per_expert = bytes_per_parameter(options, cluster, expert_layout(layout));
  double step_bytes = 0;
  const auto [gathered_weights, unsharded_gradients] =
      working_set_bytes(options, model, cluster, layout, stage, n + n_expert, &step_bytes);
  memory.weights_bytes =
      static_cast<int64_t>(per.weights * n + per_expert.weights * n_expert + gathered_weights +
                           fp8_state_bytes(model, cluster, layout, options, stage) -
                           fp8_param_gather_saving_bytes(model, cluster, layout, options, stage));
  memory.gradients_bytes = static_cast<int64_t>(
      per.gradients * n + per_expert.gradients * n_expert + unsharded_gradients);
  memory.optimizer_bytes =
      static_cast<int64_t>(per.optimizer * n + per_expert.optimizer * n_expert);

  const double tokens = static_cast<double>(rank_micro_batch_tokens(model, layout));
  const double h = static_cast<double>(model.hidden_size);
  const double e = static_cast<double>(element_bytes(cluster));
  const double t = static_cast<double>(layout.tp);
  const double sequence_split = layout.sequence_parallel ? t : 1.0;
  // Peak over the op list of held micro-batches' activations plus, for split schedules, the
  // B-to-W tensors of those waiting for their W; per chunk unit, the stage's layers averaged
  // over its vpp chunks (dense and MoE layers differ).
  double held_bytes = 0, waiting_bytes = 0, largest_layer_bytes = 0, largest_rebuild_bytes = 0;
  int64_t stage_layers = 0, rebuilt_layers = 0;
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    const LayerRange range = chunk_layers(model, layout, stage, chunk);
    stage_layers += range.count();
    // A group's layers, at most the chunk's recomputed ones (none where DeepSpeed checkpoints
    // no run of the chunk: nothing is rebuilt there).
    rebuilt_layers = std::max(
        rebuilt_layers,
        rebuilt_layer_count(layout, recomputed_layers(model, layout, options, range).count()));
    // Under the uniform method a chunk keeps one input per group of recompute_group_layers.
    const double inputs_per_recomputed_layer =
        checkpointed_inputs_per_recomputed_layer(model, layout, options, range);
    for (const bool moe_layer : {false, true}) {
      const int64_t num_moe = range.num_moe(model);
      const double count = static_cast<double>(moe_layer ? num_moe : range.count() - num_moe);
      if (count > 0) {
        const double kept_bytes =
            activation_bytes_per_layer(model, cluster, layout, options, moe_layer);
        Layout stored = layout;
        stored.recompute = Recompute::kNone;
        const double layer_bytes =
            activation_bytes_per_layer(model, cluster, stored, options, moe_layer);
        // Layers storing kept_bytes: all of them, except under Megatron's block method, where
        // those after the chunk's first recompute_layers store a whole layer's.
        const double recomputed_count =
            static_cast<double>(layers_under_recompute(model, layout, options, range, moe_layer));
        held_bytes += recomputed_count * inputs_per_recomputed_layer * kept_bytes +
                      (count - recomputed_count) * layer_bytes;
        waiting_bytes += count * weight_gradient_bytes_per_layer(model, cluster, layout, moe_layer);
        largest_layer_bytes = std::max(largest_layer_bytes, layer_bytes);
        largest_rebuild_bytes = std::max(largest_rebuild_bytes, layer_bytes - kept_bytes);
      }
    }
  }
  // Per layer times layers per chunk when every layer is alike (the dense case, kept in that
  // order of operations), the chunk average otherwise.
  double layers_per_micro_batch_unit = 1.0;
  std::vector<std::pair<int64_t, int64_t>> held_and_waiting = in_flight.held_and_waiting;
  if (!model.is_moe()) {
    held_and_waiting =
        dense_held_and_waiting(model, layout, stage, in_flight, &layers_per_micro_batch_unit,
                               ep_overlap_schedule(layout, options));
    // Under the block and uniform methods a held layer's bytes are the stage's average: exact
    // when every chunk has as many layers (a unit is one chunk), otherwise the average over the
    // peak's layers whatever their place in their chunk.
    const bool chunk_shaped = layout.recompute_layers > 0 || layout.recompute_group_layers > 1;
    held_bytes = chunk_shaped && stage_layers > 0
                     ? held_bytes / static_cast<double>(stage_layers)
                     : activation_bytes_per_layer(model, cluster, layout, options);
    waiting_bytes = weight_gradient_bytes_per_layer(model, cluster, layout);
  } else {
    held_bytes /= static_cast<double>(layout.vpp);
    waiting_bytes /= static_cast<double>(layout.vpp);
  }
  double peak_layer_bytes = 0;
  for (const auto& [held, waiting] : held_and_waiting) {
    peak_layer_bytes = std::max(peak_layer_bytes, static_cast<double>(held) * held_bytes +
                                                      static_cast<double>(waiting) * waiting_bytes);
  }
  double activations = peak_layer_bytes * layers_per_micro_batch_unit;
  // Transients that exist once, at different moments of the step, so the larger one counts:
  // a recomputed layer's rebuilt activations during its backward, and the loss's on the last
  // stage.
  double rebuild_bytes = 0;
  if (layout.recompute == Recompute::kFull) {
    // The backward of one layer rebuilds that layer's full activations (ibid. Sec. 4.3); a
    // uniform group's backward rebuilds all of its layers' before running through them.
    rebuild_bytes = static_cast<double>(rebuilt_layers) * largest_layer_bytes;
  } else if (layout.recompute == Recompute::kSelective ||
             op_level_selective_recompute(layout, options)) {
    // The block's backward rebuilds what selective recompute dropped (the attention core's
    // scores without flash attention, the --recompute-modules' tensors; measured by the
    // executor: the peak holds one block's rebuilt MLP) or op-level checkpointing did not keep.
    rebuild_bytes = largest_rebuild_bytes;
  }
  double loss_bytes = 0;
  if (stage == 0 && model.dropout) {
    // Embedding output dropout mask per first-chunk micro-batch in flight (ibid. Sec. 4.4,
    // eq. 4).
    activations += tokens * h / sequence_split * static_cast<double>(in_flight.first_chunk);
  }
  if (stage == layout.pp - 1) {
    // Final norm and LM-head inputs and the fp32 logits (ibid. Sec. 4.4: 4 s b v / t) of every
    // last-chunk micro-batch in flight: one under 1F1B, all m under GPipe, whose losses are
    // computed in the forward and whose cross-entropy backward needs the softmax.
    const double vocab = static_cast<double>(padded_vocab_size(model, layout.tp, options)) / t;
    const LossBytes loss = loss_bytes_per_token_vocab(cluster, options);
    // Gemma 2's final soft-cap run eagerly (transformers Gemma2ForCausalLM.forward: `/ c`,
    // torch.tanh, `* c`; loss_cost.cpp softcap_bytes_per_element): autograd's TanhBackward0
    // keeps tanh's output, e T V / t more per micro-batch in flight (dividing and multiplying
    // by a Python scalar save nothing). Compiled, the partitioner recomputes it from the saved
    // logits: nothing more.
    const double softcap_held =
        model.final_logit_softcapping > 0.0 && !loss_compiled(options) ? e : 0.0;
    activations +=
        (2.0 * tokens * h * e / sequence_split + (loss.held + softcap_held) * tokens * vocab) *
        static_cast<double>(in_flight.last_chunk);
    if (model.has_mtp()) {
      // Each MTP depth per last-chunk micro-batch in flight (Megatron-Core
      // multi_token_prediction.py MultiTokenPredictionLayer): its transformer layer's
      // activations (activation_bytes_per_layer of the decoder's last layer's kind), the
      // inputs of enorm and hnorm and eh_proj's 2h-wide input (T h e / sp each, sequence-
      // sharded), and its final norm's and the shared head's inputs and logits as the main
      // head's above. Under full recompute (uniform) _checkpointed_forward keeps only the
      // depth's two inputs, hidden_states and the embedded tokens; under the block method the
      // depth is not recomputed and keeps what an unrecomputed layer keeps; selective recompute
      // applies to it as to every layer (the depth's layer shares the decoder's config).
      const bool moe_layer = mtp_layer_kind(model).moe;
      const double hidden = tokens * h * e / sequence_split;
      Layout stored = layout;
      if (stored.recompute == Recompute::kFull) {
        stored.recompute = Recompute::kNone;
      }
      const double depth_bytes =
          (mtp_recomputed_under_full(layout)
               ? 2.0 * hidden
               : activation_bytes_per_layer(model, cluster, stored, options, moe_layer) +
                     4.0 * hidden) +
          2.0 * hidden + (loss.held + softcap_held) * tokens * vocab;
      activations += static_cast<double>(model.mtp_num_layers) * depth_bytes *
                     static_cast<double>(in_flight.last_chunk);
    }
    if (options.framework == Framework::kFsdp) {
      const auto [head_input_bytes, loss_parallel_bytes] =
          fsdp_tp_loss_extra_bytes(model, cluster, layout, options);
      activations += head_input_bytes * static_cast<double>(in_flight.last_chunk);
      loss_bytes = loss.transient * tokens * vocab + loss_parallel_bytes;
    } else if (e < 4.0) {
      // The 16-bit logits stay alive while their fp32 copy is made (Megatron-Core
      // tensor_parallel/cross_entropy.py line 25, vocab_parallel_logits.float()): e T V / t.
      loss_bytes = e * tokens * vocab;
    }
  }
  activations += std::max(rebuild_bytes, loss_bytes) +
                 fsdp_pipelining_buffer_bytes(model, cluster, layout, options, stage, in_flight) +
                 gemm_workspace_bytes(cluster, options);
  const double cached_bytes =
      fsdp_loss_cached_bytes(model, cluster, layout, options, rebuild_bytes, loss_bytes);
  // Ring attention's receive buffers: the next K/V chunk arrives while the current one is used,
  // and in the backward its dK/dV too (TE context_parallel.py p2p_comm_buffers, double-
  // buffered): 4 chunk volumes, once per rank since layers run one at a time.
  for (const CpAttentionComm::Call& call :
       cp_attention_comm(model, cluster, layout, options).calls) {
    if (call.kind == CollectiveKind::kSendRecv) {
      activations += 2.0 * static_cast<double>(call.message_bytes);
    }
  }
  memory.activations_bytes = static_cast<int64_t>(activations);
  // Optimizer-step transients exist when the activations are freed: only their excess counts.
  memory.gradients_bytes += static_cast<int64_t>(std::max(0.0, step_bytes - activations));
  memory.reserved_bytes =
      reserve_bytes(cluster, memory.total_bytes()) + static_cast<int64_t>(cached_bytes);
  return memory;
}

// Megatron-LM --fp8-param-gather: training/training.py builds the model under TE's
// fp8_model_init, so each TE Linear/LayerNormLinear/LayerNormMLP weight is a Float8Tensor
// (transformer_engine/pytorch/tensor/float8_tensor.py); core/distributed/param_and_grad_buffer.py
// gives Float8Tensor params a torch.uint8 param buffer (1 byte per element) and
// core/optimizer/distrib_optimizer.py keeps their fp32 main-param shard (the 12/dp optimizer
// bytes, unchanged) and re-quantizes it after the step (fp8_utils.py quantize_param_shard).
// Megatron-LM and TransformerEngine read in the code index at unpinned 2025 commits.
// --tp-comm-overlap's userbuffers (TE initialize_ub, one (seq x micro-batch / cp) x hidden
// buffer per overlapped GEMM) are not counted: TE's CommOverlapBase/CommOverlapP2PBase register
// them with register_user_buffer_collective(..., alloc = true), a cudaMalloc outside PyTorch's
// caching allocator (common/comm_gemm_overlap/comm_gemm_overlap.cpp, unpinned).
double fp8_param_gather_weight_count(const models::TransformerConfig& model,
                                     const models::ClusterConfig& cluster, const Layout& layout,
                                     const PlanOptions& options, int64_t stage) {
  if (!options.fp8_param_gather) {
    return 0.0;
  }
  const double layers = static_cast<double>(stage_layer_count(model, layout, stage) +
                                            stage_mtp_layer_count(model, layout, stage));
  return layers * linear_weights_per_layer(shape_of(model, cluster, layout));
}

// Per fp8 weight: e - 1 bytes (a 1-byte Float8Tensor instead of an e-byte weight) plus the
// 1-byte fp8 cast of the weight that fp8_state_bytes counts (TE's base.py get_weight_workspace
// casts only non-Float8Tensor weights: the param is the cast now; the transpose stays).
double fp8_param_gather_saving_bytes(const models::TransformerConfig& model,
                                     const models::ClusterConfig& cluster, const Layout& layout,
                                     const PlanOptions& options, int64_t stage) {
  const double e = static_cast<double>(element_bytes(cluster));
  return e * fp8_param_gather_weight_count(model, cluster, layout, options, stage);
}

}  // namespace meshplan::planner
