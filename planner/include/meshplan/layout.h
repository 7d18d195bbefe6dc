#pragma once
// A parallel layout in Megatron-LM's vocabulary, and the rank placement it implies.

#include <cstdint>
#include <string>

namespace meshplan::planner {

enum class Recompute { kNone, kSelective, kFull };

/// Pipeline schedules. kOneFOneB is PipeDream-Flush (Narayanan et al. 2021, Fig. 4 top);
/// kInterleaved is Megatron-LM's interleaved 1F1B with vpp model chunks per stage (ibid. Fig. 4
/// bottom); kZbH1 is Qi et al. 2023 "Zero Bubble Pipeline Parallelism", ZB-H1.
enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved, kZbH1 };

/// How global ranks map to (tp, dp, pp) coordinates. The first-named dimension varies fastest.
/// kTpDpPp is Megatron-LM's default order: rank = tp_rank + tp * (dp_rank + dp * pp_rank).
enum class Placement { kTpDpPp, kTpPpDp };

struct Layout {
  int64_t tp = 1;            // tensor model parallel size
  int64_t pp = 1;            // pipeline model parallel size
  int64_t dp = 1;            // data parallel size
  int64_t vpp = 1;           // virtual pipeline stages (model chunks) per pipeline rank
  int64_t micro_batch = 1;   // sequences per micro-batch
  int64_t global_batch = 1;  // sequences per optimizer step
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  int zero = 0;  // 0-3; 1 is Megatron's distributed optimizer
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  Placement placement = Placement::kTpDpPp;
  // Expert model parallel size (Megatron --expert-model-parallel-size): each MoE layer's experts
  // are split over ep ranks taken from the data-parallel group (ep consecutive dp ranks, as
  // Megatron's default order tp-cp-ep-dp-pp), so ep divides dp. Experts are tp-sharded as
  // Megatron's default --expert-tensor-parallel-size = tp.
  int64_t ep = 1;

  int64_t num_gpus() const { return tp * pp * dp; }
  /// Micro-batches per pipeline per step: global_batch / (dp * micro_batch).
  int64_t num_micro_batches() const { return global_batch / (dp * micro_batch); }

  bool operator==(const Layout&) const = default;
};

/// The rules every part reads from a layout (planner, simulator, executor), named once.
///
/// Virtual pipeline stage of model chunk `chunk` on pipeline rank `stage`: v = chunk * pp +
/// stage (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's interleaved assignment), so
/// activations go to v + 1 and gradients to v - 1.
inline int64_t virtual_stage(int64_t pp, int64_t stage, int64_t chunk) {
  return chunk * pp + stage;
}

/// Expert data parallel size: the ranks holding the same experts, dp / ep (Megatron's
/// expert-data-parallel group); expert gradients are reduced, and ZeRO-sharded, over it.
inline int64_t expert_data_parallel(const Layout& layout) {
  return layout.dp / layout.ep;
}
/// The layout as expert parameters see it: ZeRO shards them over the expert data parallel
/// group (Megatron's distributed optimizer keeps expert parameters in their own buffers,
/// sharded over expert-data-parallel ranks), so dp becomes dp / ep.
inline Layout expert_layout(const Layout& layout) {
  Layout expert = layout;
  expert.dp = expert_data_parallel(layout);
  expert.ep = 1;
  return expert;
}

/// ZeRO (Rajbhandari et al. 2020, Fig. 1): stage 1 shards optimizer states over dp, stage 2
/// also gradients, stage 3 also parameters. With dp = 1 nothing is sharded.
inline bool zero_shards_optimizer(const Layout& layout) {
  return layout.zero >= 1 && layout.dp > 1;
}
inline bool zero_shards_gradients(const Layout& layout) {
  return layout.zero >= 2 && layout.dp > 1;
}
inline bool zero_shards_parameters(const Layout& layout) {
  return layout.zero >= 3 && layout.dp > 1;
}
/// Elements of `count` one rank updates: ceil(count / dp) when ZeRO shards the optimizer (the
/// buffer is padded to a multiple of dp), else all of them.
inline int64_t zero_shard_count(const Layout& layout, int64_t count) {
  return zero_shards_optimizer(layout) ? (count + layout.dp - 1) / layout.dp : count;
}

/// Whether (schedule, pp, vpp, micro-batches) can be scheduled: interleaved needs pp >= 2,
/// vpp >= 2 and micro-batches divisible by pp (Megatron-LM rejects the same: arguments.py and
/// forward_backward_pipelining_with_interleaving); the others need vpp = 1. Returns "" when
/// fine, else "vpp_schedule" or "interleaved_micro_batches" with `reason` set to one line.
std::string check_schedule_shape(ScheduleKind schedule, int64_t pp, int64_t vpp,
                                 int64_t num_micro_batches, std::string* reason);

struct RankCoords {
  int64_t tp_rank = 0;
  int64_t dp_rank = 0;
  int64_t pp_rank = 0;
};

RankCoords rank_coords(const Layout& layout, int64_t rank);
int64_t global_rank(const Layout& layout, const RankCoords& coords);

std::string to_string(Recompute recompute);
std::string to_string(ScheduleKind schedule);
std::string to_string(Placement placement);
/// Parse the CLI/JSON spellings ("none", "selective", "full"; "gpipe", "1f1b", "interleaved",
/// "zb-h1"; "tp-dp-pp", "tp-pp-dp"). Throw InputError naming `field` on anything else.
Recompute parse_recompute(const std::string& text, const std::string& field);
ScheduleKind parse_schedule(const std::string& text, const std::string& field);
Placement parse_placement(const std::string& text, const std::string& field);

/// "tp=8 pp=4 dp=32 vpp=1 mb=1 recompute=full sp=off zero=0 schedule=1f1b", then " ep=8" when
/// ep > 1
std::string describe(const Layout& layout);

}  // namespace meshplan::planner
