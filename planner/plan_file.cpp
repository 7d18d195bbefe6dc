// The versioned plan file (docs/plan-format.md).

#include "meshplan/plan_file.h"

#include <fmt/format.h>

#include <array>
#include <nlohmann/json.hpp>
#include <string_view>

#include "meshplan/dp_buckets.h"
#include "meshplan/errors.h"
#include "meshplan/json_io.h"

namespace meshplan::planner {

nlohmann::json layout_to_json(const Layout& layout) {
  nlohmann::json json = {{"tp", layout.tp},
                         {"pp", layout.pp},
                         {"dp", layout.dp},
                         {"vpp", layout.vpp},
                         {"micro_batch", layout.micro_batch},
                         {"global_batch", layout.global_batch},
                         {"recompute", to_string(layout.recompute)},
                         {"sequence_parallel", layout.sequence_parallel},
                         {"zero", layout.zero},
                         {"schedule", to_string(layout.schedule)},
                         {"placement", to_string(layout.placement)},
                         {"ep", layout.ep}};
  // Written only when the expert tensor parallel size differs from tp (Layout::etp 0 is tp,
  // Megatron's default), so plans at etp = tp stay byte-identical to older files.
  if (expert_tensor_parallel(layout) != layout.tp) {
    json["etp"] = layout.etp;
  }
  if (layout.cp > 1) {  // omitted at 1, so plans without context parallelism stay as they were
    json["cp"] = layout.cp;
  }
  // Written only for an uneven split, so even plans stay byte-identical to older files.
  if (!layout.stage_layers.empty()) {
    json["stage_layers"] = layout.stage_layers;
  }
  // Written only when a layout string placed the chunks otherwise than stage_layers' rule.
  if (!layout.virtual_stage_layers.empty()) {
    json["virtual_stage_layers"] = layout.virtual_stage_layers;
  }
  // Written only when set (interleaved, Megatron-Core's
  // --microbatch-group-size-per-virtual-pipeline-stage): absent means pp.
  if (layout.microbatch_group > 0) {
    json["microbatch_group"] = layout.microbatch_group;
  }
  // Written only under hybrid sharding: absent means dp, full sharding.
  if (hybrid_sharded(layout)) {
    json["dp_shard"] = dp_shard_size(layout);
  }
  // Written only for Megatron's block method: absent means every layer of a full recompute.
  if (layout.recompute_layers > 0) {
    json["recompute_layers"] = layout.recompute_layers;
  }
  // Written only for Megatron's uniform method with groups of more than one layer.
  if (layout.recompute_group_layers > 1) {
    json["recompute_group_layers"] = layout.recompute_group_layers;
  }
  // Written only when not Megatron-Core's default, the attention core alone.
  if (layout.recompute_modules != kRecomputeCoreAttn) {
    json["recompute_modules"] = recompute_module_names(layout.recompute_modules);
  }
  return json;
}

namespace {

// Every key a reader accepts (docs/plan-format.md); anything else is a typo and is rejected, as
// the model and cluster loaders do. `prediction` is informative and its content is not checked.
constexpr std::array<std::string_view, 8> kPlanFields = {
    "format", "version", "model", "cluster", "num_gpus", "layout", "options", "prediction"};
constexpr std::array<std::string_view, 21> kLayoutFields = {"tp",
                                                            "pp",
                                                            "dp",
                                                            "vpp",
                                                            "micro_batch",
                                                            "global_batch",
                                                            "recompute",
                                                            "sequence_parallel",
                                                            "zero",
                                                            "schedule",
                                                            "placement",
                                                            "cp",
                                                            "stage_layers",
                                                            "virtual_stage_layers",
                                                            "ep",
                                                            "microbatch_group",
                                                            "etp",
                                                            "dp_shard",
                                                            "recompute_layers",
                                                            "recompute_group_layers",
                                                            "recompute_modules"};
constexpr std::array<std::string_view, 32> kOptionsFields = {"flash_attention",
                                                             "flash_attention_version",
                                                             "fsdp_version",
                                                             "fsdp_head_in_root",
                                                             "overlap_grad_reduce",
                                                             "overlap_param_gather",
                                                             "overlap_tp_comm",
                                                             "scatter_gather_pipeline",
                                                             "bucket_bytes",
                                                             "allow_tp_across_nodes",
                                                             "framework",
                                                             "cp_comm",
                                                             "precision",
                                                             "moe_load_imbalance",
                                                             "moe_aux_loss_coeff",
                                                             "fp8_param_gather",
                                                             "overlap_p2p_comm",
                                                             "overlap_moe_expert_parallel_comm",
                                                             "delay_wgrad_compute",
                                                             "grad_reduce_dtype",
                                                             "cross_entropy_loss_fusion",
                                                             "compile",
                                                             "compile_loss",
                                                             "norm_kernel",
                                                             "pipeline_grad_scatter_gather",
                                                             "deepspeed_grad_all_reduce",
                                                             "optimizer_impl",
                                                             "weight_decay",
                                                             "distribute_saved_activations",
                                                             "moe_dispatcher",
                                                             "fp8_recipe",
                                                             "make_vocab_size_divisible_by"};

// Bounds that catch typos and unit mistakes before any product of them is formed (a plan file
// with global_batch 1e12 made explain allocate gigabytes and never finish):
// - GPUs: what `plan --gpus` accepts;
// - vpp: one chunk per layer at most, and the model loader allows 100,000 layers;
// - global batch: 15 times the largest we know of, 65,536 sequences (LAMB, You et al. 2019);
//   GPT-3 used 1,536 (Brown et al. 2020, Table 2.1);
// - tokens per micro-batch: 4 orders above Llama-3's 8,192 x 16; keeps tokens * h * 4 bytes in
//   64 bits for any h the model loader accepts (1e9 * 1e6 * 4 = 4e15).
constexpr int64_t kPlanMaxGpus = 10'000'000;
constexpr int64_t kPlanMaxVpp = 100'000;
constexpr int64_t kPlanMaxLayers = kMaxRecomputeLayers;
constexpr int64_t kPlanMaxGlobalBatch = 1'000'000;
constexpr int64_t kPlanMaxMicroBatchTokens = 1'000'000'000;

// A layout size in [1, max]; throws InputError "<where>: <field>: must be between 1 and <max>".
int64_t require_size(const nlohmann::json& json, const char* field, int64_t max,
                     const std::string& where) {
  const int64_t value = require_int(json, field, where);
  if (value < 1 || value > max) {
    throw InputError(
        fmt::format("{}: {}: must be between 1 and {} ({})", where, field, max, value));
  }
  return value;
}

}  // namespace

std::vector<int64_t> stage_layers_from_json(const nlohmann::json& json, const std::string& where,
                                            const std::string& field) {
  if (!json.is_array() || json.empty()) {
    throw InputError(fmt::format("{}: {}: expected a non-empty array of layer counts ({})", where,
                                 field, json.type_name()));
  }
  std::vector<int64_t> layers;
  for (const nlohmann::json& count : json) {
    if (!count.is_number_integer()) {
      throw InputError(fmt::format("{}: {}: entry {} is not an integer ({})", where, field,
                                   layers.size(), count.type_name()));
    }
    layers.push_back(count.get<int64_t>());
  }
  return layers;  // as given: check_stage_layers checks it, then canonical_stage_layers
}

uint32_t recompute_modules_from_json(const nlohmann::json& names, const std::string& field) {
  std::vector<std::string> list;
  if (names.is_array() && names.size() <= 16) {
    for (const nlohmann::json& name : names) {
      if (name.is_string()) {
        list.push_back(name.get<std::string>());
      }
    }
  }
  if (!names.is_array() || list.size() != names.size()) {
    throw InputError(fmt::format("{}: expected a list of module names", field));
  }
  return parse_recompute_modules(list, field);
}

Layout layout_from_json(const nlohmann::json& json, const std::string& source) {
  const std::string where = source + ": layout";
  reject_unknown_fields(json, kLayoutFields, where);
  Layout layout;
  layout.tp = require_size(json, "tp", kPlanMaxGpus, where);
  layout.pp = require_size(json, "pp", kPlanMaxGpus, where);
  layout.dp = require_size(json, "dp", kPlanMaxGpus, where);
  if (layout.tp * layout.pp > kPlanMaxGpus / layout.dp) {  // tp * pp <= 1e14: no overflow yet
    throw InputError(fmt::format("{}: tp*pp*dp: more than {} GPUs ({}*{}*{})", where, kPlanMaxGpus,
                                 layout.tp, layout.pp, layout.dp));
  }
  if (json.contains("cp")) {  // optional: absent means 1 (plans written before context parallel)
    layout.cp = require_size(json, "cp", kPlanMaxGpus, where);
    if (layout.cp > kPlanMaxGpus / (layout.tp * layout.pp * layout.dp)) {
      throw InputError(fmt::format("{}: tp*cp*pp*dp: more than {} GPUs ({}*{}*{}*{})", where,
                                   kPlanMaxGpus, layout.tp, layout.cp, layout.pp, layout.dp));
    }
  }
  layout.vpp = require_size(json, "vpp", kPlanMaxVpp, where);
  layout.micro_batch = require_size(json, "micro_batch", kPlanMaxGlobalBatch, where);
  layout.global_batch = require_size(json, "global_batch", kPlanMaxGlobalBatch, where);
  layout.recompute =
      parse_recompute(require_string(json, "recompute", where), source + ": layout: recompute");
  layout.sequence_parallel = require_bool(json, "sequence_parallel", where);
  const int64_t zero = require_int(json, "zero", where);
  if (zero < 0 || zero > 3) {  // checked before the narrowing: 2^32 must not pass as stage 0
    throw InputError(fmt::format("{}: zero: expected 0, 1, 2 or 3 ({})", where, zero));
  }
  layout.zero = static_cast<int>(zero);
  layout.schedule =
      parse_schedule(require_string(json, "schedule", where), source + ": layout: schedule");
  if (json.contains("microbatch_group")) {  // optional: absent means pp (Megatron's default)
    layout.microbatch_group = require_size(json, "microbatch_group", kPlanMaxGlobalBatch, where);
  }
  if (json.contains("placement")) {
    layout.placement =
        parse_placement(require_string(json, "placement", where), source + ": layout: placement");
  }
  // Optional: plan files written before expert parallelism have ep 1.
  if (json.contains("ep")) {
    layout.ep = require_size(json, "ep", kPlanMaxGpus, where);
  }
  // Optional: absent means tp (plan files written before expert tensor parallelism).
  if (json.contains("etp")) {
    set_expert_tensor_parallel(layout, require_size(json, "etp", kPlanMaxGpus, where));
  }
  if (json.contains("stage_layers")) {
    layout.stage_layers = stage_layers_from_json(json.at("stage_layers"), where);
  }
  if (json.contains("virtual_stage_layers")) {
    layout.virtual_stage_layers =
        stage_layers_from_json(json.at("virtual_stage_layers"), where, "virtual_stage_layers");
  }
  // Optional: absent means dp (full sharding; plan files written before hybrid sharding).
  if (json.contains("dp_shard")) {
    set_dp_shard(layout, require_size(json, "dp_shard", kPlanMaxGpus, where));
  }
  // Optional: absent means every layer (full recompute as before Megatron's block method).
  if (json.contains("recompute_layers")) {
    layout.recompute_layers = require_size(json, "recompute_layers", kPlanMaxLayers, where);
  }
  // Optional: absent means one layer per checkpointed group.
  if (json.contains("recompute_group_layers")) {
    layout.recompute_group_layers =
        require_size(json, "recompute_group_layers", kPlanMaxLayers, where);
  }
  // Optional: absent means Megatron-Core's default, the attention core alone.
  if (json.contains("recompute_modules")) {
    layout.recompute_modules =
        recompute_modules_from_json(json.at("recompute_modules"), where + ": recompute_modules");
  }
  return layout;
}

void check_moe_load_imbalance(double factor, const std::string& field) {
  // 1 is perfect balance; the busiest rank cannot hold more than all ep ranks' tokens, and a
  // factor past 64 is a typo rather than a what-if.
  if (!(factor >= 1.0 && factor <= 64.0)) {
    throw InputError(fmt::format("{}: must be in [1, 64] ({})", field, factor));
  }
}

void check_moe_aux_loss_coeff(double coefficient, const std::string& field) {
  // Published coefficients are 1e-4 (DeepSeek-V3's sequence-wise loss) to 0.02 (Mixtral's
  // router_aux_loss_coef); past 1 the balancing term outweighs the language-model loss.
  if (!(coefficient >= 0.0 && coefficient <= 1.0)) {
    throw InputError(fmt::format("{}: must be in [0, 1] ({})", field, coefficient));
  }
}

nlohmann::json options_to_json(const PlanOptions& options) {
  nlohmann::json json = {
      {"flash_attention", options.flash_attention},
      {"overlap_grad_reduce", options.overlap_grad_reduce},
      {"overlap_param_gather", options.overlap_param_gather},
      {"overlap_tp_comm", options.overlap_tp_comm},
      {"scatter_gather_pipeline", options.scatter_gather_pipeline},
      {"bucket_bytes",
       options.bucket_bytes ? nlohmann::json(*options.bucket_bytes) : nlohmann::json(nullptr)},
      {"allow_tp_across_nodes", options.allow_tp_across_nodes},
      {"framework", to_string(options.framework)},
      {"moe_load_imbalance", options.moe_load_imbalance}};
  if (options.cp_comm != CpComm::kP2p) {  // omitted at the default, as layout.cp at 1
    json["cp_comm"] = to_string(options.cp_comm);
  }
  if (options.gemm_precision != GemmPrecision::kBf16) {  // omitted for bf16 (plan-format.md)
    json["precision"] = to_string(options.gemm_precision);
  }
  if (options.moe_aux_loss_coeff != 0) {  // omitted at the default, 0 (off)
    json["moe_aux_loss_coeff"] = options.moe_aux_loss_coeff;
  }
  if (options.fp8_param_gather) {  // omitted at the default, off
    json["fp8_param_gather"] = true;
  }
  if (options.fp8_recipe != Fp8Recipe::kDelayed) {  // omitted at the default, delayed
    json["fp8_recipe"] = to_string(options.fp8_recipe);
  }
  if (options.make_vocab_size_divisible_by) {  // `meshplan plan` writes the divisor it used
    json["make_vocab_size_divisible_by"] = *options.make_vocab_size_divisible_by;
  }
  if (options.overlap_p2p_comm) {  // omitted when off, as in plan files written before the key
    json["overlap_p2p_comm"] = true;
  }
  if (options.overlap_moe_expert_parallel_comm) {  // omitted at the default, off
    json["overlap_moe_expert_parallel_comm"] = true;
  }
  if (options.delay_wgrad_compute) {  // omitted at the default, off
    json["delay_wgrad_compute"] = true;
  }
  if (options.distribute_saved_activations) {  // omitted at the default, off
    json["distribute_saved_activations"] = true;
  }
  if (options.moe_dispatcher != MoeDispatcher::kAllToAll) {  // omitted at the default
    json["moe_dispatcher"] = to_string(options.moe_dispatcher);
  }
  if (options.compile) {  // omitted at the default, off
    json["compile"] = true;
    if (!options.compile_loss) {  // omitted at the default, the loss compiled with the blocks
      json["compile_loss"] = false;
    }
  }
  if (options.flash_attention_version != 2) {  // omitted at the default, FlashAttention-2
    json["flash_attention_version"] = options.flash_attention_version;
  }
  if (options.fsdp_version != 2) {  // omitted at the default, FSDP2
    json["fsdp_version"] = options.fsdp_version;
  }
  if (options.fsdp_head_in_root) {  // omitted when unset: the FSDP version's wrapping
    json["fsdp_head_in_root"] = *options.fsdp_head_in_root;
  }
  if (options.norm_kernel != NormKernel::kFused) {  // omitted at the default, fused
    json["norm_kernel"] = to_string(options.norm_kernel);
  }
  if (!options.pipeline_grad_scatter_gather) {  // omitted at the default, true
    json["pipeline_grad_scatter_gather"] = false;
  }
  if (!options.deepspeed_grad_all_reduce) {  // omitted at the default, true
    json["deepspeed_grad_all_reduce"] = false;
  }
  if (options.optimizer_impl != OptimizerImpl::kFused) {  // omitted at the default, fused
    json["optimizer_impl"] = to_string(options.optimizer_impl);
  }
  if (!options.weight_decay) {  // omitted at the default, on
    json["weight_decay"] = false;
  }
  if (options.grad_reduce_dtype) {  // omitted when unset: the framework's default
    json["grad_reduce_dtype"] = to_string(*options.grad_reduce_dtype);
  }
  if (options.cross_entropy_loss_fusion != CrossEntropyFusion::kOff) {  // omitted when off
    json["cross_entropy_loss_fusion"] = to_string(options.cross_entropy_loss_fusion);
  }
  return json;
}

PlanOptions options_from_json(const nlohmann::json& json, const std::string& source,
                              const PlanOptions* defaults) {
  PlanOptions options = defaults ? *defaults : PlanOptions{};
  const std::string where = source + ": options";
  reject_unknown_fields(json, kOptionsFields, where);
  // With defaults, an absent key keeps its default; without, every key is required.
  const auto given = [&](const char* field) { return !defaults || json.contains(field); };
  const auto read_bool = [&](const char* field, bool& value) {
    if (given(field)) {
      value = require_bool(json, field, where);
    }
  };
  read_bool("flash_attention", options.flash_attention);
  if (json.contains("flash_attention_version")) {  // optional: absent means 2
    const int64_t version = require_int(json, "flash_attention_version", where);
    if (version != 1 && version != 2) {  // before the narrowing: 2^32 + 1 must not pass as 1
      throw InputError(
          fmt::format("{}: flash_attention_version: expected 1 or 2 ({})", where, version));
    }
    options.flash_attention_version = static_cast<int>(version);
  }
  if (json.contains("fsdp_version")) {  // optional: absent means 2
    const int64_t version = require_int(json, "fsdp_version", where);
    if (version != 1 && version != 2) {  // before the narrowing, as flash_attention_version
      throw InputError(fmt::format("{}: fsdp_version: expected 1 or 2 ({})", where, version));
    }
    options.fsdp_version = static_cast<int>(version);
  }
  if (json.contains("fsdp_head_in_root")) {  // optional: absent means the version's wrapping
    options.fsdp_head_in_root = require_bool(json, "fsdp_head_in_root", where);
  }
  read_bool("overlap_grad_reduce", options.overlap_grad_reduce);
  read_bool("overlap_param_gather", options.overlap_param_gather);
  read_bool("overlap_tp_comm", options.overlap_tp_comm);
  read_bool("scatter_gather_pipeline", options.scatter_gather_pipeline);
  // null: the framework's default (dp_bucket_bytes); `meshplan plan` writes the value it used.
  if (given("bucket_bytes") &&
      !(json.contains("bucket_bytes") && json.at("bucket_bytes").is_null())) {
    options.bucket_bytes = require_int(json, "bucket_bytes", where);
  }
  if (options.bucket_bytes && *options.bucket_bytes < 1) {
    throw InputError(
        fmt::format("{}: bucket_bytes: must be positive ({})", where, *options.bucket_bytes));
  }
  read_bool("allow_tp_across_nodes", options.allow_tp_across_nodes);
  // Optional in plan files too: those written before it assumed balanced experts.
  if (json.contains("moe_load_imbalance")) {
    options.moe_load_imbalance = require_number(json, "moe_load_imbalance", where);
  }
  check_moe_load_imbalance(options.moe_load_imbalance, where + ": moe_load_imbalance");
  if (json.contains("moe_aux_loss_coeff")) {  // optional: absent means 0 (off)
    options.moe_aux_loss_coeff = require_number(json, "moe_aux_loss_coeff", where);
  }
  check_moe_aux_loss_coeff(options.moe_aux_loss_coeff, where + ": moe_aux_loss_coeff");
  // Optional in plan files too: those written before the key were planned for Megatron-LM.
  if (json.contains("framework")) {
    options.framework =
        parse_framework(require_string(json, "framework", where), where + ": framework");
  }
  if (json.contains("cp_comm")) {  // optional: absent means p2p
    options.cp_comm = parse_cp_comm(require_string(json, "cp_comm", where), where + ": cp_comm");
  }
  // Optional: absent means bf16 GEMMs, as in every plan file written before the key.
  if (json.contains("precision")) {
    options.gemm_precision =
        parse_gemm_precision(require_string(json, "precision", where), where + ": precision");
  }
  if (json.contains("fp8_param_gather")) {  // optional: absent means off
    options.fp8_param_gather = require_bool(json, "fp8_param_gather", where);
  }
  if (json.contains("fp8_recipe")) {  // optional: absent means delayed
    options.fp8_recipe =
        parse_fp8_recipe(require_string(json, "fp8_recipe", where), where + ": fp8_recipe");
  }
  // Optional: absent is the framework's default (vocab_size_divisible_by); `meshplan plan`
  // writes the divisor it used.
  if (json.contains("make_vocab_size_divisible_by")) {
    options.make_vocab_size_divisible_by = require_int(json, "make_vocab_size_divisible_by", where);
  }
  check_vocab_padding_options(options, where + ": make_vocab_size_divisible_by");
  if (json.contains("cross_entropy_loss_fusion")) {  // optional: absent means off
    options.cross_entropy_loss_fusion =
        parse_cross_entropy_fusion(require_string(json, "cross_entropy_loss_fusion", where),
                                   where + ": cross_entropy_loss_fusion");
  }
  if (json.contains("overlap_p2p_comm")) {  // optional: absent means off (every send exposed)
    options.overlap_p2p_comm = require_bool(json, "overlap_p2p_comm", where);
  }
  check_overlap_p2p_options(options, where + ": overlap_p2p_comm");
  if (json.contains("overlap_moe_expert_parallel_comm")) {  // optional: absent means off
    options.overlap_moe_expert_parallel_comm =
        require_bool(json, "overlap_moe_expert_parallel_comm", where);
  }
  if (json.contains("delay_wgrad_compute")) {  // optional: absent means off
    options.delay_wgrad_compute = require_bool(json, "delay_wgrad_compute", where);
  }
  if (json.contains("compile")) {  // optional: absent means off (eager)
    options.compile = require_bool(json, "compile", where);
  }
  if (json.contains("compile_loss")) {  // optional: absent means the loss compiled with compile
    options.compile_loss = require_bool(json, "compile_loss", where);
    if (!options.compile) {
      throw InputError(where + ": compile_loss: only with compile true (the blocks compiled)");
    }
  }
  if (json.contains("grad_reduce_dtype")) {  // optional: absent means the framework's default
    options.grad_reduce_dtype = parse_grad_reduce_dtype(
        require_string(json, "grad_reduce_dtype", where), where + ": grad_reduce_dtype");
  }
  check_flash_attention_version(options, where + ": flash_attention_version");
  if (json.contains("norm_kernel")) {  // optional: absent means fused
    options.norm_kernel =
        parse_norm_kernel(require_string(json, "norm_kernel", where), where + ": norm_kernel");
  }
  check_norm_kernel_options(options, where + ": norm_kernel");
  if (json.contains("pipeline_grad_scatter_gather")) {  // optional: absent means true
    options.pipeline_grad_scatter_gather =
        require_bool(json, "pipeline_grad_scatter_gather", where);
  }
  check_pipeline_grad_scatter_gather_options(options, where + ": pipeline_grad_scatter_gather");
  if (json.contains("deepspeed_grad_all_reduce")) {  // optional: absent means true
    options.deepspeed_grad_all_reduce = require_bool(json, "deepspeed_grad_all_reduce", where);
  }
  check_deepspeed_grad_all_reduce_options(options, where + ": deepspeed_grad_all_reduce");
  if (json.contains("optimizer_impl")) {  // optional: absent means fused
    options.optimizer_impl = parse_optimizer_impl(require_string(json, "optimizer_impl", where),
                                                  where + ": optimizer_impl");
  }
  check_optimizer_impl_options(options, where + ": optimizer_impl");
  if (json.contains("weight_decay")) {  // optional: absent means on
    options.weight_decay = require_bool(json, "weight_decay", where);
  }
  check_weight_decay_options(options, where + ": weight_decay");
  if (json.contains("distribute_saved_activations")) {  // optional: absent means off
    options.distribute_saved_activations =
        require_bool(json, "distribute_saved_activations", where);
  }
  check_distribute_saved_activations_options(options, where + ": distribute_saved_activations");
  if (json.contains("moe_dispatcher")) {  // optional: absent means alltoall
    options.moe_dispatcher = parse_moe_dispatcher(require_string(json, "moe_dispatcher", where),
                                                  where + ": moe_dispatcher");
  }
  check_moe_dispatcher_options(options, where + ": moe_dispatcher");
  return options;
}

nlohmann::json plan_to_json(const Plan& plan, const nlohmann::json& prediction) {
  nlohmann::json options = options_to_json(plan.options);
  // A search over zero may pick ZeRO 0 or 3 under --deepspeed-grad-all-reduce off, where the
  // option changes nothing: the file leaves it out, as plan_from_json refuses it there.
  if (!grad_all_reduce_option_applies(plan.layout.zero)) {
    options.erase("deepspeed_grad_all_reduce");
  }
  return {{"format", kPlanFormat},
          {"version", kPlanFormatVersion},
          {"model", models::model_to_json(plan.model)},
          {"cluster", models::cluster_to_json(plan.cluster)},
          {"num_gpus", plan.num_gpus},
          {"layout", layout_to_json(plan.layout)},
          {"options", options},
          {"prediction", prediction}};
}

Plan plan_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object", source));
  }
  reject_other_input_kind(json, InputKind::kPlan, source);
  const std::string format = require_string(json, "format", source);
  if (format != kPlanFormat) {
    throw InputError(fmt::format("{}: format: not a meshplan plan file (\"{}\")", source, format));
  }
  const int64_t version = require_int(json, "version", source);
  if (version > kPlanFormatVersion) {
    throw InputError(
        fmt::format("{}: version: plan format version {} is newer than this meshplan reads ({})",
                    source, version, kPlanFormatVersion));
  }
  if (version < 1) {
    throw InputError(fmt::format("{}: version: must be at least 1 ({})", source, version));
  }
  reject_unknown_fields(json, kPlanFields, source);
  for (const char* field : {"model", "cluster", "layout", "options"}) {
    if (!json.contains(field) || !json.at(field).is_object()) {
      throw InputError(fmt::format("{}: {}: missing or not an object", source, field));
    }
  }
  Plan plan;
  plan.model = models::model_from_json(json.at("model"), source + ": model");
  models::validate_model(plan.model, source + ": model");
  models::validate_training_length(plan.model, source + ": model");
  plan.cluster = models::cluster_from_json(json.at("cluster"), source + ": cluster");
  models::validate_cluster(plan.cluster, source + ": cluster");
  plan.num_gpus = require_size(json, "num_gpus", kPlanMaxGpus, source);
  plan.layout = layout_from_json(json.at("layout"), source);
  if (plan.layout.micro_batch > kPlanMaxMicroBatchTokens / plan.model.seq_length) {
    throw InputError(fmt::format(
        "{}: layout: micro_batch: micro_batch * seq_length absurdly large, more than {} tokens "
        "({} * {})",
        source, kPlanMaxMicroBatchTokens, plan.layout.micro_batch, plan.model.seq_length));
  }
  plan.options = options_from_json(json.at("options"), source);
  check_norm_kernel_model(plan.model, plan.options, source + ": options: norm_kernel");
  check_attention_sinks_kernel(plan.model, plan.options, source + ": options: flash_attention");
  check_mtp_options(plan.model, plan.options, source + ": model: mtp_num_layers");
  if (plan.layout.num_gpus() != plan.num_gpus) {
    throw InputError(fmt::format("{}: layout: {} = {} differs from num_gpus ({})", source,
                                 plan.layout.cp > 1 ? "tp*cp*pp*dp" : "tp*pp*dp",
                                 plan.layout.num_gpus(), plan.num_gpus));
  }
  if (!plan.layout.stage_layers.empty()) {
    plan.layout.stage_layers = checked_stage_layers(
        plan.model, plan.layout.pp, std::move(plan.layout.stage_layers), source + ": layout");
  }
  Validity validity = check_layout(plan.model, plan.cluster, plan.num_gpus, plan.layout,
                                   plan.options.allow_tp_across_nodes);
  if (validity.ok()) {
    validity = check_cp_options(plan.model, plan.layout, plan.options);
  }
  if (validity.ok()) {
    validity = check_recompute_options(plan.model, plan.layout, plan.options);
  }
  if (validity.ok()) {
    validity = check_fp8_param_gather(plan.model, plan.layout, plan.options);
  }
  if (validity.ok()) {
    validity = check_moe_a2a_overlap(plan.model, plan.layout, plan.options);
  }
  if (validity.ok()) {
    validity = check_grad_reduce_dtype(plan.layout, plan.options);
  }
  if (validity.ok()) {
    validity = check_moe_dispatcher(plan.model, plan.layout, plan.options);
  }
  // A hand-written plan is held to what its framework can run, as the search is (README
  // "Frameworks"), so simulate, execute and compare never cost a layout the framework refuses.
  if (validity.ok()) {
    validity = check_framework(plan.model, plan.options, plan.layout, true);
  }
  if (!validity.ok()) {
    throw InputError(fmt::format("{}: layout: {}", source, validity.reason));
  }
  check_grad_reduce_dtype_options(plan.cluster, plan.options,
                                  source + ": options: grad_reduce_dtype");
  check_fsdp_version(plan.options, source + ": options: fsdp_version");
  check_fsdp_head_in_root(plan.options, source + ": options: fsdp_head_in_root");
  if (!plan.options.deepspeed_grad_all_reduce &&
      !grad_all_reduce_option_applies(plan.layout.zero)) {
    throw InputError(fmt::format(
        "{}: options: deepspeed_grad_all_reduce: false applies to ZeRO 1-2's gradient reduce, "
        "not zero {}",
        source, plan.layout.zero));
  }
  try {
    check_compile_options(plan.options);
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: options: {}", source, e.what()));
  }
  return plan;
}

void write_plan_file(const std::string& path, const Plan& plan, const nlohmann::json& prediction) {
  write_file_atomic(path, plan_to_json(plan, prediction).dump(2) + "\n");
}

Plan read_plan_file(const std::string& path) {
  return plan_from_json(read_json_file(path), path);
}

}  // namespace meshplan::planner
