// Time of one micro-batch through one model chunk on one rank: GEMMs at a shape-dependent
// fraction of peak, memory-bound ops at a fraction of HBM bandwidth, and the exposed part of
// the tensor-parallel collectives.

#include "compute_cost.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "estimate_internal.h"
#include "fp8_cast_cost.h"
#include "linear_gemms.h"
#include "loss_cost.h"
#include "memory.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "model_shape.h"
#include "module_recompute_cost.h"

namespace meshplan::planner {

// GEMM throughput falls off for small matrices (NVIDIA "Matrix Multiplication Background User's
// Guide", DU-09799-001, Feb. 2023). A GEMM is computed in output tiles, one thread block each,
// in waves over the SMs (Sec. 2.1); each block loops over K, so its fixed cost (filling the
// load pipeline, writing the tile: prologue and epilogue) is spread over K, and its loads and
// stores make the arithmetic intensity MNK / (MK + NK + MN) (Sec. 2) fall as any dimension
// shrinks; M and N also enter through partial tiles at the edges and a last partial wave (tile
// and wave quantisation, Sec. 3), which cuBLAS smooths by choosing among tile sizes (Sec. 2.3).
// We model this as a fixed overhead per unit of work in an effective inverse size:
//   efficiency = e_max / (1 + x_half (1/K + w (1/M + 1/N))),  w = kOuterDimensionWeight,
// so a cube of side x runs at e_max x / (x + (1 + 2w) x_half). e_max and x_half are per-GPU
// parameters of the cluster description; w is one constant for every GPU. The three were
// chosen once on the validation runs marked used_for_parameters (README, Validation).
// FP8 GEMMs (Transformer Engine) run at the GPU's FP8 peak with their own e_max and the same
// x_half.
namespace {
// Weight of 1/M and 1/N against 1/K: of 0.1, 0.2, 0.3 and 0.5 (each with its best per-GPU
// e_max and x_half), 0.2 gave the lowest mean |error| over the chosen-on runs.
constexpr double kOuterDimensionWeight = 0.2;
}  // namespace

double gemm_inverse_size(double m, double n, double k) {
  return 1.0 / k + kOuterDimensionWeight * (1.0 / m + 1.0 / n);
}

double gemm_seconds(const models::ClusterConfig& cluster, double m, double n, double k,
                    GemmPrecision precision) {
  const bool fp8 = precision == GemmPrecision::kFp8;
  const double peak_efficiency =
      fp8 ? cluster.efficiency.fp8_gemm_peak_efficiency : cluster.efficiency.gemm_peak_efficiency;
  const double efficiency = peak_efficiency / (1.0 + cluster.efficiency.gemm_half_efficiency_dim *
                                                         gemm_inverse_size(m, n, k));
  const double peak = fp8 ? cluster.gpu.peak_fp8_flops_per_second : peak_flops_per_second(cluster);
  return 2.0 * m * n * k / (peak * efficiency);
}

// torchtitan's llama model.py at 1ea476e9f (the A100 runs) and 3faaa1a0d (the 405B run), run
// eager (rope and SwiGLU are the same ops at b5bcd76c6, models/common/rope.py, feed_forward.py):
// every ATen op is one kernel that reads its inputs and writes its output; the backward is
// autograd's (PyTorch tools/autograd/derivatives.yaml), one kernel per formula, reading what
// the op saved. Per element, e the activations' bytes, 4 fp32 (a cast to the dtype it already
// has is no kernel: cast = e + 4 for e < 4, else 0):
// - apply_rotary_emb, per q and k element: xq.float() (cast), view_as_complex (a view),
//   complex multiply by freqs_cis (read 4, write 4; freqs_cis is s d / 2 per sequence, not
//   counted), view_as_real (view), type_as (cast). Backward: type_as's cast back (cast), the
//   multiply's grad * conj(freqs_cis) (read 4, write 4), .float()'s cast back (cast).
// - FeedForward w2(F.silu(w1(x)) * w3(x)), per f element: silu (read e, write e), the multiply
//   (read 2e, write e). Backward: mul's grad * w3x and grad * silu (read 2e, write e each),
//   silu_backward from the saved w1x (read 2e, write e).
// - repeat_kv (a > g): x[..., None, :].expand(...).reshape(...) cannot be a view, so it copies
//   keys and values (read g d, write a d each); its backward, expand's sum_to, reduces them
//   back (read a d, write g d each).
// The norms stay on the shared count unless norm_kernel is eager
// (eager_rmsnorm_bytes_per_element), and the residual adds do: an eager residual add is the same
// one kernel as a fused one.
PassBytes eager_elementwise_bytes_per_token(const models::TransformerConfig& model, int64_t tp,
                                            double element_bytes) {
  const double e = element_bytes, t = static_cast<double>(tp);
  const double d = static_cast<double>(model.head_dim);
  const double a = static_cast<double>(model.num_attention_heads) / t;
  const double g = static_cast<double>(model.num_kv_heads) / t;
  const double f = static_cast<double>(model.ffn_hidden_size) / t;
  PassBytes bytes;
  if (model.positions == models::Positions::kRope) {
    const double cast = e < 4.0 ? e + 4.0 : 0.0;
    bytes.forward += (a + g) * d * (2.0 * cast + 8.0);
    bytes.backward += (a + g) * d * (2.0 * cast + 8.0);
  }
  if (models::is_gated(model.activation)) {
    bytes.forward += f * (2.0 * e + 3.0 * e);
    bytes.backward += f * (3.0 * e + 3.0 * e + 3.0 * e);
  }
  if (model.num_kv_heads < model.num_attention_heads) {
    bytes.forward += 2.0 * (g + a) * d * e;
    bytes.backward += 2.0 * (a + g) * d * e;
  }
  return bytes;
}

// torchtitan's norms.py RMSNorm at 1ea476e9f and 3faaa1a0d (model.norm_type "rmsnorm"):
// output = (x.float() * rsqrt(x.float().pow(2).mean(-1, keepdim) + eps)).type_as(x) * weight,
// one ATen kernel per op, per-row (s x 1) and per-column (h) tensors not counted; e the
// activations' bytes, cast = e + 4 for e < 4, else 0 (no kernel). Forward: .float() (cast),
// pow(2) (read 4, write 4), mean (read 4), x * rsqrt (read 4, write 4), type_as (cast),
// * weight (read e, write e): 20 + 2 cast + 2e, 36 in bf16. Backward (PyTorch
// tools/autograd/derivatives.yaml, FunctionsManual.cpp): * weight's grad * weight (read e,
// write e) and grad * output (read 2e, write e) summed to the weight (read e); type_as's cast
// back (cast); x * r's grad * r (read 4, write 4) and grad * x (read 8, write 4) summed to the
// row (read 4); mean_backward's expand and divide (write 4); pow_backward's
// grad * (2 * x.pow(1)): the pow(1) copy (read 4, write 4), the scalar multiply (read 4, write
// 4), the multiply by grad (read 8, write 4); the two gradients of x.float() added (read 8,
// write 4); .float()'s cast back (cast): 68 + 2 cast + 6e, 92 in bf16 (and in fp32).
PassBytes eager_rmsnorm_bytes_per_element(double element_bytes) {
  const double e = element_bytes;
  const double cast = e < 4.0 ? e + 4.0 : 0.0;
  const double forward = cast + 8.0 + 4.0 + 8.0 + cast + 2.0 * e;
  const double weight_backward = 2.0 * e + 3.0 * e + e;
  const double scale_backward = 8.0 + 12.0 + 4.0;
  const double square_backward = 4.0 + 8.0 + 8.0 + 12.0;  // mean, pow(1) copy, 2 *, grad *
  const double backward = weight_backward + cast + scale_backward + square_backward + 12.0 + cast;
  return {forward, backward};
}

// Per FSDP unit and micro-batch, P unit_parameters, e param_element_bytes (the bf16
// param_dtype; autograd's gradients of the unsharded parameters have it too), r
// reduce_element_bytes, N shard_ranks. What counts is work on the compute stream, work the
// compute stream waits for, and an elementwise kernel on a side stream: kernels of different
// streams run on the same SMs and HBM, so a memory-bound one beside the compute stream's
// kernels costs them about its own time. Measured: replacing FSDP2's pre-divide of the fp32
// reduce-scatter input, a kernel on the reduce-scatter stream, by NCCL's average "saves extra
// memory read/write for dividing. This yields ~1.5% speedup on the Llama-7B workload"
// (pytorch/pytorch#120919, 2024-03). The 1/N-sized casts of the shard (fp32 -> e before each
// all-gather) and the sharded gradient's post-divide and accumulation are left out.
// - FSDP2 (torch/distributed/_composable/fsdp, pytorch/pytorch 01d66d21f and the 2024 nightlies'
//   _fsdp_collectives.py): foreach_all_gather_copy_out, called by FSDPParamGroup
//   wait_for_unshard on the current (compute) stream, split_with_sizes_copy()s the all-gather
//   output into each parameter's unsharded tensor: read e P, write e P, once forward and once
//   backward (ZeRO-3 reshards after the forward and gathers again). foreach_reduce_scatter's
//   copy-in torch.cat()s the unsharded gradients into the reduce_dtype input: read e P, write
//   r P; the compute stream waits for it (current_stream.wait_event(copy_in_event), later
//   wait_stream(reduce_scatter_stream), later still it runs on the current stream). No divide:
//   a bf16 or fp32 reduce-scatter averages in NCCL (ReduceOp.AVG, pytorch#120919 for fp32,
//   #123362, 2024-04, for bf16; torchtitan's runs are from 2024-04 on).
// - FSDP1 (torch 2.1.0 torch/distributed/fsdp/_flat_param.py, use_orig_params): the all-gather
//   writes straight into the padded unsharded flat parameter (no copy-out); the parameters are
//   torch.split views of it (_get_unflat_views_aligned) made under enable_grad, so autograd's
//   SplitWithSizesBackward (tools/autograd/derivatives.yaml split_with_sizes_backward:
//   at::cat of the views' gradients) writes the flat gradient: read e P, write e P. Then
//   _runtime_utils.py _reduce_grad divides the padded unsharded gradient in place before the
//   reduce-scatter, on the post-backward stream (_div_if_needed(padded_unsharded_grad,
//   _gradient_predivide_factor); the factor is 2 or more whenever N > 1, e.g. 4 at N 8, 8 at
//   N 64, _get_gradient_predivide_factor): read r P, write r P ("Since pre-division is done
//   before sharding, the op cost is quite expensive", pytorch#128918; FSDP2 dropped it).
PassBytes fsdp_unit_pass_bytes(int fsdp_version, double unit_parameters, double param_element_bytes,
                               double reduce_element_bytes, int64_t shard_ranks,
                               double gathered_saving_bytes) {
  const double p = unit_parameters, e = param_element_bytes, r = reduce_element_bytes;
  if (fsdp_version == 1) {
    const double predivide = shard_ranks > 1 ? 2.0 * r * p : 0.0;
    return {0.0, 2.0 * e * p + predivide};
  }
  // Under torchao's float8 all-gather the fp8 weights are copied out of the all-gather output
  // in their 1 byte (fsdp_post_all_gather wraps the copied-out data in a Float8Tensor); the
  // gradients, and so the reduce-scatter copy-in, stay in e.
  const double gathered = e * p - gathered_saving_bytes;
  return {2.0 * gathered, 2.0 * gathered + (e + r) * p};
}

double memory_seconds(const models::ClusterConfig& cluster, double bytes) {
  return bytes / (cluster.gpu.hbm_bytes_per_second * cluster.efficiency.hbm_efficiency);
}

// An MoE layer's token permutations per micro-batch on one rank, forward bytes read plus
// written. The permutation before the dispatch and the un-permutation after the combine read and
// write the rank's T k / sp routed copies each (Megatron-Core moe_utils.py permute, unpermute).
// With more than one local expert (E / ep > 1) the alltoall dispatcher sorts the received
// tokens by local expert after the dispatch and un-sorts them before the combine, over the copies
// gathered from the etp ranks, etp T k / sp (token_dispatcher.py MoEAlltoAllTokenDispatcher
// dispatch_postprocess "Permutation 2" and combine_preprocess "Unpermutation 2":
// sort_chunks_by_idxs, fused under moe_permute_fusion; d98e8a64, core_v0.17.0). Balanced
// routing: a rank receives as many copies as it sends.
// The flex dispatcher (DeepEP) permutes nothing before its fused dispatch, which sends each token
// once per destination rank; the received tokens are then expanded to one copy per local expert
// (_DeepepManager get_permuted_hidden_states_by_experts: permute over the multihot map, T k / sp
// copies read and written) and folded back before the combine (unpermute): the same two passes,
// and no second sort (token_dispatcher.py d98e8a64; HybridEP's dispatch_with_permute makes the
// same expansion inside its call).
double moe_permute_bytes(const models::TransformerConfig& model,
                         const models::ClusterConfig& cluster, const Layout& layout,
                         const PlanOptions& options) {
  const Shape x = shape_of(model, cluster, layout, /*moe_layer=*/true);
  const double routed_copy_bytes =
      x.tokens * static_cast<double>(model.experts_per_token) * x.h * x.e / x.sp;
  double bytes = 2.0 * 2.0 * routed_copy_bytes;
  if (options.moe_dispatcher == MoeDispatcher::kAllToAll && model.num_experts / layout.ep > 1) {
    bytes += 2.0 * 2.0 * routed_copy_bytes * static_cast<double>(expert_tensor_parallel(layout));
  }
  return bytes;
}

namespace {

// One layer's FSDP memory passes (fsdp_unit_pass_bytes) under framework fsdp with ZeRO-3, the
// layer being the unit (dp_buckets.cpp); none otherwise.
PassBytes fsdp_pass_bytes(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options, bool moe_layer) {
  if (options.framework != Framework::kFsdp || layout.zero != 3) {
    return {};
  }
  const LayerParameters p = layer_parameters(model, layout.tp, moe_layer, layout.ep, layout.etp);
  return fsdp_unit_pass_bytes(
      options.fsdp_version, static_cast<double>(p.sharded + p.replicated + p.expert),
      static_cast<double>(element_bytes(cluster)),
      static_cast<double>(grad_reduce_element_bytes(cluster, layout, options)),
      zero_shard_group_size(layout),
      fsdp_float8_gather_saving_bytes(model, cluster, layout, options));
}

// Bytes per hidden element of one norm: the fused kernel's read and write, backward twice that
// (Narayanan et al. 2021, Sec. 5.1), or torchtitan's eager RMSNorm (norm_kernel eager).
PassBytes norm_bytes_per_element(const PlanOptions& options, double element_bytes) {
  if (options.norm_kernel == NormKernel::kEager) {
    return eager_rmsnorm_bytes_per_element(element_bytes);
  }
  return {2.0 * element_bytes, 4.0 * element_bytes};
}

struct LayerTime {
  // Share of tp_comm_forward that is the all-gathers of the column-parallel inputs under
  // sequence parallelism (what op-level selective recompute runs again).
  double tp_forward_gather_share = 0.5;
  double linear_forward = 0;     // QKV, output, MLP GEMMs
  double attention_forward = 0;  // scores, softmax, attention-times-values
  double memory_forward = 0;     // norms, residual adds, activation, rope
  double memory_backward = 0;    // their gradients (2 x forward, or the eager kernels')
  double fp8_cast_forward = 0;   // the FP8 casts (fp8_cast_cost.cpp)
  double fp8_cast_backward = 0;
  double tp_comm_forward = 0;  // all-reduce equivalents of the forward
  double tp_comm_backward = 0;
  double cp_comm_forward = 0;  // exposed context-parallel attention traffic
  double cp_comm_backward = 0;
};

// The attention's tp collectives of one layer per direction. Dense: one all-reduce of the
// hidden state each way (Shoeybi et al. 2019, Fig. 4; under sequence parallelism an all-gather
// and a reduce-scatter of the same volume, Korthikanti et al. 2022, Sec. 4.2.2). MLA
// (Megatron-Core multi_latent_attention.py, get_query_key_value_tensors): the down
// projections are replicated, so what crosses the tp group at the attention's input is the
// query latent (or the hidden state when q_lora_rank is 0), the kv latent and the shared
// rotary key, one call each, as collective_inventory's add_mla_tensor_parallel lists them:
// gathered forward and reduce-scattered backward under sequence parallelism, all-reduced
// backward without it; the output projection keeps the hidden state's reduction. `pair` is
// one dense all-reduce, or under sequence parallelism its all-gather plus reduce-scatter.
struct AttentionTpComm {
  double forward = 0, backward = 0;
};
AttentionTpComm attention_tp_seconds(const models::TransformerConfig& model,
                                     const models::ClusterConfig& cluster, const Layout& layout,
                                     const PlanOptions& options, double tokens, double pair) {
  if (!model.is_mla()) {
    return {pair, pair};
  }
  const double e = static_cast<double>(element_bytes(cluster));
  const auto latents = [&](CollectiveKind kind) {
    double seconds = 0;
    const MlaLatentWidths widths = mla_latent_widths(model);
    for (const int64_t width : {widths.query, widths.kv, widths.rope}) {
      seconds +=
          collective_seconds(cluster, kind, static_cast<int64_t>(tokens * width * e), layout.tp, 1);
    }
    return seconds;
  };
  if (!layout.sequence_parallel) {
    return {pair, latents(CollectiveKind::kAllReduce)};
  }
  const auto hidden = [&](CollectiveKind kind, double bytes_per_element) {
    return collective_seconds(cluster, kind,
                              static_cast<int64_t>(tokens * model.hidden_size * bytes_per_element),
                              layout.tp, 1);
  };
  // The output projection's output gradient is gathered as the dense layers' are.
  const double gather_e = static_cast<double>(tp_all_gather_element_bytes(cluster, options));
  return {latents(CollectiveKind::kAllGather) + hidden(CollectiveKind::kReduceScatter, e),
          hidden(CollectiveKind::kAllGather, gather_e) + latents(CollectiveKind::kReduceScatter)};
}

// torch's async TP (torchtitan's experimental.enable_async_tensor_parallel; Inductor's
// micro_pipeline_tp pass, torch/_inductor/fx_passes/micro_pipeline_tp.py) fuses an all-gather
// with the matmuls that consume it and a reduce-scatter with the one matmul that feeds it:
// fuse_matmul_reduce_scatter returns unless the reduce-scatter's input is an aten.mm (or
// _scaled_mm) or its reshape. In the backward an input gradient that is a sum of matmuls is
// reduce-scattered unfused: torchtitan's Attention has separate wq, wk and wv (dq Wq + dk Wk +
// dv Wv) and its SwiGLU FeedForward w1 and w3 (torchtitan models/llama/model.py); a GELU MLP's
// single fc1 is fused, and a parallel block's two branches meet in one sum; an MoE layer's MLP
// side (its experts' own tp collectives) is costed as fused. All-reduces (tp
// without sequence parallelism) have no pattern: nothing is fused. Returns the unfused part of
// one layer's backward tp time, the reduce-scatters of hidden_bytes each.
double async_tp_unfused_backward_seconds(const models::TransformerConfig& model,
                                         const models::ClusterConfig& cluster, const Layout& layout,
                                         double hidden_bytes, bool moe_layer) {
  const double reduce = collective_seconds(cluster, CollectiveKind::kReduceScatter,
                                           static_cast<int64_t>(hidden_bytes), layout.tp, 1);
  if (model.parallel_residual) {
    return reduce;
  }
  const bool swiglu_mlp = models::is_gated(model.activation) && !moe_layer;
  return reduce + (swiglu_mlp ? reduce : 0.0);
}

}  // namespace

namespace {

LayerTime layer_time(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, LayerKind kind) {
  const bool moe_layer = kind.moe;
  const Shape x = shape_of(model, cluster, layout);
  const double t = x.t, tokens = x.tokens, h = x.h, d = x.d, a = x.a, g = x.g, e = x.e;
  const double f = active_ffn_width(model, moe_layer);  // per token
  LayerTime time;
  // The linear GEMMs are the ones Transformer Engine runs in FP8 (te.Linear, LayerNormLinear,
  // LayerNormMLP, TEGroupedLinear for the experts); the attention core, the router and the LM
  // head stay in 16 bits.
  const LinearGemms gemms = layer_linear_gemms(model, layout, options, x, moe_layer);
  time.linear_forward = linear_gemm_seconds(model, cluster, options, x, gemms, moe_layer);
  time.attention_forward =
      attention_forward_seconds(model, cluster, layout, options, kind.windowed);
  // Memory-bound element-wise work, bytes read plus written: two norms (read, write), two
  // residual adds (read two, write one), the activation (gelu: read f, write f; swiglu: read
  // 2f, write f), rotary embedding of q and k (read, write). With dropout each residual add is
  // Megatron-Core's fused bias-dropout-add, which also writes its 1-byte mask for the backward
  // (fusions/fused_bias_dropout.py bias_dropout_add_fused_train at baf94af3, core_r0.8.0).
  const double norm_tokens = layout.sequence_parallel ? tokens / t : tokens;
  const double dropout_mask_bytes = model.dropout ? 1.0 : 0.0;
  // Two norms per layer, four with sandwich_norm (Gemma 2/3's post-attention and post-MLP
  // norms, each on the rank's T / sp rows of a branch output before its residual add).
  const double norms_per_layer = model.sandwich_norm ? 4.0 : 2.0;
  const double fused_norm_bytes = norms_per_layer * 2.0 * norm_tokens * h * e;
  double bytes = 2.0 * (3.0 * e + dropout_mask_bytes) * norm_tokens * h;  // residual adds
  const bool swiglu = models::is_gated(model.activation);
  const double activation_bytes = (swiglu ? 3.0 : 2.0) * tokens * f / t * e;
  const double rope_bytes =
      model.positions == models::Positions::kRope ? 2.0 * tokens * (a + g) * d / t * e : 0.0;
  // Per-head q/k norms (Qwen3, Gemma 3; Llama 4's gainless L2 norm, on its rotary layers,
  // counted on every layer as rope is): one fused norm over Q and K (read, write), as the
  // block's own norms are counted.
  bytes += model.has_qk_normalization() ? 2.0 * tokens * (a + g) * d / t * e : 0.0;
  if (moe_layer) {
    bytes += moe_permute_bytes(model, cluster, layout, options);
  }
  // The backward of each fused kernel moves twice its forward (Narayanan et al. 2021, Sec.
  // 5.1). torchtitan without torch.compile runs rope, SwiGLU and the GQA repeat as eager
  // kernels (eager_elementwise_bytes_per_token) in its dense, non-MLA blocks; compiled,
  // Inductor fuses them back into the count above.
  PassBytes eager;
  if (options.norm_kernel == NormKernel::kEager) {  // the two norms' eager kernels instead
    const PassBytes norm = norm_bytes_per_element(options, e);
    eager.forward += norms_per_layer * norm_tokens * h * norm.forward;
    eager.backward += norms_per_layer * norm_tokens * h * norm.backward;
  } else {
    bytes += fused_norm_bytes;
  }
  if (options.framework == Framework::kFsdp && !options.compile && !moe_layer && !model.is_mla()) {
    const PassBytes kernels = eager_elementwise_bytes_per_token(model, layout.tp, e);
    eager.forward += kernels.forward * tokens;
    eager.backward += kernels.backward * tokens;
    bytes += swiglu ? 0.0 : activation_bytes;  // GELU is one ATen kernel eager too
  } else {
    bytes += activation_bytes + rope_bytes;
  }
  time.memory_forward = memory_seconds(cluster, bytes + eager.forward);
  time.memory_backward = memory_seconds(cluster, 2.0 * bytes + eager.backward);
  // Transformer Engine's casts, or torchao's Float8Linear's under --framework fsdp.
  if (options.gemm_precision == GemmPrecision::kFp8) {
    const Fp8CastBytes casts =
        torchao_float8(options)
            ? torchao_float8_cast_bytes(gemms)
            : fp8_cast_bytes(gemms, layout.sequence_parallel, norm_tokens, options.fp8_recipe);
    time.fp8_cast_forward = memory_seconds(cluster, casts.forward);
    time.fp8_cast_backward = memory_seconds(cluster, casts.backward);
  }
  if (layout.cp > 1) {
    const CpAttentionComm cp = cp_attention_comm(model, cluster, layout, options);
    time.cp_comm_forward = cp.forward_exposed_seconds;
    time.cp_comm_backward = cp.backward_exposed_seconds;
  }
  if (layout.tp > 1) {
    // Two all-reduces forward and two backward per layer (Shoeybi et al. 2019, Fig. 4); with
    // sequence parallelism each is an all-gather plus a reduce-scatter of the same total
    // volume (Korthikanti et al. 2022, Sec. 4.2.2). The extra backward all-gather that
    // re-gathers the saved inputs overlaps with the input-gradient GEMM there, so it is not
    // exposed.
    double pair = collective_seconds(cluster, CollectiveKind::kAllReduce,
                                     static_cast<int64_t>(tokens * h * e), layout.tp, 1);
    const double gather_e = static_cast<double>(tp_all_gather_element_bytes(cluster, options));
    if (layout.sequence_parallel && gather_e != e) {
      // The all-gather moves Transformer Engine's FP8 copies, the reduce-scatter the GEMM's
      // 16-bit output (tp_all_gather_element_bytes).
      pair = collective_seconds(cluster, CollectiveKind::kAllGather,
                                static_cast<int64_t>(tokens * h * gather_e), layout.tp, 1) +
             collective_seconds(cluster, CollectiveKind::kReduceScatter,
                                static_cast<int64_t>(tokens * h * e), layout.tp, 1);
    }
    // An MoE layer (sequence parallel, as Megatron requires) replaces the MLP's pair by one on
    // the routed tokens (the alltoall dispatcher's all-gather over the etp ranks after dispatch
    // and reduce-scatter before combine; none at etp 1) plus the shared experts' own pair.
    double mlp_pair = pair;
    if (moe_layer) {
      mlp_pair = moe_expert_tp_seconds(model, cluster, layout, CollectiveKind::kAllReduce) +
                 (model.num_shared_experts > 0 ? pair : 0.0);
    }
    const AttentionTpComm attention =
        attention_tp_seconds(model, cluster, layout, options, tokens, pair);
    time.tp_comm_forward = attention.forward + mlp_pair;
    time.tp_comm_backward = attention.backward + mlp_pair;
    if (model.parallel_residual) {
      // One reduction of the summed outputs, the two inputs' collectives (dense_tp_calls_per_layer;
      // validate_model admits parallel blocks for dense, non-MLA layers only). Under sequence
      // parallelism the backward all-gathers the output gradient once for both branches.
      const DenseTpCalls calls = dense_tp_calls_per_layer(model);
      const auto outputs = static_cast<double>(calls.output_reductions);
      const auto inputs = static_cast<double>(calls.input_collectives);
      if (!layout.sequence_parallel) {
        time.tp_comm_forward = outputs * pair;
        time.tp_comm_backward = inputs * pair;
      } else {
        const double gather =
            collective_seconds(cluster, CollectiveKind::kAllGather,
                               static_cast<int64_t>(tokens * h * gather_e), layout.tp, 1);
        const double reduce =
            collective_seconds(cluster, CollectiveKind::kReduceScatter,
                               static_cast<int64_t>(tokens * h * e), layout.tp, 1);
        time.tp_comm_forward = inputs * gather + outputs * reduce;
        time.tp_comm_backward = outputs * gather + inputs * reduce;
        time.tp_forward_gather_share = inputs * gather / time.tp_comm_forward;
      }
    }
    const bool fsdp = options.framework == Framework::kFsdp;
    if (options.overlap_tp_comm && (!fsdp || layout.sequence_parallel)) {
      // Megatron-Core --tp-comm-overlap pipelines the collectives with the GEMMs they feed
      // (Wang et al. 2023, "Overlap communication with dependent computation"): only what the
      // GEMMs cannot cover is exposed. torch's async TP (--framework fsdp) leaves some
      // reduce-scatters out (async_tp_unfused_backward_seconds).
      const double unfused = fsdp ? async_tp_unfused_backward_seconds(model, cluster, layout,
                                                                      tokens * h * e, moe_layer)
                                  : 0.0;
      time.tp_comm_forward = std::max(0.0, time.tp_comm_forward - time.linear_forward);
      time.tp_comm_backward =
          unfused + std::max(0.0, time.tp_comm_backward - unfused - 2.0 * time.linear_forward);
    }
    if (options.gemm_precision == GemmPrecision::kFp8 && !torchao_float8(options)) {
      // Current scaling's amax all-reduces, one float each, before the casts they scale
      // (fp8_amax_reductions): latency, exposed. None under delayed scaling.
      const Fp8AmaxReductions amax =
          fp8_amax_reductions(gemms, layout.sequence_parallel, options.fp8_recipe);
      if (amax.forward + amax.backward > 0) {
        const double one_float =
            collective_seconds(cluster, CollectiveKind::kAllReduce, 4, layout.tp, 1);
        time.tp_comm_forward += amax.forward * one_float;
        time.tp_comm_backward += amax.backward * one_float;
      }
    }
  }
  return time;
}

// What full recompute does not re-run under non-reentrant checkpoint's early stop, per layer.
struct EarlyStopSkip {
  double compute_seconds = 0;
  double tp_comm_seconds = 0;
  double flops = 0;  // on this rank
};

// torchtitan's op-level selective activation checkpointing (`activation_checkpoint.mode =
// "selective"`, `selective_ac_option = "op"`; torchtitan parallelize_llama.py at 1ea476e9f,
// _apply_ac_to_transformer_block): per TransformerBlock, the outputs of SDPA, reduce-scatter
// and of every odd-numbered aten.mm are saved ("Saves output of all compute ops, except every
// second mm"; the count restarts per block, `meta = defaultdict(int)` per checkpoint call);
// everything else is recomputed in the backward. The block's mms in forward order are wq, wk,
// wv, wo, then w1, w3, w2 (SwiGLU, w2(silu(w1 x) * w3 x)) or fc1, fc2 (GELU): the 2nd, 4th
// and 6th re-run, i.e. wk, wo and w3 (SwiGLU) or fc2 (GELU); so do the norms, activation,
// rotary and residual adds (memory_forward) and, with sequence parallelism, the forward
// all-gathers (LayerTime::tp_forward_gather_share of the forward tp traffic; only
// reduce_scatter_tensor is saved).
struct OpSacRecompute {
  double compute_seconds = 0;
  double tp_comm_seconds = 0;
  double flops = 0;  // on this rank
};

OpSacRecompute op_sac_recompute(const models::ClusterConfig& cluster, const Layout& layout,
                                const PlanOptions& options, const Shape& x, bool swiglu,
                                const LayerTime& layer) {
  const double t = x.t, tokens = x.tokens, h = x.h, d = x.d, a = x.a, g = x.g, f = x.f;
  OpSacRecompute out;
  const double k_proj = one_linear_gemm_seconds(cluster, options, tokens, g * d / t, h);
  const double output = one_linear_gemm_seconds(cluster, options, tokens, h, a * d / t);
  const double mlp = swiglu ? one_linear_gemm_seconds(cluster, options, tokens, f / t, h)   // w3
                            : one_linear_gemm_seconds(cluster, options, tokens, h, f / t);  // fc2
  out.compute_seconds = k_proj + output + mlp + layer.memory_forward;
  out.flops = 2.0 * tokens * (h * g * d + a * d * h + h * f) / t;
  out.tp_comm_seconds =
      layout.sequence_parallel ? layer.tp_forward_gather_share * layer.tp_comm_forward : 0.0;
  return out;
}

// torch.utils.checkpoint's non-reentrant early stop (PyTorch #96866, on by default since 2.1:
// `_enable_checkpoint_early_stop`, `_StopRecomputationError`): the recompute raises once the
// pack hook has re-saved the block's last saved tensor. Autograd saves an op's inputs before it
// runs it (tools/autograd/gen_variable_type.py: setup_derivative's save_variables precede the
// redispatch), so the recompute ends before the MLP's last GEMM (llm-foundry v0.3.0 MPTMLP
// down_proj, torchtitan FeedForward w2: x + w2(...), the residual add saving nothing). Skipped:
// that GEMM (not under torchao's Float8Linear: matmul_with_hp_or_float8_args, float8_linear.py
// at 36027d82d, is an autograd.Function, whose saved tensors are packed after its forward
// returns, torch/csrc/autograd/python_function.cpp process_outputs), under tensor parallelism its
// reduce-scatter (RowwiseParallel's output redistribute saves no tensor), and the residual add.
// With dropout the mask native_dropout returns is saved last, after the GEMM: only the add is
// skipped. Dense MLPs only (an MoE block ends in its combine). Under --compile the same is assumed:
// AOTAutograd's partitioner re-runs in the backward only what the backward graph reads
// (torch/_functorch/partitioners.py; not read at the runs' commits, and no --compile run uses full
// recompute).
EarlyStopSkip checkpoint_early_stop_skip(const models::TransformerConfig& model,
                                         const models::ClusterConfig& cluster, const Layout& layout,
                                         const PlanOptions& options, const Shape& x,
                                         bool moe_layer) {
  EarlyStopSkip skip;
  if (options.framework != Framework::kFsdp || layout.recompute != Recompute::kFull || moe_layer) {
    return skip;
  }
  const double norm_tokens = layout.sequence_parallel ? x.tokens / x.t : x.tokens;
  skip.compute_seconds = memory_seconds(cluster, 3.0 * x.e * norm_tokens * x.h);
  if (!checkpoint_early_stop_skips_mlp_output(model, layout, options)) {
    return skip;
  }
  if (options.gemm_precision != GemmPrecision::kFp8) {
    skip.compute_seconds += gemm_seconds(cluster, x.tokens, x.h, x.f / x.t, options.gemm_precision);
    skip.flops = 2.0 * x.tokens * x.h * x.f / x.t;
  }
  if (layout.tp > 1) {
    skip.tp_comm_seconds =
        collective_seconds(cluster, CollectiveKind::kReduceScatter,
                           static_cast<int64_t>(x.tokens * x.h * x.e), layout.tp, 1);
  }
  return skip;
}

// A chunk's running totals, read before and after some work to attribute that work to one node
// of the EP-overlap schedule: forward (compute and exposed tp comm), backward input (the same)
// and weight gradients.
struct PassSeconds {
  double forward = 0;
  double backward = 0;
  double weight = 0;
  PassSeconds operator-(const PassSeconds& other) const {
    return {forward - other.forward, backward - other.backward, weight - other.weight};
  }
};

PassSeconds pass_seconds(const ChunkCost& cost) {
  return {cost.forward_compute_seconds + cost.forward_tp_comm_seconds,
          cost.backward_input_compute_seconds + cost.backward_tp_comm_seconds,
          cost.backward_weight_compute_seconds};
}

}  // namespace

DenseTpCalls dense_tp_calls_per_layer(const models::TransformerConfig& model) {
  return {model.parallel_residual ? 1 : 2, 2};
}

double attention_forward_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, bool windowed_layer) {
  const Shape x = shape_of(model, cluster, layout);
  // Megatron's full-square count over this rank's tokens: with context parallelism each rank
  // has T / cp queries against all s keys, 1/cp of the causal work once load-balanced
  // (chunks r and 2 cp - 1 - r, Megatron-Core get_batch_on_this_cp_rank).
  const double attention_flops =
      layer_forward_flops(model, x.tokens, LayerKind{false, windowed_layer}).attention / x.t;
  if (options.flash_attention) {
    // FlashAttention (Dao 2022) keeps scores on chip: one fused kernel at its own efficiency.
    // Its causal kernels skip the key blocks above the diagonal, so they do half the full
    // square; attention_efficiency is measured on that half (Dao-AILab/flash-attention
    // benchmarks/benchmark_flash_attention.py flops(): 4 b s^2 h d / 2 if causal, the count
    // behind the FlashAttention-2/-3 papers' TFLOP/s and cuDNN's bars in them). Under a sliding
    // window its kernels also skip the key blocks left of the window (flash_attn_func
    // window_size, which Megatron-Core hands Transformer Engine): attention_flops carries the
    // window's share of the pairs (attention_window_fraction), at the same rate.
    // attention_efficiency is FlashAttention-2's rate; FlashAttention-1 runs at about half of
    // it ("around 2x speedup compared to FlashAttention", Dao 2023, abstract), and its Triton
    // port no faster (llm-foundry v0.3.0 llmfoundry/models/layers/flash_attn_triton.py header:
    // forward + backward slightly slower than the CUDA FlashAttention).
    // Gemma 2's attention soft-cap costs nothing more here: FlashAttention-2 applies it on chip
    // inside the kernel (flash_attn_func's `softcap` argument, flash-attn v2.6.0, 2024-07, added
    // for Gemma 2; transformers' flash_attention_2 path passes config.attn_logit_softcapping).
    const double generation_rate = options.flash_attention_version == 1 ? 0.5 : 1.0;
    return 0.5 * attention_flops /
           (peak_flops_per_second(cluster) * cluster.efficiency.attention_efficiency *
            generation_rate);
  }
  // Per head the batched scores GEMM Q K^T (s x s, reducing over d) and attention-times-values
  // (s x d, reducing over s), plus the fused scale-mask-softmax that reads and writes the
  // a s^2 b scores (Korthikanti et al. 2022, Sec. 4.1). cp = 1 here (check_cp_options). A
  // sliding window shortens none of it: Megatron-Core's unfused DotProductAttention computes
  // the full s x s baddbmm and masks it (FusedScaleMaskSoftmax window_size,
  // get_sliding_window_causal_mask, d98e8a64), so the full square is timed.
  const double heads = static_cast<double>(layout.micro_batch) * x.a / x.t;
  // Gemma 2's attention soft-cap, unfused, is elementwise passes over the same a s^2 b scores
  // before the softmax (softcap_bytes_per_element: eager, or one pass when compiled); its
  // backward is timed at attention_backward_to_forward's 2x with the rest.
  const double softcap_bytes =
      model.attn_logit_softcapping > 0.0
          ? softcap_bytes_per_element(x.e, options.compile).forward * heads * x.s * x.s
          : 0.0;
  return heads * (gemm_seconds(cluster, x.s, x.s, x.d) + gemm_seconds(cluster, x.s, x.d, x.s)) +
         memory_seconds(cluster, 2.0 * heads * x.s * x.s * x.e + softcap_bytes);
}

PassBytes embedding_bytes(const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const Layout& layout,
                          const PlanOptions& options) {
  // Megatron-Core LanguageModelEmbedding.forward and VocabParallelEmbedding.forward at
  // baf94af3 (core_r0.8.0), per T h e of the micro-batch's tokens.
  const double t = static_cast<double>(layout.tp);
  const double tokens = static_cast<double>(rank_micro_batch_tokens(model, layout));
  const double h = static_cast<double>(model.hidden_size);
  const double e = static_cast<double>(element_bytes(cluster));
  const bool learned = model.positions == models::Positions::kLearned;
  // Lookup (read the rows, write), the other tp ranks' rows zeroed (output_parallel[input_mask]
  // = 0: (t - 1) / t of them), learned positions' lookup and add, the [b s h] -> [s b h]
  // .contiguous() copy (none at micro-batch 1, already contiguous), under sequence
  // parallelism the clone of the rank's T / t rows (clone_scatter_output_in_embedding).
  const double transpose = layout.micro_batch > 1 ? 2.0 : 0.0;
  const double sp_rows = layout.sequence_parallel ? 1.0 / t : 1.0;
  double forward = 2.0 + (1.0 - 1.0 / t) + (learned ? 2.0 + 3.0 : 0.0) + transpose +
                   (layout.sequence_parallel ? 2.0 * sp_rows : 0.0);
  // Backward: the mask's gradient (zeros its rows again), the copy's transpose, the lookup's
  // gradient (read the output gradient, write the touched rows) per table.
  double backward = (1.0 - 1.0 / t) + transpose + 2.0 * (learned ? 2.0 : 1.0);
  PassBytes bytes{forward * tokens * h * e, backward * tokens * h * e};
  if (model.scale_embeddings) {
    // Gemma's x sqrt(h) on the rank's rows (Megatron-Bridge gemma/modules.py
    // EmbeddingScalingMixin at 067f987d: `embeddings * hidden_size**0.5` after
    // LanguageModelEmbedding.forward): read e, write e; backward the same on the gradient.
    bytes.forward += sp_rows * tokens * h * 2.0 * e;
    bytes.backward += sp_rows * tokens * h * 2.0 * e;
  }
  if (model.dropout) {
    // embedding_dropout on the rank's rows: read e, write e and the 1-byte mask; backward
    // reads the gradient and the mask, writes e.
    bytes.forward += sp_rows * tokens * h * (2.0 * e + 1.0);
    bytes.backward += sp_rows * tokens * h * (2.0 * e + 1.0);
  }
  // F.embedding's backward is dense (PyTorch embedding_dense_backward_cuda: a zeroed table
  // gradient, V / t rows; learned positions s rows more). Megatron's DDP hook then adds it into
  // main_grad (distributed_data_parallel.py _make_param_hook: param.main_grad.add_(
  // param.grad.data), read e, read and write the main grad) every micro-batch: the embedding has
  // no fused weight-gradient accumulation, the linears (gradient_accumulation_fusion) do.
  const double rows = static_cast<double>(padded_vocab_size(model, layout.tp, options)) / t +
                      (learned ? static_cast<double>(model.seq_length) : 0.0);
  bytes.backward += rows * h * e;
  if (options.framework == Framework::kMegatron) {
    const double main_grad =
        static_cast<double>(grad_reduce_element_bytes(cluster, layout, options));
    bytes.backward += rows * h * (e + 2.0 * main_grad);
  }
  return bytes;
}

double attention_backward_to_forward(const PlanOptions& options) {
  // FlashAttention's backward runs five matmuls (Q K^T again, dV, dP, dQ, dK) to the forward's
  // two: 2.5 x the forward FLOPs (benchmark_flash_attention.py flops(), mode "bwd"), and
  // attention_efficiency is their fwd_bwd rate, 3.5 x forward FLOPs over both times. Unfused,
  // each of the two GEMMs and the softmax has a two-GEMM (or read-write) backward: 2 x
  // (Narayanan et al. 2021, Sec. 5.1).
  return options.flash_attention ? 2.5 : 2.0;
}

bool checkpoint_early_stop_skips_mlp_output(const models::TransformerConfig& model,
                                            const Layout& layout, const PlanOptions& options) {
  // checkpoint_early_stop_skip: torchtitan's and llm-foundry's blocks under
  // checkpoint_wrapper(NO_REENTRANT); with dropout the saved mask comes after the MLP.
  return options.framework == Framework::kFsdp && layout.recompute == Recompute::kFull &&
         !model.dropout;
}

bool op_level_selective_recompute(const Layout& layout, const PlanOptions& options) {
  // check_recompute_options refuses selective-op under any other framework.
  return options.framework == Framework::kFsdp && layout.recompute == Recompute::kSelectiveOp;
}

double peak_flops_per_second(const models::ClusterConfig& cluster) {
  return cluster.precision == models::Precision::kFp32 ? cluster.gpu.peak_fp32_flops_per_second
                                                       : cluster.gpu.peak_bf16_flops_per_second;
}

double gradient_accumulation_bytes_per_parameter(const models::ClusterConfig& cluster,
                                                 const Layout& layout, const PlanOptions& options) {
  const double m = static_cast<double>(layout.num_micro_batches());
  const double later = (m - 1.0) / m;  // share of micro-batches adding into a held gradient
  const double e = static_cast<double>(element_bytes(cluster));
  const double d = static_cast<double>(zero_shard_group_size(layout));
  // PyTorch autograd's AccumulateGrad (torch/csrc/autograd/functions/accumulate_grad.h): the
  // first backward after the gradient was set to None steals the new gradient (no copy); each
  // later one adds in place, variable_grad += new_grad (read 2 g, write g).
  const auto autograd_add = [&](double g) { return 3.0 * g * later; };
  switch (options.framework) {
    case Framework::kMegatron:
      // --gradient-accumulation-fusion (on by default): the weight-gradient GEMM accumulates
      // into the fp32 main_grad itself (wgrad_gemm_accum_fp32); the embedding's add is in
      // embedding_bytes.
    case Framework::kMeshplan:
      // executor/ops/linear.cpp: linear_backward_weight adds (+=) into the gradient buffer.
      return 0.0;
    case Framework::kDeepSpeed:
      // DeepSpeed 0.19.6 (edaa722), grad_accum_dtype = the model dtype (engine.py
      // get_data_types). Under the pipeline engine bf16 ZeRO 0 runs BF16_Optimizer
      // (_do_optimizer_sanity_check): the 16-bit gradients are cleared before each backward
      // (pipe/engine.py _exec_backward_pass, clear_lp_grads) and added into its own gradient
      // buffer after it, every micro-batch (bf16_optimizer.py _update_hp_grad, hp_grad.add_).
      if (layout.zero == 0 && layout.pp > 1 && cluster.precision != models::Precision::kFp32) {
        return 3.0 * e;
      }
      // ZeRO 0 otherwise (DDP_BFLOAT16, no wrapper in fp32) and ZeRO 1 (stage_1_and_2.py: no
      // gradient hooks but at the accumulation boundary): autograd accumulates in param.grad.
      if (layout.zero <= 1) {
        return autograd_add(e);
      }
      // ZeRO 2/3 reduce every micro-batch: each gradient is copied into the contiguous IPG
      // bucket (stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads; stage3.py
      // __add_grad_to_ipg_bucket, on the reduce stream beside the compute), and the reduced
      // partition is copied or added into the rank's gradient partition (ZeRO 2
      // copy_grads_in_partition every micro-batch, then autograd adds into it; ZeRO 3
      // partition_grads: copy_ at micro_step_id 0, add_ after).
      if (layout.zero == 2) {
        return 2.0 * e + (2.0 * e + autograd_add(e)) / d;
      }
      return 2.0 * e + (2.0 * e / m + autograd_add(e)) / d;
    case Framework::kFsdp:
      if (layout.zero == 0) {
        // DDP (torchtitan's replicate): fp32 gradients accumulated by autograd.
        return autograd_add(4.0);
      }
      if (layout.pp > 1) {
        // Under torch.distributed.pipelining every micro-batch but the last skips the
        // reduce-scatter (stage.py backward_maybe_with_nosync) and FSDP2 keeps the unsharded
        // gradient (memory.cpp fsdp_pp_accumulated_gradient_bytes): in reduce_dtype r > e the
        // first is upcast (_fsdp_param.py to_accumulated_grad_if_needed: read e, write r), the
        // later ones added to it (accumulate_unsharded_grad_if_needed: read r + e, write r);
        // with r = e (a bf16 reduce, or fp32 training) autograd accumulates in place.
        const double r = static_cast<double>(grad_reduce_element_bytes(cluster, layout, options));
        if (r > e) {
          return (e + r) / m + (e + 2.0 * r) * later;
        }
        return autograd_add(e);
      }
      // FSDP reduce-scatters every micro-batch and adds the fp32 shard into the sharded
      // gradient (FSDP2 _fsdp_collectives.py foreach_reduce; FSDP1 _accumulate_sharded_grad).
      return autograd_add(4.0) / d;
  }
  return 0.0;
}

SavedInputSplit saved_input_split(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options) {
  if (!options.distribute_saved_activations || layout.recompute != Recompute::kFull) {
    return {};
  }
  const double t = static_cast<double>(layout.tp);
  const double input_bytes = static_cast<double>(rank_micro_batch_tokens(model, layout)) *
                             static_cast<double>(model.hidden_size) *
                             static_cast<double>(element_bytes(cluster));
  SavedInputSplit split;
  split.forward_seconds = memory_seconds(cluster, 2.0 * input_bytes / t);
  if (options.framework == Framework::kDeepSpeed) {
    split.backward_seconds = memory_seconds(cluster, input_bytes + 2.0 * input_bytes / t);
  }
  if (layout.tp > 1) {
    split.gather_seconds = collective_seconds(cluster, CollectiveKind::kAllGather,
                                              static_cast<int64_t>(input_bytes), layout.tp, 1);
  }
  return split;
}

ChunkCost chunk_cost(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage,
                     int64_t chunk) {
  ChunkCost cost;
  const int64_t virtual_stage = planner::virtual_stage(layout.pp, stage, chunk);
  cost.num_layers = stage_layer_range(model, layout, stage, chunk).count();
  cost.has_embedding = virtual_stage == 0;
  cost.has_lm_head = virtual_stage == layout.pp * layout.vpp - 1;
  const double t = static_cast<double>(layout.tp);
  const double tokens = static_cast<double>(rank_micro_batch_tokens(model, layout));
  const double h = static_cast<double>(model.hidden_size);
  const double e = static_cast<double>(element_bytes(cluster));

  const LayerRange range = chunk_layers(model, layout, stage, chunk);
  cost.num_moe_layers = range.num_moe(model);
  const double accumulation_bytes_per_parameter =
      gradient_accumulation_bytes_per_parameter(cluster, layout, options);
  double forward_flops = 0;
  double recompute_flops = 0;
  std::array<EpOverlapLayer, kLayerKinds.size()> ep_overlap_nodes{};  // by kind
  std::vector<EpOverlapLayer> mtp_overlap_nodes;  // one per MTP depth, after the chunk's layers
  const auto kind_index = [](LayerKind kind) {
    return static_cast<size_t>(std::find(kLayerKinds.begin(), kLayerKinds.end(), kind) -
                               kLayerKinds.begin());
  };
  // `count` layers of one kind (dense or MoE, windowed or full attention), `recomputed` of them
  // under full recompute, each keeping `inputs_per_recomputed` checkpointed inputs.
  const auto add_layers = [&](LayerKind kind, double count, double recomputed,
                              double inputs_per_recomputed, bool ep_overlap_node) {
    const bool moe_layer = kind.moe;
    const LayerTime layer = layer_time(model, cluster, layout, options, kind);
    const double layer_forward = layer.linear_forward + layer.attention_forward +
                                 layer.memory_forward + layer.fp8_cast_forward;
    // Backward = 2 x forward (Narayanan et al. 2021, Sec. 5.1): for each linear one GEMM for
    // the input gradient (B) and one for the weight gradient (W); element-wise work
    // memory_backward and the attention core attention_backward_to_forward times its, all in B.
    double input_backward = layer.linear_forward +
                            attention_backward_to_forward(options) * layer.attention_forward +
                            layer.memory_backward + layer.fp8_cast_backward;
    double tp_backward = layer.tp_comm_backward;
    double cp_backward = layer.cp_comm_backward;
    // MoE: dispatch and combine forward, their transposes backward (Megatron-Core
    // token_dispatcher.py MoEAlltoAllTokenDispatcher all-to-alls, or MoEFlexTokenDispatcher's
    // fused DeepEP kernels: moe_dispatch_combine_seconds); not overlapped with compute.
    const double all_to_all =
        moe_layer ? moe_dispatch_combine_seconds(model, cluster, layout, options, stage) : 0.0;
    // The alltoall dispatcher's forward dispatch first all-gathers the ep ranks' token counts
    // (the backward reuses them; a full recompute gathers them again). The flex dispatcher has
    // no such collective: DeepEP exchanges the counts inside its dispatch call (notify step).
    double token_counts = moe_layer && options.moe_dispatcher == MoeDispatcher::kAllToAll
                              ? moe_token_count_seconds(model, cluster, layout, stage)
                              : 0.0;
    if (moe_layer && options.moe_aux_loss_coeff > 0 && layout.tp * layout.cp > 1) {
      // The load-balancing loss sums the E token counts over the tp x cp ranks sharing the
      // sequences, each forward (Megatron-Core router.py _apply_aux_loss).
      token_counts +=
          collective_seconds(cluster, CollectiveKind::kAllReduce,
                             model.num_experts * kMoeTokenCountBytes, layout.tp * layout.cp, 1);
    }
    double ep_backward = all_to_all;
    // selective-op is torchtitan's op-level policy (check_recompute_options admits it under
    // fsdp, for dense MHA/GQA blocks only).
    const bool op_sac = op_level_selective_recompute(layout, options);
    const OpSacRecompute sac =
        op_sac ? op_sac_recompute(cluster, layout, options, shape_of(model, cluster, layout),
                                  models::is_gated(model.activation), layer)
               : OpSacRecompute{};
    // Under fsdp the recompute stops before the MLP's last GEMM (checkpoint_early_stop_skip).
    // Selective and selective-op recompute name what they re-run (an attention core, a policy's
    // ops), none of it after the block's last saved tensor: early stop removes nothing there.
    const EarlyStopSkip early_stop = checkpoint_early_stop_skip(
        model, cluster, layout, options, shape_of(model, cluster, layout), moe_layer);
    double recompute_backward = 0, recompute_tp = 0, recompute_cp = 0, recompute_ep = 0;
    // Distributed saved activations: each kept input's split after the forward, its gather
    // before the recompute (saved_input_split; zero unless on, which needs recompute full), for
    // one input per recomputed layer or per uniform group.
    const SavedInputSplit split = saved_input_split(model, cluster, layout, options);
    const double checkpointed_inputs = recomputed * inputs_per_recomputed;
    if (layout.recompute == Recompute::kFull) {
      // The layer's forward runs again (Chen et al. 2016), less what early stop skips.
      recompute_backward = layer_forward - early_stop.compute_seconds;
      // Under async TP (overlap_tp_comm) the skipped reduce-scatter was overlapped with w2: the
      // exposed remainder drops by at most its time.
      recompute_tp = std::max(0.0, layer.tp_comm_forward - early_stop.tp_comm_seconds);
      recompute_cp = layer.cp_comm_forward;
      recompute_ep = all_to_all + token_counts;
    } else if (op_sac) {
      input_backward += sac.compute_seconds;
      tp_backward += sac.tp_comm_seconds;
    } else if (recomputes_module(layout, kRecomputeCoreAttn) && !options.flash_attention) {
      // Selective recompute re-runs the attention core (Korthikanti et al. 2022, Sec. 5). With
      // flash attention its backward already recomputes the scores: nothing is added.
      input_backward += layer.attention_forward;
    }
    // Megatron-Core's other --recompute-modules: memory-bound kernels, and latent attention's up
    // projections with their latent gathers, run again in the backward.
    input_backward += memory_seconds(
        cluster, selective_module_recompute_bytes(model, cluster, layout, moe_layer));
    const ModuleRecompute up_projections =
        mla_up_projection_recompute(model, cluster, layout, options);
    const ModuleRecompute mlp = dense_mlp_recompute(model, cluster, layout, options, moe_layer);
    const ModuleRecompute shared =
        shared_experts_recompute(model, cluster, layout, options, moe_layer);
    const ModuleRecompute moe_block =
        moe_block_recompute(model, cluster, layout, options, moe_layer);
    input_backward += up_projections.compute_seconds + mlp.compute_seconds +
                      shared.compute_seconds + moe_block.compute_seconds;
    tp_backward +=
        up_projections.tp_seconds + mlp.tp_seconds + shared.tp_seconds + moe_block.tp_seconds;
    if (moe_block.compute_seconds > 0) {
      ep_backward += all_to_all + token_counts;  // the block's dispatch and combine again
    }
    // The FLOPs the kernels execute: an unfused windowed layer computes the full s x s square
    // and masks it (attention_forward_seconds), so it counts as a full-attention layer.
    const LayerKind executed_kind{kind.moe, kind.windowed && options.flash_attention};
    const LayerFlops flops = layer_forward_flops(model, tokens, executed_kind);
    forward_flops += flops.total() / t * count;
    if (layout.recompute == Recompute::kFull) {
      recompute_flops += (flops.total() / t - early_stop.flops) * recomputed;
    } else if (op_sac) {
      recompute_flops += sac.flops * count;
    } else if (recomputes_module(layout, kRecomputeCoreAttn)) {
      recompute_flops += flops.attention / t * count;
    }
    recompute_flops += (up_projections.flops + mlp.flops + shared.flops + moe_block.flops) * count;
    cost.forward_compute_seconds +=
        layer_forward * count + split.forward_seconds * checkpointed_inputs;
    // FSDP's passes run once per unit and micro-batch, not again in a recomputed forward.
    const PassBytes fsdp_passes = fsdp_pass_bytes(model, cluster, layout, options, moe_layer);
    cost.forward_compute_seconds += memory_seconds(cluster, fsdp_passes.forward) * count;
    input_backward += memory_seconds(cluster, fsdp_passes.backward);
    cost.forward_tp_comm_seconds += layer.tp_comm_forward * count;
    cost.forward_ep_comm_seconds += (all_to_all + token_counts) * count;
    cost.backward_input_compute_seconds += input_backward * count +
                                           recompute_backward * recomputed +
                                           split.backward_seconds * checkpointed_inputs;
    cost.backward_weight_compute_seconds += layer.linear_forward * count;
    const LayerParameters parameters =
        layer_parameters(model, layout.tp, moe_layer, layout.ep, layout.etp);
    cost.backward_weight_compute_seconds +=
        memory_seconds(cluster, accumulation_bytes_per_parameter *
                                    static_cast<double>(parameters.sharded + parameters.replicated +
                                                        parameters.expert)) *
        count;
    if (ep_overlap_node) {
      // The layer's nodes (EpOverlapLayer). check_moe_a2a_overlap leaves no full or moe-module
      // recompute, FSDP pass or split input here: the layer's forward and backward are the sums
      // charged below. The routed experts' grouped GEMMs are the mlp node (their input and
      // weight gradients one GEMM each, Narayanan et al. 2021, Sec. 5.1); everything else,
      // the token count gathers and the tp and cp collectives included, the pre-dispatch node.
      double experts = 0;
      if (moe_layer) {
        const Shape x = shape_of(model, cluster, layout);
        for (const LinearGemm& gemm : layer_linear_gemms(model, layout, options, x, true)) {
          if (gemm.expert) {
            experts += gemm.multiplier * one_linear_gemm_seconds(cluster, options, gemm.tokens,
                                                                 gemm.n, gemm.k, gemm.expert);
          }
        }
      }
      // Dispatch, and combine, each half the pair (alltoall: one all-to-all each; flex: DeepEP's
      // dispatch and combine, within 3% of each other, moe_flex_traffic).
      const double a2a = 0.5 * all_to_all;
      const double layer_weight =
          layer.linear_forward +
          memory_seconds(cluster,
                         accumulation_bytes_per_parameter *
                             static_cast<double>(parameters.sharded + parameters.replicated +
                                                 parameters.expert));
      EpOverlapLayer& node = ep_overlap_nodes[kind_index(kind)];
      node.dispatch_seconds = a2a;
      node.combine_seconds = a2a;
      node.mlp_forward_seconds = experts;
      node.mlp_backward_seconds = 2.0 * experts;
      node.attention_forward_seconds =
          layer_forward + layer.tp_comm_forward + layer.cp_comm_forward + token_counts - experts;
      node.attention_backward_seconds = input_backward + tp_backward + cp_backward +
                                        (ep_backward - all_to_all) + layer_weight - 2.0 * experts;
      node.mlp_weight_seconds = experts;  // the experts' weight-gradient GEMM (as their forward)
      node.attention_weight_seconds = layer_weight - experts;  // the rest of the layer's
    }
    cost.backward_tp_comm_seconds += tp_backward * count + recompute_tp * recomputed +
                                     split.gather_seconds * checkpointed_inputs;
    cost.backward_ep_comm_seconds += ep_backward * count + recompute_ep * recomputed;
    cost.forward_cp_comm_seconds += layer.cp_comm_forward * count;
    cost.backward_cp_comm_seconds += cp_backward * count + recompute_cp * recomputed;
  };
  // Each kind of layer once, times its count. Full recompute's extra work is charged to the
  // recomputed layers of the kind: all of them, or under Megatron's block method those among
  // the chunk's first recompute_layers.
  for (const LayerKind kind : kLayerKinds) {
    const double count = static_cast<double>(range.num_of_kind(model, kind));
    if (count > 0) {
      add_layers(kind, count,
                 static_cast<double>(layers_under_recompute(model, layout, options, range, kind)),
                 checkpointed_inputs_per_recomputed_layer(model, layout, options, range),
                 options.overlap_moe_expert_parallel_comm);
    }
  }
  if (cost.has_lm_head && model.has_mtp()) {
    // The multi-token-prediction depths on the last virtual stage (Megatron-Core
    // multi_token_prediction.py mtp_on_this_rank without a custom pipeline layout), each one
    // transformer layer of the decoder's last layer's kind (mtp_layer_kind). Under full recompute
    // MultiTokenPredictionLayer._checkpointed_forward checkpoints each depth (uniform method,
    // one input per depth); the block method skips it ("not supported for MTP yet"). Under
    // overlap_moe_expert_parallel_comm the depth is one more layer of the merged schedule.
    const double depths = static_cast<double>(model.mtp_num_layers);
    const bool mtp_recomputed = mtp_recomputed_under_full(layout);
    add_layers(mtp_layer_kind(model), depths, mtp_recomputed ? depths : 0.0, 1.0,
               options.overlap_moe_expert_parallel_comm);
  }

  const double all_reduce_hidden =
      layout.tp > 1 ? collective_seconds(cluster, CollectiveKind::kAllReduce,
                                         static_cast<int64_t>(tokens * h * e), layout.tp, 1)
                    : 0.0;
  const double vocab_rows = static_cast<double>(padded_vocab_size(model, layout.tp, options)) / t;
  // Vocab-parallel lookup, then an all-reduce (or, with sequence parallelism, a reduce-scatter:
  // half the volume); `weight_rows`: the table rows whose gradient it accumulates.
  const auto add_embedding = [&](double weight_rows) {
    const PassBytes embedding = embedding_bytes(model, cluster, layout, options);
    cost.forward_compute_seconds += memory_seconds(cluster, embedding.forward);
    cost.backward_weight_compute_seconds += memory_seconds(cluster, embedding.backward);
    cost.backward_weight_compute_seconds +=
        memory_seconds(cluster, accumulation_bytes_per_parameter * weight_rows * h);
    cost.forward_tp_comm_seconds +=
        layout.sequence_parallel ? 0.5 * all_reduce_hidden : all_reduce_hidden;
    if (layout.sequence_parallel) {
      // The backward all-gathers the sequence-sharded output gradient for the weight gradient.
      cost.backward_tp_comm_seconds += 0.5 * all_reduce_hidden;
    }
  };
  if (cost.has_embedding) {
    add_embedding(vocab_rows + (model.positions == models::Positions::kLearned
                                    ? static_cast<double>(model.seq_length)
                                    : 0.0));
  }
  const double norm_tokens = layout.sequence_parallel ? tokens / t : tokens;
  const PassBytes norm = norm_bytes_per_element(options, e);
  // A norm (final norm, LM head's GEMM and the loss), once for the main model and once per MTP
  // depth (Megatron-Core multi_token_prediction.py process_mtp_loss: the shared output_layer's
  // logits and loss per depth).
  const auto add_head = [&]() {
    const double head_gemm = gemm_seconds(cluster, tokens, vocab_rows, h);
    // Final norm (norm_bytes_per_element: fused or eager) and the cross-entropy's passes over
    // the rank's T V / t logits (loss_bytes_per_logit: eager or compiled).
    PassBytes loss = loss_bytes_per_logit(e, options);
    if (model.final_logit_softcapping > 0.0) {
      // Gemma 2's final soft-cap on the same logits before the loss: fused into the compiled
      // loss's graph or three eager ops (softcap_bytes_per_element).
      const PassBytes softcap = softcap_bytes_per_element(e, loss_compiled(options));
      loss.forward += softcap.forward;
      loss.backward += softcap.backward;
    }
    cost.forward_compute_seconds +=
        head_gemm + memory_seconds(cluster, norm.forward * norm_tokens * h +
                                                loss.forward * tokens * vocab_rows);
    cost.backward_input_compute_seconds +=
        head_gemm + memory_seconds(cluster, norm.backward * norm_tokens * h +
                                                loss.backward * tokens * vocab_rows);
    cost.backward_weight_compute_seconds += head_gemm;
    if (layout.tp > 1) {
      const double loss_all_reduce = collective_seconds(
          cluster, CollectiveKind::kAllReduce, static_cast<int64_t>(tokens * 4.0), layout.tp, 1);
      cost.forward_tp_comm_seconds +=
          3.0 * loss_all_reduce + (layout.sequence_parallel ? 0.5 * all_reduce_hidden : 0.0);
      cost.backward_tp_comm_seconds += all_reduce_hidden;
    }
    forward_flops += lm_head_forward_flops(model, tokens) *
                     (static_cast<double>(padded_vocab_size(model, layout.tp, options)) /
                      static_cast<double>(model.vocab_size)) /
                     t;
  };
  if (cost.has_lm_head) {
    add_head();
    // A tied head on the embedding's own chunk is the embedding's parameter, counted there.
    if (!model.tied_embeddings || !cost.has_embedding) {
      cost.backward_weight_compute_seconds +=
          memory_seconds(cluster, accumulation_bytes_per_parameter * vocab_rows * h);
    }
  }
  if (cost.has_lm_head && model.has_mtp()) {
    // Each MTP depth's work beyond its transformer layer (added above) (DeepSeek-V3 report
    // Sec. 2.2; Megatron-Core multi_token_prediction.py MultiTokenPredictionLayer): the shared
    // embedding's lookup of the shifted tokens (_get_embeddings; its gradient accumulated into
    // the stage's copy of the table), enorm and hnorm, their concatenation (read and written,
    // forward and backward), eh_proj (ColumnParallelLinear T x 2h -> h / t, _concat_embeddings),
    // then final_layernorm, the shared output layer and the loss (add_head). The head's weight
    // gradient accumulates into the same buffer once more per depth.
    const double eh_proj_gemm = gemm_seconds(cluster, tokens, h / t, 2.0 * h);
    const double concat_bytes = 4.0 * e * norm_tokens * h;
    for (int64_t depth = 0; depth < model.mtp_num_layers; ++depth) {
      const PassSeconds before_depth = pass_seconds(cost);
      add_embedding(vocab_rows);
      cost.forward_compute_seconds +=
          eh_proj_gemm +
          memory_seconds(cluster, 2.0 * norm.forward * norm_tokens * h + concat_bytes);
      cost.backward_input_compute_seconds +=
          eh_proj_gemm +
          memory_seconds(cluster, 2.0 * norm.backward * norm_tokens * h + concat_bytes);
      cost.backward_weight_compute_seconds +=
          eh_proj_gemm + memory_seconds(cluster, accumulation_bytes_per_parameter *
                                                     (2.0 * h * h / t + vocab_rows * h));
      if (mtp_recomputed_under_full(layout)) {
        // _checkpointed_forward re-runs eh_proj with the layer (the norms are cheap and elided).
        cost.backward_input_compute_seconds += eh_proj_gemm;
        recompute_flops += 2.0 * tokens * 2.0 * h * h / t;
      }
      if (layout.tp > 1) {
        // With sequence parallelism eh_proj all-gathers its 2h-wide input (the volume of one
        // hidden all-reduce) and reduce-scatters its gradient; without, the input gradient is
        // all-reduced (2h wide). gather_from_tensor_model_parallel_region then all-gathers the
        // h / t output columns (half a hidden all-reduce), whose backward splits; with sequence
        // parallelism scatter_to_sequence_parallel_region splits, its backward all-gathers.
        cost.forward_tp_comm_seconds +=
            (layout.sequence_parallel ? 1.0 : 0.0) * all_reduce_hidden + 0.5 * all_reduce_hidden;
        cost.backward_tp_comm_seconds +=
            layout.sequence_parallel ? 1.5 * all_reduce_hidden : 2.0 * all_reduce_hidden;
      }
      forward_flops += 2.0 * tokens * 2.0 * h * h / t;
      const PassSeconds before_head = pass_seconds(cost);
      add_head();
      if (options.overlap_moe_expert_parallel_comm) {
        // Its node in the merged schedule: the layer's, the work above in pre_dispatch
        // (MultiTokenPredictionLayer's embedding, norms and eh_proj before the transformer
        // layer) and the head in mtp_post_process.
        EpOverlapLayer node = ep_overlap_nodes[kind_index(mtp_layer_kind(model))];
        const PassSeconds pre = before_head - before_depth;
        const PassSeconds post = pass_seconds(cost) - before_head;
        node.attention_forward_seconds += pre.forward;
        node.attention_backward_seconds += pre.backward + pre.weight;
        node.attention_weight_seconds += pre.weight;
        node.post_forward_seconds = post.forward;
        node.post_backward_seconds = post.backward + post.weight;
        mtp_overlap_nodes.push_back(node);
      }
    }
  }
  if (options.overlap_moe_expert_parallel_comm) {
    // One micro-batch's forward through the chunk's layers beside another's backward
    // (ep_overlap_layers_seconds) against the two in sequence.
    for (int64_t l = range.first; l < range.end; ++l) {
      cost.ep_overlap_layers.push_back(ep_overlap_nodes[kind_index(layer_kind(model, l))]);
    }
    // Megatron-Core appends the MTP layers to the chunk's layer plans
    // (TransformerModelChunkSchedulePlan._build_layer_schedule_plan(model.mtp)).
    cost.ep_overlap_layers.insert(cost.ep_overlap_layers.end(), mtp_overlap_nodes.begin(),
                                  mtp_overlap_nodes.end());
    cost.ep_overlap_delay_wgrad = options.delay_wgrad_compute;
    if (options.delay_wgrad_compute) {
      // Every backward, merged or alone (run with no forward layer), has its weight gradients
      // outside the event chain: alone, a layer's dispatch all-to-all runs beside the experts'
      // weight gradient and the next layer's combine beside the attention's. That shortening
      // comes off its exposed all-to-alls.
      const std::vector<EpOverlapLayer> backward_layers(cost.ep_overlap_layers.rbegin(),
                                                        cost.ep_overlap_layers.rend());
      cost.backward_ep_comm_seconds -= ep_overlap_layers_seconds({}, backward_layers, false) -
                                       ep_overlap_layers_seconds({}, backward_layers, true);
    }
    cost.ep_overlap_saved_seconds = ep_overlap_pair_saved_seconds(cost, cost);
  }

  cost.forward_flops = static_cast<int64_t>(forward_flops);
  cost.backward_flops = static_cast<int64_t>(2.0 * forward_flops + recompute_flops);
  return cost;
}

}  // namespace meshplan::planner
