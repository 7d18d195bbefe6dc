// The linear GEMMs of one layer on one rank (linear_gemms.h).

#include "linear_gemms.h"

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

}  // namespace meshplan::planner
