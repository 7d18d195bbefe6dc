// Memory per rank of one pipeline stage: model states per ZeRO stage, activations per
// Korthikanti et al. 2022, and the per-GPU reserve.

#include "memory.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "model_shape.h"

namespace meshplan::planner {

double activation_bytes_per_layer(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options) {
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
  const Shape x = shape_of(model, cluster, layout);
  const auto [t, tokens, h, d, a, g, f, s, e, sequence_split, fc1_columns] = x;
  if (layout.recompute == Recompute::kFull) {
    // Only the layer input is kept: 2 s b h bytes (ibid. Sec. 4.3), / t with sequence parallel.
    return tokens * h * e / sequence_split;
  }
  const double activation_input =
      (model.activation == models::Activation::kSwiglu ? 2.0 : 1.0) * tokens * f * e;
  const double split =
      (tokens * (a + 2.0 * g) * d * e + tokens * a * d * e + activation_input + tokens * f * e) / t;
  const double replicated = (4.0 * tokens * h * e + 2.0 * tokens * h) / sequence_split;
  double scores = 0;
  if (layout.recompute == Recompute::kNone && !options.flash_attention) {
    scores = a * s * tokens * (2.0 * e + 1.0) / t;
  } else if (options.flash_attention) {
    scores = 4.0 * tokens * a / t;  // fp32 log-sum-exp per query row (Dao 2022, Alg. 1)
  }
  return split + replicated + scores;
}

double weight_gradient_bytes_per_layer(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout) {
  // W of a linear Y = X A needs X and dY (dA = X^T dY). Inputs: QKV and first MLP projection
  // take the (sequence-sharded under SP) normed hidden states, the output projection the
  // attention output (T a d / t), the second MLP projection the activation (T f / t). Output
  // gradients: QKV (T (a + 2g) d / t), attention output and second MLP projection (T h, / t
  // under SP), first MLP projection (T f or 2 T f for SwiGLU, / t).
  const Shape x = shape_of(model, cluster, layout);
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

InFlight peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                        int64_t stage) {
  // Counted from the schedule's own op list; memoised because the search asks for the same
  // (schedule, pp, vpp, m) many times.
  using Key = std::tuple<int, int64_t, int64_t, int64_t>;
  static std::map<Key, std::vector<InFlight>> cache;
  const Key key{static_cast<int>(kind), pp, vpp, num_micro_batches};
  auto it = cache.find(key);
  if (it == cache.end()) {
    const PipelineSchedule schedule =
        generate_schedule(kind, pp, vpp, num_micro_batches, /*with_transfers=*/false);
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

MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, const InFlight& in_flight) {
  MemoryBreakdown memory;
  const StageParameters parameters = stage_parameters(model, layout, stage);
  const double n = static_cast<double>(parameters.sharded + parameters.replicated);
  const double dp = static_cast<double>(layout.dp);
  // ZeRO (Rajbhandari et al. 2020), Fig. 1: model states = (2 + 2 + K) psi bytes with K = 12
  // for mixed-precision Adam (fp32 master weights, m, v); stage 1 shards the K psi optimizer
  // states over dp, stage 2 also the gradients, stage 3 also the weights. In fp32 there is no
  // master copy: (4 + 4 + 8) psi.
  const bool fp32 = cluster.precision == models::Precision::kFp32;
  const double weight_bytes = fp32 ? 4.0 : 2.0;
  const double gradient_bytes = fp32 ? 4.0 : 2.0;
  const double optimizer_bytes = fp32 ? 8.0 : 12.0;
  memory.weights_bytes =
      static_cast<int64_t>(weight_bytes * n / (zero_shards_parameters(layout) ? dp : 1.0));
  memory.gradients_bytes =
      static_cast<int64_t>(gradient_bytes * n / (zero_shards_gradients(layout) ? dp : 1.0));
  memory.optimizer_bytes =
      static_cast<int64_t>(optimizer_bytes * n / (zero_shards_optimizer(layout) ? dp : 1.0));
  if (layout.zero >= 3) {
    // ZeRO-3 gathers layer by layer (ibid. Sec. 5.3); the working set holds two gathered
    // layers, the one computing and the next one prefetched (Sec. 7.2.2).
    const LayerParameters layer = layer_parameters(model, layout.tp);
    memory.weights_bytes +=
        static_cast<int64_t>(2.0 * weight_bytes * static_cast<double>(layer.sharded));
  }

  const double tokens = static_cast<double>(layout.micro_batch * model.seq_length);
  const double h = static_cast<double>(model.hidden_size);
  const double e = static_cast<double>(element_bytes(cluster));
  const double t = static_cast<double>(layout.tp);
  const double sequence_split = layout.sequence_parallel ? t : 1.0;
  const double layers_per_micro_batch_unit = static_cast<double>(layers_per_chunk(model, layout));
  // Peak over the op list of held micro-batches' activations plus, for split schedules, the
  // B-to-W tensors of those waiting for their W.
  const double held_bytes = activation_bytes_per_layer(model, cluster, layout, options);
  const double waiting_bytes = weight_gradient_bytes_per_layer(model, cluster, layout);
  double peak_layer_bytes = 0;
  for (const auto& [held, waiting] : in_flight.held_and_waiting) {
    peak_layer_bytes = std::max(peak_layer_bytes, static_cast<double>(held) * held_bytes +
                                                      static_cast<double>(waiting) * waiting_bytes);
  }
  double activations = peak_layer_bytes * layers_per_micro_batch_unit;
  if (layout.recompute == Recompute::kFull) {
    // The backward of one layer rebuilds that layer's full activations (ibid. Sec. 4.3).
    Layout stored = layout;
    stored.recompute = Recompute::kNone;
    activations += activation_bytes_per_layer(model, cluster, stored, options);
  }
  if (stage == 0) {
    // Embedding output dropout mask per first-chunk micro-batch in flight (ibid. Sec. 4.4,
    // eq. 4).
    activations += tokens * h / sequence_split * static_cast<double>(in_flight.first_chunk);
  }
  if (stage == layout.pp - 1) {
    // Final norm and LM-head inputs and the fp32 logits (ibid. Sec. 4.4: 4 s b v / t) of every
    // last-chunk micro-batch in flight: one under 1F1B, all m under GPipe, whose losses are
    // computed in the forward and whose cross-entropy backward needs the softmax.
    const double vocab = static_cast<double>(padded_vocab_size(model, layout.tp)) / t;
    activations += (2.0 * tokens * h * e / sequence_split + 4.0 * tokens * vocab) *
                   static_cast<double>(in_flight.last_chunk);
  }
  memory.activations_bytes = static_cast<int64_t>(activations);
  memory.reserved_bytes = cluster.reserved_bytes_per_gpu;
  return memory;
}

}  // namespace meshplan::planner
