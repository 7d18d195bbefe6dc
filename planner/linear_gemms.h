#pragma once
// Private: the linear-layer GEMMs of one transformer layer on one rank, the one list that both
// their time (linear_gemm_seconds, read by compute_cost.cpp and module_recompute_cost.cpp) and
// Transformer Engine's FP8 casts (fp8_cast_cost.cpp) read.

#include <array>
#include <cstddef>

#include "meshplan/cost_model.h"
#include "model_shape.h"

namespace meshplan::planner {

/// One linear GEMM of `tokens` rows: output width n, reduction k, run `multiplier` times (the
/// local experts, times the MoE load imbalance). norm_input: its input comes straight from a
/// norm (Transformer Engine's LayerNormLinear: QKV and the dense MLP input). expert: a grouped
/// expert GEMM, outside the tp layers' sequence parallelism. row_parallel: its output is
/// reduced over tp (attention output projection, MLP output), so under sequence parallelism
/// its output gradient arrives sequence-sharded and is gathered.
struct LinearGemm {
  double tokens = 0, n = 0, k = 0;
  double multiplier = 1;
  bool norm_input = false;
  bool expert = false;
  bool row_parallel = false;
};

/// The GEMMs Transformer Engine runs in FP8 under --precision fp8 (te.Linear, LayerNormLinear,
/// TEGroupedLinear): attention projections and MLP or experts; not the MoE router, the
/// attention core or the LM head.
struct LinearGemms {
  std::array<LinearGemm, 9> items{};  // MLA with a q latent (5) + experts (2) + shared (2)
  size_t count = 0;
  void add(const LinearGemm& gemm) { items.at(count++) = gemm; }
  const LinearGemm* begin() const { return items.data(); }
  const LinearGemm* end() const { return items.data() + count; }
};
LinearGemms layer_linear_gemms(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const Shape& x, bool moe_layer);
/// The MLP's part of layer_linear_gemms: the dense MLP, or the routed and shared experts.
LinearGemms mlp_linear_gemms(const models::TransformerConfig& model, const Layout& layout,
                             const PlanOptions& options, const Shape& x, bool moe_layer);

/// Whether the linear GEMMs are torchao's Float8Linear: FP8 under framework fsdp.
bool torchao_float8(const PlanOptions& options);
/// One linear GEMM (m x n x k) in the plan's precision; torchao's Float8Linear runs its FP8 GEMMs
/// at kTorchaoFp8GemmEfficiencyRatio of Transformer Engine's and leaves `expert` GEMMs in bf16.
double one_linear_gemm_seconds(const models::ClusterConfig& cluster, const PlanOptions& options,
                               double m, double n, double k, bool expert = false);
/// The GEMMs of `gemms` in the plan's precision, and in an MoE layer the 16-bit router.
double linear_gemm_seconds(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const PlanOptions& options,
                           const Shape& x, const LinearGemms& gemms, bool moe_layer);

}  // namespace meshplan::planner
