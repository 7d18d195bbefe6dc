// Exhaustive layout search. Nothing is pruned: every layout in the space is costed.

#include "meshplan/search.h"

#include <fmt/format.h>

#include <algorithm>

#include "estimate_internal.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

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
       {std::pair{space.tp, "tp"}, {space.pp, "pp"}, {space.dp, "dp"}}) {
    if (fixed && (*fixed < 1 || space.num_gpus % *fixed != 0)) {
      throw InputError(fmt::format("{}: does not divide the GPU count ({} % {})", field,
                                   space.num_gpus, *fixed));
    }
  }
  const int64_t fixed_product = space.tp.value_or(1) * space.pp.value_or(1) * space.dp.value_or(1);
  if (space.num_gpus % fixed_product != 0 ||
      (space.tp && space.pp && space.dp && fixed_product != space.num_gpus)) {
    throw InputError(fmt::format("tp*pp*dp: fixed sizes multiply to {}, which does not fit {} GPUs",
                                 fixed_product, space.num_gpus));
  }
}

// (schedule, vpp) pairs for pp stages: every schedule when pp > 1, interleaved with every vpp
// >= 2 that divides the layers per stage (or the fixed vpp).
std::vector<std::pair<ScheduleKind, int64_t>> schedule_choices(
    const models::TransformerConfig& model, const SearchSpace& space, int64_t pp) {
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
    const int64_t layers_per_stage = model.num_layers % pp == 0 ? model.num_layers / pp : 0;
    const std::vector<int64_t> vpps = space.vpp ? std::vector<int64_t>{*space.vpp}
                                                : divisors(std::max<int64_t>(layers_per_stage, 1));
    for (int64_t vpp : vpps) {
      if (vpp >= 2 || space.vpp) {
        schedules.emplace_back(kind, vpp);
      }
    }
  }
  return schedules;
}

// Expert parallel sizes to try with dp: the fixed one, 1 for a dense model, else the divisors
// of dp that divide the expert count (others fail check_layout's "ep_dp"/"ep_experts" anyway).
std::vector<int64_t> ep_choices(const models::TransformerConfig& model, const SearchSpace& space,
                                int64_t dp) {
  if (space.ep) {
    return {*space.ep};
  }
  if (!model.is_moe()) {
    return {1};
  }
  std::vector<int64_t> eps;
  for (int64_t ep : divisors(dp)) {
    if (model.num_experts % ep == 0) {
      eps.push_back(ep);
    }
  }
  return eps;
}

// Appends every (recompute, sp, zero) variant of `base` the space allows.
void add_variants(const SearchSpace& space, const PlanOptions& options, const Layout& base,
                  std::vector<Layout>& layouts) {
  // With flash attention, selective recompute stores and recomputes exactly what no recompute
  // does (the fused kernel keeps no scores), so searching it would only duplicate every plan;
  // a fixed --recompute selective is still costed.
  const std::vector<Recompute> recomputes =
      options.flash_attention
          ? std::vector<Recompute>{Recompute::kNone, Recompute::kFull}
          : std::vector<Recompute>{Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  const std::vector<bool> sps = base.tp > 1 ? std::vector<bool>{false, true} : std::vector{false};
  const std::vector<int> zeros = base.dp > 1 ? std::vector<int>{0, 1, 2, 3} : std::vector{0};
  for (Recompute recompute : choices(space.recompute, recomputes)) {
    for (bool sp : choices(space.sequence_parallel, sps)) {
      for (int zero : choices(space.zero, zeros)) {
        Layout layout = base;
        layout.recompute = recompute;
        layout.sequence_parallel = sp;
        layout.zero = zero;
        layouts.push_back(layout);
      }
    }
  }
}

// Every layout of the space, in the search's order (tp, pp, micro-batch, schedule, ...).
std::vector<Layout> enumerate_layouts(const models::TransformerConfig& model,
                                      const SearchSpace& space, const PlanOptions& options) {
  std::vector<Layout> layouts;
  const std::vector<int64_t> gpu_divisors = divisors(space.num_gpus);
  for (int64_t tp : choices(space.tp, gpu_divisors)) {
    for (int64_t pp : choices(space.pp, gpu_divisors)) {
      if (space.num_gpus % (tp * pp) != 0) {
        continue;
      }
      const int64_t dp = space.num_gpus / (tp * pp);
      if (space.dp && *space.dp != dp) {
        continue;
      }
      const int64_t batch_per_replica = space.global_batch % dp == 0 ? space.global_batch / dp : 1;
      const auto schedules = schedule_choices(model, space, pp);
      for (int64_t micro_batch : choices(space.micro_batch, divisors(batch_per_replica))) {
        for (const auto& [schedule, vpp] : schedules) {
          Layout base;
          base.tp = tp;
          base.pp = pp;
          base.dp = dp;
          base.vpp = vpp;
          base.micro_batch = micro_batch;
          base.global_batch = space.global_batch;
          base.schedule = schedule;
          base.placement = space.placement;
          for (int64_t ep : ep_choices(model, space, dp)) {
            base.ep = ep;
            add_variants(space, options, base, layouts);
          }
        }
      }
    }
  }
  return layouts;
}

}  // namespace

SearchResult search_layouts(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const SearchSpace& space,
                            const PlanOptions& options, Objective objective, int64_t top_k,
                            const SearchProgress& progress) {
  check_space(space);
  const std::vector<Layout> layouts = enumerate_layouts(model, space, options);
  SearchResult result;
  auto& best = result.best;
  const int64_t total = static_cast<int64_t>(layouts.size());
  for (const Layout& layout : layouts) {
    if (progress && result.num_evaluated % kProgressInterval == 0) {
      progress(result.num_evaluated, total);
    }
    ++result.num_evaluated;
    const Validity runnable = check_framework(options.framework, layout);
    if (!runnable.ok()) {
      ++result.rejections[runnable.code];
      result.example_reason.emplace(runnable.code, runnable.reason);
      continue;
    }
    PlanEstimate estimate = estimate_plan_internal(model, cluster, layout, options, false);
    if (!estimate.feasible) {
      ++result.rejections[estimate.rejection_code];
      result.example_reason.emplace(estimate.rejection_code, estimate.rejection_reason);
      continue;
    }
    // Keep the best top_k, ordered by the objective (ties: the first found stays ahead).
    ++result.num_feasible;
    if (static_cast<int64_t>(best.size()) == top_k && !better(estimate, best.back(), objective)) {
      continue;
    }
    const auto position = std::upper_bound(
        best.begin(), best.end(), estimate,
        [&](const PlanEstimate& a, const PlanEstimate& b) { return better(a, b, objective); });
    best.insert(position, std::move(estimate));
    if (static_cast<int64_t>(best.size()) > top_k) {
      best.pop_back();
    }
  }
  if (progress) {
    progress(total, total);
  }
  // The fixed fields leave only layouts the framework cannot run: an input error, not a search.
  if (total > 0 && result.rejections["framework"] == total) {
    throw InputError(fmt::format("--framework: {}", result.example_reason.at("framework")));
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
