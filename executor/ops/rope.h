#pragma once
// Rotary position embedding (Su et al. 2021, "RoFormer", eq. 34) in the half-split pairing of
// GPT-NeoX and Llama: channel i pairs with i + R/2 and turns by angle pos * base^(-2i/R), over
// the first R = rotary_dim channels of each head (all HS by default; partial rotary, Megatron-LM
// --rotary-percent, rotates R = int(HS x percent) and passes the other HS - R through, as
// Megatron-Core's apply_rotary_pos_emb_bshd and GPT-NeoX's rotary_pct do).
// The rotation is applied in place: its backward is the inverse rotation of the gradient and
// needs nothing saved. YaRN also multiplies cos and sin by its attention factor A
// (models::rope_attention_factor): forward A R x, backward A R^T dy.
//
// Shape letters: T sequence positions, B sequences, HS head size; rows are sequence-first
// (row t*B + b has position t), each `row_stride` elements long, and the first `num_heads`
// heads of a row (the query and key heads of a fused QKV row) are rotated.
// A scaled model (Llama 3.1's bands, linear interpolation, YaRN) turns pair i by
// models::rope_inverse_frequency instead.
//
// The header is included by the CUDA sources (gpu/elementwise.cu, for kRopeBase), compiled as
// C++17 (CMAKE_CUDA_STANDARD), so it names models::RopeScaling without including models.h, whose
// defaulted comparisons are C++20.

namespace meshplan::models {
struct RopeScaling;
}  // namespace meshplan::models

namespace meshplan::executor {

/// The default base of the rotary frequencies, 10000 (Su et al. 2021, Sec. 3.2.2; Llama 2 uses
/// the same; the model's rope_theta gives another, Llama 3's 500000).
inline constexpr double kRopeBase = 10000.0;

/// qk (T, B, row_stride): heads 0 .. num_heads-1 of each row rotated in place. `positions` (T)
/// gives row t's position in the sequence (context parallelism holds two chunks of it); null
/// means t. `rotary_dim` (even, at most HS) channels from each head's start are rotated; 0 means
/// all HS. `base` is the rotary base (the layer's, TransformerConfig::layer_rope_theta), `scaling`
/// the frequencies' scaling (TransformerConfig::layer_rope_scaling); null means unscaled.
template <typename Real>
void rope_forward(Real* qk, int T, int B, int num_heads, int row_stride, int HS,
                  const int* positions = nullptr, int rotary_dim = 0, double base = kRopeBase,
                  const models::RopeScaling* scaling = nullptr);
/// dqk (T, B, row_stride): gradients of the rotated heads turned back in place (the transpose
/// of the forward rotation), the rest of the row left as it is.
template <typename Real>
void rope_backward(Real* dqk, int T, int B, int num_heads, int row_stride, int HS,
                   const int* positions = nullptr, int rotary_dim = 0, double base = kRopeBase,
                   const models::RopeScaling* scaling = nullptr);

}  // namespace meshplan::executor
