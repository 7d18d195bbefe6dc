#pragma once
// meshplan simulate: a discrete-event replay of one training step over a task graph.
// Durations come only from the planner's cost model (cost_model.h), the order of pipeline work
// only from its schedule generator (schedule.h). Units: seconds, bytes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/layout.h"
#include "meshplan/plan_file.h"
#include "meshplan/schedule.h"

namespace meshplan::simulator {

struct SimulationOptions {
  bool all_ranks = false;           // every rank; default: one representative per stage
  bool zero_communication = false;  // every collective and transfer takes no time
  // Gradient bucket; simulate passes the plan's (planner::kDefaultBucketBytes unless changed).
  int64_t bucket_bytes = planner::kDefaultBucketBytes;
  // The replay writes a Chrome trace (simulate --trace): the task cap is kMaxTraceTasks.
  bool with_trace = false;
};

enum class TaskKind : uint8_t {
  kForward,         // F compute of (micro-batch, chunk)
  kBackward,        // whole backward compute (input and weight gradients)
  kBackwardInput,   // B of split (zero-bubble) schedules
  kBackwardWeight,  // W of split schedules
  kOptimizerStep,
  kTpComm,         // exposed tensor-parallel communication of the preceding F or B
  kPpTransfer,     // activation or its gradient to the neighbouring stage (sender's channel)
  kRecvWait,       // the receiver blocks until the transfer has arrived (zero length)
  kGradReduce,     // one data-parallel bucket: all-reduce, or reduce-scatter under ZeRO
  kEmbeddingSync,  // tied word-embedding gradient all-reduce, first and last stage
  kParamGather,    // ZeRO: one bucket of the parameter all-gather
  kJoin,           // zero-length synchronisation (collective start, grad-norm barrier)
  kCpComm,         // exposed context-parallel attention traffic of the preceding F or B
  kEpAllToAll,     // MoE dispatch and combine all-to-alls of the preceding F or B (exposed)
};

/// Per rank: one compute stream and the communication channels. Each runs its tasks in the
/// order they were issued, one at a time, like a CUDA stream.
enum class StreamKind : uint8_t {
  kCompute,
  kTpComm,      // used only with overlap_tp_comm; otherwise tp comm runs on kCompute
  kPpForward,   // sends to the next stage
  kPpBackward,  // sends to the previous stage
  kDpComm,      // gradient reductions, embedding sync
  kDpGather,    // ZeRO parameter all-gathers
  kNone,        // joins
};
inline constexpr int kNumStreamKinds = 6;  // streams that exist per rank (kNone excluded)

std::string to_string(TaskKind kind);
std::string to_string(StreamKind kind);
bool is_compute(TaskKind kind);        // F, B, W, optimizer
bool is_communication(TaskKind kind);  // tp and cp comm, transfers, DP collectives

/// Most tasks one replay holds. A replay takes about kBytesPerTask of memory per task
/// (measured: llama3-405b on 16,384 dgx-h100, --all-ranks, 20,660,981 tasks, 5.30 GB peak
/// resident; tiny tp 2 x pp 4 x dp 2 with 500,000 micro-batches, 64,000,065 tasks, 14.5 GB),
/// so the cap keeps one replay near 8 GiB and about a minute: within a 16 GiB machine, and
/// far below the int32_t task ids' 2^31.
inline constexpr int64_t kMaxTasks = int64_t{1} << 25;
inline constexpr int64_t kBytesPerTask = 256;
/// Most tasks a replay with a Chrome trace holds: the trace is built in memory, about 150 bytes
/// of JSON per task on top of the replay (measured: megatron-1t on 2,560 GPUs, --all-ranks,
/// about 26 M tasks, a 3.8 GB trace and 9 GB resident), and Perfetto's UI holds about 2 GB.
/// 2^23 tasks keep the trace near 1.2 GB.
inline constexpr int64_t kMaxTraceTasks = int64_t{1} << 23;

struct Bucket {
  int64_t bytes = 0;
  double seconds = 0;  // the collective on this bucket alone
};

/// One pipeline stage's durations, each as if it ran alone.
struct StageCosts {
  std::vector<planner::ChunkCost> chunks;  // [vpp]
  double transfer_seconds = 0;             // one micro-batch's activation send
  // One gradient send; unset: transfer_seconds (planner: larger only when sent whole).
  std::optional<double> gradient_transfer_seconds;
  std::vector<Bucket> grad_buckets;   // in the order the backward fills them
  std::vector<Bucket> param_buckets;  // ZeRO-1/2 parameter all-gather, in forward order
  // ZeRO-3 (Rajbhandari et al. 2020, Sec. 7.2.2): one chunk's parameters, gathered before each
  // of its F and B, and its gradients, reduce-scattered after each of its backward (W) ops.
  std::vector<Bucket> chunk_param_buckets;
  // Gathered before each B instead, when that differs (planner DpBuckets::chunk_param_backward:
  // DeepSpeed's coordinator); unset: chunk_param_buckets before B as before F.
  std::optional<std::vector<Bucket>> chunk_param_backward_buckets;
  std::vector<Bucket> chunk_grad_buckets;
  // PyTorch FSDP's root unit (planner DpBuckets::chunk_root_param): gathered before each F
  // only, ahead of chunk_param_buckets, and reduce-scattered after each gradient op, after
  // chunk_grad_buckets. Empty unless the plan's framework is fsdp under ZeRO 3.
  std::vector<Bucket> chunk_root_param_buckets;
  std::vector<Bucket> chunk_root_grad_buckets;
  double embedding_sync_seconds = 0;  // first and last stage; 0 when embeddings are untied
  bool has_embedding_sync = false;
  double optimizer_step_seconds = 0;
};

/// Everything the replay needs; hand-built in tests, from a plan in simulate_plan.
struct SimulationInput {
  planner::PipelineSchedule schedule;
  planner::Layout layout;     // tp, pp, dp and placement name the ranks
  int64_t gpus_per_node = 8;  // ranks r with equal r / gpus_per_node share a node's NIC
  bool overlap_tp_comm = false;
  bool overlap_grad_reduce = true;
  bool overlap_param_gather = true;  // gather at the step's start, before each forward needs it
  // Pipeline sends hold the sender's compute stream until they finish (DeepSpeed's pipeline
  // engine: blocking p2p send/recv, planner exposed_transfer_seconds); false: buffered.
  bool blocking_sends = false;
  // A transfer starts only once its receiver has reached the receive (a rendezvous: the
  // receive is posted where the op list waits for it, so the data moves then): PyTorch's
  // pipelining schedules post each receive just before waiting for it (schedules.py
  // Schedule1F1B, ScheduleGPipe: _batch_p2p(get_fwd_recv_ops) then _wait_batch_p2p), and
  // meshplan's executor receives with a blocking MPI_Recv at the op that needs the data (its
  // MPI_Isend moves a large message only once the receive is matched), and Megatron-Core's
  // interleaved schedule without overlap_p2p_comm waits for each call as it issues it, none
  // posted ahead (whose sends, waited for too, this leaves buffered: its calls pair
  // differently from the op lists, see paired_p2p). false: the data moves as soon as it is
  // sent (overlap_p2p_comm posts the receive early).
  bool late_receives = false;
  // Each run of consecutive transfer ops is one call waited for whole: Megatron-Core's
  // p2p_communication._communicate pairs each send with the opposite receive
  // (send_forward_recv_backward, send_backward_recv_forward) and waits for every request of the
  // call in its schedule without interleaving (schedules.py
  // forward_backward_pipelining_without_interleaving), whose calls the generator's 1F1B op
  // lists follow. A send moves once its receiver has posted the call holding the matching
  // receive, and the op after the run waits for its sends as for its receives.
  bool paired_p2p = false;
  // Sharded data parallelism keeps its collectives inside the pass that issues them. ZeRO 2
  // and 3: the op after a gradient op waits for that op's last reduce-scatter. ZeRO 3: a
  // forward's gathers start once the op before it ends (no prefetch from the op before).
  // PyTorch FSDP: the root's pre-forward makes the all-gather streams wait for the compute
  // stream, and the root's post-backward callback makes the compute stream wait for the last
  // reduce-scatter (FSDP2 _fsdp_state.py _root_post_backward_final_callback; FSDP1
  // _runtime_utils.py _post_backward_final_callback). DeepSpeed: stage3.py and
  // stage_1_and_2.py independent_gradient_partition_epilogue synchronize after every backward.
  // Megatron-FSDP (d98e8a64), optim_grads and optim_grads_params alike: the root
  // post-backward's grad_reduce_pipeline.reset() waits for every reduce-scatter event, once per
  // model chunk (each chunk is its own root), the backward prefetch ends at bucket 0, and the
  // next forward's all-gather stream waits for the compute stream (megatron_fsdp.py
  // _root_post_backward, param_and_grad_buffer.py). planner::backward_waits_for_reduce_scatter
  // says which frameworks; false (meshplan's executor): a gather may run one op ahead and a
  // reduce-scatter beside the next op.
  bool sharded_pass_boundaries = false;
  // ZeRO-3 chunk buckets run once per chunk a step, not per op: gathers in the chunk's first
  // forward (micro-batch 0), reduce-scatters after its last backward, all after that op
  // (planner::zero3_gathers_once_per_step: torchtitan's pipelining).
  bool zero3_gathers_once_per_step = false;
  // A backward op's ZeRO-3 gathers, like a forward's at a pass boundary, start once the op
  // before it ends and after that op's reduce-scatters (planner::
  // zero3_backward_gathers_start_a_pass: Megatron-FSDP with pp > 1, no prefetch across roots).
  bool zero3_backward_pass_starts = false;
  bool all_ranks = false;
  bool with_trace = false;          // SimulationOptions::with_trace: the cap is kMaxTraceTasks
  std::vector<StageCosts> stages;   // [pp]
  std::string source = "simulate";  // names the input in errors: the plan file's path
};

struct TaskRecord {
  TaskKind kind = TaskKind::kJoin;
  StreamKind stream = StreamKind::kNone;
  int32_t rank = -1;      // index into SimulationResult::ranks; -1 for joins
  int32_t op_index = -1;  // position in the stage's op list (pieces of one op share it)
  int32_t micro_batch = -1;
  int32_t chunk = -1;
  int32_t bucket = -1;
  int32_t peer = -1;         // transfer <-> its kRecvWait
  double alone_seconds = 0;  // duration without contention
  double start_seconds = 0;
  double end_seconds = 0;
};

struct SimulatedRank {
  int64_t global_rank = 0;
  planner::RankCoords coords;
  int64_t node = 0;
  int64_t nic_weight = 1;  // ranks on its node this one stands for (1 with all_ranks)
};

/// Time of one stage's ranks (mean over them), summing to the step time.
struct StageBreakdown {
  int64_t stage = 0;
  int64_t num_ranks = 0;
  double compute_seconds = 0;       // F, B, W, optimizer running
  double exposed_comm_seconds = 0;  // own or incoming communication running, no compute
  double bubble_seconds = 0;        // neither, before the last op-list task of any rank ends
  double idle_seconds = 0;          // neither, after it (waiting for other stages, DP, ...)
};

/// Consecutive critical-path tasks of one rank and category ("compute", "tp comm", ...).
struct CriticalSegment {
  int32_t rank = 0;
  std::string category;
  int64_t num_ops = 0;  // ops first met on the path here (a cut op counts once)
  double start_seconds = 0;
  double end_seconds = 0;
};

struct SimulationResult {
  std::string model_name;
  std::string cluster_name;
  planner::Layout layout;
  SimulationOptions options;
  // The plan's software options as replayed (simulate_plan: the bucket the replay used); unset
  // for a SimulationInput replayed directly.
  std::optional<planner::PlanOptions> plan_options;
  double step_time_s = 0;
  double analytic_step_time_s = 0;  // the planner's closed form for the same plan
  std::string planner_rejection;    // why the planner rejects the plan (memory), or empty
  double pipeline_end_seconds = 0;  // last task of any rank's op list ends
  int64_t num_events = 0;
  // How pipeline transfers were replayed (pp > 1; empty otherwise): transfer_model_name.
  std::string transfer_model;
  std::vector<SimulatedRank> ranks;
  std::vector<TaskRecord> tasks;
  std::vector<StageBreakdown> stages;
  std::vector<CriticalSegment> critical_path;  // in time order
};

/// How `input`'s pipeline sends and receives are replayed, in words: "paired calls"
/// (paired_p2p), "blocking sends" (blocking_sends), "late receives" (late_receives) or
/// "buffered sends".
std::string transfer_model_name(const SimulationInput& input);

/// Replays `input`. Throws InputError (starting with input.source) when the costs do not fit
/// the schedule or the task graph would exceed kMaxTasks, RuntimeError if the schedule
/// deadlocks. analytic_step_time_s is left 0.
SimulationResult simulate(const SimulationInput& input);

/// Durations of `plan` from the planner: chunk costs and optimizer steps of `estimate`, sends
/// and the embedding sync from its collective inventory, data-parallel buckets (ZeRO 0-2:
/// options.bucket_bytes; ZeRO-3: one per layer) through planner::collective_seconds. Throws
/// InputError naming `source` (the plan file) when bucket_bytes is not positive or `estimate`
/// has no stage costs; input.source is set to `source`.
SimulationInput simulation_input(const planner::Plan& plan, const planner::PlanEstimate& estimate,
                                 const SimulationOptions& options,
                                 const std::string& source = "simulate");

/// estimate_plan, simulation_input and simulate; `source` names the plan in errors. With
/// options.zero_communication both the estimate and the replay use links of infinite
/// bandwidth and no latency.
SimulationResult simulate_plan(const planner::Plan& plan, const SimulationOptions& options,
                               const std::string& source);

/// A task as traces and pictures show it: the pieces of one op (cut at bucket boundaries)
/// merged back into one span. Joins and zero-length waits are left out.
struct TaskSpan {
  int32_t first_task = 0;  // index into SimulationResult::tasks; describes the span
  int32_t last_task = 0;
  double start_seconds = 0;
  double end_seconds = 0;
};
std::vector<TaskSpan> task_spans(const SimulationResult& result);

}  // namespace meshplan::simulator
