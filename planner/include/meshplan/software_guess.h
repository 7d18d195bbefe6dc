#pragma once
// The software a published run ran, guessed where the run states neither `framework` nor
// `options` (runs-file version 1, and later runs that leave both out): README "Validation",
// validation/README.md.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// The layout fields a guess depends on, as the run states them (nullopt: searched), and
/// whether the model's norm is RMSNorm (torchtitan's eager norm kernel is an RMSNorm's).
struct StatedLayout {
  std::optional<int64_t> pp;
  std::optional<ScheduleKind> schedule;
  std::optional<int> zero;
  bool rmsnorm = false;
};

/// What the guessed software of a run's era could not run, for the layout fields the run leaves
/// to the search (stated fields are kept as stated): ZeRO stages above max_zero, sequence
/// parallelism, selective recompute.
struct SearchLimits {
  std::optional<int> max_zero;  // nullopt: any stage
  bool sequence_parallel = true;
  bool selective_recompute = true;
  bool operator==(const SearchLimits&) const = default;
};

/// One candidate: the framework and options costed, the era's search limits, and one line
/// saying what decided them.
struct SoftwareGuess {
  PlanOptions options;
  std::string basis;
  SearchLimits limits;
};

/// The year a source is dated: its first standalone four-digit number from 2017 to 2039 that is
/// not part of an arXiv identifier or a decimal (0 when it has none).
int source_year(std::string_view source);

/// The candidates in order: the framework the source names (torchtitan, FSDP, llm-foundry or
/// Composer: fsdp; DeepSpeed, DeeperSpeed or GPT-NeoX: deepspeed; Megatron-Core, NeMo or
/// Megatron-Bridge: megatron), or deepspeed for a ZeRO-2/3 run dated before 2025; then always
/// Megatron-LM. Options follow the source's era: dated 2024 or later (or Megatron-Core named),
/// the frameworks' current defaults; else the 2021-22 set. FP8 named -> precision fp8 where
/// the GPU has FP8 tensor cores. torchtitan named: its defaults of the source's year
/// (torch.compile and AsyncTP where named; in 2024 the foreach AdamW, the root's FSDP unit
/// holding the embedding and head, the eager RMSNorm uncompiled). Limits follow the source's year
/// too: Megatron-LM gained its distributed optimizer in 2022 and ZeRO 2-3 in 2025, sequence
/// parallelism and selective recompute in 2022 (Megatron-DeepSpeed in July 2023); a dated source
/// before those (with a year's lag for sequence parallelism and selective recompute, unless it
/// names them) searches without them. validate costs the first candidate the framework can run.
std::vector<SoftwareGuess> guess_software(const std::string& source, const StatedLayout& layout,
                                          bool gpu_has_fp8);

}  // namespace meshplan::planner
