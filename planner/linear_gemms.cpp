// The linear GEMMs of one layer on one rank (linear_gemms.h).

#include "linear_gemms.h"

#include "fp8_cast_cost.h"

namespace meshplan::planner {
namespace {

// Attention projections. MLA (DeepSeek-V2, Sec. 2.1; Megatron-Core multi_latent_attention.py):
// down projections duplicated over tp, up projections and the output split.
void add_attention(LinearGemms& gemms, const models::TransformerConfig& model, const Shape& x) {
  const double t = x.t, tokens = x.tokens, h = x.h, d = x.d, a = x.a, g = x.g;
  if (!model.is_mla()) {
    gemms.add({tokens, (a + 2.0 * g) * d / t, h, 1.0, true});    // QKV
    gemms.add({tokens, h, a * d / t, 1.0, false, false, true});  // output
    return;
  }
  const double q_rank = static_cast<double>(model.q_lora_rank);
  const double kv_rank = static_cast<double>(model.kv_lora_rank);
  const double rope = static_cast<double>(model.qk_rope_head_dim);
  const double nope_plus_v = static_cast<double>(model.qk_nope_head_dim + model.v_head_dim);
  const double v = static_cast<double>(model.v_head_dim);
  gemms.add({tokens, kv_rank + rope, h});
  gemms.add({tokens, a * nope_plus_v / t, kv_rank});
  gemms.add({tokens, h, a * v / t, 1.0, false, false, true});
  if (q_rank > 0) {
    gemms.add({tokens, q_rank, h});
    gemms.add({tokens, a * d / t, q_rank});
  } else {
    gemms.add({tokens, a * d / t, h});
  }
}

}  // namespace

// MLP GEMMs. MoE (Megatron-Core alltoall dispatcher, grouped experts): E / ep local experts of
// width f_e / etp, each with T k etp ep / (E t) tokens when balanced (a stage's tp cp dp ranks
// route dp b s k slots to E experts held by tp cp dp / (etp ep) replicas; the etp ranks of one
// replica share its tokens), times the load-imbalance factor; shared experts as a dense MLP of
// S f_s over tp. The router (16-bit) is costed by its caller.
LinearGemms mlp_linear_gemms(const models::TransformerConfig& model, const Layout& layout,
                             const PlanOptions& options, const Shape& x, bool moe_layer) {
  LinearGemms gemms;
  const double t = x.t, tokens = x.tokens, h = x.h, f = x.f;
  const double fc1_per_f = x.fc1 / f;
  if (!moe_layer) {
    gemms.add({tokens, x.fc1 / t, h, 1.0, true});            // MLP input
    gemms.add({tokens, h, f / t, 1.0, false, false, true});  // MLP output
    return gemms;
  }
  const double experts = static_cast<double>(model.num_experts);
  const double ep = static_cast<double>(layout.ep);
  const double etp = static_cast<double>(expert_tensor_parallel(layout));
  const double k = static_cast<double>(model.experts_per_token);
  const double f_e = static_cast<double>(model.expert_ffn_hidden_size);
  const double per_expert_tokens = tokens * k * etp * ep / (experts * t);
  const double local_experts = experts / ep * options.moe_load_imbalance;
  gemms.add({per_expert_tokens, fc1_per_f * f_e / etp, h, local_experts, false, true});
  gemms.add({per_expert_tokens, h, f_e / etp, local_experts, false, true});
  if (model.num_shared_experts > 0) {
    const double f_s = static_cast<double>(model.num_shared_experts) *
                       static_cast<double>(model.shared_expert_ffn_hidden_size);
    gemms.add({tokens, fc1_per_f * f_s / t, h});
    gemms.add({tokens, h, f_s / t, 1.0, false, false, true});
  }
  return gemms;
}

LinearGemms layer_linear_gemms(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const Shape& x, bool moe_layer) {
  LinearGemms gemms;
  add_attention(gemms, model, x);
  for (const LinearGemm& gemm : mlp_linear_gemms(model, layout, options, x, moe_layer)) {
    gemms.add(gemm);
  }
  return gemms;
}

bool torchao_float8(const PlanOptions& options) {
  return options.gemm_precision == GemmPrecision::kFp8 && options.framework == Framework::kFsdp;
}

// One linear GEMM in the plan's precision; torchao's Float8Linear (--framework fsdp) runs its
// FP8 GEMMs at kTorchaoFp8GemmEfficiencyRatio of Transformer Engine's FP8 throughput, and
// converts nn.Linear only: an MoE model's grouped experts (not nn.Linear, as memory.cpp counts
// their gathered weights) stay bf16.
double one_linear_gemm_seconds(const models::ClusterConfig& cluster, const PlanOptions& options,
                               double m, double n, double k, bool expert) {
  if (!torchao_float8(options)) {
    return gemm_seconds(cluster, m, n, k, options.gemm_precision);
  }
  if (expert) {
    return gemm_seconds(cluster, m, n, k, GemmPrecision::kBf16);
  }
  return gemm_seconds(cluster, m, n, k, GemmPrecision::kFp8) / kTorchaoFp8GemmEfficiencyRatio;
}

// The GEMMs of `gemms` in the plan's precision, and in an MoE layer the 16-bit router (T / sp
// tokens, h -> E).
double linear_gemm_seconds(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const PlanOptions& options,
                           const Shape& x, const LinearGemms& gemms, bool moe_layer) {
  double seconds = 0;
  for (const LinearGemm& gemm : gemms) {
    seconds += gemm.multiplier *
               one_linear_gemm_seconds(cluster, options, gemm.tokens, gemm.n, gemm.k, gemm.expert);
  }
  if (moe_layer) {
    seconds += gemm_seconds(cluster, x.tokens / x.sp, static_cast<double>(model.num_experts), x.h);
  }
  return seconds;
}

}  // namespace meshplan::planner
