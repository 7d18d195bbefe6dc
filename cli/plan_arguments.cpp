// meshplan plan's flags into the search space and the plan options (plan_arguments.h).

#include "plan_arguments.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "decimal_number.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/pipeline_layout.h"
#include "meshplan/plan_file.h"
#include "meshplan/units.h"

namespace meshplan::cli {

namespace {

bool parse_on_off(const std::string& text, const std::string& flag) {
  if (text == "on") {
    return true;
  }
  if (text == "off") {
    return false;
  }
  throw InputError(fmt::format("{}: expected on or off ({})", flag, text));
}

// A flag's positive size where "auto" is the other choice (--cp, --recompute-layers); throws
// InputError naming the flag.
int64_t parse_size_or_auto(const std::string& text, const std::string& flag) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size()) {
    throw InputError(fmt::format("{}: expected a positive integer or auto ({})", flag, text));
  }
  if (value < 1) {
    throw InputError(fmt::format("{}: must be positive ({})", flag, value));
  }
  return value;
}

// A layer count of --recompute-layers or --recompute-group-layers: parse_size_or_auto's, at most
// planner::kMaxRecomputeLayers (what a plan file reads back).
int64_t parse_layer_count(const std::string& text, const std::string& flag) {
  const int64_t value = parse_size_or_auto(text, flag);
  if (value > planner::kMaxRecomputeLayers) {
    throw InputError(fmt::format("{}: must be between 1 and {} ({})", flag,
                                 planner::kMaxRecomputeLayers, value));
  }
  return value;
}

void require_positive(const std::optional<int64_t>& value, const std::string& flag) {
  if (value && *value < 1) {
    throw InputError(fmt::format("{}: must be positive ({})", flag, *value));
  }
}

// --memory-headroom: below 1, a fraction of each GPU's memory; from 1 on, GiB. Returns bytes;
// throws InputError unless it leaves the GPU some memory.
int64_t parse_memory_headroom(const std::string& text, const models::ClusterConfig& cluster) {
  double value = 0;
  size_t used = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(value) || value < 0) {
    throw InputError(fmt::format(
        "--memory-headroom: expected GiB (>= 1) or a fraction of the GPU's memory (< 1) ({})",
        text));
  }
  const double hbm_bytes = static_cast<double>(cluster.gpu.hbm_bytes);
  const double bytes = value < 1 ? value * hbm_bytes : value * static_cast<double>(kBytesPerGiB);
  if (bytes >= hbm_bytes) {
    throw InputError(
        fmt::format("--memory-headroom: leaves no memory on the {:.1f} GiB of each {} ({})",
                    hbm_bytes / static_cast<double>(kBytesPerGiB), cluster.gpu.name, text));
  }
  return static_cast<int64_t>(bytes);
}

// "7,8,8,7" -> {7, 8, 8, 7}; throws InputError naming --stage-layers on anything else.
std::vector<int64_t> parse_stage_layer_list(const std::string& text) {
  std::vector<int64_t> layers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const DecimalInt item =
        parse_decimal_int64(std::string_view(text).substr(start, comma - start));
    if (item.error != DecimalError::kNone) {
      throw InputError(fmt::format(
          "--stage-layers: expected comma-separated layer counts, e.g. 7,8,8,7 ({})", text));
    }
    layers.push_back(item.value);
    start = comma + 1;
  }
  return layers;
}

// A fixed --cp must pass the context-parallel validity rules on its own (with the fixed tp, or
// tp 1 when searched), so its error names --cp rather than arriving as "no feasible layout";
// --cp-comm a2a without cp > 1 would be ignored, so it is refused.
void check_cp_arguments(const PlanArguments& args, const models::TransformerConfig& model,
                        const planner::SearchSpace& space, const planner::PlanOptions& options) {
  if (options.cp_comm != planner::CpComm::kP2p && !space.search_cp && space.cp.value_or(1) == 1) {
    throw InputError(
        fmt::format("--cp-comm: needs --cp greater than 1 or auto ({})", args.cp_comm));
  }
  if (!space.cp || *space.cp == 1) {
    return;
  }
  planner::Layout layout;
  layout.tp = space.tp.value_or(1);
  layout.cp = *space.cp;
  layout.placement = space.placement;
  planner::Validity validity = planner::check_cp_layout(model, layout);
  if (validity.ok()) {
    validity = planner::check_cp_options(model, layout, options);
  }
  if (!validity.ok()) {
    throw InputError(fmt::format("--cp: {}", validity.reason));
  }
}

// A fixed flag that distributed saved activations cannot run with is named here rather than
// left to the search's "no feasible layout" (planner::check_distribute_saved_activations).
void check_saved_activation_arguments(const planner::SearchSpace& space,
                                      const planner::PlanOptions& options) {
  if (!options.distribute_saved_activations) {
    return;
  }
  const std::string flag = "--distribute-saved-activations";
  if (space.recompute && *space.recompute != planner::Recompute::kFull) {
    throw InputError(
        fmt::format("{}: needs --recompute full ({})", flag, planner::to_string(*space.recompute)));
  }
  if (space.sequence_parallel.value_or(false)) {
    throw InputError(fmt::format(
        "{}: not with --sequence-parallel on (the saved input is already split over tp)", flag));
  }
  if (options.framework != planner::Framework::kDeepSpeed && space.tp == 1) {
    throw InputError(
        fmt::format("{}: needs --tp above 1 under --framework {} (Megatron-LM "
                    "arguments.py; DeepSpeed alone runs it at tp 1) (1)",
                    flag, planner::to_string(options.framework)));
  }
}

// --bucket-mb where every ZeRO stage the search may pick reduces without buckets of that size
// (planner::dp_bucket_size_inert_reason: megatron at ZeRO 2-3 or without overlap_grad_reduce,
// FSDP and the executor at ZeRO 3) is refused: the size would be written and ignored.
void check_bucket_arguments(const PlanArguments& args, const planner::SearchSpace& space,
                            const planner::PlanOptions& options) {
  if (args.given.count("--bucket-mb") == 0) {
    return;
  }
  std::string inert;
  for (int zero = 0; zero <= 3; ++zero) {
    if (space.zero && *space.zero != zero) {
      continue;
    }
    planner::Layout probe;  // dp 2: the dp-1 case is check_ineffective_arguments'
    probe.dp = 2;
    probe.zero = zero;
    const std::string reason = planner::dp_bucket_size_inert_reason(probe, options);
    if (reason.empty()) {
      return;
    }
    if (inert.empty()) {
      inert = reason;  // the lowest stage's: megatron without overlap names the overlap
    }
  }
  throw InputError(fmt::format("--bucket-mb: no effect {}({})",
                               space.zero ? fmt::format("with --zero {} ", *space.zero) : "",
                               inert));
}

// --deepspeed-grad-all-reduce off describes ZeRO 1-2's gradient reduce: with --zero fixed to 0 or
// 3 it would change nothing, so it is refused rather than ignored.
// --overlap-param-gather on with a fixed ZeRO stage whose parameter all-gather the framework
// never overlaps (planner::parameter_gather_overlapped: DeepSpeed's ZeRO 1-2 gather inside the
// optimizer step) would be ignored, so it is refused.
void check_param_gather_arguments(const PlanArguments& args, const planner::SearchSpace& space,
                                  const planner::PlanOptions& options) {
  if (args.given.count("--overlap-param-gather") == 0 || !options.overlap_param_gather ||
      !space.zero || (*space.zero != 1 && *space.zero != 2)) {
    return;
  }
  planner::Layout probe;
  probe.zero = *space.zero;
  if (!planner::parameter_gather_overlapped(probe, options)) {
    throw InputError(fmt::format(
        "--overlap-param-gather: no effect with --zero {} under framework {} (it all-gathers the "
        "updated parameters inside the optimizer step)",
        *space.zero, planner::to_string(options.framework)));
  }
}

void check_grad_all_reduce_arguments(const planner::SearchSpace& space,
                                     const planner::PlanOptions& options) {
  if (options.deepspeed_grad_all_reduce || !space.zero ||
      planner::grad_all_reduce_option_applies(*space.zero)) {
    return;
  }
  throw InputError(fmt::format(
      "--deepspeed-grad-all-reduce: off applies to ZeRO 1-2's gradient reduce, not --zero {}",
      *space.zero));
}

// Megatron's block method (--recompute-layers) under a framework without it, named before the
// search (planner::check_recompute_layers rejects the searched layouts alike).
// A flag given with sizes fixed so that it changes nothing is refused rather than ignored:
// each has no collective or schedule to act on there.
void check_ineffective_arguments(const PlanArguments& args, const models::TransformerConfig& model,
                                 const planner::SearchSpace& space) {
  const auto refuse_if = [&args](bool no_effect, const char* flag, const char* why) {
    if (no_effect && args.given.count(flag) > 0) {
      throw InputError(fmt::format("{}: no effect {}", flag, why));
    }
  };
  const bool fixed_pp1 = space.pp == 1;
  const bool fixed_non_interleaved =
      space.schedule && *space.schedule != planner::ScheduleKind::kInterleaved;
  refuse_if(fixed_pp1 || fixed_non_interleaved, "--overlap-p2p-comm",
            "without the interleaved schedule (fixed by --pp 1 or --schedule)");
  refuse_if(fixed_pp1, "--scatter-gather-pipeline", "with --pp 1 (no pipeline sends)");
  refuse_if(space.tp == 1, "--overlap-tp-comm", "with --tp 1 (no tensor-parallel collectives)");
  refuse_if(space.zero == 0, "--overlap-param-gather", "with --zero 0 (no parameter gather)");
  // Gradients are reduced over dp x cp: with both fixed at 1 there is no reduce (the gradient
  // buffer's dtype, --grad-reduce-dtype, still sets its memory).
  const bool no_grad_reduce = space.dp == 1 && !space.search_cp && space.cp.value_or(1) == 1;
  for (const char* flag : {"--overlap-grad-reduce", "--bucket-mb"}) {
    refuse_if(no_grad_reduce, flag, "with --dp 1 and no context parallelism (no gradient reduce)");
  }
  // Given at all (--moe-load-imbalance 1, its default, included), not only when not 1.
  for (const char* flag :
       {"--etp", "--moe-load-imbalance", "--moe-aux-loss-coeff", "--moe-dispatcher"}) {
    if (!model.is_moe() && args.given.count(flag) > 0) {
      throw InputError(fmt::format("{}: needs a mixture-of-experts model ({} has no experts)", flag,
                                   model.name));
    }
  }
  // The flex dispatcher is costed at ep > 1 and etp 1 only (planner::check_moe_dispatcher): a
  // fixed size outside that is refused here rather than as "no feasible layout".
  if (args.moe_dispatcher == "flex" && model.is_moe() && space.ep.value_or(0) == 1) {
    throw InputError(
        "--moe-dispatcher: flex needs --ep greater than 1 (Megatron-Core's DeepEP dispatcher "
        "requires TPxEP > 1)");
  }
  if (args.moe_dispatcher == "flex" && model.is_moe() && space.etp.value_or(1) > 1) {
    throw InputError(fmt::format(
        "--moe-dispatcher: flex is modelled with etp 1 only (the flex dispatcher's etp x ep "
        "group is not) (--etp {})",
        *space.etp));
  }
}

void check_recompute_layers_arguments(const planner::SearchSpace& space,
                                      const planner::PlanOptions& options) {
  if (space.recompute_group_layers > 1 || space.search_recompute_group_layers) {
    planner::check_recompute_group_layers_request(options, "--recompute-group-layers");
  }
  if (space.recompute_layers == 0 && !space.search_recompute_layers) {
    return;
  }
  planner::check_recompute_layers_request(options, "--recompute-layers");
}

}  // namespace

models::TransformerConfig plan_model(const PlanArguments& args, std::string* note) {
  require_positive(args.seq_len, "--seq-len");
  return models::load_training_model(args.model, args.seq_len, note);
}

planner::SearchSpace search_space(const PlanArguments& args, const models::ClusterConfig& cluster) {
  constexpr int64_t kMaxGpus = 10'000'000;
  if (args.gpus < 1 || args.gpus > kMaxGpus) {
    throw InputError(fmt::format("--gpus: must be between 1 and {} ({})", kMaxGpus, args.gpus));
  }
  // Each fixed size within what a plan file reads back (planner/plan_file.cpp), so that no
  // product of them (dp x micro-batch, pp x vpp) leaves 64 bits.
  for (const auto& [value, flag, max] :
       {std::tuple{args.global_batch, "--global-batch", planner::kMaxGlobalBatch},
        {args.tp, "--tp", kMaxGpus},
        {args.pp, "--pp", kMaxGpus},
        {args.dp, "--dp", kMaxGpus},
        {args.vpp, "--vpp", planner::kMaxRecomputeLayers},
        {args.ep, "--ep", kMaxGpus},
        {args.etp, "--etp", kMaxGpus},
        {args.mb_group, "--mb-group", planner::kMaxGlobalBatch},
        {args.dp_shard, "--dp-shard", kMaxGpus},
        {args.micro_batch, "--micro-batch", planner::kMaxGlobalBatch}}) {
    require_positive(value, flag);
    if (value && *value > max) {
      throw InputError(fmt::format("{}: must be between 1 and {} ({})", flag, max, *value));
    }
  }
  if (args.top < 1) {
    throw InputError(fmt::format("--top: must be positive ({})", args.top));
  }
  if (args.refine && *args.refine < 1) {
    throw InputError(fmt::format("--refine: must be positive ({})", *args.refine));
  }
  planner::SearchSpace space;
  space.num_gpus = args.gpus;
  // Default: two sequences per GPU (documented in the README), within the search's cap.
  space.global_batch = args.global_batch.value_or(2 * args.gpus);
  if (!args.global_batch && space.global_batch > planner::kMaxGlobalBatch) {
    throw InputError(fmt::format(
        "--global-batch: the default, 2 x --gpus = {}, is more than {} sequences: give one",
        space.global_batch, planner::kMaxGlobalBatch));
  }
  space.tp = args.tp;
  if (args.cp && *args.cp == "auto") {
    space.search_cp = true;
  } else if (args.cp) {
    space.cp = parse_size_or_auto(*args.cp, "--cp");
  }
  space.pp = args.pp;
  space.dp = args.dp;
  space.vpp = args.vpp;
  space.ep = args.ep;
  space.etp = args.etp;
  space.micro_batch = args.micro_batch;
  if (args.recompute) {
    space.recompute = planner::parse_recompute(*args.recompute, "--recompute");
  }
  if (args.sequence_parallel) {
    space.sequence_parallel = parse_on_off(*args.sequence_parallel, "--sequence-parallel");
  }
  if (args.recompute_layers) {  // Megatron's block method: needs whole layers recomputed
    if (*args.recompute_layers == "auto") {
      space.search_recompute_layers = true;
    } else {
      space.recompute_layers = parse_layer_count(*args.recompute_layers, "--recompute-layers");
    }
    if (space.recompute != planner::Recompute::kFull && !space.search_recompute_layers) {
      throw InputError(fmt::format(
          "--recompute-layers: needs --recompute full ({})",
          space.recompute ? planner::to_string(*space.recompute) : std::string("searched")));
    }
    if (space.search_recompute_layers && space.recompute &&
        *space.recompute != planner::Recompute::kFull) {
      throw InputError(
          fmt::format("--recompute-layers: auto needs full recompute among the "
                      "searched ones ({})",
                      planner::to_string(*space.recompute)));
    }
  }
  if (args.recompute_group_layers) {  // Megatron's uniform method: whole layers, in groups
    const bool search = *args.recompute_group_layers == "auto";
    if (!search) {
      space.recompute_group_layers =
          parse_layer_count(*args.recompute_group_layers, "--recompute-group-layers");
    }
    if (!search && space.recompute != planner::Recompute::kFull) {
      throw InputError(fmt::format(
          "--recompute-group-layers: needs --recompute full ({})",
          space.recompute ? planner::to_string(*space.recompute) : std::string("searched")));
    }
    if (search && space.recompute && *space.recompute != planner::Recompute::kFull) {
      throw InputError(fmt::format(
          "--recompute-group-layers: auto needs full recompute among the searched ones ({})",
          planner::to_string(*space.recompute)));
    }
    if (args.recompute_layers) {
      throw InputError(
          "--recompute-group-layers: not with --recompute-layers (Megatron-LM's "
          "--recompute-method is uniform or block)");
    }
    space.search_recompute_group_layers = search;
  }
  if (args.recompute_modules && *args.recompute_modules == "auto") {
    space.search_recompute_modules = true;
    if (space.recompute && *space.recompute != planner::Recompute::kSelective) {
      throw InputError(
          fmt::format("--recompute-modules: auto needs selective recompute among the searched "
                      "ones ({})",
                      planner::to_string(*space.recompute)));
    }
  } else if (args.recompute_modules) {  // Megatron-Core's --recompute-modules
    std::vector<std::string> names;
    for (size_t begin = 0; begin <= args.recompute_modules->size();) {
      const size_t end =
          std::min(args.recompute_modules->find(',', begin), args.recompute_modules->size());
      if (end > begin) {
        names.push_back(args.recompute_modules->substr(begin, end - begin));
      }
      begin = end + 1;
    }
    space.recompute_modules = planner::parse_recompute_modules(names, "--recompute-modules");
    if (space.recompute != planner::Recompute::kSelective) {
      throw InputError(fmt::format(
          "--recompute-modules: needs --recompute selective ({})",
          space.recompute ? planner::to_string(*space.recompute) : std::string("searched")));
    }
  }
  if (args.zero) {
    if (*args.zero < 0 || *args.zero > 3) {
      throw InputError(fmt::format("--zero: expected 0, 1, 2 or 3 ({})", *args.zero));
    }
    space.zero = *args.zero;
  }
  if (args.schedule) {
    space.schedule = planner::parse_schedule(*args.schedule, "--schedule");
  }
  if (args.mb_group) {  // a group size exists only for the interleaved schedule: it fixes it
    if (space.schedule && *space.schedule != planner::ScheduleKind::kInterleaved) {
      throw InputError(fmt::format("--mb-group: needs the interleaved schedule ({})",
                                   planner::to_string(*space.schedule)));
    }
    space.schedule = planner::ScheduleKind::kInterleaved;
    space.microbatch_group = args.mb_group;
  }
  if (args.dp_shard) {  // hybrid sharding: FSDP2 at ZeRO 3, Megatron's instances at ZeRO 1
    if (space.zero && *space.zero != 1 && *space.zero != 3) {
      throw InputError(
          fmt::format("--dp-shard: hybrid sharding needs ZeRO 1 (megatron) or 3 (fsdp) (--zero {})",
                      *space.zero));
    }
    space.dp_shard = args.dp_shard;
  }
  space.placement = planner::parse_placement(args.placement, "--placement");
  if (args.memory_headroom) {
    space.memory_headroom_bytes = parse_memory_headroom(*args.memory_headroom, cluster);
  }
  if (args.objective != "time" && args.objective != "memory") {
    throw InputError(fmt::format("--objective: expected time or memory ({})", args.objective));
  }
  return space;
}

namespace {

// --pipeline-layout (Megatron-Core's --pipeline-model-parallel-layout): the string fixes pp (which
// it needs, as Megatron-LM does), the split, vpp and, with vpp > 1, the interleaved schedule.
void fix_pipeline_layout(const PlanArguments& args, const models::TransformerConfig& model,
                         planner::SearchSpace& space) {
  constexpr const char* kFlag = "--pipeline-layout";
  if (args.stage_layers || args.first_stage_layers || args.last_stage_layers) {
    throw InputError(fmt::format(
        "{}: give either the layout or --stage-layers/--first-stage-layers/--last-stage-layers",
        kFlag));
  }
  planner::fix_pipeline_layout(
      model, *args.pipeline_layout,
      {.layout = kFlag, .pp = "--pp", .vpp = "--vpp", .schedule = "--schedule"}, space);
}

}  // namespace

void fix_stage_layers(const PlanArguments& args, const models::TransformerConfig& model,
                      planner::SearchSpace& space) {
  if (args.pipeline_layout) {
    fix_pipeline_layout(args, model, space);
    return;
  }
  const bool first_last = args.first_stage_layers || args.last_stage_layers;
  if (args.stage_layers && first_last) {
    throw InputError(
        "--stage-layers: give either the list or --first-stage-layers/--last-stage-layers");
  }
  if (args.stage_layers) {
    std::vector<int64_t> layers = parse_stage_layer_list(*args.stage_layers);
    if (space.pp && *space.pp != static_cast<int64_t>(layers.size())) {
      throw InputError(fmt::format("--stage-layers: {} entries for --pp {} ({})", layers.size(),
                                   *space.pp, *args.stage_layers));
    }
    planner::Layout layout;
    layout.pp = static_cast<int64_t>(layers.size());
    layout.stage_layers = layers;
    layout.vpp = space.vpp.value_or(1);
    const std::string reason = planner::check_stage_layers(model, layout);
    if (!reason.empty()) {
      throw InputError("--stage-layers: " + reason);
    }
    space.pp = layout.pp;
    space.stage_layers = planner::canonical_stage_layers(layers);
  } else if (first_last) {
    const char* flag = args.first_stage_layers ? "--first-stage-layers" : "--last-stage-layers";
    if (!space.pp) {
      throw InputError(fmt::format("{}: needs --pp", flag));
    }
    space.stage_layers = planner::first_last_stage_layers(
        model.num_layers, *space.pp, args.first_stage_layers, args.last_stage_layers, flag);
  }
}

planner::PlanOptions plan_options(const PlanArguments& args, const models::ClusterConfig& cluster) {
  planner::PlanOptions options;
  // A cluster of CPU cores runs only on meshplan's own executor, so its plans default to it.
  options.framework = args.framework ? planner::parse_framework(*args.framework, "--framework")
                      : models::is_cpu_cluster(cluster) ? planner::Framework::kMeshplan
                                                        : planner::Framework::kMegatron;
  options.gemm_precision = planner::parse_gemm_precision(args.precision, "--precision");
  options.flash_attention = parse_on_off(args.flash_attention, "--flash-attention");
  options.flash_attention_version = args.flash_attention_version;
  options.fsdp_version = args.fsdp_version;
  options.overlap_grad_reduce = parse_on_off(args.overlap_grad_reduce, "--overlap-grad-reduce");
  options.overlap_param_gather = parse_on_off(args.overlap_param_gather, "--overlap-param-gather");
  options.overlap_tp_comm = parse_on_off(args.overlap_tp_comm, "--overlap-tp-comm");
  options.fp8_param_gather = parse_on_off(args.fp8_param_gather, "--fp8-param-gather");
  options.fp8_recipe = planner::parse_fp8_recipe(args.fp8_recipe, "--fp8-recipe");
  options.cross_entropy_loss_fusion = planner::parse_cross_entropy_fusion(
      args.cross_entropy_loss_fusion, "--cross-entropy-loss-fusion");
  if (args.compile == "blocks") {  // torchtitan 9dec370 .. d1f62be7: the loss stays eager
    options.compile = true;
    options.compile_loss = false;
  } else if (args.compile == "on" || args.compile == "off") {
    options.compile = args.compile == "on";
  } else {
    throw InputError(fmt::format("--compile: expected on, off or blocks ({})", args.compile));
  }
  options.norm_kernel = planner::parse_norm_kernel(args.norm_kernel, "--norm-kernel");
  options.overlap_p2p_comm = args.overlap_p2p_comm
                                 ? parse_on_off(*args.overlap_p2p_comm, "--overlap-p2p-comm")
                                 : options.framework == planner::Framework::kMegatron;
  planner::check_overlap_p2p_options(options, "--overlap-p2p-comm");
  options.overlap_moe_expert_parallel_comm =
      parse_on_off(args.overlap_moe_expert_parallel_comm, "--overlap-moe-expert-parallel-comm");
  options.delay_wgrad_compute = parse_on_off(args.delay_wgrad_compute, "--delay-wgrad-compute");
  if (options.delay_wgrad_compute && !options.overlap_moe_expert_parallel_comm) {
    throw InputError(
        "--delay-wgrad-compute: needs --overlap-moe-expert-parallel-comm on (Megatron-Core "
        "asserts it, transformer_config.py)");
  }
  if (options.overlap_moe_expert_parallel_comm &&
      options.framework != planner::Framework::kMegatron) {
    throw InputError(fmt::format(
        "--overlap-moe-expert-parallel-comm: framework {}: only Megatron-Core merges a forward "
        "with a backward to overlap the expert all-to-alls",
        planner::to_string(options.framework)));
  }
  planner::check_flash_attention_version(options, "--flash-attention-version");
  planner::check_fsdp_version(options, "--fsdp-version");
  if (args.fsdp_head_in_root) {
    options.fsdp_head_in_root = parse_on_off(*args.fsdp_head_in_root, "--fsdp-head-in-root");
  }
  planner::check_fsdp_head_in_root(options, "--fsdp-head-in-root");
  planner::check_norm_kernel_options(options, "--norm-kernel");
  options.optimizer_impl = planner::parse_optimizer_impl(args.optimizer_impl, "--optimizer-impl");
  planner::check_optimizer_impl_options(options, "--optimizer-impl");
  options.weight_decay = parse_on_off(args.weight_decay, "--weight-decay");
  planner::check_weight_decay_options(options, "--weight-decay");
  options.distribute_saved_activations =
      parse_on_off(args.distribute_saved_activations, "--distribute-saved-activations");
  planner::check_distribute_saved_activations_options(options, "--distribute-saved-activations");
  if (args.grad_reduce_dtype) {
    options.grad_reduce_dtype =
        planner::parse_grad_reduce_dtype(*args.grad_reduce_dtype, "--grad-reduce-dtype");
  }
  options.scatter_gather_pipeline =
      parse_on_off(args.scatter_gather_pipeline, "--scatter-gather-pipeline");
  options.pipeline_grad_scatter_gather =
      parse_on_off(args.pipeline_grad_scatter_gather, "--pipeline-grad-scatter-gather");
  planner::check_pipeline_grad_scatter_gather_options(options, "--pipeline-grad-scatter-gather");
  options.deepspeed_grad_all_reduce =
      parse_on_off(args.deepspeed_grad_all_reduce, "--deepspeed-grad-all-reduce");
  planner::check_deepspeed_grad_all_reduce_options(options, "--deepspeed-grad-all-reduce");
  planner::check_overlap_tp_comm_options(options, "--overlap-tp-comm");
  options.allow_tp_across_nodes = args.allow_tp_across_nodes;
  planner::check_moe_load_imbalance(args.moe_load_imbalance, "--moe-load-imbalance");
  options.moe_load_imbalance = args.moe_load_imbalance;
  planner::check_moe_aux_loss_coeff(args.moe_aux_loss_coeff, "--moe-aux-loss-coeff");
  options.moe_aux_loss_coeff = args.moe_aux_loss_coeff;
  options.cp_comm = planner::parse_cp_comm(args.cp_comm, "--cp-comm");
  options.moe_dispatcher = planner::parse_moe_dispatcher(args.moe_dispatcher, "--moe-dispatcher");
  planner::check_moe_dispatcher_options(options, "--moe-dispatcher");
  if (args.bucket_mb) {
    // At least one byte, at most 1e6 MiB (DDP's bucket_cap_mb is a few tens).
    if (!(*args.bucket_mb * static_cast<double>(kBytesPerMiB) >= 1.0) || *args.bucket_mb > 1e6) {
      throw InputError(fmt::format(
          "--bucket-mb: must be in (0, 1e6] MiB and at least one byte ({})", *args.bucket_mb));
    }
    options.bucket_bytes =
        static_cast<int64_t>(*args.bucket_mb * static_cast<double>(kBytesPerMiB));
  }
  options.make_vocab_size_divisible_by = args.make_vocab_size_divisible_by;
  planner::check_vocab_padding_options(options, "--make-vocab-size-divisible-by");
  return options;
}

void check_plan_arguments(const PlanArguments& args, const models::TransformerConfig& model,
                          const models::ClusterConfig& cluster, const planner::SearchSpace& space,
                          const planner::PlanOptions& options) {
  if (args.save_plan_rank < 1 || (args.save_plan_rank > 1 && args.save_plan_path.empty())) {
    throw InputError(fmt::format("--save-plan-rank: {} ({})",
                                 args.save_plan_rank < 1 ? "must be positive" : "needs --save-plan",
                                 args.save_plan_rank));
  }
  check_ineffective_arguments(args, model, space);
  check_cp_arguments(args, model, space, options);
  check_saved_activation_arguments(space, options);
  check_grad_all_reduce_arguments(space, options);
  check_bucket_arguments(args, space, options);
  check_param_gather_arguments(args, space, options);
  check_recompute_layers_arguments(space, options);
  planner::check_recompute_modules_request(model, options, space.recompute_modules,
                                           "--recompute-modules");
  if (space.search_recompute_modules) {
    planner::check_recompute_modules_search_request(model, options, "--recompute-modules");
  }
  planner::check_grad_reduce_dtype_options(cluster, options, "--grad-reduce-dtype");
}

std::optional<reports::EmitTarget> emit_target(const PlanArguments& args) {
  if (args.emit.empty()) {
    if (!args.emit_out.empty()) {
      throw InputError(
          "--emit-out: needs --emit "
          "megatron|torchtitan|deepspeed|megatron-deepspeed|megatron-bridge|slurm");
    }
    return std::nullopt;
  }
  const reports::EmitTarget target = reports::parse_emit_target(args.emit, "--emit");
  if (target == reports::EmitTarget::kSlurm && args.save_plan_path.empty()) {
    throw InputError(
        "--emit slurm: needs --save-plan (the script runs meshplan execute on that file)");
  }
  return target;
}

void add_plan_flags(CLI::App& plan, PlanArguments& args) {
  plan.add_option("--model", args.model, "Model preset or config.json path")->required();
  plan.add_option("--cluster", args.cluster, "Cluster preset or cluster JSON path")->required();
  plan.add_option("--gpus", args.gpus, "Number of GPUs")->required();
  plan.add_option("--global-batch", args.global_batch, "Sequences per step (default 2 x GPUs)");
  plan.add_option("--seq-len", args.seq_len,
                  "Training sequence length (default: the model's; a Hugging Face config: "
                  "min(max_position_embeddings, 4096))");
  plan.add_option("--top", args.top, "How many layouts to print")->capture_default_str();
  plan.add_option("--objective", args.objective, "time | memory")->capture_default_str();
  plan.add_option("--tp", args.tp, "Fix tensor model parallel size");
  plan.add_option("--pp", args.pp, "Fix pipeline model parallel size");
  plan.add_option("--dp", args.dp, "Fix data parallel size");
  plan.add_option("--cp", args.cp,
                  "Context parallel size, or auto to search it (default 1: not searched)");
  plan.add_option("--cp-comm", args.cp_comm,
                  "Context-parallel attention: p2p (ring) | a2a (Ulysses all-to-all)")
      ->capture_default_str();
  plan.add_option("--vpp", args.vpp, "Fix virtual pipeline stages per rank");
  plan.add_option("--mb-group", args.mb_group,
                  "Fix the interleaved schedule's micro-batch group size N (Megatron "
                  "--microbatch-group-size-per-virtual-pipeline-stage; implies interleaved)");
  plan.add_option("--dp-shard", args.dp_shard,
                  "Fix hybrid sharding's shard group, in data-parallel ranks: fsdp at ZeRO 3 "
                  "(torchtitan data_parallel_shard_degree) or megatron at ZeRO 1 (dp / "
                  "--num-distributed-optimizer-instances); divides dp; searched under fsdp "
                  "when not given");
  plan.add_option("--ep", args.ep,
                  "Fix expert parallel size (MoE models; divides tp*cp*dp/etp and the expert "
                  "count)");
  plan.add_option("--etp", args.etp,
                  "Fix expert tensor parallel size (MoE models; Megatron "
                  "--expert-tensor-parallel-size; divides tp; searched over tp and 1 when not "
                  "given)");
  plan.add_option("--moe-load-imbalance", args.moe_load_imbalance,
                  "Busiest rank's routed-expert work over the balanced share (MoE; >= 1)")
      ->capture_default_str();
  plan.add_option("--moe-aux-loss-coeff", args.moe_aux_loss_coeff,
                  "Router load-balancing loss coefficient (MoE; Megatron --moe-aux-loss-coeff; "
                  "0 = off)")
      ->capture_default_str();
  plan.add_option("--moe-dispatcher", args.moe_dispatcher,
                  "MoE token dispatcher: alltoall (NCCL all-to-all) | flex (Megatron-Core "
                  "--moe-token-dispatcher-type flex, DeepEP: RDMA once per destination node, "
                  "NVLink forward; megatron, ep > 1, etp 1)")
      ->capture_default_str();
  plan.add_option("--micro-batch", args.micro_batch, "Fix the micro-batch size");
  plan.add_option("--stage-layers", args.stage_layers,
                  "Fix the layers of each pipeline stage, e.g. 7,8,8,7 (fixes pp)");
  plan.add_option("--pipeline-layout,--pipeline-model-parallel-layout", args.pipeline_layout,
                  "Fix the layers of each virtual stage as Megatron-Core's layout string, e.g. "
                  "\"Et|(tt|)*30mL\" (E embedding, t layer, m MTP depth, L loss; '|' between "
                  "virtual stages; needs --pp; fixes vpp and, above 1, interleaved)");
  plan.add_option("--first-stage-layers", args.first_stage_layers,
                  "Layers on the first stage, the rest even (Megatron-Core "
                  "--decoder-first-pipeline-num-layers; needs --pp)");
  plan.add_option("--last-stage-layers", args.last_stage_layers,
                  "Layers on the last stage, the rest even (Megatron-Core "
                  "--decoder-last-pipeline-num-layers; needs --pp)");
  plan.add_option("--recompute", args.recompute,
                  "Fix recompute: none | selective | selective-op | full");
  plan.add_option("--recompute-layers", args.recompute_layers,
                  "With --recompute full: recompute only each model chunk's first N layers, "
                  "the others keep their activations (Megatron-LM --recompute-method block "
                  "--recompute-num-layers N; megatron and meshplan); auto: also try each "
                  "full-recompute layout with the fewest such layers that fit");
  plan.add_option("--recompute-group-layers", args.recompute_group_layers,
                  "With --recompute full: checkpoint each model chunk's layers in groups of N, "
                  "keeping one input per group and rebuilding a group's N layers at once "
                  "(Megatron-LM --recompute-method uniform --recompute-num-layers N, DeepSpeed "
                  "activation_checkpoint_interval N; megatron, deepspeed and meshplan); auto: "
                  "also try each full-recompute layout that does not fit with the group size "
                  "needing the least memory");
  plan.add_option("--recompute-modules", args.recompute_modules,
                  "With --recompute selective: the modules recomputed, comma-separated "
                  "(Megatron-LM --recompute-modules; core_attn, the default, moe_act, "
                  "layernorm, mla_up_proj, mlp, shared_experts, moe; megatron and meshplan); "
                  "auto: also try each selective layout that does not fit with every list the "
                  "model can take, ranking the best that fits (the fastest)");
  plan.add_option("--sequence-parallel", args.sequence_parallel, "Fix sequence parallel: on | off");
  plan.add_option("--zero", args.zero, "Fix the ZeRO stage: 0 | 1 | 2 | 3");
  plan.add_option("--schedule", args.schedule,
                  "Fix the schedule: gpipe | 1f1b | interleaved | zb-h1");
  plan.add_option("--framework", args.framework,
                  "Software that runs the plan: megatron | deepspeed | fsdp | meshplan (default: "
                  "megatron; meshplan on a CPU cluster such as local-cpu)");
  plan.add_option("--precision", args.precision,
                  "Linear-layer GEMMs: bf16 | fp8 (Transformer Engine FP8; H100/H200 only)")
      ->capture_default_str();
  plan.add_option("--placement", args.placement, "Rank order: tp-dp-pp | tp-pp-dp")
      ->capture_default_str();
  plan.add_option("--flash-attention", args.flash_attention, "on | off")->capture_default_str();
  plan.add_option("--flash-attention-version", args.flash_attention_version,
                  "Fused attention kernel generation: 2 (FlashAttention-2, cuDNN, FA3) | 1 "
                  "(FlashAttention-1 or its Triton port, at half the rate)")
      ->capture_default_str();
  plan.add_option("--fsdp-version", args.fsdp_version,
                  "Under --framework fsdp, which PyTorch FSDP: 2 (fully_shard, torchtitan) | 1 "
                  "(FullyShardedDataParallel with use_orig_params, llm-foundry/Composer)")
      ->capture_default_str();
  plan.add_option("--fsdp-head-in-root", args.fsdp_head_in_root,
                  "Under --framework fsdp, the final norm and LM head in the root's FSDP unit "
                  "with the embedding: on | off (default: on for --fsdp-version 1, off for 2)");
  plan.add_option("--overlap-grad-reduce", args.overlap_grad_reduce, "on | off")
      ->capture_default_str();
  plan.add_option("--overlap-param-gather", args.overlap_param_gather, "on | off")
      ->capture_default_str();
  plan.add_option("--overlap-tp-comm", args.overlap_tp_comm, "on | off")->capture_default_str();
  plan.add_option("--fp8-param-gather", args.fp8_param_gather,
                  "Megatron-LM --fp8-param-gather: fp8 linear weights, gathered in fp8 (on | off; "
                  "needs --precision fp8, --framework megatron, --zero 1)")
      ->capture_default_str();
  plan.add_option("--fp8-recipe", args.fp8_recipe,
                  "Megatron-LM --fp8-recipe: Transformer Engine's FP8 scaling, delayed (amax "
                  "history) | tensorwise (current scaling, Megatron-Bridge's fp8_cs; needs "
                  "--precision fp8, --framework megatron)")
      ->capture_default_str();
  plan.add_option("--cross-entropy-loss-fusion", args.cross_entropy_loss_fusion,
                  "The fused loss: off | native (Megatron-Core --cross-entropy-loss-fusion) | "
                  "te (with --cross-entropy-fusion-impl te), --framework megatron | xentropy "
                  "(llm-foundry's FlashAttention loss, loss_fn fused_crossentropy), "
                  "--framework fsdp, tp 1")
      ->capture_default_str();
  plan.add_option("--compile", args.compile,
                  "torchtitan --training.compile: torch.compile of each TransformerBlock and the "
                  "loss (on | off | blocks: the blocks only, the loss eager, as torchtitan "
                  "9dec370..d1f62be7; --framework fsdp only; off: eager element-wise)")
      ->capture_default_str();
  plan.add_option("--norm-kernel", args.norm_kernel,
                  "torchtitan model.norm_type: fused (fused_rmsnorm) | eager (the hand-written "
                  "rmsnorm, one kernel per op; --framework fsdp, --compile off, rmsnorm models)")
      ->capture_default_str();
  plan.add_option("--optimizer-impl", args.optimizer_impl,
                  "Adam(W) implementation: fused (one kernel) | foreach | for-loop "
                  "(torch.optim.AdamW unfused) | composer (Composer DecoupledAdamW); unfused "
                  "only with --framework fsdp")
      ->capture_default_str();
  plan.add_option("--weight-decay", args.weight_decay,
                  "Whether AdamW decays weights (on | off): an unfused optimizer's extra pass")
      ->capture_default_str();
  plan.add_option("--distribute-saved-activations", args.distribute_saved_activations,
                  "Megatron-LM --distribute-saved-activations, DeepSpeed partition_activations: "
                  "each recomputed layer keeps 1/tp of its input and all-gathers it before the "
                  "recompute (on | off; megatron or deepspeed, recompute full, no sequence "
                  "parallelism)")
      ->capture_default_str();
  plan.add_option("--overlap-p2p-comm", args.overlap_p2p_comm,
                  "Megatron-Core --overlap-p2p-communication: interleaved pipeline sends overlap "
                  "compute (on | off; default on for --framework megatron, else off; megatron "
                  "only; no effect on other schedules)");
  plan.add_option("--overlap-moe-expert-parallel-comm", args.overlap_moe_expert_parallel_comm,
                  "Megatron-Core --overlap-moe-expert-parallel-comm: each forward after the first "
                  "runs merged with the previous micro-batch's backward, layer by layer, their "
                  "expert all-to-alls beside the other's compute (on | off; megatron, MoE at ep > "
                  "1, pp 1 or interleaved, no full or moe recompute)")
      ->capture_default_str();
  plan.add_option("--delay-wgrad-compute", args.delay_wgrad_compute,
                  "Megatron-Core --delay-wgrad-compute: with --overlap-moe-expert-parallel-comm, "
                  "each layer's weight gradients leave the backward's all-to-all chain (on | "
                  "off)")
      ->capture_default_str();
  plan.add_option("--grad-reduce-dtype", args.grad_reduce_dtype,
                  "Data-parallel gradient reduce and grad-buffer dtype: fp32 | bf16 (16-bit); "
                  "default: the framework's (megatron zero 0/1 and fsdp: fp32, else bf16)");
  plan.add_option("--scatter-gather-pipeline", args.scatter_gather_pipeline,
                  "Send 1/tp of each pipeline tensor and all-gather it (Megatron-LM 2021)")
      ->capture_default_str();
  plan.add_option("--pipeline-grad-scatter-gather", args.pipeline_grad_scatter_gather,
                  "With --scatter-gather-pipeline, split the gradient sends too (on | off; off: "
                  "DeepSpeed before #1407, e.g. DeeperSpeed eb7f5cff; --framework deepspeed "
                  "only)")
      ->capture_default_str();
  plan.add_option("--deepspeed-grad-all-reduce", args.deepspeed_grad_all_reduce,
                  "DeepSpeed ZeRO 1-2 all-reduce their gradient buckets (on: DeepSpeed >= "
                  "0.12.4, and ZeRO-1 from 0.4.4; off: a reduce per rank's slice, as ZeRO-2 "
                  "before 0.12.4 or DeeperSpeed's legacy ZeRO-1; --framework deepspeed only)")
      ->capture_default_str();
  plan.add_option("--bucket-mb", args.bucket_mb,
                  "Data-parallel bucket size in MiB of gradients; default: the framework's "
                  "(megatron: max(40M, 1M x dp x cp) parameters, only pipeline rank 0's first "
                  "chunk bucketed; deepspeed: 5e8 elements, reduce_bucket_size; others: 25 MiB, "
                  "PyTorch DDP's bucket_cap_mb)");
  plan.add_option("--make-vocab-size-divisible-by", args.make_vocab_size_divisible_by,
                  "Pad the vocabulary to a multiple of this times tp, as Megatron-LM's flag of "
                  "that name does; default: the framework's (megatron and deepspeed: 128, "
                  "Megatron-LM's, Megatron-DeepSpeed's and GPT-NeoX's default; fsdp and "
                  "meshplan: 1, no padding beyond a multiple of tp)");
  plan.add_flag("--allow-tp-across-nodes", args.allow_tp_across_nodes,
                "Let tensor-parallel groups span nodes");
  plan.add_option("--refine", args.refine,
                  "Re-rank the best K analytic plans by simulated step time");
  plan.add_option("--json", args.json_path, "Write the ranked plans as JSON");
  plan.add_option("--save-plan", args.save_plan_path, "Write the best plan as a plan file");
  plan.add_option("--save-plan-rank", args.save_plan_rank,
                  "With --save-plan: write the K-th ranked plan (1 = best) instead; --emit "
                  "then emits exactly that plan or refuses it")
      ->capture_default_str();
  plan.add_option("--memory-headroom", args.memory_headroom,
                  "Keep each plan's peak memory this far below the GPU's: GiB if >= 1, else a "
                  "fraction of the GPU's memory (0.1 = 10%)");
  plan.add_flag("--explain-rejections", args.explain_rejections,
                "Print how many layouts each validity rule rejected");
  plan.add_option("--emit", args.emit,
                  "Launch config of the best plan the target can express (and --save-plan "
                  "saves that one): megatron | torchtitan | deepspeed | megatron-deepspeed | "
                  "megatron-bridge | slurm");
  plan.add_option("--emit-out", args.emit_out,
                  "Write --emit's config to this file (default: stdout, the table to stderr)");
}

}  // namespace meshplan::cli
