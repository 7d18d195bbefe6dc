#pragma once
// The analytical cost model: memory, compute and communication of one training step of one
// layout. Every formula lives here (planner/*.cpp); the simulator and executor call these
// functions and never restate them. Units: bytes, seconds, FLOPs.

#include <cstdint>
#include <string>
#include <vector>

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/schedule.h"
#include "meshplan/units.h"

namespace meshplan::planner {

/// PyTorch DDP's default gradient bucket: bucket_cap_mb = 25, which DDP multiplies by 2^20
/// (Li et al. 2020, Sec. 3.2.3). The planner, the simulator and the executor all use it.
inline constexpr int64_t kDefaultBucketBytes = 25 * kBytesPerMiB;

/// The software that runs the plan. It limits the layouts the search may pick (check_framework)
/// and sets the memory accounting (planner/memory.cpp); README "Frameworks" lists each rule with
/// its version and source. kMeshplan is this project's executor.
enum class Framework { kMegatron, kDeepSpeed, kFsdp, kMeshplan };
std::string to_string(Framework framework);
/// "megatron", "deepspeed", "fsdp", "meshplan"; throws InputError naming `field` otherwise.
Framework parse_framework(const std::string& text, const std::string& field);

/// Knobs of the training run that are not part of the layout.
struct PlanOptions {
  Framework framework = Framework::kMegatron;
  bool flash_attention = true;  // fused attention: no s^2 score tensors stored or moved
  // Data-parallel gradient reduction overlaps with the backward of the last micro-batch
  // (Megatron-LM --overlap-grad-reduce, PyTorch DDP buckets). Off: it runs after the backward.
  bool overlap_grad_reduce = true;
  // Tensor-parallel communication overlaps with GEMMs (Megatron-Core --tp-comm-overlap).
  bool overlap_tp_comm = false;
  // ZeRO-1/2 parameter all-gather overlaps with the next step's forward (Megatron-LM
  // --overlap-param-gather). Off: it runs after the optimizer step.
  bool overlap_param_gather = true;
  // Megatron-LM's scatter/gather of pipeline sends without sequence parallelism (Narayanan et
  // al. 2021, Sec. 4.1; its --no-scatter-gather-tensors-in-pipeline turns it off): each tp rank
  // sends 1/t of the activation and the receiver all-gathers it over NVLink.
  bool scatter_gather_pipeline = false;
  // Data-parallel gradients and ZeRO-1/2 parameters move in buckets of this many bytes, each a
  // collective paying its latency.
  int64_t bucket_bytes = kDefaultBucketBytes;
  // Tensor-parallel groups may span nodes (normally rejected: tp belongs on NVLink).
  bool allow_tp_across_nodes = false;
  // Mixture-of-experts load imbalance: the busiest rank's routed-expert work over the balanced
  // share (tokens x k / ep). 1.0 assumes perfect balance (dropless routing with a well-trained
  // balancing loss); it multiplies the routed experts' GEMM time (the all-to-all stays at the
  // balanced volume). Not a measured figure: an explicit what-if.
  double moe_load_imbalance = 1.0;

  bool operator==(const PlanOptions&) const = default;
};

enum class CollectiveKind { kAllReduce, kAllGather, kReduceScatter, kSendRecv, kAllToAll };
/// kEp: the expert-parallel group (ep ranks of the dp group); kExpertDp: the expert data
/// parallel group (dp / ep ranks holding the same experts).
enum class CommGroup { kTp, kPp, kDp, kEmbedding, kEp, kExpertDp };
std::string to_string(CollectiveKind kind);
std::string to_string(CommGroup group);

/// One kind of collective a rank issues during a step. `message_bytes` is nccl-tests' "size":
/// the full (unsharded) buffer of an all-reduce, the gathered output of an all-gather, the
/// input of a reduce-scatter, the payload of a send. Bytes on the wire per rank follow from the
/// ring algorithm: 2(n-1)/n, (n-1)/n, (n-1)/n and 1 times message_bytes (nccl-tests
/// doc/PERFORMANCE.md); an all-to-all's message is what one rank sends in total, (n-1)/n of it
/// leaving the rank (nccl-tests alltoall.cu's busbw factor).
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
  double forward_ep_comm_seconds = 0;          // MoE all-to-alls (dispatch, combine), exposed
  double backward_ep_comm_seconds = 0;         // their backward (and recompute's)
  int64_t num_moe_layers = 0;                  // of num_layers
  int64_t forward_flops = 0;                   // matmul FLOPs executed, per rank
  int64_t backward_flops = 0;                  // recompute included
  double forward_seconds() const {
    return forward_compute_seconds + forward_tp_comm_seconds + forward_ep_comm_seconds;
  }
  double backward_seconds() const {
    return backward_input_compute_seconds + backward_weight_compute_seconds +
           backward_tp_comm_seconds + backward_ep_comm_seconds;
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

/// Checks the layout's validity rules (returns a non-empty code and reason on the first
/// violation; memory is not checked here). Codes, in the order checked: "sizes", "gpus",
/// "tp_heads", "tp_kv_heads", "tp_ffn", "tp_node", "pp_layers", "batch", "vpp_schedule" or
/// "interleaved_micro_batches" (check_schedule_shape), "sequence_parallel", "zero", then the
/// mixture-of-experts rules (check_moe_layout): "ep", "ep_dp", "ep_experts", "tp_expert_ffn",
/// "moe_sequence_parallel", "moe_zero3".
struct Validity {
  std::string code;
  std::string reason;
  bool ok() const { return code.empty(); }
};
Validity check_layout(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                      int64_t num_gpus, const Layout& layout, bool allow_tp_across_nodes = false);

/// Whether `framework` can run `layout`: "" (ok) or code "framework" with a one-line reason
/// naming the framework, the version read and the source that says so.
Validity check_framework(Framework framework, const Layout& layout);

/// Full estimate of one layout (valid or not: an invalid one comes back infeasible, with its
/// reason). Throws nothing for infeasible layouts.
PlanEstimate estimate_plan(const models::TransformerConfig& model,
                           const models::ClusterConfig& cluster, const Layout& layout,
                           const PlanOptions& options = {});

/// Vocabulary padded to the smallest multiple of tp, ceil(V / tp) * tp, so the vocab-parallel
/// embedding splits evenly (Megatron-LM pads further, to 128 tp, for GEMM alignment; that
/// differs by under 0.1% of the parameters of any preset).
int64_t padded_vocab_size(const models::TransformerConfig& model, int64_t tp);

/// Parameters one rank of pipeline stage `stage` holds (tp-sharded matrices, replicated norms
/// and row-parallel biases, padded vocab-parallel embedding on the first stage, untied or
/// pipeline-tied LM head on the last). The executor allocates exactly this many.
int64_t stage_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                              int64_t stage);

/// Layers in every model chunk: l / (pp * vpp), the same for each (stage, chunk). Precondition:
/// divisible (check_layout's "pp_layers").
int64_t layers_per_chunk(const models::TransformerConfig& model, const Layout& layout);

/// The layers of model chunk `chunk` on pipeline rank `stage`: [first, first + count) in the
/// model's order (virtual stage v = chunk * pp + stage holds layers v L .. v L + L - 1).
struct LayerRange {
  int64_t first = 0;
  int64_t count = 0;
  /// MoE layers among them (TransformerConfig::is_moe_layer).
  int64_t num_moe(const models::TransformerConfig& model) const;
};
LayerRange chunk_layers(const models::TransformerConfig& model, const Layout& layout, int64_t stage,
                        int64_t chunk);

/// Expert parameters one rank of stage `stage` holds: its E / ep experts of every MoE layer of
/// the stage, tp-sharded (0 for a dense model). Included in stage_parameter_count.
int64_t stage_expert_parameter_count(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage);

/// Bytes one rank sends in one MoE all-to-all (token dispatch or combine) of one micro-batch:
/// its T / sp tokens, each to k experts, h elements of e bytes (Megatron's alltoall token
/// dispatcher; dropless). (ep - 1) / ep of it leaves the rank.
int64_t moe_all_to_all_bytes(const models::TransformerConfig& model,
                             const models::ClusterConfig& cluster, const Layout& layout);

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
bool pipeline_scatter_gather(const Layout& layout, const PlanOptions& options);

/// One stage-to-stage activation (or gradient) transfer leaving `stage`: the collective
/// inventory's send over the slower of the stage's two boundaries, plus the receiver's tp
/// all-gather when scatter/gather is in effect.
double pipeline_transfer_seconds(const models::TransformerConfig& model,
                                 const models::ClusterConfig& cluster, const Layout& layout,
                                 const PlanOptions& options, int64_t stage);

/// Megatron-LM model FLOPs of one step (no recompute), generalised to GQA and SwiGLU:
/// 6 * tokens * (matmul parameters per token) + attention scores term, see flops.cpp.
double model_flops_per_step(const models::TransformerConfig& model, int64_t global_batch);

}  // namespace meshplan::planner
