#pragma once
// A parallel layout in Megatron-LM's vocabulary, and the rank placement it implies.

#include <cstdint>
#include <string>
#include <vector>

namespace meshplan::planner {

/// kSelective: Korthikanti et al. 2022 (Megatron --recompute-granularity selective), the
/// attention core re-run. kSelectiveOp ("selective-op"): torchtitan's op-level selective AC
/// (selective_ac_option "op"): the block's SDPA and every odd-numbered mm output kept, every
/// second mm and the element-wise work re-run (compute_cost.cpp op_sac_recompute); fsdp only.
enum class Recompute { kNone, kSelective, kFull, kSelectiveOp };

/// Megatron-Core's --recompute-modules under selective recompute (transformer_config.py
/// recompute_modules, d98e8a64; default ["core_attn"]), as bit flags of Layout::recompute_modules.
/// The modules meshplan costs:
///   core_attn: the attention core (Korthikanti et al. 2022, Sec. 5), normal checkpointing;
///   moe_act:   the routed experts' activation function (experts.py, CheckpointWithoutOutput:
///              its output, the second expert GEMM's input, is dropped after that GEMM);
///   layernorm: the norms that are modules of their own (transformer_layer.py: not the ones
///              Transformer Engine fuses into the next linear layer, IdentityOp there): an MoE
///              layer's pre-MLP norm and a latent-attention layer's input norm;
///   mla_up_proj: latent attention's up projections and rope (multi_latent_attention.py
///              qkv_up_proj_and_rope_apply under CheckpointWithoutOutput: Q, K and V dropped
///              after the attention core);
///   mlp:       a dense layer's whole MLP, normal checkpointing (transformer_layer.py
///              recompute_mlp; MoE layers are not affected);
///   shared_experts: an MoE layer's shared experts' MLP, normal checkpointing (moe_layer.py
///              shared_experts_compute under tensor_parallel.checkpoint);
///   moe:       an MoE layer's whole MoE block (router, dispatch, experts, combine, shared
///              experts), normal checkpointing (moe_layer.py MoELayer.forward).
enum RecomputeModule : uint32_t {
  kRecomputeCoreAttn = 1u << 0,
  kRecomputeMoeAct = 1u << 1,
  kRecomputeLayernorm = 1u << 2,
  kRecomputeMlaUpProj = 1u << 3,
  kRecomputeMlp = 1u << 4,
  kRecomputeSharedExperts = 1u << 5,
  kRecomputeMoe = 1u << 6,
};

/// Pipeline schedules. kOneFOneB is PipeDream-Flush (Narayanan et al. 2021, Fig. 4 top);
/// kInterleaved is Megatron-LM's interleaved 1F1B with vpp model chunks per stage (ibid. Fig. 4
/// bottom); kZbH1 is Qi et al. 2023 "Zero Bubble Pipeline Parallelism", ZB-H1.
enum class ScheduleKind { kGpipe, kOneFOneB, kInterleaved, kZbH1 };

/// How global ranks map to (tp, cp, dp, pp) coordinates. The first-named dimension varies
/// fastest, and context parallelism always sits between tp and the rest, as in Megatron-Core's
/// order "tp-cp-ep-dp-pp" (megatron/core/parallel_state.py, initialize_model_parallel, d98e8a64).
/// kTpDpPp is Megatron-LM's default order:
///   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)).
/// kTpPpDp: rank = tp_rank + tp * (cp_rank + cp * (pp_rank + pp * dp_rank)); it needs cp = 1
/// (check_layout "cp_placement"), since its dp x cp gradient group has no single stride.
enum class Placement { kTpDpPp, kTpPpDp };

struct Layout {
  int64_t tp = 1;            // tensor model parallel size
  int64_t pp = 1;            // pipeline model parallel size
  int64_t dp = 1;            // data parallel size
  int64_t cp = 1;            // context parallel size: the sequence split over cp ranks
  int64_t vpp = 1;           // virtual pipeline stages (model chunks) per pipeline rank
  int64_t micro_batch = 1;   // sequences per micro-batch
  int64_t global_batch = 1;  // sequences per optimizer step
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  int zero = 0;  // 0-3; 1 is Megatron's distributed optimizer
  ScheduleKind schedule = ScheduleKind::kOneFOneB;
  Placement placement = Placement::kTpDpPp;
  // Expert model parallel size (Megatron --expert-model-parallel-size): each MoE layer's experts
  // are split over ep ranks. Megatron-Core lays a second grid, etp x ep x expert-dp (x pp), over
  // the same tp x cp x dp ranks of a stage (parallel_state.py initialize_model_parallel:
  // expert_decoder_rank_generator, order tp-ep-dp-pp, cp 1), so the ep group is ep ranks etp
  // apart and etp * ep divides tp * cp * dp (expert_parallel_ranks). With etp = tp these are
  // ep consecutive ranks of the gradient group dp x cp.
  int64_t ep = 1;
  // Expert tensor parallel size (Megatron --expert-tensor-parallel-size): each routed expert's
  // weights are split over etp ranks (experts.py TEGroupedMLP on the expert tp group). 0 means
  // tp, Megatron's default (arguments.py: None -> tensor_model_parallel_size), and is the only
  // spelling of it: read it through expert_tensor_parallel(), set it with
  // set_expert_tensor_parallel(). meshplan models etp dividing tp (check_layout "etp_tp").
  int64_t etp = 0;
  // Transformer layers of each pipeline stage, [pp]; empty: the even split, num_layers / pp on
  // every stage. Set only for an uneven split: Megatron-Core's
  // --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers or an explicit
  // list. Read it through stage_layer_range (cost_model.h), never directly.
  std::vector<int64_t> stage_layers;
  // Transformer layers of each virtual stage, [pp * vpp] in virtual-stage order v = chunk * pp +
  // stage, as Megatron-Core's --pipeline-model-parallel-layout lists them
  // (pipeline_parallel_layer_layout.py); empty unless it differs from how stage_layer_range
  // splits each stage's count over its chunks (DeepSeek-V3's "Et|(tt|)*30mL": 1,2,...,2,0).
  // stage_layers then holds its per-stage sums (canonical: {} when even). Set it through
  // pipeline_layout_split (pipeline_layout.h); read it through stage_layer_range.
  std::vector<int64_t> virtual_stage_layers;
  // Interleaved schedule only: micro-batches each model chunk runs in a row before the next
  // chunk, Megatron-Core's --microbatch-group-size-per-virtual-pipeline-stage
  // (model_parallel_config.py microbatch_group_size_per_vp_stage; Llama 3's N, Dubey et al.
  // 2024, Sec. 3.3.2). 0: Megatron's default, pp. Read it through microbatch_group_size().
  int64_t microbatch_group = 0;
  // Hybrid sharding (HSDP; torchtitan's data_parallel_shard_degree, FSDP2 fully_shard on a 2-D
  // (replicate, shard) mesh): ZeRO-3 shards the model states over dp_shard data-parallel ranks
  // (times cp) and keeps dp / dp_shard replicas of each shard. 0 means dp, full sharding, and is
  // the only spelling of it: read it through dp_shard_size(), set it with set_dp_shard().
  int64_t dp_shard = 0;
  // With recompute full: transformer layers of each model chunk that are recomputed,
  // Megatron-Core's --recompute-method block --recompute-num-layers N (megatron/core/recompute.py
  // at d98e8a64, the block branch: the chunk's first N layers checkpointed, the others keep their
  // activations). 0 means every layer, meshplan's full recompute (Megatron's uniform method,
  // one layer per group). Read it through recomputed_layer_count().
  int64_t recompute_layers = 0;
  // With recompute full: transformer layers per checkpointed group, Megatron-Core's
  // --recompute-method uniform --recompute-num-layers N (recompute.py, the uniform branch: each
  // chunk's layers in groups of N from its first, each group's input kept, the group's forward
  // run again before its backward) and DeepSpeed's PipelineModule activation_checkpoint_interval.
  // 0 or 1: one layer per group. Not with recompute_layers (the block method). Read it through
  // checkpointed_input_count() and rebuilt_layer_count().
  int64_t recompute_group_layers = 0;
  // With recompute selective: the RecomputeModule flags recomputed, Megatron-Core's
  // --recompute-modules; the default is its default, the attention core alone. Read it through
  // recomputes_module().
  uint32_t recompute_modules = kRecomputeCoreAttn;

  int64_t num_gpus() const { return tp * cp * pp * dp; }
  /// Micro-batches per pipeline per step: global_batch / (dp * micro_batch).
  int64_t num_micro_batches() const { return global_batch / (dp * micro_batch); }

  bool operator==(const Layout&) const = default;
};

/// The rules every part reads from a layout (planner, simulator, executor), named once.
///
/// Layers of a model chunk of `chunk_layers` layers that are recomputed: all of them under full
/// recompute (recompute_layers 0, or at least the chunk's count), its first recompute_layers
/// under Megatron's block method, none without full recompute.
inline int64_t recomputed_layer_count(const Layout& layout, int64_t chunk_layers) {
  if (layout.recompute != Recompute::kFull) {
    return 0;
  }
  if (layout.recompute_layers <= 0 || layout.recompute_layers >= chunk_layers) {
    return chunk_layers;
  }
  return layout.recompute_layers;
}

/// The largest recompute_layers or recompute_group_layers a plan states: the model loader's
/// layer bound (a chunk never has more layers), so a plan written is a plan read back.
inline constexpr int64_t kMaxRecomputeLayers = 100'000;

/// Whether selective recompute re-runs `module` (Layout::recompute_modules); false under any
/// other recompute.
inline bool recomputes_module(const Layout& layout, RecomputeModule module) {
  return layout.recompute == Recompute::kSelective && (layout.recompute_modules & module) != 0;
}

/// Layer inputs a model chunk of `chunk_layers` layers keeps per micro-batch for its recompute:
/// one per recomputed layer (recomputed_layer_count), or under the uniform method one per group
/// of recompute_group_layers, ceil(L / N); 0 without full recompute.
inline int64_t checkpointed_input_count(const Layout& layout, int64_t chunk_layers) {
  const int64_t recomputed = recomputed_layer_count(layout, chunk_layers);
  const int64_t group = layout.recompute_group_layers > 1 ? layout.recompute_group_layers : 1;
  return (recomputed + group - 1) / group;
}

/// checkpointed_input_count over recomputed_layer_count for a chunk of `chunk_layers` layers:
/// 1 when each recomputed layer keeps its own input, 1/N-ish under the uniform method's groups
/// (every layer input has the same bytes, so a chunk's inputs can be charged per recomputed
/// layer); 1 when nothing is recomputed.
inline double checkpointed_inputs_per_recomputed_layer(const Layout& layout, int64_t chunk_layers) {
  const int64_t recomputed = recomputed_layer_count(layout, chunk_layers);
  if (recomputed == 0) {
    return 1.0;
  }
  return static_cast<double>(checkpointed_input_count(layout, chunk_layers)) /
         static_cast<double>(recomputed);
}

/// Layers whose activations one recompute rebuilds together (a group's backward holds them all
/// until it has run through them): recompute_group_layers under the uniform method, at most
/// the chunk's `chunk_layers`; 1 otherwise.
inline int64_t rebuilt_layer_count(const Layout& layout, int64_t chunk_layers) {
  if (layout.recompute != Recompute::kFull || layout.recompute_group_layers <= 1) {
    return 1;
  }
  return layout.recompute_group_layers < chunk_layers ? layout.recompute_group_layers
                                                      : chunk_layers;
}
/// Virtual pipeline stage of model chunk `chunk` on pipeline rank `stage`: v = chunk * pp +
/// stage (Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM's interleaved assignment), so
/// activations go to v + 1 and gradients to v - 1.
inline int64_t virtual_stage(int64_t pp, int64_t stage, int64_t chunk) {
  return chunk * pp + stage;
}

/// Decoder layers per pipeline stage of a per-virtual-stage list (Layout::virtual_stage_layers,
/// v order): stage s sums entries s, s + pp, s + 2 pp, ...
inline std::vector<int64_t> stage_sums_of_virtual_stages(int64_t pp,
                                                         const std::vector<int64_t>& layers) {
  std::vector<int64_t> sums(static_cast<size_t>(pp), 0);
  for (size_t v = 0; v < layers.size(); ++v) {
    sums[v % static_cast<size_t>(pp)] += layers[v];
  }
  return sums;
}

/// Micro-batches per group of the interleaved schedule: layout.microbatch_group, or pp when 0
/// (Megatron-Core model_parallel_config.py __post_init__: None -> pipeline_model_parallel_size).
inline int64_t microbatch_group_size(const Layout& layout) {
  return layout.microbatch_group > 0 ? layout.microbatch_group : layout.pp;
}

/// Ranks that hold the same parameters and reduce their gradients together: dp * cp. Context-
/// parallel ranks see different tokens of the same sequences, so Megatron-Core reduces
/// gradients and shards its distributed optimizer over the data-parallel group "with context
/// parallel" (distributed_data_parallel.py dp_cp_group; optimizer/__init__.py
/// data_parallel_group=intra_dp_cp_group, d98e8a64). Every dp collective and ZeRO shard below
/// is over this group.
inline int64_t grad_group_size(const Layout& layout) {
  return layout.dp * layout.cp;
}

/// Data-parallel ranks of one shard group: layout.dp_shard, or dp when it is 0 (full sharding).
inline int64_t dp_shard_size(const Layout& layout) {
  return layout.dp_shard > 0 ? layout.dp_shard : layout.dp;
}
/// Replicas of each shard under hybrid sharding: dp / dp_shard (1 under full sharding).
inline int64_t dp_replicate_size(const Layout& layout) {
  return layout.dp / dp_shard_size(layout);
}
/// Whether the layout shards over part of the data-parallel ranks only (HSDP).
inline bool hybrid_sharded(const Layout& layout) {
  return dp_replicate_size(layout) > 1;
}
/// Sets the shard group's data-parallel size, stored as 0 when it equals dp (its one spelling).
inline void set_dp_shard(Layout& layout, int64_t dp_shard) {
  layout.dp_shard = dp_shard == layout.dp ? 0 : dp_shard;
}
/// Ranks ZeRO shards model states over: the gradient group dp * cp, or under hybrid sharding
/// its shard group dp_shard * cp (torchtitan's "dp_shard_cp" mesh dimension,
/// torchtitan/distributed/parallel_dims.py); the gradient group still reduces every gradient.
inline int64_t zero_shard_group_size(const Layout& layout) {
  return dp_shard_size(layout) * layout.cp;
}

/// Expert tensor parallel size: layout.etp, or tp when it is 0 (Megatron's default).
inline int64_t expert_tensor_parallel(const Layout& layout) {
  return layout.etp > 0 ? layout.etp : layout.tp;
}
/// Sets the expert tensor parallel size, stored as 0 when it equals tp (its one spelling), so
/// layouts that differ only in how they say "etp = tp" compare equal.
inline void set_expert_tensor_parallel(Layout& layout, int64_t etp) {
  layout.etp = etp == layout.tp ? 0 : etp;
}

/// Expert data parallel size: the ranks holding the same experts, tp * cp * dp / (etp * ep)
/// (Megatron-Core parallel_state.py initialize_model_parallel: expert_data_parallel_size =
/// world_size / (expert_tensor_parallel_size * expert_model_parallel_size * pp); dp * cp / ep
/// when etp = tp); expert gradients are reduced, and ZeRO-sharded, over it.
inline int64_t expert_data_parallel(const Layout& layout) {
  return layout.tp * grad_group_size(layout) / (expert_tensor_parallel(layout) * layout.ep);
}
/// The layout as expert parameters see it: ZeRO shards them over the expert data parallel
/// group (Megatron's distributed optimizer keeps expert parameters in their own buffers,
/// sharded over expert-data-parallel ranks), so the gradient group becomes
/// tp * cp * dp / (etp * ep) and the tensor-parallel size etp.
inline Layout expert_layout(const Layout& layout) {
  Layout expert = layout;
  expert.tp = expert_tensor_parallel(layout);
  expert.etp = 0;
  expert.dp = expert_data_parallel(layout);
  expert.cp = 1;
  expert.ep = 1;
  return expert;
}

/// ZeRO (Rajbhandari et al. 2020, Fig. 1): stage 1 shards optimizer states over the shard
/// group (zero_shard_group_size: the gradient group, or its shard part under HSDP), stage 2
/// also gradients, stage 3 also parameters. With a group of one nothing is sharded.
inline bool zero_shards_optimizer(const Layout& layout) {
  return layout.zero >= 1 && zero_shard_group_size(layout) > 1;
}
inline bool zero_shards_gradients(const Layout& layout) {
  return layout.zero >= 2 && zero_shard_group_size(layout) > 1;
}
inline bool zero_shards_parameters(const Layout& layout) {
  return layout.zero >= 3 && zero_shard_group_size(layout) > 1;
}
/// Elements of `count` one rank updates: ceil(count / shard group) when ZeRO shards the
/// optimizer (the buffer is padded to a multiple of the shard group), else all of them.
inline int64_t zero_shard_count(const Layout& layout, int64_t count) {
  const int64_t group = zero_shard_group_size(layout);
  return zero_shards_optimizer(layout) ? (count + group - 1) / group : count;
}

/// Whether (schedule, pp, vpp, micro-batches, group size N) can be scheduled: interleaved needs
/// pp >= 2, vpp >= 2, pp <= N <= m and m % N either 0 or >= pp (Megatron-Core
/// schedules.py forward_backward_pipelining_with_interleaving raises on the same: "should
/// range in [PP, M]", "the remainder of M ... divided by N ... should be 0, or larger than or
/// equal to the pipeline-parallel size"); with N = pp that is m divisible by pp. The others
/// need vpp = 1 and no group size. `microbatch_group` 0 means pp. Returns "" when fine, else
/// "vpp_schedule", "interleaved_micro_batches" or "microbatch_group" with `reason` set.
std::string check_schedule_shape(ScheduleKind schedule, int64_t pp, int64_t vpp,
                                 int64_t num_micro_batches, std::string* reason,
                                 int64_t microbatch_group = 0);

struct RankCoords {
  int64_t tp_rank = 0;
  int64_t cp_rank = 0;
  int64_t dp_rank = 0;
  int64_t pp_rank = 0;
};

RankCoords rank_coords(const Layout& layout, int64_t rank);
int64_t global_rank(const Layout& layout, const RankCoords& coords);

/// Global ranks of the expert-parallel group holding `rank`, in ep-rank order: Megatron-Core's
/// expert grid numbers a stage's tp x cp x dp ranks (flattened tp fastest, then cp, then dp)
/// as etp_rank + etp * (ep_rank + ep * expert_dp_rank) (parallel_state.py, expert order
/// tp-ep-dp-pp), so the group is ep ranks etp apart of that flattening. Precondition: the
/// layout passed check_layout.
std::vector<int64_t> expert_parallel_ranks(const Layout& layout, int64_t rank);

std::string to_string(Recompute recompute);
std::string to_string(ScheduleKind schedule);
std::string to_string(Placement placement);
/// Parse the CLI/JSON spellings ("none", "selective", "full"; "gpipe", "1f1b", "interleaved",
/// "zb-h1"; "tp-dp-pp", "tp-pp-dp"). Throw InputError naming `field` on anything else.
Recompute parse_recompute(const std::string& text, const std::string& field);
/// RecomputeModule flags as Megatron-Core names them, in flag order: {"core_attn", "moe_act"}.
std::vector<std::string> recompute_module_names(uint32_t modules);
/// The same names comma-separated: "core_attn,moe_act".
std::string format_recompute_modules(uint32_t modules);
/// Parses Megatron-Core's module names (a list, comma-separated on the CLI): the costed ones of
/// RecomputeModule; the others Megatron-Core has are refused as not modelled, anything else as
/// unknown, and an empty list (use recompute none) too. Throws InputError naming `field`.
uint32_t parse_recompute_modules(const std::vector<std::string>& names, const std::string& field);
ScheduleKind parse_schedule(const std::string& text, const std::string& field);
Placement parse_placement(const std::string& text, const std::string& field);

/// "tp=8 pp=4 dp=32 vpp=1 mb=1 recompute=full sp=off zero=0 schedule=1f1b"; " cp=C" follows
/// dp when cp > 1, " dp_shard=S" follows dp (and cp) under hybrid sharding, " mb_group=N" follows
/// the schedule when set, " stage_layers=7,8,...,8,7" when the split is uneven,
/// " virtual_stage_layers=1,2,...,2,0" when a layout string set it, " ep=E" when ep > 1, and
/// " etp=E" ends it when etp != tp.
std::string describe(const Layout& layout);

/// "7,8,8,7": a stage-layer list as the CLI and the reports spell it.
std::string format_stage_layers(const std::vector<int64_t>& stage_layers);

}  // namespace meshplan::planner
