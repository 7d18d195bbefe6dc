#include "meshplan/layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <utility>

#include "meshplan/errors.h"

namespace meshplan::planner {

RankCoords rank_coords(const Layout& layout, int64_t rank) {
  RankCoords coords;
  coords.tp_rank = rank % layout.tp;
  coords.cp_rank = (rank / layout.tp) % layout.cp;
  const int64_t rest = rank / (layout.tp * layout.cp);
  if (layout.placement == Placement::kTpDpPp) {
    coords.dp_rank = rest % layout.dp;
    coords.pp_rank = rest / layout.dp;
  } else {
    coords.pp_rank = rest % layout.pp;
    coords.dp_rank = rest / layout.pp;
  }
  return coords;
}

int64_t global_rank(const Layout& layout, const RankCoords& coords) {
  const int64_t inner = coords.tp_rank + layout.tp * coords.cp_rank;
  const int64_t tp_cp = layout.tp * layout.cp;
  if (layout.placement == Placement::kTpDpPp) {
    return inner + tp_cp * (coords.dp_rank + layout.dp * coords.pp_rank);
  }
  return inner + tp_cp * (coords.pp_rank + layout.pp * coords.dp_rank);
}

std::vector<int64_t> expert_parallel_ranks(const Layout& layout, int64_t rank) {
  const RankCoords coords = rank_coords(layout, rank);
  const int64_t etp = expert_tensor_parallel(layout);
  // Position in the stage's tp x cp x dp ranks, tp fastest: the expert grid's numbering.
  const int64_t flat = coords.tp_rank + layout.tp * (coords.cp_rank + layout.cp * coords.dp_rank);
  const int64_t first = flat - (flat / etp) % layout.ep * etp;
  std::vector<int64_t> ranks;
  for (int64_t ep_rank = 0; ep_rank < layout.ep; ++ep_rank) {
    const int64_t member = first + ep_rank * etp;
    RankCoords at = coords;
    at.tp_rank = member % layout.tp;
    at.cp_rank = member / layout.tp % layout.cp;
    at.dp_rank = member / (layout.tp * layout.cp);
    ranks.push_back(global_rank(layout, at));
  }
  return ranks;
}

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone:
      return "none";
    case Recompute::kSelective:
      return "selective";
    case Recompute::kFull:
      return "full";
    case Recompute::kSelectiveOp:
      return "selective-op";
  }
  return "?";
}

std::string to_string(ScheduleKind schedule) {
  switch (schedule) {
    case ScheduleKind::kGpipe:
      return "gpipe";
    case ScheduleKind::kOneFOneB:
      return "1f1b";
    case ScheduleKind::kInterleaved:
      return "interleaved";
    case ScheduleKind::kZbH1:
      return "zb-h1";
  }
  return "?";
}

std::string to_string(Placement placement) {
  return placement == Placement::kTpDpPp ? "tp-dp-pp" : "tp-pp-dp";
}

namespace {

constexpr std::array<std::pair<RecomputeModule, std::string_view>, 7> kRecomputeModuleNames = {{
    {kRecomputeCoreAttn, "core_attn"},
    {kRecomputeMoeAct, "moe_act"},
    {kRecomputeLayernorm, "layernorm"},
    {kRecomputeMlaUpProj, "mla_up_proj"},
    {kRecomputeMlp, "mlp"},
    {kRecomputeSharedExperts, "shared_experts"},
    {kRecomputeMoe, "moe"},
}};

}  // namespace

std::vector<std::string> recompute_module_names(uint32_t modules) {
  std::vector<std::string> names;
  for (const auto& [flag, name] : kRecomputeModuleNames) {
    if ((modules & flag) != 0) {
      names.emplace_back(name);
    }
  }
  return names;
}

std::string format_recompute_modules(uint32_t modules) {
  std::string text;
  for (const std::string& name : recompute_module_names(modules)) {
    if (!text.empty()) {
      text += ',';
    }
    text += name;
  }
  return text;
}

uint32_t parse_recompute_modules(const std::vector<std::string>& names, const std::string& field) {
  if (names.empty()) {
    throw InputError(
        fmt::format("{}: no module (selective recompute of nothing is recompute none)", field));
  }
  uint32_t modules = 0;
  for (const std::string& name : names) {
    const auto known = std::find_if(kRecomputeModuleNames.begin(), kRecomputeModuleNames.end(),
                                    [&](const auto& entry) { return entry.second == name; });
    if (known != kRecomputeModuleNames.end()) {
      modules |= known->first;
      continue;
    }
    // Megatron-Core's other choices (transformer_config.py recompute_modules, d98e8a64).
    for (const std::string_view other : {"gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"}) {
      if (name == other) {
        throw InputError(fmt::format(
            "{}: {} is a Megatron-Core module meshplan does not cost yet (costed: core_attn, "
            "moe_act, layernorm, mla_up_proj, mlp, shared_experts, moe)",
            field, name));
      }
    }
    throw InputError(
        fmt::format("{}: unknown module, expected core_attn, moe_act, layernorm, mla_up_proj, mlp, "
                    "shared_experts or moe ({})",
                    field, name));
  }
  return modules;
}

Recompute parse_recompute(const std::string& text, const std::string& field) {
  for (Recompute value :
       {Recompute::kNone, Recompute::kSelective, Recompute::kFull, Recompute::kSelectiveOp}) {
    if (text == to_string(value)) {
      return value;
    }
  }
  throw InputError(fmt::format(
      "{}: unknown recompute, expected none, selective, selective-op or full ({})", field, text));
}

ScheduleKind parse_schedule(const std::string& text, const std::string& field) {
  for (ScheduleKind value : {ScheduleKind::kGpipe, ScheduleKind::kOneFOneB,
                             ScheduleKind::kInterleaved, ScheduleKind::kZbH1}) {
    if (text == to_string(value)) {
      return value;
    }
  }
  throw InputError(fmt::format(
      "{}: unknown schedule, expected gpipe, 1f1b, interleaved or zb-h1 ({})", field, text));
}

Placement parse_placement(const std::string& text, const std::string& field) {
  for (Placement value : {Placement::kTpDpPp, Placement::kTpPpDp}) {
    if (text == to_string(value)) {
      return value;
    }
  }
  throw InputError(
      fmt::format("{}: unknown placement, expected tp-dp-pp or tp-pp-dp ({})", field, text));
}

std::string describe(const Layout& layout) {
  std::string text = fmt::format(
      "tp={} pp={} dp={}{}{} vpp={} mb={} recompute={} sp={} zero={} schedule={}", layout.tp,
      layout.pp, layout.dp, layout.cp > 1 ? fmt::format(" cp={}", layout.cp) : "",
      hybrid_sharded(layout) ? fmt::format(" dp_shard={}", dp_shard_size(layout)) : "", layout.vpp,
      layout.micro_batch, to_string(layout.recompute), layout.sequence_parallel ? "on" : "off",
      layout.zero, to_string(layout.schedule));
  if (layout.recompute_layers > 0) {
    text += fmt::format(" recompute_layers={}", layout.recompute_layers);
  }
  if (layout.recompute_group_layers > 1) {
    text += fmt::format(" recompute_group_layers={}", layout.recompute_group_layers);
  }
  if (layout.recompute_modules != kRecomputeCoreAttn) {
    text +=
        fmt::format(" recompute_modules={}", format_recompute_modules(layout.recompute_modules));
  }
  if (layout.microbatch_group > 0) {
    text += fmt::format(" mb_group={}", layout.microbatch_group);
  }
  if (!layout.stage_layers.empty()) {
    text += " stage_layers=" + format_stage_layers(layout.stage_layers);
  }
  if (!layout.virtual_stage_layers.empty()) {
    text += " virtual_stage_layers=" + format_stage_layers(layout.virtual_stage_layers);
  }
  if (layout.ep > 1) {
    text += fmt::format(" ep={}", layout.ep);
  }
  if (layout.etp > 0 && layout.etp != layout.tp) {
    text += fmt::format(" etp={}", layout.etp);
  }
  return text;
}

std::string format_stage_layers(const std::vector<int64_t>& stage_layers) {
  // Long lists (a typo'd plan file) are cut: the message stays one readable line.
  constexpr size_t kShown = 64;
  if (stage_layers.size() <= kShown) {
    return fmt::format("{}", fmt::join(stage_layers, ","));
  }
  return fmt::format("{},... ({} entries)",
                     fmt::join(stage_layers.begin(), stage_layers.begin() + kShown, ","),
                     stage_layers.size());
}

std::string check_schedule_shape(ScheduleKind schedule, int64_t pp, int64_t vpp,
                                 int64_t num_micro_batches, std::string* reason,
                                 int64_t microbatch_group) {
  if (schedule != ScheduleKind::kInterleaved) {
    if (microbatch_group != 0) {
      *reason = fmt::format("a micro-batch group size needs the interleaved schedule ({}, {})",
                            microbatch_group, to_string(schedule));
      return "microbatch_group";
    }
    if (vpp == 1) {
      return "";
    }
    *reason = fmt::format("vpp > 1 needs the interleaved schedule (vpp {}, {})", vpp,
                          to_string(schedule));
    return "vpp_schedule";
  }
  if (vpp < 2 || pp < 2) {
    *reason =
        fmt::format("interleaved schedule needs pp >= 2 and vpp >= 2 (pp {}, vpp {})", pp, vpp);
    return "vpp_schedule";
  }
  if (microbatch_group == 0) {  // Megatron's default N = pp: m divisible by pp
    if (num_micro_batches % pp != 0) {
      *reason = fmt::format("interleaved schedule needs micro-batches divisible by pp ({} % {})",
                            num_micro_batches, pp);
      return "interleaved_micro_batches";
    }
    return "";
  }
  const int64_t n = microbatch_group;
  if (n < pp || n > num_micro_batches) {
    *reason = fmt::format("micro-batch group size must lie in [pp, micro-batches] = [{}, {}] ({})",
                          pp, num_micro_batches, n);
    return "microbatch_group";
  }
  const int64_t remainder = num_micro_batches % n;
  if (remainder != 0 && remainder < pp) {
    *reason = fmt::format(
        "micro-batches % micro-batch group size must be 0 or at least pp {} ({} % {} = {})", pp,
        num_micro_batches, n, remainder);
    return "microbatch_group";
  }
  return "";
}

}  // namespace meshplan::planner
