#pragma once
// The analytical cost model: memory, compute and communication of one training step of one
// layout. Every formula lives here (planner/*.cpp); the simulator and executor call these
// functions and never restate them. Units: bytes, seconds, FLOPs.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/plan_options.h"
#include "meshplan/schedule.h"
#include "meshplan/units.h"
#include "meshplan/validity.h"

namespace meshplan::planner {

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kSendRecv, kAllToAll };
/// kDp is the gradient group of grad_group_size(layout) = dp * cp ranks; kCp the cp ranks of
/// one (tp, dp, pp) coordinate, the ring of context-parallel attention; kEp the expert-parallel
/// group (ep ranks etp apart: expert_parallel_ranks); kExpertDp the expert data parallel group
/// (tp * cp * dp / (etp * ep) ranks etp * ep apart holding the same experts). Under hybrid
/// sharding (hybrid_sharded) kDpShard is the shard group of zero_shard_group_size ranks (the
/// first dp_shard * cp of the gradient group, consecutive at stride tp) and kDpReplicate the
/// dp / dp_shard ranks holding the same shard (stride tp * cp * dp_shard).
enum class CommGroup { kTp, kPp, kDp, kEmbedding, kCp, kEp, kExpertDp, kDpShard, kDpReplicate };
std::string to_string(CollectiveKind kind);
std::string to_string(CommGroup group);

/// One kind of collective a rank issues during a step. `message_bytes` is nccl-tests' "size":
/// the full (unsharded) buffer of an all-reduce, the gathered output of an all-gather, the
/// input of a reduce-scatter, the payload of a send. Bytes on the wire per rank follow from the
/// ring algorithm: 2(n-1)/n, (n-1)/n, (n-1)/n and 1 times message_bytes (nccl-tests
/// doc/PERFORMANCE.md); an all-to-all's message is each rank's whole send buffer, (n-1)/n of
/// which leaves the rank (nccl-tests src/alltoall.cu AlltoAllGetBw).
struct CollectiveTraffic {
  std::string what;  // "tp: attention output all-reduce (forward)"
  CollectiveKind kind = CollectiveKind::kAllReduce;
  CommGroup group = CommGroup::kTp;
  int64_t group_size = 1;
  int64_t stage = 0;  // pipeline rank that issues it
  int64_t message_bytes = 0;
  int64_t calls_per_step = 0;
  double seconds_per_call = 0;  // alpha-beta ring time, tiered by placement
  int64_t total_message_bytes() const { return message_bytes * calls_per_step; }
};

/// Per-rank memory of one pipeline stage, bytes. Model states per ZeRO (Rajbhandari et al.
/// 2020, Fig. 1); activations per Korthikanti et al. 2022 (Sec. 4, eqs. 1-6) times the peak
/// in-flight count from the schedule's op list.
struct MemoryBreakdown {
  int64_t weights_bytes = 0;
  int64_t gradients_bytes = 0;
  int64_t optimizer_bytes = 0;
  int64_t activations_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t total_bytes() const {
    return weights_bytes + gradients_bytes + optimizer_bytes + activations_bytes + reserved_bytes;
  }
};

/// One transformer layer as Megatron-Core's EP all-to-all overlap splits it into schedule nodes
/// (model_chunk_schedule_plan.py TransformerLayerSchedulePlan, d98e8a64): the pre-dispatch node
/// (attention, norms, router, token permutation, shared experts, tp and cp collectives), the
/// dispatch all-to-all, the routed experts (mlp node), the combine all-to-all. Backward times
/// hold the weight gradients (delay_wgrad_compute off). A dense layer has only the first.
struct EpOverlapLayer {
  double attention_forward_seconds = 0;
  double mlp_forward_seconds = 0;
  double attention_backward_seconds = 0;
  double mlp_backward_seconds = 0;
  double dispatch_seconds = 0;  // forward dispatch; its transpose in the backward takes the same
  double combine_seconds = 0;
  // The weight-gradient parts of attention_backward_seconds and mlp_backward_seconds (what
  // delay_wgrad_compute takes out of the event chain).
  double attention_weight_seconds = 0;
  double mlp_weight_seconds = 0;
  // An MTP depth's mtp_post_process node (its final norm, the shared output layer and the loss),
  // on the computation stream after combine_fwd and before combine_bwd; 0 for a decoder layer.
  double post_forward_seconds = 0;
  double post_backward_seconds = 0;
};

/// One micro-batch through one model chunk on one rank. Compute and exposed tensor-parallel
/// communication are kept apart so the simulator can put them on different streams.
struct ChunkCost {
  int64_t num_layers = 0;
  bool has_embedding = false;
  bool has_lm_head = false;  // final norm, LM head, loss
  double forward_compute_seconds = 0;
  double forward_tp_comm_seconds = 0;          // exposed
  double backward_input_compute_seconds = 0;   // B (includes recompute forward, if any)
  double backward_weight_compute_seconds = 0;  // W
  double backward_tp_comm_seconds = 0;         // exposed, recompute's included
  double forward_cp_comm_seconds = 0;          // exposed cp attention traffic
  double backward_cp_comm_seconds = 0;         // exposed, recompute's included
  double forward_ep_comm_seconds = 0;          // MoE all-to-alls (dispatch, combine), exposed
  double backward_ep_comm_seconds = 0;         // their backward (and recompute's)
  int64_t num_moe_layers = 0;                  // of num_layers
  // overlap_moe_expert_parallel_comm: how much shorter a forward merged with another
  // micro-batch's backward on this chunk runs than the two in sequence (all-to-all time the
  // other's compute hides; ep_overlap_layers_seconds). 0 when off.
  double ep_overlap_saved_seconds = 0;
  // overlap_moe_expert_parallel_comm: the chunk's layers as schedule nodes, forward order (for
  // merged pairs of two chunks, ep_overlap_pair_saved_seconds). Empty when off.
  std::vector<EpOverlapLayer> ep_overlap_layers;
  bool ep_overlap_delay_wgrad = false;  // delay_wgrad_compute (ep_overlap_layers_seconds)
  int64_t forward_flops = 0;            // matmul FLOPs executed, per rank
  int64_t backward_flops = 0;           // recompute included
  double forward_seconds() const {
    return forward_compute_seconds + forward_tp_comm_seconds + forward_cp_comm_seconds +
           forward_ep_comm_seconds;
  }
  double backward_seconds() const {
    return backward_input_compute_seconds + backward_weight_compute_seconds +
           backward_tp_comm_seconds + backward_cp_comm_seconds + backward_ep_comm_seconds;
  }
};

struct StageEstimate {
  int64_t stage = 0;
  std::vector<ChunkCost> chunks;  // [vpp]
  int64_t peak_in_flight_micro_batches = 0;
  MemoryBreakdown memory;
  int64_t num_parameters = 0;  // per rank of this stage (tp-sharded)
  double optimizer_step_seconds = 0;
  double dp_grad_sync_seconds = 0;  // full duration of the gradient collectives
};

/// Where one step's time goes, on the critical stage.
struct StepBreakdown {
  double pipeline_compute_seconds = 0;  // busy time of the critical stage's F and B
  double tp_comm_exposed_seconds = 0;   // part of the above spent in tp collectives
  double bubble_seconds = 0;            // pipeline fill and drain
  double pp_transfer_seconds = 0;       // exposed stage-to-stage transfers
  double dp_comm_exposed_seconds = 0;   // gradient sync not hidden behind backward
  double optimizer_seconds = 0;
};

struct PlanEstimate {
  Layout layout;
  bool feasible = false;
  std::string rejection_code;    // "memory", "tp_heads", ... (empty when feasible)
  std::string rejection_reason;  // one line, with values
  double step_time_s = 0;
  StepBreakdown breakdown;
  double model_flops_per_step = 0;     // Megatron-LM count, no recompute
  double hardware_flops_per_step = 0;  // executed, recompute included
  double mfu = 0;
  double hfu = 0;
  double model_tflops_per_gpu = 0;
  double tokens_per_s = 0;
  int64_t peak_memory_bytes = 0;      // max over stages
  std::vector<StageEstimate> stages;  // [pp]
  std::vector<CollectiveTraffic> collectives;
};

/// Time of one merged forward-backward over a chunk's layers (TransformerModelChunkSchedulePlan
/// .run): forward layer i beside backward layer i of `backward` (the chunk's layers in backward
/// order), the layers one side lacks run alone, replayed on a compute and a communication stream
/// in TransformerLayerSchedulePlan.run's issue order, each node after the same micro-batch's
/// previous node (docs/research/ep-a2a-overlap.md).
/// With `delay_wgrad` (delay_wgrad_compute) the backward's weight gradients run on the
/// computation stream outside the backward's event chain: mlp_weight after mlp_bwd (issue item 5,
/// before dispatch_bwd), attention_weight after pre_dispatch_bwd (item 10).
double ep_overlap_layers_seconds(const std::vector<EpOverlapLayer>& forward,
                                 const std::vector<EpOverlapLayer>& backward,
                                 bool delay_wgrad = false);

/// How much shorter one micro-batch's forward through `forward`'s layers merged with another's
/// backward through `backward`'s layers (in reverse: TransformerModelChunkSchedulePlan.run pairs
/// forward layer i with the backward's i-th popped layer, the last first) runs than the two in
/// sequence: the forward's nodes in sequence plus the backward alone (ep_overlap_layers_seconds
/// with no forward: its nodes in sequence, or with delay_wgrad_compute its weight gradients
/// beside its dispatch) minus the merged ep_overlap_layers_seconds, at least 0. The chunks may
/// differ (interleaved pipelining merges a forward of one chunk with a backward of another).
double ep_overlap_pair_saved_seconds(const ChunkCost& forward, const ChunkCost& backward);

/// Full estimate of one layout (valid or not: an invalid one comes back infeasible, with its
/// reason). Throws nothing for infeasible layouts.
PlanEstimate estimate_plan(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const Layout& layout,
                           const PlanOptions& options = {});

/// The vocabulary padding divisor d a plan is costed with: options.make_vocab_size_divisible_by
/// when given, else the framework's default: 128 under megatron (Megatron-LM d98e8a64
/// arguments.py `--make-vocab-size-divisible-by`) and deepspeed (Megatron-DeepSpeed's same flag,
/// GPT-NeoX's `make_vocab_size_divisible_by`, both 128), 1 under fsdp (torchtitan builds the
/// tokenizer's vocabulary as it is) and meshplan (its executor builds whatever rows the divisor
/// pads to; 1 keeps the plan's vocabulary at a multiple of tp only).
int64_t vocab_size_divisible_by(const PlanOptions& options);

/// Vocabulary rows as the framework builds them: V padded to the smallest multiple of d tp,
/// ceil(V / (d tp)) d tp with d = vocab_size_divisible_by(options) (Megatron-LM build_tokenizer.py
/// vocab_size_with_padding: "divisible by model parallel size and still having GPU friendly
/// size"), so the vocab-parallel embedding and LM head split evenly over tp.
int64_t padded_vocab_size(const models::TransformerConfig& model, int64_t tp,
                          const PlanOptions& options);

/// "" when the framework builds the vocabulary padded as options say, else why not: a divisor
/// above 1 under fsdp (torchtitan pads nothing), or a divisor outside 1..2^20 (1,048,576). The
/// message names the field as `field`.
std::string vocab_padding_error(const PlanOptions& options, std::string_view field);
/// Throws InputError with vocab_padding_error's message when it has one (check_precision calls
/// it with the plan-file name, make_vocab_size_divisible_by; the CLI with its flag).
/// Layout-independent and cheap when it passes (no allocation): the search calls it per layout.
void check_vocab_padding_options(const PlanOptions& options, std::string_view field);

/// Parameters one rank of pipeline stage `stage` holds (tp-sharded matrices, replicated norms
/// and row-parallel biases, padded vocab-parallel embedding on the first stage, untied or
/// pipeline-tied LM head on the last). The executor allocates exactly this many.
int64_t stage_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage, const PlanOptions& options);

/// What the compute cost tells one transformer layer by: an MoE or a dense MLP
/// (TransformerConfig::is_moe_layer), attention over the sliding window or full causal
/// attention (TransformerConfig::is_windowed_layer). A chunk costs the sum of its layers' kinds.
struct LayerKind {
  bool moe = false;
  bool windowed = false;
  bool operator==(const LayerKind&) const = default;
};
inline constexpr std::array<LayerKind, 4> kLayerKinds = {
    {{false, false}, {false, true}, {true, false}, {true, true}}};
LayerKind layer_kind(const models::TransformerConfig& model, int64_t layer);
/// The kind of each multi-token-prediction depth's transformer layer: the decoder's last layer's
/// (Megatron-Core gpt_layer_specs.py get_gpt_mtp_block_spec uses the decoder's last layer spec).
LayerKind mtp_layer_kind(const models::TransformerConfig& model);
/// Whether the word embedding's gradient is all-reduced between the first and the last pipeline
/// stage (Megatron-Core finalize_model_grads.py _allreduce_word_embedding_grads): pp > 1 with a
/// tied head, or with MTP, whose last stage holds a copy of the embedding (gpt_model.py builds
/// `embedding` where `pre_process or mtp_process`).
bool embedding_gradient_all_reduced(const models::TransformerConfig& model, const Layout& layout);
/// The stage's multi-token-prediction depths: all mtp_num_layers of them on the last stage
/// (Megatron-Core multi_token_prediction.py mtp_on_this_rank without a custom layout, in the last
/// virtual chunk), 0 on the others. Each is one transformer layer of mtp_layer_kind.
int64_t stage_mtp_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage);
/// Whether full recompute re-runs the MTP depths: Megatron-Core multi_token_prediction.py
/// MultiTokenPredictionLayer._checkpointed_forward checkpoints each depth under the uniform
/// method (recompute_layers 0, one layer per group) and skips it under the block method.
bool mtp_recomputed_under_full(const Layout& layout);
/// Forward FLOPs of the MTP module outside its transformer layers, for `tokens` tokens: per depth
/// eh_proj 2 T (2h) h, plus Megatron-LM's count of the three norms, 2 T 3h (training.py
/// num_floating_point_operations, d98e8a64 "MTP norms and proj"), and one more logits GEMM,
/// 2 T h V ("MTP + final logit"). 0 without MTP.
double mtp_extra_forward_flops(const models::TransformerConfig& model, double tokens);

/// Global transformer-layer indices [first, end) of one model chunk on one pipeline stage.
struct LayerRange {
  int64_t first = 0;
  int64_t end = 0;
  int64_t count() const { return end - first; }
  /// MoE layers among them (TransformerConfig::is_moe_layer); 0 for a dense model.
  int64_t num_moe(const models::TransformerConfig& model) const;
  /// Layers among them of kind `kind` (layer_kind).
  int64_t num_of_kind(const models::TransformerConfig& model, LayerKind kind) const;
};

/// The layers of a model chunk's `range` whose forward runs again: all of them under full
/// recompute, its first recompute_layers under Megatron's block method, none otherwise
/// (recomputed_layer_count).
inline LayerRange recomputed_layers(const Layout& layout, const LayerRange& range) {
  return LayerRange{range.first, range.first + recomputed_layer_count(layout, range.count())};
}

/// The layers of a model chunk's `range` whose forward runs again as the plan's framework runs
/// it: recomputed_layers(layout, range), except under DeepSpeed's pipeline engine (framework
/// deepspeed, pp > 1), which checkpoints only runs of activation_checkpoint_interval functions
/// made of transformer layers alone: stage 0 keeps the activations of its first N - 2 layers
/// (its first run also holds two functions that are not layers) and the last stage those of its
/// last L mod N (their run also holds the final norm and the LM head). parameters.cpp cites it.
LayerRange recomputed_layers(const models::TransformerConfig& model, const Layout& layout,
                             const PlanOptions& options, const LayerRange& range);
/// Layer inputs a chunk keeps per micro-batch for its recompute: one per group of
/// recompute_group_layers (one per layer when unset) of its recomputed_layers, ceil(R / N).
int64_t checkpointed_input_count(const models::TransformerConfig& model, const Layout& layout,
                                 const PlanOptions& options, const LayerRange& range);
/// checkpointed_input_count over the recomputed layers' count (1 when none is recomputed): what
/// a chunk's kept inputs cost per recomputed layer, every layer input having the same bytes.
double checkpointed_inputs_per_recomputed_layer(const models::TransformerConfig& model,
                                                const Layout& layout, const PlanOptions& options,
                                                const LayerRange& range);

/// Layers of one kind (MoE or dense) in a chunk's `range` that are costed as layout.recompute
/// says: all of them, except under full recompute, where only its recomputed_layers are (the
/// first recompute_layers under Megatron's block method, DeepSpeed's checkpointed runs); the
/// others are costed as without recompute. Memory and chunk cost both read it.
int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range, bool moe_layer);
/// The same for the layers of kind `kind` (chunk cost: windowed and full layers apart).
int64_t layers_under_recompute(const models::TransformerConfig& model, const Layout& layout,
                               const PlanOptions& options, const LayerRange& range, LayerKind kind);

/// The one rule of which layers a (stage, chunk) holds; planner, simulator and executor all
/// read it. Even split (layout.stage_layers empty): virtual stage v = chunk * pp + stage holds
/// [v L, (v + 1) L), L = l / (pp vpp) (Narayanan et al. 2021, Sec. 2.2.2). Uneven split:
/// chunk c of stage s holds n_s / vpp layers starting at c l / vpp + sum_{j<s} n_j / vpp, as
/// Megatron-Core's get_transformer_layer_offset and get_num_layers_to_build place them (vpp 1:
/// stage s holds n_s layers after those of stages 0..s-1). Uneven split whose counts vpp does
/// not divide: Megatron-Core's embedding/loss-accounted split (--account-for-embedding-in-
/// pipeline-split, --account-for-loss-in-pipeline-split): L layers per stage, L - 1 on the
/// first and/or last, every chunk L / vpp layers except the first chunk of stage 0 and/or the
/// last chunk of the last stage, one fewer (they carry the embedding, the LM head and loss);
/// Llama 3 405B's 126 layers on pp 16 with vpp 8 leave those two chunks no layer at all.
/// Any other uneven split: stage s's n_s layers over its chunks as evenly as they go, the
/// longer chunks last (chunk_layer_count: 7 layers in 8 chunks leave chunk 0 empty, 9 give
/// chunk 7 two), in virtual-stage order as Megatron-Core's --pipeline-model-parallel-layout
/// lists them. A virtual-stage list (Layout::virtual_stage_layers, from a layout string) gives
/// each virtual stage its count, in that order. Precondition: check_layout passed ("pp_layers",
/// "stage_layers").
LayerRange stage_layer_range(const models::TransformerConfig& model, const Layout& layout,
                             int64_t stage, int64_t chunk);
/// Layers of chunk `chunk` (0..vpp-1) of a stage of `stage_layer_count` layers under the general
/// uneven rule (stage_layer_range): n / vpp, plus one in the last n % vpp chunks.
int64_t chunk_layer_count(int64_t stage_layer_count, int64_t vpp, int64_t chunk);
/// Most layers any chunk of pipeline stage `stage` holds (the unit of in-flight activations).
int64_t max_chunk_layer_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage);
/// Whether the uneven `stage_layers` split into vpp chunks is the embedding/loss-accounted one
/// (some count not divisible by vpp; see stage_layer_range). False for the even split ({}).
bool is_accounted_split(const std::vector<int64_t>& stage_layers, int64_t vpp);
/// Whether `stage_layers` ({}: the even split of num_layers over pp) splits into vpp chunks by
/// one of Megatron-Core's flag rules: even l % (pp vpp) == 0, every count divisible by vpp, or
/// the embedding/loss-accounted form (the search's vpp choices; other splits need a pipeline
/// layout, see stage_layer_range).
bool split_allows_vpp(const std::vector<int64_t>& stage_layers, int64_t num_layers, int64_t pp,
                      int64_t vpp);
/// Transformer layers of pipeline stage `stage`, over all its chunks.
int64_t stage_layer_count(const models::TransformerConfig& model, const Layout& layout,
                          int64_t stage);

/// Megatron-Core's uneven split (arguments.py --decoder-first-pipeline-num-layers and
/// --decoder-last-pipeline-num-layers; transformer_config.py __post_init__): the given first
/// and/or last stage counts (each >= 1), the other layers evenly over the remaining stages
/// (which must divide them). Returns the per-stage list, or {} when it is the even split.
/// Throws InputError "<field>: ..." naming what is wrong, with values.
std::vector<int64_t> first_last_stage_layers(int64_t num_layers, int64_t pp,
                                             std::optional<int64_t> first,
                                             std::optional<int64_t> last, const std::string& field);

/// Checks an explicit per-stage list against the model and pp: pp entries, each >= 1 (as
/// Megatron-Core requires of first and last), summing to num_layers; and a virtual-stage list
/// (Layout::virtual_stage_layers): pp * vpp entries, each >= 0, summing per stage to the
/// stage's count (at least one). Any vpp is admitted
/// (stage_layer_range says how the chunks split). Returns "" when fine, else one line without
/// the source (check_layout's "stage_layers" reason).
std::string check_stage_layers(const models::TransformerConfig& model, const Layout& layout);

/// `stage_layers` with the even split mapped to {} (so even layouts compare and serialise as
/// before the field existed).
std::vector<int64_t> canonical_stage_layers(std::vector<int64_t> stage_layers);

/// DeepSpeed PipelineModule's partition_method (deepspeed/runtime/pipe/module.py
/// _partition_layers): "type:transformer" balances the count of transformer layers (what GPT-NeoX
/// and Megatron-DeepSpeed pass), "parameters" (PipelineModule's default) the parameters of every
/// layer spec, the embedding and LM head included, and "type:transformer|embedding"
/// (Megatron-DeepSpeed's --pp-partition-method, as GLM-130B trained) the count of transformer
/// layers and embedding specs, the tied LM head being one.
enum class DeepSpeedPartition { kTypeTransformer, kParameters, kTypeTransformerEmbedding };
inline constexpr std::array<DeepSpeedPartition, 3> kDeepSpeedPartitions = {
    DeepSpeedPartition::kTypeTransformer, DeepSpeedPartition::kParameters,
    DeepSpeedPartition::kTypeTransformerEmbedding};
std::string to_string(DeepSpeedPartition method);

/// Transformer layers per stage, [pp], that DeepSpeed 0.19.6's partition_balanced gives `method`
/// over a GPT pipeline's layer specs (embedding, the layers, final norm, LM head; parameters per
/// tensor-parallel rank, the vocabulary padded as `options` say). A stage may get 0 layers when
/// pp is close to the layer count.
std::vector<int64_t> deepspeed_stage_layers(const models::TransformerConfig& model, int64_t tp,
                                            int64_t pp, DeepSpeedPartition method,
                                            const PlanOptions& options);

/// Which method builds `layout`'s split (canonical form; the first of kDeepSpeedPartitions that
/// does), or nothing when none does.
std::optional<DeepSpeedPartition> deepspeed_partition_of(const models::TransformerConfig& model,
                                                         const Layout& layout,
                                                         const PlanOptions& options);

/// The splits a DeepSpeed pipeline can run for pp stages: deepspeed_stage_layers of every method,
/// canonical (canonical_stage_layers: even is {}), without duplicates, leaving out any that
/// gives a stage no transformer layer.
std::vector<std::vector<int64_t>> deepspeed_stage_splits(const models::TransformerConfig& model,
                                                         int64_t tp, int64_t pp,
                                                         const PlanOptions& options);

/// A split a file states (a plan's or a published run's stage_layers): checked as written against
/// the model and pp (check_stage_layers: count, sign, sum), even when it is the even one, then
/// canonical_stage_layers. Throws InputError "<where>: <reason>".
std::vector<int64_t> checked_stage_layers(const models::TransformerConfig& model, int64_t pp,
                                          std::vector<int64_t> stage_layers,
                                          const std::string& where);

/// The layers of model chunk `chunk` on pipeline rank `stage`: stage_layer_range's, the one
/// rule (even or uneven split); its num_moe counts the MoE layers among them.
LayerRange chunk_layers(const models::TransformerConfig& model, const Layout& layout, int64_t stage,
                        int64_t chunk);

/// Expert parameters one rank of stage `stage` holds: its E / ep experts of every MoE layer of
/// the stage, tp-sharded (0 for a dense model). Included in stage_parameter_count.
int64_t stage_expert_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options);

/// Bytes one rank sends in one MoE all-to-all (token dispatch or combine) of one micro-batch:
/// its T / sp tokens, each to k experts, h elements of e bytes (Megatron's alltoall token
/// dispatcher; dropless). (ep - 1) / ep of it leaves the rank. Exact for the forward dispatch
/// and the combine's backward (every token goes to k experts whatever the routing); the combine
/// and the dispatch's backward send back the rows this rank's experts received, which is this
/// balanced figure only on average over the ep group (the group's sum is always ep times it).
/// moe_load_imbalance scales the experts' GEMMs, not these bytes.
int64_t moe_all_to_all_bytes(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout);

/// P(a token's k experts, k distinct of E under balanced routing, include at least one of a
/// given `group_experts`): 1 - C(E - g, k) / C(E, k).
double moe_expected_groups_hit(int64_t num_experts, int64_t group_experts,
                               int64_t experts_per_token);
/// P(a token's k experts include one of the consecutive experts [first_expert, first_expert +
/// expert_count)) under balanced routing: moe_expected_groups_hit(E, count, k) without routing
/// groups; with the model's group-limited routing (router_num_groups G, router_group_topk M),
/// M of the G groups equally likely and k / M distinct experts in each chosen group (moe_cost.cpp
/// says why and how close that is).
double moe_expected_range_hit(const models::TransformerConfig& model, int64_t first_expert,
                              int64_t expert_count);
/// Expected distinct destinations a token reaches when the E experts are split evenly, in
/// order, over `destinations` (ep ranks or nodes): the sum of their moe_expected_range_hit;
/// G (1 - C(E - E/G, k) / C(E, k)) without routing groups.
double moe_expected_destinations(const models::TransformerConfig& model, int64_t destinations);

/// One MoE layer's flex dispatch and combine (DeepEP normal kernels) of one micro-batch on one
/// rank of stage `stage`'s ep group (moe_cost.cpp; etp 1): its T / sp tokens of h elements,
/// each sent over RDMA once per destination node other than its own (inter_node_bytes) and
/// forwarded over NVLink once per destination GPU (nvlink_bytes); rdma_logical_bytes counts the
/// own node too, the count DeepEP's published RDMA bandwidth is measured on. All zero at ep 1.
struct MoeFlexTraffic {
  int64_t nodes = 1;             // nodes the ep group spans
  int64_t local_members = 1;     // most ep ranks on one node
  double destination_nodes = 0;  // expected nodes a token reaches, its own included
  double destination_gpus = 0;   // expected ep ranks a token reaches
  double inter_node_bytes_per_rank = 0;
  double rdma_logical_bytes_per_rank = 0;
  double nvlink_bytes_per_rank = 0;
  double dispatch_seconds = 0;  // one dispatch (and one combine backward)
  double combine_seconds = 0;   // one combine (and one dispatch backward)
};
MoeFlexTraffic moe_flex_traffic(const models::TransformerConfig& model,
                                const models::ClusterConfig& cluster, const Layout& layout,
                                int64_t stage);
/// One MoE layer's dispatch plus combine of one micro-batch on stage `stage` under
/// options.moe_dispatcher (the same pair again in its backward): 2 moe_all_to_all_seconds for
/// alltoall, the flex kernels' dispatch_seconds + combine_seconds for flex.
double moe_dispatch_combine_seconds(const models::TransformerConfig& model,
                                    const models::ClusterConfig& cluster, const Layout& layout,
                                    const PlanOptions& options, int64_t stage);

/// Bytes of one expert's token count in the MoE dispatcher's and router's count collectives:
/// Megatron-Core counts routed tokens in int64 (routing_map.sum() of a bool tensor).
inline constexpr int64_t kMoeTokenCountBytes = 8;

/// Bytes (gathered output) of the token-count all-gather before each MoE layer's forward
/// dispatch: every ep rank's E int64 counts (Megatron-Core token_dispatcher.py
/// MoEAlltoAllTokenDispatcher.preprocess, routing_map.sum(dim=0)), ep E 8.
int64_t moe_token_count_bytes(const models::TransformerConfig& model, const Layout& layout);

/// Ring collective time on a group of `group_size` ranks placed `stride` ranks apart in the
/// global numbering (tp: 1, dp: tp, ...), starting at global rank `first_rank` (a send goes
/// from first_rank to first_rank + stride). Groups inside one node use NVLink; groups that span
/// nodes are costed hierarchically (intra-node tier, then inter-node tier) over the nodes they
/// actually touch.
double collective_seconds(const models::ClusterConfig& cluster, CollectiveKind kind,
                          int64_t message_bytes, int64_t group_size, int64_t stride,
                          int64_t first_rank = 0);

/// Whether pipeline sends are scattered over tp and the receiver all-gathers them: the
/// scatter_gather_pipeline option with tp > 1 and no sequence parallelism (which already sends
/// 1/t of the tensor).
/// `gradient`: for the gradient sends, which pipeline_grad_scatter_gather false leaves whole.
bool pipeline_scatter_gather(const Layout& layout, const PlanOptions& options,
                             bool gradient = false);

/// One stage-to-stage activation (`gradient` false) or gradient transfer leaving `stage`: the
/// collective inventory's send over the slower of the stage's two boundaries, plus the
/// receiver's tp all-gather when scatter/gather is in effect for that direction.
double pipeline_transfer_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, int64_t stage, bool gradient = false);

/// Effective inverse size of an m x n x k GEMM (m x k times k x n), in 1/elements:
/// 1/k + w (1/m + 1/n) with the model's fixed w (compute_cost.cpp). For a cube of side x it is
/// (1 + 2w) / x.
double gemm_inverse_size(double m, double n, double k);

/// Time of one m x n x k GEMM (2mnk FLOPs, k the reduced dimension) at the cluster's peak times
/// the shape-dependent efficiency e_max / (1 + x_half * gemm_inverse_size(m, n, k))
/// (compute_cost.cpp). meshplan calibrate fits e_max and x_half with it. FP8 GEMMs (Transformer
/// Engine) run at the GPU's FP8 peak with their own e_max and the same x_half.
double gemm_seconds(const models::ClusterConfig& cluster, double m, double n, double k,
                    GemmPrecision precision = GemmPrecision::kBf16);

/// Tokens of one micro-batch one rank computes: micro_batch * seq_length / cp (context
/// parallelism shards the sequence; Megatron-Core get_batch_on_this_cp_rank gives each cp rank
/// 2 of the 2 cp sequence chunks). Precondition: divisible (check_layout "cp_seq").
int64_t rank_micro_batch_tokens(const models::TransformerConfig& model, const Layout& layout);

/// Context-parallel attention traffic of one layer and one micro-batch on one rank (of its cp
/// group), and the part of it the attention compute cannot hide. cp_attention.cpp gives the
/// formulas and their sources.
struct CpAttentionComm {
  struct Call {
    std::string what;                                 // the collective inventory's description
    CollectiveKind kind = CollectiveKind::kSendRecv;  // send_recv (p2p ring), all_to_all (a2a)
    int64_t message_bytes = 0;                        // one call, nccl-tests "size"
    int64_t forward_calls = 0;                        // per layer forward (and recomputed one)
    int64_t backward_calls = 0;                       // per layer backward
  };
  std::vector<Call> calls;              // empty when cp = 1
  double forward_exposed_seconds = 0;   // per layer forward
  double backward_exposed_seconds = 0;  // per layer backward
};
/// Precondition: check_layout passed.
CpAttentionComm cp_attention_comm(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options);

/// (query, key) pairs one sequence of `seq_tokens` attends over under a window of
/// `window_tokens` (0: none): s (s + 1) / 2 for full causal attention; w (w + 1) / 2 + (s - w) w
/// when 0 < w < s (query i attends keys i - w < j <= i: the first w queries see 1..w keys, the
/// rest w each). The one place of the count; flops.cpp attention_window_fraction uses it.
double attention_key_pairs(int64_t seq_tokens, int64_t window_tokens);
/// attention_key_pairs of the model's window over those of full causal attention at its
/// seq_length: 1 without a window (or one of seq_length or more), below 1 with one. Scales the
/// attention core's FLOPs (layer_forward_flops) and FlashAttention's time on a windowed layer
/// (LayerKind::windowed); a full-attention layer's share is 1.
double attention_window_fraction(const models::TransformerConfig& model);

/// Megatron-LM model FLOPs of one step (no recompute), generalised to GQA and SwiGLU:
/// 6 * tokens * (matmul parameters per token) + attention scores term, see flops.cpp. Each
/// windowed layer (TransformerConfig::is_windowed_layer) scales its attention term by
/// attention_window_fraction.
double model_flops_per_step(const models::TransformerConfig& model, int64_t global_batch);

}  // namespace meshplan::planner
