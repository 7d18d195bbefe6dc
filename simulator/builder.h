#pragma once
// Private: the state of build_task_graph, shared by graph_builder.cpp (ranks, op lists,
// transfers) and step_end.cpp (data-parallel collectives, embedding sync, barrier, optimizer).

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "bucket_split.h"
#include "graph_builder.h"

namespace meshplan::simulator {

struct RankState {
  int32_t last = -1;                                  // last task in program order
  std::vector<int32_t> grad_ready;                    // [bucket] task after which it is complete
  std::vector<std::vector<int32_t>> param_users;      // [bucket] tasks that need it
  std::vector<int32_t> transfer_to;                   // [receive key] transfer arriving here
  std::vector<std::pair<int32_t, int32_t>> receives;  // (kRecvWait task, receive key)
  std::vector<int32_t> receive_posts;  // per receive: the rank's task before it, or -1
  // paired_p2p: the run of transfer ops being built: the task before it, the op index of its
  // last transfer op (-1: no run) and its sends.
  int32_t transfer_run_post = -1;
  int32_t transfer_run_last_op = -1;
  std::vector<int32_t> transfer_run_sends;
  // ZeRO-3, in op order: per op that needs the chunk's parameters, the task after which its
  // gathers may start (-1: at once) and per bucket the piece that needs it; per op that
  // produces gradients, per bucket the piece after which it is complete.
  std::vector<int32_t> gather_gates;
  // Per op that needs the chunk's parameters: the gradient op (index into reduce_ready) whose
  // reduce-scatters its gathers wait for (an op that starts a pass), -1: none.
  std::vector<int32_t> gather_after_reduce;
  std::vector<std::vector<int32_t>> gather_users;
  std::vector<std::vector<int32_t>> reduce_ready;
  // The same ops' buckets, one collective each: [op][bucket] its seconds alone (an F gathers
  // FSDP's root unit first, a B does not).
  std::vector<std::vector<double>> gather_seconds;
  std::vector<std::vector<double>> reduce_seconds;
  // Without overlap_grad_reduce or with sharded_pass_boundaries: per op that produces
  // gradients, the first task of the next compute op, which waits for its reduce-scatters
  // (-1: none follows).
  std::vector<int32_t> reduce_blocks;
  int32_t grads_done = -1;  // last data-parallel gradient task (or embedding sync)
  int32_t optimizer = -1;
};

class Builder {
 public:
  explicit Builder(const SimulationInput& input);
  BuiltGraph build();

 private:
  // graph_builder.cpp
  void validate() const;
  void place_ranks();
  int32_t rank_index(const planner::RankCoords& coords) const;
  void add_links();
  int32_t nic_out(int64_t node) const { return nic_of_node_.at(node); }
  int32_t nic_in(int64_t node) const { return nic_of_node_.at(node) + 1; }
  int32_t nvlink_out(int32_t rank) const { return nvlink_of_rank_[rank]; }
  int32_t nvlink_in(int32_t rank) const { return nvlink_of_rank_[rank] + 1; }
  /// A collective's member task: over its GPU's NVLink when the group has other members on its
  /// node, over its node's NIC when the group spans nodes.
  void set_collective_flow(int32_t task, int32_t rank, bool nvlink, bool nic);
  int32_t add_task(TaskKind kind, StreamKind stream, int32_t rank, double seconds);
  void chain(RankState& state, int32_t task);
  int32_t receive_key(bool gradient, int64_t micro_batch, int64_t chunk) const;
  std::map<int32_t, std::vector<Piece>> carriers(const std::vector<planner::PipelineOp>& ops,
                                                 const StageCosts& costs,
                                                 planner::OpKind carrier_kind, bool last_of_chunk,
                                                 const std::vector<Bucket>& buckets,
                                                 BucketEdge edge) const;
  /// What one rank's op list needs besides its ops: the ops that carry once-a-step buckets and
  /// the per-op (ZeRO-2/3) bucket sizes.
  struct OpListContext {
    std::map<int32_t, std::vector<Piece>> grad_carriers;   // op index -> pieces
    std::map<int32_t, std::vector<Piece>> param_carriers;  // op index -> pieces
    // ZeRO-3 per-op buckets (StageCosts): the layers' (before F, and before B) and FSDP's root
    // unit's.
    std::vector<Bucket> layer_gathers, layer_gathers_backward, root_gathers, layer_reduces,
        root_reduces;
    planner::OpKind gradient_kind = planner::OpKind::kBackward;  // W in split schedules
    std::vector<int32_t> op_ends;  // last task of each compute op so far
  };
  /// The context of `rank`'s op list; sizes its state's once-a-step bucket slots.
  OpListContext op_list_context(int32_t rank);
  /// One compute op's pieces, cut where buckets become ready or are needed; points `needs` and
  /// `ready` at the bucket slots the pieces fill (null: the once-a-step gathers / none).
  std::vector<OpPiece> compute_pieces(int32_t rank, int32_t index, const planner::PipelineOp& op,
                                      OpListContext& context, std::vector<int32_t>*& needs,
                                      std::vector<int32_t>*& ready);
  /// An op's exposed all-to-alls, less its share of a merged pair's overlap (graph_builder.cpp).
  double merged_ep_seconds(const std::vector<planner::ChunkCost>& chunks,
                           const planner::PipelineOp& op) const;
  /// Tasks of one compute op (its pieces, then its exposed tp communication).
  void add_op_communication(int32_t rank, int32_t index, const planner::PipelineOp& op,
                            double share);
  void add_compute_op(int32_t rank, int32_t index, const planner::PipelineOp& op,
                      OpListContext& context);
  /// Names the op a task belongs to (index, micro-batch, chunk).
  void describe_task(int32_t task, int32_t index, const planner::PipelineOp& op);
  /// Every task of `rank`'s op list, in order.
  void build_op_list(int32_t rank);
  void add_send(int32_t rank, int32_t index, const planner::PipelineOp& op);
  void connect_receives();
  void end_transfer_run(int32_t rank);

  // step_end.cpp
  // Which links a collective's members use: their data-parallel group's, or (the embedding
  // sync of the first and last stage) the pair's.
  enum class Group { kDataParallel, kEmbeddingPair };
  std::vector<int32_t> add_collective(const std::vector<int32_t>& members,
                                      const std::vector<std::vector<int32_t>>& ready, TaskKind kind,
                                      StreamKind stream, double seconds, int32_t bucket,
                                      Group group);
  std::vector<std::vector<int32_t>> dp_groups() const;
  void add_zero3_collectives(const std::vector<int32_t>& members);
  void add_param_gathers(const std::vector<int32_t>& members, bool after_optimizer);
  void add_embedding_sync();
  void add_step_end();

  const SimulationInput& input_;
  const planner::Layout& layout_;
  const int64_t num_micro_batches_;
  const int64_t vpp_;
  std::unique_ptr<TaskGraph> graph_;  // made by build() once the ranks are known
  std::vector<SimulatedRank> ranks_;
  std::vector<RankState> states_;
  std::map<int64_t, int32_t> nic_of_node_;  // node -> its NIC's egress link (ingress + 1)
  std::vector<int32_t> nvlink_of_rank_;     // rank -> its NVLink egress link (ingress + 1)
  std::vector<bool> dp_spans_nodes_;        // [rank] its data-parallel group spans nodes
  std::vector<bool> dp_shares_node_;        // [rank] its group has other members on its node
  std::vector<bool> cp_spans_nodes_;        // [rank] its context-parallel group spans nodes
  std::vector<bool> cp_shares_node_;        // [rank] its cp group has other members on its node
  std::vector<bool> ep_spans_nodes_;        // [rank] its expert-parallel group spans nodes
  std::vector<bool> ep_shares_node_;        // [rank] ... has other members on its node
};

}  // namespace meshplan::simulator
