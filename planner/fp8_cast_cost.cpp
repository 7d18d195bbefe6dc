// Transformer Engine's FP8 casts: memory-bound work that --precision fp8 adds around each FP8
// GEMM (TE 1.x, the versions of NeMo 24.07 and Megatron-Core 0.8: transformer_engine/pytorch/
// module/linear.py and layernorm_linear.py _Linear/_LayerNormLinear forward and backward,
// base.py grad_output_preprocess). Hopper's FP8 GEMMs take both operands K-major ("TN"), so
// every tensor used by two GEMMs is kept as an FP8 copy and an FP8 transpose:
//  - a plain Linear's input (attention output projection, MLP output, the experts' and shared
//    experts' inputs, every MLA projection) is cast and transposed in one kernel
//    (fp8_cast_transpose_fused: read 2 bytes, write 1 + 1) in the forward; under sequence
//    parallelism TE casts only (read 2, write 1) and transposes in the backward (read 1,
//    write 1);
//  - a LayerNormLinear's input (QKV, dense MLP input) comes out of the norm already in FP8
//    (layernorm_fwd_fp8: 1 byte written instead of 2 per element of the norm's output) and is
//    transposed in the backward for the weight gradient (fp8_transpose: read 1, write 1 over
//    the gathered tokens);
//  - every linear's output gradient is cast and transposed in the backward
//    (fp8_cast_transpose_bgrad_fused: read 2, write 1 + 1), over the gathered tokens.
// The weights are cast once per step, not per micro-batch (is_first_microbatch caching), and
// are left out; so are the scale and amax updates (a few floats per tensor).

#include "fp8_cast_cost.h"

namespace meshplan::planner {
namespace {

constexpr double kCastTransposeBytes = 4.0;   // read 2 (bf16), write 1 + 1 (fp8 and transpose)
constexpr double kCastBytes = 3.0;            // read 2, write 1
constexpr double kTransposeBytes = 2.0;       // read 1, write 1
constexpr double kNormFp8SavingBytes = -1.0;  // the norm writes 1 byte instead of 2

// One linear layer's casts, in elements of its input (tokens x k) and output (tokens x n).
struct LinearShape {
  double tokens, k, n;
  bool norm_input;  // a LayerNormLinear: the norm writes its FP8 input
};

void add_linear(Fp8CastBytes& bytes, const LinearShape& linear, double norm_tokens,
                bool sequence_parallel) {
  if (linear.norm_input) {
    bytes.forward += kNormFp8SavingBytes * norm_tokens * linear.k;
    bytes.backward += kTransposeBytes * linear.tokens * linear.k;
  } else if (sequence_parallel) {
    bytes.forward += kCastBytes * linear.tokens * linear.k;
    bytes.backward += kTransposeBytes * linear.tokens * linear.k;
  } else {
    bytes.forward += kCastTransposeBytes * linear.tokens * linear.k;
  }
  bytes.backward += kCastTransposeBytes * linear.tokens * linear.n;
}

}  // namespace

Fp8CastBytes fp8_cast_bytes(const models::TransformerConfig& model, const Layout& layout,
                            const PlanOptions& options, const Shape& x, bool moe_layer) {
  Fp8CastBytes bytes;
  if (options.gemm_precision != GemmPrecision::kFp8) {
    return bytes;
  }
  const double t = x.t, tokens = x.tokens, h = x.h, d = x.d, a = x.a, g = x.g;
  const double norm_tokens = layout.sequence_parallel ? tokens / t : tokens;
  const bool sp = layout.sequence_parallel;
  if (model.is_mla()) {
    // Each MLA projection as a plain Linear on its own input (a small overcount for the ones
    // Megatron-Core fuses with a norm).
    const double q_rank = static_cast<double>(model.q_lora_rank);
    const double kv_rank = static_cast<double>(model.kv_lora_rank);
    const double rope = static_cast<double>(model.qk_rope_head_dim);
    const double nope_plus_v = static_cast<double>(model.qk_nope_head_dim + model.v_head_dim);
    const double v = static_cast<double>(model.v_head_dim);
    add_linear(bytes, {tokens, h, kv_rank + rope, false}, norm_tokens, sp);
    add_linear(bytes, {tokens, kv_rank, a * nope_plus_v / t, false}, norm_tokens, sp);
    add_linear(bytes, {tokens, a * v / t, h, false}, norm_tokens, sp);
    if (q_rank > 0) {
      add_linear(bytes, {tokens, h, q_rank, false}, norm_tokens, sp);
      add_linear(bytes, {tokens, q_rank, a * d / t, false}, norm_tokens, sp);
    } else {
      add_linear(bytes, {tokens, h, a * d / t, false}, norm_tokens, sp);
    }
  } else {
    add_linear(bytes, {tokens, h, (a + 2.0 * g) * d / t, true}, norm_tokens, sp);  // QKV
    add_linear(bytes, {tokens, a * d / t, h, false}, norm_tokens, sp);             // output
  }
  const double fc1_per_f = x.fc1 / x.f;
  if (!moe_layer) {
    add_linear(bytes, {tokens, h, x.fc1 / t, true}, norm_tokens, sp);  // MLP input
    add_linear(bytes, {tokens, x.f / t, h, false}, norm_tokens, sp);   // MLP output
    return bytes;
  }
  // MoE (Megatron-Core TEGroupedLinear after a separate pre-MLP norm): the rank's routed
  // tokens, T k etp / t over its E / ep local experts (compute_cost.cpp mlp_gemm_seconds).
  const double etp = static_cast<double>(expert_tensor_parallel(layout));
  const double f_e = static_cast<double>(model.expert_ffn_hidden_size);
  const double routed_tokens =
      tokens * static_cast<double>(model.experts_per_token) * etp / t * options.moe_load_imbalance;
  add_linear(bytes, {routed_tokens, h, fc1_per_f * f_e / etp, false}, norm_tokens, false);
  add_linear(bytes, {routed_tokens, f_e / etp, h, false}, norm_tokens, false);
  if (model.num_shared_experts > 0) {
    const double f_s = static_cast<double>(model.num_shared_experts) *
                       static_cast<double>(model.shared_expert_ffn_hidden_size);
    add_linear(bytes, {tokens, h, fc1_per_f * f_s / t, false}, norm_tokens, sp);
    add_linear(bytes, {tokens, f_s / t, h, false}, norm_tokens, sp);
  }
  return bytes;
}

}  // namespace meshplan::planner
