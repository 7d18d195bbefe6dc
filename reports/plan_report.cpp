// The planner's reports: plan (header, ranked table and --json, rejections, the --refine
// table), explain and validate. Each table row and its JSON record are written in one place.

#include "meshplan/plan_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "memory_json.h"
#include "meshplan/dp_buckets.h"
#include "meshplan/pipeline_layout.h"
#include "meshplan/units.h"

namespace meshplan::reports {

namespace {

constexpr double kGiB = static_cast<double>(kBytesPerGiB);

std::string on_off(bool value) {
  return value ? "on" : "off";
}

// Appends estimate `e`, ranked `rank` (from 1), as a row of the table and a record of "plans";
// the cp column only when `with_cp` (some listed layout has cp > 1). The last three columns say
// why it ranks where it does: micro-batches per pipeline per step, the pipeline bubble and the
// exposed communication (tp + pp transfers + dp), in seconds. A mixture-of-experts model's
// table ends with an ep column after them.
// The recompute column: Megatron's block method as block:N, its uniform method with groups of
// N layers as group:N, else the recompute kind.
std::string recompute_label(const planner::Layout& l) {
  if (l.recompute_layers > 0) {
    return fmt::format("block:{}", l.recompute_layers);
  }
  if (l.recompute == planner::Recompute::kFull && l.recompute_group_layers > 1) {
    return fmt::format("group:{}", l.recompute_group_layers);
  }
  return to_string(l.recompute);
}

void add_plan_row(int rank, const planner::PlanEstimate& e, const models::TransformerConfig& model,
                  const planner::PlanOptions& options, bool with_cp, Report* report) {
  const bool moe = model.is_moe();
  const planner::Layout& l = e.layout;
  const double exposed_comm_seconds = exposed_communication_seconds(e.breakdown);
  report->table += fmt::format(
      " {:>4} {:>4}{} {:>4} {:>5} {:>4} {:>4} {:>10} {:>3} {:>4} {:>11} {:>8.1f} "
      "{:>9.4f} {:>6.1f} {:>12.0f} {:>5} {:>8.4f} {:>8.4f}{}\n",
      rank, l.tp, with_cp ? fmt::format(" {:>4}", l.cp) : "", l.pp, l.dp, l.vpp, l.micro_batch,
      recompute_label(l), on_off(l.sequence_parallel), l.zero, to_string(l.schedule),
      static_cast<double>(e.peak_memory_bytes) / kGiB, e.step_time_s, 100.0 * e.mfu, e.tokens_per_s,
      l.num_micro_batches(), e.breakdown.bubble_seconds, exposed_comm_seconds,
      moe ? fmt::format(" {:>5}", l.ep) : "");
  if (!l.stage_layers.empty()) {
    // Under deepspeed the split is one its PipelineModule builds (check_framework): say which.
    const auto method = options.framework == planner::Framework::kDeepSpeed
                            ? planner::deepspeed_partition_of(model, l, options)
                            : std::nullopt;
    report->table += fmt::format(
        "#      plan {}: layers per stage {}{}\n", rank,
        planner::format_stage_layers(l.stage_layers),
        method
            ? fmt::format(" (DeepSpeed PipelineModule partition_method \"{}\")", to_string(*method))
            : "");
  }
  if (!l.virtual_stage_layers.empty()) {
    report->table += fmt::format("#      plan {}: pipeline layout \"{}\"\n", rank,
                                 planner::format_pipeline_layout(model, l));
  }
  if (l.recompute == planner::Recompute::kSelective &&
      l.recompute_modules != planner::kRecomputeCoreAttn) {
    report->table += fmt::format("#      plan {}: recompute modules {}\n", rank,
                                 planner::format_recompute_modules(l.recompute_modules));
  }
  if (planner::hybrid_sharded(l)) {
    report->table += fmt::format("#      plan {}: {}\n", rank, hybrid_sharding_note(l));
  }
  if (planner::expert_tensor_parallel(l) != l.tp) {
    report->table += fmt::format("#      plan {}: experts split over etp {} of the tp {} ranks\n",
                                 rank, planner::expert_tensor_parallel(l), l.tp);
  }
  const std::string caveat = planner::framework_caveat(options.framework, l);
  if (!caveat.empty()) {
    report->table += fmt::format("#      plan {}: caveat: {}\n", rank, caveat);
  }
  nlohmann::json record = estimate_json(e);
  record["num_micro_batches"] = l.num_micro_batches();
  if (!caveat.empty()) {
    record["caveat"] = caveat;
  }
  record["exposed_comm_seconds"] = exposed_comm_seconds;
  report->json["plans"].push_back(std::move(record));
}

}  // namespace

std::string hybrid_sharding_note(const planner::Layout& l) {
  const std::string over = fmt::format("{} data-parallel ranks{}", planner::dp_shard_size(l),
                                       l.cp > 1 ? fmt::format(" x cp {}", l.cp) : "");
  if (l.zero == 1) {
    return fmt::format(
        "hybrid sharding: distributed optimizer over {}, {} instances (Megatron "
        "--num-distributed-optimizer-instances {})",
        over, planner::dp_replicate_size(l), planner::dp_replicate_size(l));
  }
  return fmt::format(
      "hybrid sharding: ZeRO-3 over {}, {} replicas (torchtitan data_parallel_shard_degree {}, "
      "data_parallel_replicate_degree {})",
      over, planner::dp_replicate_size(l), planner::dp_shard_size(l),
      planner::dp_replicate_size(l));
}

double exposed_communication_seconds(const planner::StepBreakdown& b) {
  return b.tp_comm_exposed_seconds + b.pp_transfer_seconds + b.dp_comm_exposed_seconds;
}

namespace {

// The bucket as the header states it: the given size in MiB, else the framework's default
// (planner::dp_bucket_bytes), which under megatron depends on the layout's dp x cp.
std::string bucket_text(const planner::PlanOptions& o) {
  if (o.bucket_bytes) {
    return fmt::format("{:.0f} MiB",
                       static_cast<double>(*o.bucket_bytes) / static_cast<double>(kBytesPerMiB));
  }
  if (o.framework == planner::Framework::kMegatron) {
    return "max(40M, 1M x dp x cp) parameters";
  }
  if (o.framework == planner::Framework::kDeepSpeed) {
    return fmt::format("{} elements (reduce_bucket_size)", planner::kDeepSpeedBucketElements);
  }
  return fmt::format("{:.0f} MiB", static_cast<double>(planner::kDefaultBucketBytes) /
                                       static_cast<double>(kBytesPerMiB));
}

}  // namespace

std::string format_plan_options(const planner::PlanOptions& o, const planner::SearchSpace& space) {
  std::string out = fmt::format(
      "# options: flash attention {}, overlap grad-reduce {}, param-gather {}, tp-comm {}, "
      "scatter-gather pipeline {}, placement {}, bucket {}",
      on_off(o.flash_attention), on_off(o.overlap_grad_reduce), on_off(o.overlap_param_gather),
      on_off(o.overlap_tp_comm), on_off(o.scatter_gather_pipeline),
      planner::to_string(space.placement), bucket_text(o));
  if (const int64_t divisor = planner::vocab_size_divisible_by(o); divisor > 1) {
    out += fmt::format(", vocab padded to a multiple of {} x tp", divisor);
  }
  if (o.allow_tp_across_nodes) {
    out += ", tp across nodes allowed";
  }
  if (o.flash_attention_version == 1) {
    out += ", flash attention 1";
  }
  if (o.fsdp_version == 1) {
    out += ", fsdp 1";
  }
  if (o.fsdp_head_in_root) {
    out += *o.fsdp_head_in_root ? ", fsdp head in root" : ", fsdp head in own unit";
  }
  if (o.norm_kernel == planner::NormKernel::kEager) {
    out += ", eager rmsnorm";
  }
  if (!o.pipeline_grad_scatter_gather) {
    out += ", pipeline gradients sent whole";
  }
  if (!o.deepspeed_grad_all_reduce) {
    out += ", ZeRO gradients reduced per rank";
  }
  if (o.optimizer_impl != planner::OptimizerImpl::kFused) {
    out += ", optimizer " + planner::to_string(o.optimizer_impl);
  }
  if (!o.weight_decay) {
    out += ", no weight decay";
  }
  if (o.fp8_param_gather) {
    out += ", fp8 param gather";
  }
  if (o.fp8_recipe != planner::Fp8Recipe::kDelayed) {
    out += ", fp8 recipe " + planner::to_string(o.fp8_recipe);
  }
  if (o.cross_entropy_loss_fusion != planner::CrossEntropyFusion::kOff) {
    out += ", cross-entropy fusion " + planner::to_string(o.cross_entropy_loss_fusion);
  }
  if (o.compile) {
    out += o.compile_loss ? ", torch.compile (blocks and loss)"
                          : ", torch.compile (blocks; loss eager)";
  }
  if (o.overlap_p2p_comm) {  // Megatron-Core's default; only interleaved layouts use it
    out += ", p2p overlap (interleaved)";
  }
  if (o.grad_reduce_dtype) {  // unset: the framework's default (README "Frameworks")
    out += ", grad-reduce " + planner::to_string(*o.grad_reduce_dtype);
  }
  if (o.distribute_saved_activations) {
    out += ", saved activations distributed over tp";
  }
  if (o.moe_dispatcher != planner::MoeDispatcher::kAllToAll) {
    out += ", MoE dispatcher " + planner::to_string(o.moe_dispatcher) + " (DeepEP)";
  }
  if (space.search_recompute_layers) {
    out += ", block recompute searched (--recompute-layers auto)";
  } else if (space.recompute_layers > 0) {
    out += fmt::format(", block recompute of {} layers per chunk", space.recompute_layers);
  }
  if (space.search_recompute_modules) {
    out += ", recompute modules searched (--recompute-modules auto)";
  } else if (space.recompute_modules != planner::kRecomputeCoreAttn) {
    out += fmt::format(", recompute modules {}",
                       planner::format_recompute_modules(space.recompute_modules));
  }
  if (space.search_recompute_group_layers) {
    out += ", recompute groups searched (--recompute-group-layers auto)";
  } else if (space.recompute_group_layers > 1) {
    out += fmt::format(", full recompute in groups of {} layers", space.recompute_group_layers);
  }
  if (space.memory_headroom_bytes > 0) {
    out += fmt::format(", memory headroom {:.1f} GiB",
                       static_cast<double>(space.memory_headroom_bytes) / kGiB);
  }
  return out + "\n";
}

std::string format_plan_options(const planner::PlanOptions& options, planner::Placement placement) {
  planner::SearchSpace space;  // nothing searched: the plan's layout is fixed
  space.placement = placement;
  return format_plan_options(options, space);
}

namespace {

// ", sliding window w" (every layer), ", sliding window w on k of l layers" (a pattern), or "".
std::string window_text(const models::TransformerConfig& model) {
  if (!model.is_windowed()) {
    return "";
  }
  int64_t windowed = 0;
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    windowed += model.is_windowed_layer(layer) ? 1 : 0;
  }
  if (windowed == model.num_layers) {
    return fmt::format(", sliding window {}", model.sliding_window);
  }
  return fmt::format(", sliding window {} on {} of {} layers", model.sliding_window, windowed,
                     model.num_layers);
}

// ", logit soft-caps: attention c, final c" (Gemma 2's, whichever are set), or "".
std::string softcap_text(const models::TransformerConfig& model) {
  std::vector<std::string> caps;
  if (model.attn_logit_softcapping > 0.0) {
    caps.push_back(fmt::format("attention {}", model.attn_logit_softcapping));
  }
  if (model.final_logit_softcapping > 0.0) {
    caps.push_back(fmt::format("final {}", model.final_logit_softcapping));
  }
  return caps.empty() ? "" : fmt::format(", logit soft-caps: {}", fmt::join(caps, ", "));
}

}  // namespace

std::string format_plan_header(const models::TransformerConfig& model,
                               const models::ClusterConfig& cluster, int64_t num_gpus,
                               int64_t global_batch, planner::Framework framework) {
  const models::ParameterCounts counts = models::count_parameters(model);
  return fmt::format("# framework {}\n", planner::to_string(framework)) +
         fmt::format(
             "# model {}: {} parameters ({:.2f}B), {} layers, hidden {}, {} heads ({} kv), ffn {}, "
             "vocab {}, seq {}{}{}{}{}{}{}\n"
             "# cluster {}: {} GPUs ({} per node, {}), global batch {} sequences ({} tokens)\n",
             model.name, counts.total, static_cast<double>(counts.total) / 1e9, model.num_layers,
             model.hidden_size, model.num_attention_heads, model.num_kv_heads,
             model.ffn_hidden_size, model.vocab_size, model.seq_length,
             model.is_moe()
                 ? fmt::format(", {} experts top-{} of ffn {} ({:.2f}B active)", model.num_experts,
                               model.experts_per_token, model.expert_ffn_hidden_size,
                               static_cast<double>(counts.active) / 1e9)
                 : "",
             // The multi-token-prediction depths, within the total (count_parameters).
             model.has_mtp() ? fmt::format(", {} MTP depth{} ({:.2f}B)", model.mtp_num_layers,
                                           model.mtp_num_layers > 1 ? "s" : "",
                                           static_cast<double>(counts.mtp) / 1e9)
                             : "",
             window_text(model), model.attention_sinks ? ", attention sinks" : "",
             softcap_text(model), model.parallel_residual ? ", parallel attention and MLP" : "",
             cluster.name, num_gpus, cluster.gpus_per_node, cluster.gpu.name, global_batch,
             global_batch * model.seq_length);
}

nlohmann::json estimate_json(const planner::PlanEstimate& estimate) {
  nlohmann::json stages = nlohmann::json::array();
  for (const planner::StageEstimate& stage : estimate.stages) {
    double forward = 0, backward = 0;
    for (const planner::ChunkCost& chunk : stage.chunks) {
      forward += chunk.forward_seconds();
      backward += chunk.backward_seconds();
    }
    stages.push_back({{"stage", stage.stage},
                      {"num_parameters", stage.num_parameters},
                      {"peak_in_flight_micro_batches", stage.peak_in_flight_micro_batches},
                      {"forward_seconds_per_micro_batch", forward},
                      {"backward_seconds_per_micro_batch", backward},
                      {"optimizer_step_seconds", stage.optimizer_step_seconds},
                      {"dp_grad_sync_seconds", stage.dp_grad_sync_seconds},
                      {"memory", memory_json(stage.memory)}});
  }
  nlohmann::json collectives = nlohmann::json::array();
  for (const planner::CollectiveTraffic& traffic : estimate.collectives) {
    collectives.push_back({{"stage", traffic.stage},
                           {"what", traffic.what},
                           {"kind", to_string(traffic.kind)},
                           {"group", to_string(traffic.group)},
                           {"group_size", traffic.group_size},
                           {"message_bytes", traffic.message_bytes},
                           {"calls_per_step", traffic.calls_per_step},
                           {"total_message_bytes", traffic.total_message_bytes()},
                           {"seconds_per_call", traffic.seconds_per_call}});
  }
  const planner::StepBreakdown& b = estimate.breakdown;
  return {{"layout", planner::layout_to_json(estimate.layout)},
          {"feasible", estimate.feasible},
          {"step_time_s", estimate.step_time_s},
          {"mfu", estimate.mfu},
          {"hfu", estimate.hfu},
          {"model_tflops_per_gpu", estimate.model_tflops_per_gpu},
          {"tokens_per_s", estimate.tokens_per_s},
          {"peak_memory_bytes", estimate.peak_memory_bytes},
          {"model_flops_per_step", estimate.model_flops_per_step},
          {"hardware_flops_per_step", estimate.hardware_flops_per_step},
          {"step_breakdown",
           {{"pipeline_compute_seconds", b.pipeline_compute_seconds},
            {"tp_comm_exposed_seconds", b.tp_comm_exposed_seconds},
            {"bubble_seconds", b.bubble_seconds},
            {"pp_transfer_seconds", b.pp_transfer_seconds},
            {"dp_comm_exposed_seconds", b.dp_comm_exposed_seconds},
            {"optimizer_seconds", b.optimizer_seconds}}},
          {"stages", stages},
          {"collectives", collectives}};
}

Report plan_report(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                   int64_t num_gpus, const planner::SearchResult& result,
                   const planner::PlanOptions& options) {
  nlohmann::json model_json = models::model_to_json(model);
  model_json["num_parameters"] = models::count_parameters(model).total;
  if (model.is_moe()) {
    model_json["num_active_parameters"] = models::count_parameters(model).active;
  }
  nlohmann::json rejections = nlohmann::json::object();
  for (const auto& [code, count] : result.rejections) {
    rejections[code] = count;
  }
  Report report;
  report.json = {{"model", model_json},
                 {"cluster", cluster.name},
                 {"num_gpus", num_gpus},
                 {"num_evaluated", result.num_evaluated},
                 {"num_feasible", result.num_feasible},
                 {"rejections", rejections},
                 {"plans", nlohmann::json::array()}};
  const bool with_cp = std::any_of(result.best.begin(), result.best.end(),
                                   [](const planner::PlanEstimate& e) { return e.layout.cp > 1; });
  const bool moe = model.is_moe();
  report.table = fmt::format(
      "#{:>4} {:>4}{} {:>4} {:>5} {:>4} {:>4} {:>10} {:>3} {:>4} {:>11} {:>8} "
      "{:>9} {:>6} {:>12} {:>5} {:>8} {:>8}{}\n",
      "rank", "tp", with_cp ? "   cp" : "", "pp", "dp", "vpp", "mb", "recompute", "sp", "zero",
      "schedule", "memory", "step", "mfu", "tokens/s", "m", "bubble", "exposed",
      moe ? "    ep" : "");
  report.table += fmt::format(
      "#{:>4} {:>4}{} {:>4} {:>5} {:>4} {:>4} {:>10} {:>3} {:>4} {:>11} {:>8} "
      "{:>9} {:>6} {:>12} {:>5} {:>8} {:>8}\n",
      "", "", with_cp ? "     " : "", "", "", "", "", "", "", "", "", "(GiB)", "(s)", "(%)",
      "(tok/s)", "(mb)", "(s)", "(s)");
  int rank = 1;
  for (const planner::PlanEstimate& e : result.best) {
    add_plan_row(rank++, e, model, options, with_cp, &report);
  }
  report.table +=
      fmt::format("# evaluated {} layouts, {} feasible", result.num_evaluated, result.num_feasible);
  if (!result.best.empty()) {
    const planner::PlanEstimate& best = result.best.front();
    report.table += fmt::format("; best: {:.4f} s/step, MFU {:.1f}%, {:.1f} model TFLOP/s per GPU",
                                best.step_time_s, 100.0 * best.mfu, best.model_tflops_per_gpu);
  }
  report.table += "\n";
  return report;
}

std::string format_rejections(const planner::SearchResult& result) {
  std::string out = fmt::format("#{:>26} {:>10}  {}\n", "rejected because", "layouts", "example");
  for (const auto& [code, count] : result.rejections) {
    out += fmt::format("#{:>26} {:>10}  {}\n", code, count, result.example_reason.at(code));
  }
  return out;
}

std::string format_refined_table(const std::vector<RefinedPlan>& refined) {
  std::string out = fmt::format("# refined by simulation: the best {} analytic plans, re-ranked\n",
                                refined.size());
  out += fmt::format("#{:>4} {:>8} {:>11} {:>11}  {}\n", "rank", "analytic", "simulated",
                     "analytic", "layout");
  out += fmt::format("#{:>4} {:>8} {:>11} {:>11}\n", "", "(rank)", "(s)", "(s)");
  for (size_t i = 0; i < refined.size(); ++i) {
    const RefinedPlan& plan = refined[i];
    out += fmt::format(" {:>4} {:>8} {:>11.4f} {:>11.4f}  {}\n", i + 1, plan.analytic_rank,
                       plan.simulated_step_time_s, plan.analytic_step_time_s,
                       planner::describe(plan.layout));
  }
  return out + "#\n";
}

namespace {

// "a" for one layer, "a-b" for several (0-based, inclusive).
std::string layer_span(int64_t first, int64_t end) {
  return end - first == 1 ? fmt::format("{}", first) : fmt::format("{}-{}", first, end - 1);
}

// Under the memory table: the layers a framework's checkpointed runs leave out of full recompute
// (DeepSpeed's pipeline engine: stage 0's first N - 2 and the last stage's last L mod N;
// planner::recomputed_layers), which keep their whole activations and are not run again; "" when
// the plan's framework recomputes what its layout says.
std::string unchecked_layers_note(const planner::Plan& plan) {
  std::string out;
  for (int64_t stage = 0; stage < plan.layout.pp; ++stage) {
    for (int64_t chunk = 0; chunk < plan.layout.vpp; ++chunk) {
      const planner::LayerRange range =
          planner::chunk_layers(plan.model, plan.layout, stage, chunk);
      const planner::LayerRange run =
          planner::recomputed_layers(plan.model, plan.layout, plan.options, range);
      if (run.count() == planner::recomputed_layers(plan.layout, range).count()) {
        continue;
      }
      std::vector<std::string> spans;
      if (run.count() == 0) {
        spans.push_back(layer_span(range.first, range.end));
      } else {
        if (run.first > range.first) {
          spans.push_back(layer_span(range.first, run.first));
        }
        if (range.end > run.end) {
          spans.push_back(layer_span(run.end, range.end));
        }
      }
      out += fmt::format(
          "# stage {}: {} {} {} in runs of {} that also hold the {} (DeepSpeed checkpoints "
          "runs of transformer layers only): whole activations kept, not recomputed\n",
          stage, range.count() - run.count() == 1 ? "layer" : "layers", fmt::join(spans, " and "),
          range.count() - run.count() == 1 ? "sits" : "sit",
          std::max<int64_t>(plan.layout.recompute_group_layers, 1),
          stage == 0 ? "embedding" : "final norm and head");
    }
  }
  return out;
}

}  // namespace

std::string format_explain(const planner::Plan& plan, const planner::PlanEstimate& e) {
  std::string out = format_plan_header(plan.model, plan.cluster, plan.num_gpus,
                                       plan.layout.global_batch, plan.options.framework);
  out += fmt::format("# layout: {}\n", planner::describe(plan.layout));
  out += format_plan_options(plan.options, plan.layout.placement);
  out += fmt::format(
      "# step {:.4f} s, MFU {:.1f}%, HFU {:.1f}%, {:.1f} model TFLOP/s per GPU, "
      "{:.0f} tokens/s\n#\n",
      e.step_time_s, 100.0 * e.mfu, 100.0 * e.hfu, e.model_tflops_per_gpu, e.tokens_per_s);
  out += "# memory per GPU, by pipeline stage\n";
  out += fmt::format("#{:>5} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}\n", "stage", "weights",
                     "grads", "optimizer", "activations", "reserved", "total", "in-flight");
  out += fmt::format("#{:>5} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>9}\n", "", "(GiB)", "(GiB)",
                     "(GiB)", "(GiB)", "(GiB)", "(GiB)", "(mb)");
  for (const planner::StageEstimate& s : e.stages) {
    const planner::MemoryBreakdown& m = s.memory;
    out +=
        fmt::format(" {:>5} {:>9.2f} {:>9.2f} {:>9.2f} {:>11.2f} {:>9.2f} {:>9.2f} {:>9}\n",
                    s.stage, m.weights_bytes / kGiB, m.gradients_bytes / kGiB,
                    m.optimizer_bytes / kGiB, m.activations_bytes / kGiB, m.reserved_bytes / kGiB,
                    m.total_bytes() / kGiB, s.peak_in_flight_micro_batches);
  }
  out += unchecked_layers_note(plan);
  out += "#\n# time per micro-batch, by pipeline stage and model chunk\n";
  // Exposed context-parallel attention traffic gets two more columns when there is any.
  const bool with_cp = e.layout.cp > 1;
  out += fmt::format("#{:>5} {:>5} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}{}\n", "stage", "chunk",
                     "layers", "fwd", "fwd-tp", "bwd-input", "bwd-weight", "bwd-tp",
                     with_cp ? fmt::format(" {:>10} {:>10}", "fwd-cp", "bwd-cp") : "");
  out += fmt::format("#{:>5} {:>5} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10}{}\n", "", "", "",
                     "(ms)", "(ms)", "(ms)", "(ms)", "(ms)",
                     with_cp ? fmt::format(" {:>10} {:>10}", "(ms)", "(ms)") : "");
  for (const planner::StageEstimate& s : e.stages) {
    for (size_t c = 0; c < s.chunks.size(); ++c) {
      const planner::ChunkCost& k = s.chunks[c];
      out +=
          fmt::format(" {:>5} {:>5} {:>6} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f}{}\n",
                      s.stage, c, k.num_layers, 1e3 * k.forward_compute_seconds,
                      1e3 * k.forward_tp_comm_seconds, 1e3 * k.backward_input_compute_seconds,
                      1e3 * k.backward_weight_compute_seconds, 1e3 * k.backward_tp_comm_seconds,
                      with_cp ? fmt::format(" {:>10.3f} {:>10.3f}", 1e3 * k.forward_cp_comm_seconds,
                                            1e3 * k.backward_cp_comm_seconds)
                              : "");
    }
  }
  const planner::StepBreakdown& b = e.breakdown;
  out += fmt::format(
      "#\n# step: pipeline compute {:.4f} s (tp comm {:.4f}), bubble {:.4f}, pp transfers {:.4f}, "
      "dp exposed {:.4f}, optimizer {:.4f}\n#\n",
      b.pipeline_compute_seconds, b.tp_comm_exposed_seconds, b.bubble_seconds,
      b.pp_transfer_seconds, b.dp_comm_exposed_seconds, b.optimizer_seconds);
  out += "# collectives per step, per rank of each stage (size as nccl-tests: full buffer)\n";
  out += fmt::format("#{:>5} {:>14} {:>9} {:>5} {:>14} {:>7} {:>14} {:>10}  {}\n", "stage", "kind",
                     "group", "ranks", "size", "calls", "total", "time", "what");
  out += fmt::format("#{:>5} {:>14} {:>9} {:>5} {:>14} {:>7} {:>14} {:>10}\n", "", "", "", "",
                     "(B)", "", "(B)", "(us/call)");
  for (const planner::CollectiveTraffic& c : e.collectives) {
    out += fmt::format(" {:>5} {:>14} {:>9} {:>5} {:>14} {:>7} {:>14} {:>10.1f}  {}\n", c.stage,
                       to_string(c.kind), to_string(c.group), c.group_size, c.message_bytes,
                       c.calls_per_step, c.total_message_bytes(), 1e6 * c.seconds_per_call, c.what);
  }
  return out;
}

namespace {

// Appends one validated run as a table row and a JSON record, both from the same values. A run
// not predicted has null prediction fields and its reason under "error".
void add_validation_row(const planner::ValidationRun& run, Report* out, nlohmann::json* runs) {
  std::string searched;
  for (const std::string& field : run.searched) {
    searched += (searched.empty() ? "" : ",") + field;
  }
  // A guessed framework is marked with * (footnote under the table).
  const std::string framework = run.framework.empty() && !run.software_guess.empty()
                                    ? to_string(run.options.framework) + "*"
                                    : (run.framework.empty() ? "-" : run.framework);
  nlohmann::json record = {
      {"id", run.id},
      {"framework",
       run.framework.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.framework)},
      {"costed_framework", to_string(run.options.framework)},
      {"software_guess",
       run.software_guess.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.software_guess)},
      {"options", planner::options_to_json(run.options)},
      {"options_stated", run.options_stated},
      {"used_for_parameters", run.used_for_parameters},
      {"published_step_time_s", run.published_step_time_s},
      {"searched", run.searched}};
  if (!run.predicted) {
    out->table +=
        fmt::format(" {:>36} {:>9} {:>10} {:>10.3f} {:>8}  not predicted: {}\n", run.id, framework,
                    "-", run.published_step_time_s, "-", run.not_predicted_reason);
    record["predicted_step_time_s"] = nullptr;
    record["error_pct"] = nullptr;
    record["layout"] = nullptr;
    record["error"] = run.not_predicted_reason;
    runs->push_back(std::move(record));
    return;
  }
  const planner::PlanEstimate& predicted = *run.predicted;
  // A run over meshplan's memory estimate is marked ! (footnote under the table).
  out->table += fmt::format(" {:>36} {:>9} {:>10.3f} {:>10.3f} {:>+8.1f}  {} [{}]{}\n", run.id,
                            framework, predicted.step_time_s, run.published_step_time_s,
                            run.error_pct(), planner::describe(predicted.layout), searched,
                            run.memory_miss.empty() ? "" : " !");
  record["predicted_step_time_s"] = predicted.step_time_s;
  record["error_pct"] = run.error_pct();
  record["layout"] = planner::layout_to_json(predicted.layout);
  record["mfu"] = predicted.mfu;
  record["peak_memory_bytes"] = predicted.peak_memory_bytes;
  record["memory_miss"] =
      run.memory_miss.empty() ? nlohmann::json(nullptr) : nlohmann::json(run.memory_miss);
  runs->push_back(std::move(record));
}

}  // namespace

Report validation_report(const planner::ValidationReport& report) {
  Report out;
  out.table =
      fmt::format("#{:>36} {:>9} {:>10} {:>10} {:>8}  {}\n", "run", "framework", "predicted",
                  "published", "error", "layout (searched fields in brackets)");
  out.table += fmt::format("#{:>36} {:>9} {:>10} {:>10} {:>8}\n", "", "", "(s)", "(s)", "(%)");
  nlohmann::json runs = nlohmann::json::array();
  for (const planner::ValidationRun& run : report.runs) {
    add_validation_row(run, &out, &runs);
  }
  const size_t num_predicted = report.runs.size() - report.num_not_predicted;
  out.table += fmt::format(
      "# {} runs, {} predicted: mean |error| {:.1f}%, max |error| {:.1f}% (over the predicted "
      "runs); {} not predicted\n",
      report.runs.size(), num_predicted, report.mean_abs_error_pct, report.max_abs_error_pct,
      report.num_not_predicted);
  const auto summary_line = [](const char* what, const planner::ErrorSummary& summary) {
    if (summary.num_predicted == 0) {
      return fmt::format("# {}: no predicted run\n", what);
    }
    return fmt::format("# {}: {} predicted runs, mean |error| {:.1f}%, max |error| {:.1f}%\n", what,
                       summary.num_predicted, summary.mean_abs_error_pct,
                       summary.max_abs_error_pct);
  };
  if (std::any_of(report.runs.begin(), report.runs.end(),
                  [](const planner::ValidationRun& run) { return !run.software_guess.empty(); })) {
    out.table +=
        "# * framework and options guessed from the run's source text and stated layout (it "
        "states neither; README \"Validation\", runs without software):\n";
    for (const planner::ValidationRun& run : report.runs) {
      if (!run.software_guess.empty()) {
        out.table += fmt::format("#   {}: {}\n", run.id, run.software_guess);
      }
    }
  }
  if (report.num_memory_misses > 0) {
    out.table +=
        "# ! over meshplan's memory estimate though the run ran: the step time is predicted in "
        "the layout with the least memory that the run's fields allow (README \"Validation\", "
        "memory misses):\n";
    for (const planner::ValidationRun& run : report.runs) {
      if (!run.memory_miss.empty()) {
        out.table += fmt::format("#   {}: {}\n", run.id, run.memory_miss);
      }
    }
  }
  if (report.parameters_marked) {
    out.table += summary_line("efficiency parameters chosen on", report.chosen_on);
    out.table += summary_line("held out (not used to choose them)", report.held_out);
  } else {
    out.table +=
        "# efficiency parameters chosen on: not stated here (no run has used_for_parameters); "
        "the project's validation/public_runs.json marks them\n";
  }
  if (report.num_not_predicted > 0) {
    out.table += fmt::format("# FAILED: {} of {} runs not predicted\n", report.num_not_predicted,
                             report.runs.size());
  }
  if (report.num_memory_misses > 0) {
    out.table += fmt::format("# FAILED: {} of {} runs over meshplan's memory estimate\n",
                             report.num_memory_misses, report.runs.size());
  }
  if (report.num_not_predicted == 0 && report.num_memory_misses == 0) {
    out.table += "# OK: every run predicted\n";
  }
  const auto over_predicted = [&](double value) {
    return num_predicted > 0 ? nlohmann::json(value) : nlohmann::json(nullptr);
  };
  out.json = {{"runs", runs},
              {"num_runs", report.runs.size()},
              {"num_predicted", num_predicted},
              {"num_not_predicted", report.num_not_predicted},
              {"num_memory_misses", report.num_memory_misses},
              {"mean_abs_error_pct", over_predicted(report.mean_abs_error_pct)},
              {"max_abs_error_pct", over_predicted(report.max_abs_error_pct)}};
  for (const auto& [key, summary] :
       {std::pair{"chosen_on", report.chosen_on}, std::pair{"held_out", report.held_out}}) {
    const bool any = summary.num_predicted > 0;
    if (!report.parameters_marked) {
      out.json[key] = nullptr;  // unknown: no run says whether it chose them
      continue;
    }
    out.json[key] = {
        {"num_predicted", summary.num_predicted},
        {"mean_abs_error_pct", any ? nlohmann::json(summary.mean_abs_error_pct) : nullptr},
        {"max_abs_error_pct", any ? nlohmann::json(summary.max_abs_error_pct) : nullptr}};
  }
  return out;
}

}  // namespace meshplan::reports
