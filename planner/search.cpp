// Exhaustive layout search. Nothing is pruned: every layout in the space is costed.

#include "meshplan/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <numeric>

#include "estimate_internal.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

constexpr double kGiB = static_cast<double>(kBytesPerGiB);

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> result;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d == 0) {
      result.push_back(d);
      if (d != n / d) {
        result.push_back(n / d);
      }
    }
  }
  std::sort(result.begin(), result.end());
  return result;
}

template <typename T>
std::vector<T> choices(const std::optional<T>& fixed, std::vector<T> all) {
  if (fixed) {
    return {*fixed};
  }
  return all;
}

bool better(const PlanEstimate& a, const PlanEstimate& b, Objective objective) {
  if (objective == Objective::kTime) {
    if (a.step_time_s != b.step_time_s) {
      return a.step_time_s < b.step_time_s;
    }
    return a.peak_memory_bytes < b.peak_memory_bytes;
  }
  if (a.peak_memory_bytes != b.peak_memory_bytes) {
    return a.peak_memory_bytes < b.peak_memory_bytes;
  }
  return a.step_time_s < b.step_time_s;
}

// Throws InputError when the fixed fields leave nothing to search or a size is out of range.
void check_space(const SearchSpace& space) {
  if (space.num_gpus < 1) {
    throw InputError(fmt::format("num_gpus: must be positive ({})", space.num_gpus));
  }
  if (space.global_batch < 1 || space.global_batch > kMaxGlobalBatch) {
    throw InputError(fmt::format("global_batch: must be between 1 and {} ({})", kMaxGlobalBatch,
                                 space.global_batch));
  }
  // Fixed sizes that cannot multiply to the GPU count leave nothing to search: say which.
  for (const auto& [fixed, field] :
       {std::pair{space.tp, "tp"}, {space.cp, "cp"}, {space.pp, "pp"}, {space.dp, "dp"}}) {
    if (fixed && (*fixed < 1 || space.num_gpus % *fixed != 0)) {
      throw InputError(fmt::format("{}: does not divide the GPU count ({} % {})", field,
                                   space.num_gpus, *fixed));
    }
  }
  // A fixed micro-batch or virtual stage count below 1 sizes nothing (the CLI and a runs file
  // refuse them first; this guards every other caller of the search).
  for (const auto& [fixed, field] :
       {std::pair{space.micro_batch, "micro_batch"}, {space.vpp, "vpp"}}) {
    if (fixed && *fixed < 1) {
      throw InputError(fmt::format("{}: must be at least 1 ({})", field, *fixed));
    }
  }
  if (space.stage_layers && space.pp &&
      static_cast<int64_t>(space.stage_layers->size()) != *space.pp &&
      !space.stage_layers->empty()) {
    throw InputError(fmt::format("stage_layers: {} entries for pp {} ({})",
                                 space.stage_layers->size(), *space.pp,
                                 format_stage_layers(*space.stage_layers)));
  }
  if (!space.virtual_stage_layers.empty() &&
      (!space.stage_layers || !space.pp || !space.vpp ||
       static_cast<int64_t>(space.virtual_stage_layers.size()) != *space.pp * *space.vpp)) {
    throw InputError(fmt::format(
        "virtual_stage_layers: needs the split, pp and vpp fixed, {} entries = pp x vpp ({})",
        space.virtual_stage_layers.size(), format_stage_layers(space.virtual_stage_layers)));
  }
  if (space.max_zero && (*space.max_zero < 0 || *space.max_zero > 3)) {
    throw InputError(fmt::format("max_zero: must be 0 to 3 ({})", *space.max_zero));
  }
  // Unset cp is 1 unless searched, so it counts as fixed at 1 for the product check.
  const bool cp_fixed = space.cp || !space.search_cp;
  const int64_t fixed_product =
      space.tp.value_or(1) * space.cp.value_or(1) * space.pp.value_or(1) * space.dp.value_or(1);
  if (space.num_gpus % fixed_product != 0 ||
      (space.tp && cp_fixed && space.pp && space.dp && fixed_product != space.num_gpus)) {
    throw InputError(fmt::format("{}: fixed sizes multiply to {}, which does not fit {} GPUs",
                                 space.cp.value_or(1) > 1 ? "tp*cp*pp*dp" : "tp*pp*dp",
                                 fixed_product, space.num_gpus));
  }
}

// (schedule, vpp) pairs for pp stages: every schedule when pp > 1, interleaved with every vpp
// >= 2 that splits one of `splits` into chunks (split_allows_vpp), or the fixed vpp.
std::vector<std::pair<ScheduleKind, int64_t>> schedule_choices(
    const models::TransformerConfig& model, const SearchSpace& space, int64_t pp,
    const std::vector<std::vector<int64_t>>& splits) {
  std::vector<std::pair<ScheduleKind, int64_t>> schedules;
  const std::vector<ScheduleKind> kinds =
      pp == 1 ? std::vector<ScheduleKind>{ScheduleKind::kOneFOneB}
              : std::vector<ScheduleKind>{ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
                                          ScheduleKind::kInterleaved, ScheduleKind::kZbH1};
  for (ScheduleKind kind : choices(space.schedule, kinds)) {
    if (kind != ScheduleKind::kInterleaved) {
      schedules.emplace_back(kind, space.vpp.value_or(1));
      continue;
    }
    std::vector<int64_t> vpps;
    for (const std::vector<int64_t>& split : splits) {
      // Divisors of the common count (every stage divisible), or of the slots per stage L of
      // the embedding/loss-accounted form (the largest count, or one more when both of pp 2's
      // stages are short), as split_allows_vpp admits them.
      const int64_t most =
          split.empty() ? model.num_layers / pp : *std::max_element(split.begin(), split.end());
      std::vector<int64_t> candidates = divisors(std::max<int64_t>(most, 1));
      const std::vector<int64_t> one_more = divisors(most + 1);
      candidates.insert(candidates.end(), one_more.begin(), one_more.end());
      for (int64_t vpp : candidates) {
        if (split_allows_vpp(split, model.num_layers, pp, vpp) &&
            std::find(vpps.begin(), vpps.end(), vpp) == vpps.end()) {
          vpps.push_back(vpp);
        }
      }
    }
    std::sort(vpps.begin(), vpps.end());
    if (space.vpp) {
      vpps = {*space.vpp};
    }
    for (int64_t vpp : vpps) {
      if (vpp >= 2 || space.vpp) {
        schedules.emplace_back(kind, vpp);
      }
    }
  }
  return schedules;
}

// Expert tensor parallel sizes to try with tp: the fixed one; tp for a dense model or under
// placement tp-pp-dp; else tp (Megatron's default) and 1 (Megatron-Core
// megatron/core/transformer/moe/README.md, MoE Parallel Folding: "Use ETP=1 for MoE",
// "Recommended to set to 1 for fine-grained MoE models"; examples/megatron_fsdp/
// sbatch_mfsdp_deepseek_v3.sh). The divisors between would double a tp 8 search's MoE space
// (bench/search_bench) for choices those recipes do not use; --etp fixes any of them.
std::vector<int64_t> etp_choices(const models::TransformerConfig& model, const SearchSpace& space,
                                 int64_t tp) {
  if (space.etp) {
    return {*space.etp > 0 ? *space.etp : tp};
  }
  if (!model.is_moe() || space.placement != Placement::kTpDpPp || tp == 1) {
    return {tp};
  }
  return {tp, 1};
}

// Expert parallel sizes to try with `expert_ranks` = tp * cp * dp / etp ranks per expert tp
// rank (dp * cp at etp = tp): the fixed one, 1 for a dense model, else its divisors that
// divide the expert count (others fail check_layout's "ep_dp"/"ep_experts" anyway).
std::vector<int64_t> ep_choices(const models::TransformerConfig& model, const SearchSpace& space,
                                int64_t expert_ranks) {
  if (space.ep) {
    return {*space.ep};
  }
  if (!model.is_moe()) {
    return {1};
  }
  std::vector<int64_t> eps;
  for (int64_t ep : divisors(expert_ranks)) {
    if (model.num_experts % ep == 0) {
      eps.push_back(ep);
    }
  }
  return eps;
}

// The splits to try for pp stages: the fixed one; under deepspeed, those its PipelineModule
// builds (deepspeed_stage_splits); else candidate_stage_splits.
std::vector<std::vector<int64_t>> stage_split_choices(const models::TransformerConfig& model,
                                                      const SearchSpace& space,
                                                      const PlanOptions& options, int64_t tp,
                                                      int64_t pp) {
  if (space.stage_layers) {
    return {*space.stage_layers};
  }
  if (options.framework == Framework::kDeepSpeed && pp > 1) {
    std::vector<std::vector<int64_t>> splits = deepspeed_stage_splits(model, tp, pp, options);
    if (splits.empty()) {
      splits.push_back({});  // no stage split exists: check_layout names why ("pp_layers")
    }
    return splits;
  }
  return candidate_stage_splits(model.num_layers, pp);
}

// Hybrid shard-group sizes to try beside full sharding (SearchSpace::dp_shard unset): under
// fsdp with placement tp-dp-pp, each proper divisor of dp whose shard group dp_shard * cp has at
// least 2 ranks (torchtitan's data_parallel_shard_degree), for its ZeRO-3 variants only; none
// elsewhere, so other frameworks' searches enumerate what they did.
std::vector<int64_t> hybrid_shard_choices(const PlanOptions& options, const Layout& base) {
  std::vector<int64_t> shards;
  if (options.framework != Framework::kFsdp || base.placement != Placement::kTpDpPp) {
    return shards;
  }
  for (int64_t dp_shard : divisors(base.dp)) {
    if (dp_shard < base.dp && dp_shard * base.cp >= 2) {
      shards.push_back(dp_shard);
    }
  }
  return shards;
}

// Appends every (recompute, sp, zero, dp_shard) variant of `base` the space allows.
// A memory-shifted split (memory_shifted_splits) is tried without recompute only: it exists to
// fit what would otherwise need recompute, and with recompute the base split's balanced stages
// are faster.
void add_variants(const SearchSpace& space, const PlanOptions& options, const Layout& base,
                  bool memory_shifted, std::vector<Layout>& layouts) {
  // With flash attention, selective recompute stores and recomputes exactly what no recompute
  // does (the fused kernel keeps no scores), so searching it would only duplicate every plan;
  // a fixed --recompute selective is still costed.
  // Under fsdp the choices are torchtitan's: none, selective-op (op-level) and full.
  const std::vector<Recompute> recomputes =
      options.framework == Framework::kFsdp
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kSelectiveOp, Recompute::kFull}
      : options.flash_attention || !space.search_selective_recompute
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kFull}
          : std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const std::vector<bool> sps = base.tp > 1 ? std::vector<bool>{false, true} : std::vector{false};
  std::vector<int> zeros =
      grad_group_size(base) > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector{0};
  if (space.max_zero) {
    std::erase_if(zeros, [&](int zero) { return zero > *space.max_zero; });
  }
  const std::vector<int64_t> hybrid_shards = hybrid_shard_choices(options, base);
  for (Recompute recompute :
       choices(space.recompute, memory_shifted ? std::vector{Recompute::kNone} : recomputes)) {
    for (bool sp : choices(space.sequence_parallel, sps)) {
      for (int zero : choices(space.zero, zeros)) {
        Layout layout = base;
        layout.recompute = recompute;
        if (recompute == Recompute::kSelective) {
          layout.recompute_modules = space.recompute_modules;
        }
        layout.sequence_parallel = sp;
        layout.zero = zero;
        if (space.dp_shard) {
          set_dp_shard(layout, *space.dp_shard);
        }
        layouts.push_back(layout);
        if (!space.dp_shard && zero == 3) {
          for (int64_t dp_shard : hybrid_shards) {
            set_dp_shard(layout, dp_shard);
            layouts.push_back(layout);
          }
        }
      }
    }
  }
}

// A split the search tries: its stage counts, the split whose vpps it takes, and whether it is
// a memory-shifted variant (memory_shifted_splits) of that one.
struct SplitChoice {
  std::vector<int64_t> split;
  std::vector<int64_t> base_split;
  bool memory_shifted = false;
};

// Appends the layouts of one (tp, pp, cp): dp takes the rest of the GPUs.
void enumerate_replicas(const models::TransformerConfig& model,
                        const models::ClusterConfig& cluster, const SearchSpace& space,
                        const PlanOptions& options, int64_t tp, int64_t pp, int64_t cp,
                        std::vector<Layout>& layouts) {
  if (space.num_gpus % (tp * pp * cp) != 0) {
    return;
  }
  const int64_t dp = space.num_gpus / (tp * pp * cp);
  if (space.dp && *space.dp != dp) {
    return;
  }
  const int64_t batch_per_replica = space.global_batch % dp == 0 ? space.global_batch / dp : 1;
  const auto splits = stage_split_choices(model, space, options, tp, pp);
  const auto schedules = schedule_choices(model, space, pp, splits);
  // Interleaved layouts also try the balanced (first) split's memory-shifted variants (not a
  // fixed split; the other splits already trade stage balance for memory), with the vpps the
  // balanced split admits.
  std::vector<SplitChoice> plain, interleaved;
  for (const std::vector<int64_t>& split : splits) {
    plain.push_back({split, split, false});
    interleaved.push_back({split, split, false});
  }
  if (!space.stage_layers) {
    for (std::vector<int64_t>& shifted : memory_shifted_splits(model.num_layers, pp, splits[0])) {
      interleaved.push_back({std::move(shifted), splits[0], true});
    }
  }
  for (int64_t micro_batch : choices(space.micro_batch, divisors(batch_per_replica))) {
    for (const auto& [schedule, vpp] : schedules) {
      for (const auto& [split, base_split, memory_shifted] :
           schedule == ScheduleKind::kInterleaved ? interleaved : plain) {
        // Megatron-Core's rules for splitting stages into vpp chunks, a fixed --vpp included
        // (with it a searched split vpp does not divide was costed in uneven chunks, so the
        // fixed search beat the free one, which never pairs them); only a split the user gave
        // with its vpp is taken as given.
        if (vpp > 1 && !(space.vpp && space.stage_layers) &&
            !split_allows_vpp(base_split, model.num_layers, pp, vpp)) {
          continue;
        }
        Layout base;
        base.tp = tp;
        base.cp = cp;
        base.pp = pp;
        base.dp = dp;
        base.vpp = vpp;
        base.micro_batch = micro_batch;
        base.global_batch = space.global_batch;
        base.schedule = schedule;
        if (schedule == ScheduleKind::kInterleaved) {
          base.microbatch_group = space.microbatch_group.value_or(
              smallest_microbatch_group(pp, space.global_batch / (dp * micro_batch)));
        }
        base.placement = space.placement;
        base.stage_layers = split;
        if (space.vpp && vpp == *space.vpp) {
          base.virtual_stage_layers = space.virtual_stage_layers;
        }
        base.recompute_layers = space.recompute_layers;
        base.recompute_group_layers = space.recompute_group_layers;
        // Expert tensor parallel sizes other than tp only where the dense rules pass. They read
        // no expert field, and base has sequence parallelism off, ZeRO 0 and no recompute, so
        // when base fails them every variant fails them too, whatever etp.
        const bool dense_ok =
            !model.is_moe() || space.etp ||
            check_dense_layout(model, cluster, space.num_gpus, base, options.allow_tp_across_nodes)
                .ok();
        for (int64_t etp : dense_ok ? etp_choices(model, space, tp) : std::vector<int64_t>{tp}) {
          set_expert_tensor_parallel(base, etp);
          // A fixed etp that does not divide the ranks still yields its layouts, for
          // check_layout to name ("etp_tp", "ep_dp").
          const int64_t stage_ranks = tp * cp * dp;
          const int64_t expert_ranks = stage_ranks % etp == 0 ? stage_ranks / etp : 1;
          for (int64_t ep : ep_choices(model, space, expert_ranks)) {
            base.ep = ep;
            add_variants(space, options, base, memory_shifted, layouts);
          }
        }
      }
    }
  }
}

}  // namespace

int64_t smallest_microbatch_group(int64_t pp, int64_t num_micro_batches) {
  if (num_micro_batches % pp == 0) {
    return 0;
  }
  for (int64_t n = pp + 1; n <= num_micro_batches; ++n) {
    const int64_t remainder = num_micro_batches % n;
    if (remainder == 0 || remainder >= pp) {
      return n;
    }
  }
  return 0;
}

namespace {

// Every layout of the space, in the search's order (tp, pp, micro-batch, schedule, ...).
std::vector<Layout> enumerate_layouts(const models::TransformerConfig& model,
                                      const models::ClusterConfig& cluster,
                                      const SearchSpace& space, const PlanOptions& options) {
  std::vector<Layout> layouts;
  const std::vector<int64_t> gpu_divisors = divisors(space.num_gpus);
  // Searched cp sizes: those check_cp_layout can accept (seq_length divisible by 2 cp; cp > 1
  // only under placement tp-dp-pp and without a window shorter than the sequence), so the
  // space grows by the useful ones only.
  std::vector<int64_t> cps{1};
  if (space.search_cp && space.placement == Placement::kTpDpPp && !model.is_windowed()) {
    for (int64_t cp : gpu_divisors) {
      if (cp > 1 && model.seq_length % (2 * cp) == 0) {
        cps.push_back(cp);
      }
    }
  }
  for (int64_t tp : choices(space.tp, gpu_divisors)) {
    // A fixed uneven split fixes pp to its length.
    const bool split_fixed = space.stage_layers && !space.stage_layers->empty();
    const std::optional<int64_t> fixed_pp =
        split_fixed ? std::optional<int64_t>(space.stage_layers->size()) : space.pp;
    for (int64_t pp : choices(fixed_pp, gpu_divisors)) {
      for (int64_t cp : choices(space.cp, cps)) {
        enumerate_replicas(model, cluster, space, options, tp, pp, cp, layouts);
      }
    }
  }
  return layouts;
}

}  // namespace

std::vector<std::vector<int64_t>> candidate_stage_splits(int64_t num_layers, int64_t pp) {
  std::vector<std::vector<int64_t>> splits;
  const bool divisible = num_layers % pp == 0;
  if (divisible) {
    splits.push_back({});
  }
  if (pp < 2 || (divisible && pp < 3)) {
    return splits;
  }
  // Megatron-Core's first/last family (transformer_config.py): middle stages of k layers,
  // first a and last b with a + b = r = l - (pp - 2) k and 1 <= a, b <= k.
  const int64_t middle = divisible ? num_layers / pp + 1 : (num_layers + pp - 1) / pp;
  const int64_t rest = num_layers - (pp - 2) * middle;
  const int64_t low = std::max<int64_t>(1, rest - middle);
  const int64_t high = std::min<int64_t>(middle, rest - 1);
  // Balanced ends (Llama 3, GLM-130B) and the LM-head stage shortest (first end full).
  for (int64_t first : {rest - rest / 2, high}) {
    if (low > high || first < low || first > high) {
      continue;
    }
    std::vector<int64_t> split(static_cast<size_t>(pp), middle);
    split.front() = first;
    split.back() = rest - first;
    split = canonical_stage_layers(split);
    if (std::find(splits.begin(), splits.end(), split) == splits.end()) {
      splits.push_back(split);
    }
  }
  if (splits.empty()) {
    splits.push_back({});  // no split exists: check_layout names why ("pp_layers")
  }
  return splits;
}

std::vector<std::vector<int64_t>> memory_shifted_splits(int64_t num_layers, int64_t pp,
                                                        const std::vector<int64_t>& split) {
  // One variant: the first quarter of the stages, where the warm-up's excess over the
  // pipeline's average, 2 ((pp - 1) / 2 - s) chunk micro-batches, is largest.
  if (pp < 4 || (split.empty() && num_layers % pp != 0)) {
    return {};
  }
  std::vector<int64_t> base = split;
  if (base.empty()) {
    base.assign(static_cast<size_t>(pp), num_layers / pp);
  }
  const int64_t k = pp / 4;
  const int64_t fullest = *std::max_element(base.begin(), base.end());
  std::vector<bool> lost(static_cast<size_t>(pp), false);
  int64_t removed = 0;
  for (size_t s = 0; s < base.size() && removed < k; ++s) {
    if (base[s] == fullest && base[s] > 1) {
      --base[s];
      lost[s] = true;
      ++removed;
    }
  }
  int64_t added = 0;
  for (size_t s = base.size(); s-- > 0 && added < removed;) {
    if (!lost[s]) {
      ++base[s];
      ++added;
    }
  }
  if (removed < k || added < k) {
    return {};
  }
  return {canonical_stage_layers(base)};
}

// The most transformer layers any model chunk of `layout` holds.
int64_t most_chunk_layers(const models::TransformerConfig& model, const Layout& layout) {
  int64_t most = 0;
  for (int64_t stage = 0; stage < layout.pp; ++stage) {
    for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
      most = std::max(most, chunk_layers(model, layout, stage, chunk).count());
    }
  }
  return most;
}

std::vector<uint32_t> recompute_module_lists(const models::TransformerConfig& model) {
  // The modules the model can take are those check_recompute_modules accepts for it (one rule:
  // moe_act and moe need MoE layers, shared_experts shared experts, mla_up_proj latent
  // attention, mlp dense non-parallel layers); layernorm besides only where a norm is a module
  // of its own (separate_norms_per_layer: MoE layers, latent attention).
  Layout probe;
  probe.recompute = Recompute::kSelective;
  const auto accepted = [&](uint32_t modules) {
    probe.recompute_modules = kRecomputeCoreAttn | modules;
    return check_recompute_modules(model, probe, PlanOptions{}).ok();
  };
  std::vector<uint32_t> moe_choices = {0};
  for (const uint32_t choice :
       {uint32_t{kRecomputeMoeAct}, uint32_t{kRecomputeSharedExperts},
        uint32_t{kRecomputeMoeAct | kRecomputeSharedExperts}, uint32_t{kRecomputeMoe}}) {
    if (accepted(choice)) {
      moe_choices.push_back(choice);
    }
  }
  std::vector<uint32_t> others;
  for (const uint32_t module :
       {uint32_t{kRecomputeMlp}, uint32_t{kRecomputeLayernorm}, uint32_t{kRecomputeMlaUpProj}}) {
    const bool changes = module != kRecomputeLayernorm || model.is_moe() || model.is_mla();
    if (changes && accepted(module)) {
      others.push_back(module);
    }
  }
  std::vector<uint32_t> lists;
  for (const uint32_t moe : moe_choices) {
    for (uint32_t subset = 0; subset < (1u << others.size()); ++subset) {
      uint32_t modules = kRecomputeCoreAttn | moe;
      for (size_t i = 0; i < others.size(); ++i) {
        if ((subset >> i & 1u) != 0) {
          modules |= others[i];
        }
      }
      if (modules != kRecomputeCoreAttn) {
        lists.push_back(modules);
      }
    }
  }
  std::stable_sort(lists.begin(), lists.end(),
                   [](uint32_t a, uint32_t b) { return std::popcount(a) < std::popcount(b); });
  return lists;
}

void check_recompute_modules_search_request(const models::TransformerConfig& model,
                                            const PlanOptions& options, const std::string& field) {
  const std::vector<uint32_t> lists = recompute_module_lists(model);
  if (lists.empty()) {
    throw InputError(fmt::format(
        "{}: auto: no module beyond core_attn changes {} (a parallel block)", field, model.name));
  }
  check_recompute_modules_request(model, options, lists.front(), field);
}

// Under --recompute-layers auto: the most layers of a chunk of `layout` (full recompute, every
// layer) when Megatron's block method can run on it, else 0 (check_recompute_layers).
int64_t block_method_max_layers(const models::TransformerConfig& model, const Layout& layout,
                                const PlanOptions& options) {
  if (layout.recompute != Recompute::kFull || layout.recompute_layers != 0) {
    return 0;
  }
  Layout block = layout;
  block.recompute_layers = 1;
  if (!check_recompute_layers(block, options).ok()) {
    return 0;
  }
  return most_chunk_layers(model, layout);
}

// Under --recompute-group-layers auto: the most layers of a chunk of `layout` (full recompute,
// every layer, one per group) when the uniform method can run on it with groups of two, else 0
// (check_recompute_group_layers).
int64_t uniform_method_max_layers(const models::TransformerConfig& model, const Layout& layout,
                                  const PlanOptions& options) {
  if (layout.recompute != Recompute::kFull || layout.recompute_layers != 0 ||
      layout.recompute_group_layers > 1) {
    return 0;
  }
  Layout groups = layout;
  groups.recompute_group_layers = 2;
  if (!check_recompute_group_layers(groups, options).ok()) {
    return 0;
  }
  return most_chunk_layers(model, layout);
}

SearchResult search_layouts(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const SearchSpace& space,
                            const PlanOptions& options, Objective objective, int64_t top_k,
                            const SearchProgress& progress) {
  check_space(space);
  if (space.memory_headroom_bytes < 0 || space.memory_headroom_bytes >= cluster.gpu.hbm_bytes) {
    throw InputError(fmt::format(
        "memory_headroom_bytes: must be at least 0 and less than the GPU's {} bytes ({})",
        cluster.gpu.hbm_bytes, space.memory_headroom_bytes));
  }
  const std::vector<Layout> layouts = enumerate_layouts(model, cluster, space, options);
  SearchResult result;
  auto& best = result.best;
  const int64_t total = static_cast<int64_t>(layouts.size());
  // The estimate of a runnable layout, infeasible too when it eats into the memory headroom.
  const auto estimate_within_headroom = [&](const Layout& layout) {
    PlanEstimate estimate = estimate_plan_internal(model, cluster, layout, options, false);
    if (estimate.feasible && space.memory_headroom_bytes > 0 &&
        estimate.peak_memory_bytes > cluster.gpu.hbm_bytes - space.memory_headroom_bytes) {
      estimate.feasible = false;
      estimate.rejection_code = "memory_headroom";
      estimate.rejection_reason = fmt::format(
          "peak memory {:.1f} GiB per GPU is within the headroom of {:.1f} GiB below the {:.1f} "
          "GiB of each {}",
          static_cast<double>(estimate.peak_memory_bytes) / kGiB,
          static_cast<double>(space.memory_headroom_bytes) / kGiB,
          static_cast<double>(cluster.gpu.hbm_bytes) / kGiB, cluster.gpu.name);
    }
    return estimate;
  };
  // Counts an estimate and keeps it among the best top_k, ordered by the objective (ties: the
  // first found stays ahead).
  const auto keep = [&](PlanEstimate estimate) {
    if (!estimate.feasible) {
      ++result.rejections[estimate.rejection_code];
      result.example_reason.emplace(estimate.rejection_code, estimate.rejection_reason);
      return;
    }
    ++result.num_feasible;
    if (static_cast<int64_t>(best.size()) == top_k && !better(estimate, best.back(), objective)) {
      return;
    }
    const auto position = std::upper_bound(
        best.begin(), best.end(), estimate,
        [&](const PlanEstimate& a, const PlanEstimate& b) { return better(a, b, objective); });
    best.insert(position, std::move(estimate));
    if (static_cast<int64_t>(best.size()) > top_k) {
      best.pop_back();
    }
  };
  // --recompute-modules auto: the lists to try, and whether selective layouts are enumerated
  // apart (add_variants leaves them out under flash attention, where they equal no recompute).
  const std::vector<uint32_t> module_lists =
      space.search_recompute_modules ? recompute_module_lists(model) : std::vector<uint32_t>{};
  const bool selective_not_enumerated =
      options.flash_attention && !space.recompute && space.search_selective_recompute;
  std::vector<uint32_t> longest_module_lists;  // no other list holds one of them
  for (const uint32_t list : module_lists) {
    if (std::none_of(module_lists.begin(), module_lists.end(),
                     [&](uint32_t other) { return other != list && (other & list) == list; })) {
      longest_module_lists.push_back(list);
    }
  }
  for (const Layout& layout : layouts) {
    if (progress && result.num_evaluated % kProgressInterval == 0) {
      progress(result.num_evaluated, total);
    }
    ++result.num_evaluated;
    const Validity runnable =
        check_framework(model, options, layout, !result.example_reason.contains("framework"));
    if (!runnable.ok()) {
      ++result.rejections[runnable.code];
      result.example_reason.emplace(runnable.code, runnable.reason);
      continue;
    }
    PlanEstimate estimate = estimate_within_headroom(layout);
    const bool fits = estimate.feasible;
    const bool out_of_memory =
        estimate.rejection_code == "memory" || estimate.rejection_code == "memory_headroom";
    keep(std::move(estimate));
    if (fits && space.search_recompute_layers) {
      // Megatron's block method between none and full recompute: the fewest recomputed layers
      // per chunk that still fit, which is the fastest of them (memory falls and time grows
      // with each recomputed layer), found by bisection.
      const int64_t layers = block_method_max_layers(model, layout, options);
      int64_t low = 1, high = layers - 1;  // the answer, if any, is in [low, high]
      Layout block = layout;
      const auto fits_with = [&](int64_t recompute_layers) {
        block.recompute_layers = recompute_layers;
        ++result.num_evaluated;
        return estimate_within_headroom(block).feasible;
      };
      if (high >= low && fits_with(high)) {
        while (low < high) {
          const int64_t middle = low + (high - low) / 2;
          if (fits_with(middle)) {
            high = middle;
          } else {
            low = middle + 1;
          }
        }
        block.recompute_layers = high;
        ++result.num_evaluated;
        keep(estimate_within_headroom(block));
      }
    }
    if (out_of_memory && space.search_recompute_modules && !module_lists.empty() &&
        (layout.recompute == Recompute::kSelective ||
         (layout.recompute == Recompute::kNone && selective_not_enumerated))) {
      // Megatron-Core's --recompute-modules for a selective layout that does not fit: each list
      // the model can take, the best that fits by the objective (the fastest) ranked. A module adds
      // recompute time and saves memory, so when none of the longest lists (every module besides
      // each MoE choice) fits, no list does: those are tried first.
      Layout selective = layout;
      selective.recompute = Recompute::kSelective;
      const auto estimate_with = [&](uint32_t modules) {
        selective.recompute_modules = modules;
        ++result.num_evaluated;
        return estimate_within_headroom(selective);
      };
      std::optional<PlanEstimate> best_list;  // by the objective
      const auto consider = [&](PlanEstimate estimate) {
        if (estimate.feasible && (!best_list || better(estimate, *best_list, objective))) {
          best_list = std::move(estimate);
        }
      };
      for (const uint32_t longest : longest_module_lists) {
        consider(estimate_with(longest));
      }
      for (const uint32_t modules : best_list ? module_lists : std::vector<uint32_t>{}) {
        if (std::find(longest_module_lists.begin(), longest_module_lists.end(), modules) ==
            longest_module_lists.end()) {
          consider(estimate_with(modules));
        }
      }
      if (best_list) {
        keep(std::move(*best_list));
      }
    }
    if (out_of_memory && space.search_recompute_group_layers) {
      // Megatron's uniform method for a full-recompute layout that does not fit: its time is
      // full recompute's, so the group size wanted is the one with the least memory. Peak
      // memory is ceil(L / N) kept inputs per held micro-batch plus N rebuilt layers, about
      // convex in N (Chen et al. 2016, Sec. 4.1: least at N ~ sqrt(L x held inputs / layer)):
      // a ternary search over 2..L, then the neighbours of its end.
      const int64_t layers = uniform_method_max_layers(model, layout, options);
      Layout groups = layout;
      const auto memory_with = [&](int64_t group_layers) {
        groups.recompute_group_layers = group_layers;
        ++result.num_evaluated;
        return estimate_within_headroom(groups).peak_memory_bytes;
      };
      int64_t low = 2, high = layers;
      while (high - low > 2) {
        const int64_t left = low + (high - low) / 3, right = high - (high - low) / 3;
        if (memory_with(left) <= memory_with(right)) {
          high = right;
        } else {
          low = left;
        }
      }
      int64_t least = 0, least_bytes = 0;
      for (int64_t group_layers = low; group_layers <= high; ++group_layers) {
        const int64_t bytes = memory_with(group_layers);
        if (least == 0 || bytes < least_bytes) {
          least = group_layers;
          least_bytes = bytes;
        }
      }
      if (least > 0) {
        groups.recompute_group_layers = least;
        ++result.num_evaluated;
        keep(estimate_within_headroom(groups));
      }
    }
  }
  if (progress) {
    progress(total, total);
  }
  // The fixed fields leave only layouts the framework cannot run: an input error, not a search.
  if (total > 0 && result.rejections["framework"] == total) {
    throw FrameworkRefusal(result.example_reason.at("framework"));
  }
  if (result.rejections["framework"] == 0) {
    result.rejections.erase("framework");
  }
  for (PlanEstimate& estimate : result.best) {
    estimate.collectives = collective_inventory(model, cluster, estimate.layout, options);
  }
  return result;
}

}  // namespace meshplan::planner
