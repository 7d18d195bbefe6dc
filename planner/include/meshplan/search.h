#pragma once
// Exhaustive search over the valid layout space, ranked by step time or peak memory.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

enum class Objective { kTime, kMemory };

/// Largest global batch the search accepts, in sequences: 2^17, twice the largest published one
/// we know of (LAMB's 65,536 sequences of 128 tokens; You et al. 2019) and 64 times Llama 3
/// 405B's 2,048 of 8,192 tokens (Dubey et al. 2024, Table 4). The op lists grow with the
/// micro-batch count, so a larger batch grows the search without bound (issue 11: 10^12
/// sequences ran for hours in gigabytes; session 36: 10^6 took 89 s for Llama-3 8B on 8 GPUs).
/// At 2^17 Llama-3 405B on 1,024 GPUs with --cp auto searches in about 46 s and 1.8 GB.
inline constexpr int64_t kMaxGlobalBatch = 131'072;

/// Called by search_layouts with (layouts costed so far, layouts in the space): before the
/// first, every kProgressInterval layouts, and once at the end with both equal.
using SearchProgress = std::function<void(int64_t evaluated, int64_t total)>;
inline constexpr int64_t kProgressInterval = 4096;

/// What the search may vary. A set field fixes that dimension; an unset one is searched.
struct SearchSpace {
  int64_t num_gpus = 0;
  int64_t global_batch = 0;
  std::optional<int64_t> tp, pp, dp, vpp, micro_batch;
  // Expert parallel size; unset: every divisor of tp * cp * dp / etp (dp * cp at etp = tp) that
  // divides num_experts for an MoE model, 1 for a dense one.
  std::optional<int64_t> ep;
  // Expert tensor parallel size; unset: tp and 1 for an MoE model under placement tp-dp-pp
  // (etp_choices, search.cpp), else tp. 0 fixes it to tp, whatever tp the search picks
  // (Layout::etp's spelling of Megatron's default; validate's runs that state no etp).
  std::optional<int64_t> etp;
  // Context parallelism: fixed when set; else searched over the divisors of the GPU count only
  // when search_cp (CLI --cp auto), else 1, so searches that do not ask stay as fast as before.
  std::optional<int64_t> cp;
  bool search_cp = false;
  std::optional<Recompute> recompute;
  // With recompute searched: whether selective recompute is among the choices (validate turns it
  // off for software that predates it, SearchLimits in software_guess.h).
  bool search_selective_recompute = true;
  std::optional<bool> sequence_parallel;
  std::optional<int> zero;
  // With zero searched: the highest stage tried (nullopt: every stage, 0 to 3).
  std::optional<int> max_zero;
  std::optional<ScheduleKind> schedule;
  Placement placement = Placement::kTpDpPp;
  // Keep plans at least this far below the GPU's memory: a layout whose peak memory exceeds
  // hbm_bytes - memory_headroom_bytes is rejected with code "memory_headroom" (0: none).
  int64_t memory_headroom_bytes = 0;
  // Fixed per-stage layer counts (Layout::stage_layers; {} = the even split), which fixes pp to
  // the list's size. Unset: the search tries the even split and the first/last splits of
  // candidate_stage_splits for each pp.
  std::optional<std::vector<int64_t>> stage_layers;
  // Fixed virtual-stage layer counts (Layout::virtual_stage_layers, from a layout string): set
  // only with stage_layers, pp and vpp (pipeline_layout_split gives all four); every layout at
  // that vpp gets them.
  std::vector<int64_t> virtual_stage_layers;
  // Interleaved schedule's micro-batch group size N (Layout::microbatch_group). Unset: pp when
  // pp divides the micro-batches, else the smallest N Megatron-Core accepts
  // (smallest_microbatch_group).
  std::optional<int64_t> microbatch_group;
  // Hybrid sharding's shard group, in data-parallel ranks (Layout::dp_shard). Fixed when set
  // (every variant gets it; those that cannot shard so are rejected as "dp_shard"; 0 fixes full
  // sharding, whatever dp, as validate does for runs that state none); unset:
  // under framework fsdp each ZeRO-3 layout is also tried with every proper divisor of dp
  // whose shard group dp_shard * cp has at least 2 ranks, full sharding first.
  std::optional<int64_t> dp_shard;
  // Megatron's block method (Layout::recompute_layers) given to every layout: with recompute
  // full, each chunk's first recompute_layers layers recomputed. 0: every layer.
  int64_t recompute_layers = 0;
  // Search it instead (--recompute-layers auto): each feasible full-recompute layout the block
  // method can run is also costed with the fewest recomputed layers per chunk that fit, found by
  // bisection (memory falls and time grows with each one), and that layout is ranked too.
  bool search_recompute_layers = false;
  // Megatron's uniform method (Layout::recompute_group_layers) given to every layout: with
  // recompute full, each chunk's layers checkpointed in groups of this many. 0: one per group.
  int64_t recompute_group_layers = 0;
  // Search it instead (--recompute-group-layers auto): each full-recompute layout that does not
  // fit in memory is also costed with the group size that needs the least memory (kept inputs
  // fall and the rebuilt group grows with N, Chen et al. 2016's sqrt(n) segments), found by a
  // search over 2..L, and ranked when that fits.
  bool search_recompute_group_layers = false;
  // Megatron-Core's --recompute-modules (Layout::recompute_modules) given to every selective
  // layout; the default is its default, the attention core alone.
  uint32_t recompute_modules = kRecomputeCoreAttn;
  // Search the list instead (--recompute-modules auto): each selective layout that does not fit
  // (under flash attention, where selective is not enumerated apart, each layout without
  // recompute) is also costed with every module list the model can take
  // (recompute_module_lists), and the best that fits by the objective (the fastest) is ranked.
  bool search_recompute_modules = false;
};

/// The --recompute-modules lists --recompute-modules auto tries for `model`, each with core_attn:
/// every combination of the modules that change something in it (mlp where it has dense,
/// non-parallel blocks; layernorm where it has MoE layers or latent attention; mla_up_proj with
/// latent attention; for MoE layers one of moe_act, shared_experts (with shared experts), both,
/// or moe, which holds both), fewest modules first; empty for a model none of them changes.
std::vector<uint32_t> recompute_module_lists(const models::TransformerConfig& model);
/// Throws InputError naming `field` (a CLI flag) when --recompute-modules auto has nothing to
/// try for `model` (no list) or options.framework has no module list
/// (check_recompute_modules_request).
void check_recompute_modules_search_request(const models::TransformerConfig& model,
                                            const PlanOptions& options, const std::string& field);

/// The smallest micro-batch group size N of the interleaved schedule that Megatron-Core accepts
/// for pp stages and m micro-batches (check_schedule_shape), as Layout::microbatch_group: 0 (pp,
/// the default) when pp divides m, else the least N in (pp, m] with m % N = 0 or >= pp; 0 when
/// there is none (m < pp). Warm-up, hence held activations, grow with N ((vpp - 1) N forwards,
/// schedules.py get_pp_rank_microbatches) while the zero-communication makespan does not
/// (README "Micro-batch groups"), so the search tries this N only.
int64_t smallest_microbatch_group(int64_t pp, int64_t num_micro_batches);

/// The per-stage layer splits the search tries for `pp` stages of `num_layers` layers (each a
/// Layout::stage_layers; {} is the even split). pp dividing the layers: the even split, plus
/// (pp >= 3) Megatron-Core first/last splits with middle stages one layer longer, l/pp + 1, and
/// first and last short to make up the difference: balanced and "last shortest" (the LM-head
/// stage light). pp not dividing: middle stages ceil(l/pp) (the smallest middle, which bounds
/// the steady state), first + last the rest, each 1..middle: balanced (the first one longer
/// when odd) and first full with the last (LM-head) stage short. No split exists: {{}} (the
/// even split, which check_layout then rejects as "pp_layers").
std::vector<std::vector<int64_t>> candidate_stage_splits(int64_t num_layers, int64_t pp);

/// Memory-shifted variants of `split` ({}: the even split) that the search tries with the
/// interleaved schedule (pp >= 4): with k = pp / 4, one layer off each of the first k fullest
/// stages and onto each of the last k others. Interleaved 1F1B's warm-up holds
/// 2 (pp - s - 1) + (vpp - 1) N chunk micro-batches on stage s (Megatron-Core schedules.py
/// get_pp_rank_microbatches), so the first stages peak highest; a layer fewer there, their
/// first chunk left short (stage_layer_range), is what lets Llama 3 405B's 8K layout on 8,192
/// H100 run interleaved without recompute. The longer stages pace the pipeline, which the
/// costing sees.
std::vector<std::vector<int64_t>> memory_shifted_splits(int64_t num_layers, int64_t pp,
                                                        const std::vector<int64_t>& split);

struct SearchResult {
  std::vector<PlanEstimate> best;  // feasible, best first, at most top_k
  int64_t num_evaluated = 0;       // layouts costed
  int64_t num_feasible = 0;
  std::map<std::string, int64_t> rejections;          // code -> count
  std::map<std::string, std::string> example_reason;  // code -> one reason, for messages
};

/// Enumerates every layout in `space`, costs each with estimate_plan and keeps the best
/// `top_k` feasible ones (ties on the objective broken by the other measure). The returned
/// estimates carry their collective inventories. Throws InputError on an empty space made
/// impossible by the fixed fields (e.g. num_gpus not divisible by the fixed tp), on num_gpus < 1,
/// on global_batch outside [1, kMaxGlobalBatch] and on memory_headroom_bytes outside
/// [0, hbm_bytes); errors name the SearchSpace field. Layouts
/// options.framework cannot run are rejected with code "framework" (check_framework); when the
/// fixed fields leave only such layouts it throws FrameworkRefusal ("--framework: <reason>").
/// `progress`, if set, hears how far the costing is (the library prints nothing).
/// The InputError search_layouts throws when the framework can run none of the layouts the fixed
/// fields allow: `plan` reports it as bad input, `validate` as a run it cannot predict.
class FrameworkRefusal : public InputError {
 public:
  explicit FrameworkRefusal(const std::string& refusal)
      : InputError("--framework: " + refusal), refusal_(refusal) {}
  /// check_framework's reason for the first refused layout.
  const std::string& refusal() const { return refusal_; }

 private:
  std::string refusal_;
};

SearchResult search_layouts(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const SearchSpace& space,
                            const PlanOptions& options, Objective objective, int64_t top_k,
                            const SearchProgress& progress = {});

}  // namespace meshplan::planner
