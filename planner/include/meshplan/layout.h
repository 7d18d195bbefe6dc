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

  int64_t num_gpus() const { return tp * pp * dp; }
  /// Micro-batches per pipeline per step: global_batch / (dp * micro_batch).
  int64_t num_micro_batches() const { return global_batch / (dp * micro_batch); }
};

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

/// "tp=8 pp=4 dp=32 vpp=1 mb=1 recompute=full sp=off zero=0 schedule=1f1b"
std::string describe(const Layout& layout);

}  // namespace meshplan::planner
