// A sliding window on some layers only (window_attn_skip_freq): each layer costed by its own
// kind, so a chunk with k of n layers windowed costs k windowed and n - k full layers. The
// expected values are the all-windowed and the full-attention chunks of the same model, mixed
// in the pattern's proportion: every chunk term is a count of layers of each kind times that
// kind's cost, plus what lies outside the layers (embedding, head), the same in all three.

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "compute_cost.h"
#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

// Relative tolerance of sums of the same terms added in another order (~1e-16 each).
constexpr double kSameSum = 1e-12;

// `model` with its window (8 of s 32) on every layer, on none, and on the layers `pattern`
// chooses (Megatron's N).
struct ThreeModels {
  models::TransformerConfig windowed, full, pattern;
};
ThreeModels three_models(models::TransformerConfig model, int64_t skip_freq) {
  ThreeModels m;
  model.sliding_window = 8;
  m.windowed = model;
  m.full = model;
  m.full.sliding_window = 0;
  m.pattern = model;
  m.pattern.window_attn_skip_freq = skip_freq;
  return m;
}

// `mixed` = share * `windowed` + (1 - share) * `full`, term by term.
void check_mix(const ChunkCost& mixed, const ChunkCost& windowed, const ChunkCost& full,
               double share) {
  const auto mix = [&](double w, double f) {
    return doctest::Approx(share * w + (1.0 - share) * f).epsilon(kSameSum).scale(0);
  };
  CHECK(mixed.forward_compute_seconds ==
        mix(windowed.forward_compute_seconds, full.forward_compute_seconds));
  CHECK(mixed.backward_input_compute_seconds ==
        mix(windowed.backward_input_compute_seconds, full.backward_input_compute_seconds));
  CHECK(mixed.backward_weight_compute_seconds ==
        mix(windowed.backward_weight_compute_seconds, full.backward_weight_compute_seconds));
  CHECK(mixed.forward_tp_comm_seconds == full.forward_tp_comm_seconds);
  CHECK(mixed.backward_tp_comm_seconds == full.backward_tp_comm_seconds);
  // FLOPs are truncated to integers per chunk: each of the three within 1 of its sum, the
  // mix within 2.
  const auto flops_off = [&](int64_t m, int64_t w, int64_t f) {
    return std::abs(static_cast<double>(m) -
                    (share * static_cast<double>(w) + (1.0 - share) * static_cast<double>(f)));
  };
  CHECK(flops_off(mixed.forward_flops, windowed.forward_flops, full.forward_flops) <= 2.0);
  CHECK(flops_off(mixed.backward_flops, windowed.backward_flops, full.backward_flops) <= 2.0);
  // The window makes a difference worth checking.
  CHECK(windowed.forward_compute_seconds < full.forward_compute_seconds);
}

void check_chunk_mix(const ThreeModels& m, const Layout& layout, const PlanOptions& options,
                     double share) {
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  check_mix(chunk_cost(m.pattern, cluster, layout, options, 0, 0),
            chunk_cost(m.windowed, cluster, layout, options, 0, 0),
            chunk_cost(m.full, cluster, layout, options, 0, 0), share);
}

TEST_CASE("window pattern: a dense chunk with 2 of 4 layers windowed costs half of each") {
  // N 2: layer numbers 1 and 3 windowed, 2 and 4 full.
  const ThreeModels m = three_models(models::load_model("tiny"), 2);
  check_chunk_mix(m, make_layout(1, 1, 1, 1, 1), PlanOptions{}, 0.5);
  // N 4: numbers 1, 2, 3 windowed, 4 full: 3 of 4.
  check_chunk_mix(three_models(models::load_model("tiny"), 4), make_layout(1, 1, 1, 1, 1),
                  PlanOptions{}, 0.75);
  // Unfused attention with selective recompute of its core: the core's time is the full
  // square's on every layer, and so are its FLOPs: the kernels compute the square and mask it
  // (sliding_window_test).
  Layout selective = make_layout(1, 1, 1, 1, 1);
  selective.recompute = Recompute::kSelective;
  PlanOptions unfused;
  unfused.flash_attention = false;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const ChunkCost p = chunk_cost(m.pattern, cluster, selective, unfused, 0, 0);
  const ChunkCost w = chunk_cost(m.windowed, cluster, selective, unfused, 0, 0);
  const ChunkCost f = chunk_cost(m.full, cluster, selective, unfused, 0, 0);
  CHECK(p.backward_input_compute_seconds ==
        doctest::Approx(f.backward_input_compute_seconds).epsilon(kSameSum).scale(0));
  CHECK(p.backward_flops == f.backward_flops);
  CHECK(w.backward_flops == f.backward_flops);
  // With FlashAttention the windowed layers' FLOPs shrink, and the pattern's sit halfway.
  const ChunkCost p_flash = chunk_cost(m.pattern, cluster, selective, PlanOptions{}, 0, 0);
  const ChunkCost w_flash = chunk_cost(m.windowed, cluster, selective, PlanOptions{}, 0, 0);
  const ChunkCost f_flash = chunk_cost(m.full, cluster, selective, PlanOptions{}, 0, 0);
  CHECK(std::abs(static_cast<double>(p_flash.backward_flops) -
                 0.5 * static_cast<double>(w_flash.backward_flops + f_flash.backward_flops)) <=
        2.0);
  CHECK(w_flash.backward_flops < f_flash.backward_flops);
}

TEST_CASE("window pattern: MoE layers are costed per window the same way") {
  models::TransformerConfig moe = models::load_model("tiny-moe");
  moe.first_dense_layers = 0;  // 4 MoE layers, 2 of them windowed under N 2
  check_chunk_mix(three_models(moe, 2), make_layout(1, 1, 1, 1, 1), PlanOptions{}, 0.5);
  // tiny-moe's dense layer 0 and MoE layers 1 to 3 under N 2: layers 0 and 2 windowed. The
  // dense layer is windowed in the pattern and the all-windowed chunk alike, so the MoE layers
  // carry the difference: pattern - full = dense (W - F) + MoE (W - F), all-windowed - full =
  // dense (W - F) + 3 MoE (W - F), and dense-only (first_dense_layers 4) separates the two.
  const ThreeModels mixed = three_models(models::load_model("tiny-moe"), 2);
  models::TransformerConfig dense_only = models::load_model("tiny-moe");
  dense_only.first_dense_layers = 3;  // layers 0 to 2 dense, layer 3 MoE: full under N 2
  const ThreeModels d = three_models(dense_only, 2);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 1, 1, 1, 1);
  const auto forward = [&](const models::TransformerConfig& model) {
    return chunk_cost(model, cluster, layout, PlanOptions{}, 0, 0).forward_compute_seconds;
  };
  // Per-layer window saving of a dense layer: d's pattern windows dense layers 0 and 2.
  const double dense_saving = (forward(d.full) - forward(d.pattern)) / 2.0;
  // Of an MoE layer: the all-windowed tiny-moe saves 1 dense and 3 MoE layers' worth.
  const double moe_saving = (forward(mixed.full) - forward(mixed.windowed) - dense_saving) / 3.0;
  CHECK(
      forward(mixed.pattern) ==
      doctest::Approx(forward(mixed.full) - dense_saving - moe_saving).epsilon(kSameSum).scale(0));
  CHECK(moe_saving > 0);
}

TEST_CASE("window pattern: block recompute re-runs the chunk's first layers by their kind") {
  const ThreeModels m = three_models(models::load_model("tiny"), 2);
  Layout block = make_layout(1, 1, 1, 1, 1);
  block.recompute = Recompute::kFull;
  block.recompute_layers = 2;  // layers 0 (windowed) and 1 (full) re-run
  check_chunk_mix(m, block, PlanOptions{}, 0.5);
  // One recomputed layer: under N 2 it is windowed, under the list [0, 1, 0, 1] full. The two
  // chunks hold 2 windowed and 2 full layers alike; they differ by a windowed layer's recompute
  // against a full one's, which the all-windowed and full chunks give: with recompute_layers 1
  // less without recompute, each is that layer kind's recompute.
  block.recompute_layers = 1;
  models::TransformerConfig shifted = m.pattern;
  shifted.window_attn_skip_freq = 0;
  shifted.window_attn_layers = {0, 1, 0, 1};
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout none = make_layout(1, 1, 1, 1, 1);
  const auto backward = [&](const models::TransformerConfig& model, const Layout& layout) {
    return chunk_cost(model, cluster, layout, PlanOptions{}, 0, 0).backward_input_compute_seconds;
  };
  const double windowed_recompute = backward(m.windowed, block) - backward(m.windowed, none);
  const double full_recompute = backward(m.full, block) - backward(m.full, none);
  CHECK(full_recompute > windowed_recompute);
  CHECK(backward(shifted, block) - backward(m.pattern, block) ==
        doctest::Approx(full_recompute - windowed_recompute).epsilon(1e-9).scale(0));
}

TEST_CASE("window pattern: estimate_plan's cached chunks are the chunks' own costs") {
  // 8 layers on pp 2 x vpp 2: virtual stages of 2 layers each. Virtual stages 1 and 2 (stage 1
  // chunk 0, stage 0 chunk 1) carry neither embedding nor head and hold one windowed and one
  // full layer each, the windowed one first in v1 and last in v2: under block recompute of one
  // layer they cost differently, and the chunk-cost cache must not take one for the other.
  models::TransformerConfig model = models::load_model("tiny");
  model.num_layers = 8;
  model.sliding_window = 8;
  model.window_attn_layers = {1, 1, 1, 0, 0, 1, 1, 1};
  Layout layout = make_layout(1, 2, 1, 1, 4);
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  layout.recompute = Recompute::kFull;
  layout.recompute_layers = 1;
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const PlanEstimate estimate = estimate_plan(model, cluster, layout);
  REQUIRE(estimate.feasible);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t c = 0; c < 2; ++c) {
      const ChunkCost own = chunk_cost(model, cluster, layout, PlanOptions{}, s, c);
      const ChunkCost& cached =
          estimate.stages[static_cast<size_t>(s)].chunks[static_cast<size_t>(c)];
      CHECK(cached.forward_seconds() == own.forward_seconds());
      CHECK(cached.backward_seconds() == own.backward_seconds());
      CHECK(cached.backward_flops == own.backward_flops);
    }
  }
  CHECK(estimate.stages[1].chunks[0].backward_seconds() !=
        estimate.stages[0].chunks[1].backward_seconds());
}

TEST_CASE("window pattern: model FLOPs count each layer's own attention share") {
  // tiny at global batch 1: T = s = 32 tokens, h 64, a 4, g 2, d 16, f 176 (SwiGLU), V 256.
  // Per layer: QKV 2 T h (a + 2g) d = 524,288; output 2 T a d h = 262,144; MLP 3 x 2 T h f =
  // 2,162,688; attention core 2 x 2 T s a d = 262,144 on a full layer, times 228 / 528 (s 32,
  // w 8: 36 + 24 x 8 = 228 of 528 pairs) on a windowed one; head 2 T h V = 1,048,576.
  const ThreeModels m = three_models(models::load_model("tiny"), 2);
  const double core = 262'144.0;
  const double per_layer = 524'288.0 + 262'144.0 + 2'162'688.0;
  const double head = 1'048'576.0;
  // Forward plus a backward of twice it; N 2 windows 2 of the 4 layers.
  const double expected = 3.0 * (4.0 * per_layer + 2.0 * core + 2.0 * core * 228.0 / 528.0 + head);
  CHECK(model_flops_per_step(m.pattern, 1) == doctest::Approx(expected).epsilon(kSameSum).scale(0));
  CHECK(
      model_flops_per_step(m.pattern, 1) ==
      doctest::Approx(0.5 * (model_flops_per_step(m.windowed, 1) + model_flops_per_step(m.full, 1)))
          .epsilon(kSameSum)
          .scale(0));
  // The list form: layer 3 only windowed.
  models::TransformerConfig last = m.pattern;
  last.window_attn_skip_freq = 0;
  last.window_attn_layers = {0, 0, 0, 1};
  CHECK(model_flops_per_step(last, 1) ==
        doctest::Approx(3.0 * (4.0 * per_layer + 3.0 * core + core * 228.0 / 528.0 + head))
            .epsilon(kSameSum)
            .scale(0));
}

TEST_CASE("window pattern: a plan's step time lies between full attention and every layer") {
  const ThreeModels m = three_models(models::load_model("tiny"), 2);
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  const Layout layout = make_layout(1, 2, 1, 1, 8);
  const PlanEstimate w = estimate_plan(m.windowed, cluster, layout);
  const PlanEstimate p = estimate_plan(m.pattern, cluster, layout);
  const PlanEstimate f = estimate_plan(m.full, cluster, layout);
  REQUIRE(w.feasible);
  REQUIRE(p.feasible);
  REQUIRE(f.feasible);
  CHECK(w.step_time_s < p.step_time_s);
  CHECK(p.step_time_s < f.step_time_s);
  // Memory does not change with the window (flash attention stores no scores).
  CHECK(p.stages[0].memory.activations_bytes == f.stages[0].memory.activations_bytes);
}

}  // namespace
}  // namespace meshplan::planner
