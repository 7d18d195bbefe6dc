#pragma once
// Private: memory functions of the cost model.

#include <cstdint>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// Bytes one layer keeps for one micro-batch between its B and W under a split schedule: the
/// inputs and output gradients of its four linear layers.
double weight_gradient_bytes_per_layer(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout,
                                       bool moe_layer = false);

/// Activation bytes one layer stores for one micro-batch on one rank.
double activation_bytes_per_layer(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options, bool moe_layer = false);

/// Peak in-flight micro-batches of one stage, counted from the schedule's op list: over all
/// chunks (in units of one chunk's activations), and of its first and last chunk alone (which
/// hold the embedding output and the LM-head inputs on the first and last stage).
struct InFlight {
  int64_t all_chunks = 0;
  int64_t first_chunk = 0;
  int64_t last_chunk = 0;
  // Split (zero-bubble) schedules: the (held, waiting-for-W) micro-batch counts over the op
  // list, Pareto-maximal points only. Held ones keep all activations; waiting ones keep the
  // linear layers' inputs and output gradients until their W (Qi et al. 2023, Sec. 2, M_W).
  // Other schedules: {(all_chunks, 0)}.
  std::vector<std::pair<int64_t, int64_t>> held_and_waiting;
};
/// `ep_overlap`: the interleaved schedule's combined 1F1B (generate_schedule), one more warm-up
/// forward held.
InFlight peak_in_flight(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                        int64_t stage, int64_t microbatch_group = 0, bool ep_overlap = false);

/// Peak over `stage`'s op list of the transformer layers whose activations it holds, each held
/// (micro-batch, chunk) counted by chunk_layers[chunk] (for stages whose chunks differ, the
/// embedding/loss-accounted split). The schedule is generate_schedule's for these arguments.
int64_t peak_in_flight_layers(ScheduleKind kind, int64_t pp, int64_t vpp, int64_t num_micro_batches,
                              int64_t microbatch_group, int64_t stage,
                              const std::vector<int64_t>& chunk_layers, bool ep_overlap = false);

/// Caching-allocator fragmentation (reserved - allocated) as a fraction of allocated bytes:
/// 1.83 GiB over 75.31 GiB allocated = 2.4% (vllm-project/compressed-tensors#587, a PyTorch
/// training-side report). No citable figure for Megatron/FSDP pretraining was found; this one
/// is used for every framework (README "Memory").
inline constexpr double kAllocatorFragmentation = 0.024;

/// The per-GPU reserve outside the model's tensors: the cluster's fixed part plus
/// fragmentation on `allocated_bytes`.
int64_t reserve_bytes(const models::ClusterConfig& cluster, int64_t allocated_bytes);

/// Bytes one gathered layer holds less under framework fsdp with precision fp8: torchao's
/// float8 all-gather moves each linear weight in 1 byte instead of e (memory.cpp; 0 otherwise).
/// The all-gathers (dp_buckets.cpp) and FSDP2's copy-out (compute_cost.cpp) move that less too.
double fsdp_float8_gather_saving_bytes(const models::TransformerConfig& model,
                                       const models::ClusterConfig& cluster, const Layout& layout,
                                       const PlanOptions& options);

/// Linear (GEMM) weights of one rank on `stage` that Megatron-LM's --fp8-param-gather keeps in
/// fp8 (options.fp8_param_gather; else 0): the QKV, attention-output and MLP weights of the
/// stage's transformer layers. Norms, biases, embedding and LM head stay in the cluster's
/// precision. Dense, non-MLA models only (check_fp8_param_gather).
double fp8_param_gather_weight_count(const models::TransformerConfig& model,
                                     const models::ClusterConfig& cluster, const Layout& layout,
                                     const PlanOptions& options, int64_t stage);

/// Bytes --fp8-param-gather saves on `stage` against --precision fp8 alone: per fp8 weight,
/// e - 1 bytes of the stored weight and the 1-byte fp8 cast fp8_state_bytes counts (the weight
/// is that cast now; its transpose stays), e bytes in all.
double fp8_param_gather_saving_bytes(const models::TransformerConfig& model,
                                     const models::ClusterConfig& cluster, const Layout& layout,
                                     const PlanOptions& options, int64_t stage);

/// Per-rank memory of pipeline stage `stage` under options.framework's accounting.
MemoryBreakdown stage_memory(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout,
                             const PlanOptions& options, int64_t stage, const InFlight& in_flight);

}  // namespace meshplan::planner
