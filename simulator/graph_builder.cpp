#include "graph_builder.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "builder.h"
#include "meshplan/errors.h"
#include "meshplan/units.h"

namespace meshplan::simulator {
namespace {

using planner::OpKind;
using planner::PipelineOp;
using planner::RankCoords;

bool is_compute_op(OpKind kind) {
  return kind == OpKind::kForward || kind == OpKind::kBackward || kind == OpKind::kBackwardInput ||
         kind == OpKind::kBackwardWeight;
}

TaskKind task_kind(OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return TaskKind::kForward;
    case OpKind::kBackward:
      return TaskKind::kBackward;
    case OpKind::kBackwardInput:
      return TaskKind::kBackwardInput;
    default:
      return TaskKind::kBackwardWeight;
  }
}

double compute_seconds(const planner::ChunkCost& cost, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return cost.forward_compute_seconds;
    case OpKind::kBackward:
      return cost.backward_input_compute_seconds + cost.backward_weight_compute_seconds;
    case OpKind::kBackwardInput:
      return cost.backward_input_compute_seconds;
    default:
      return cost.backward_weight_compute_seconds;
  }
}

// Exposed tp communication after the op: the forward's, or the backward's (which the input
// gradient needs; W has none).
double tp_seconds(const planner::ChunkCost& cost, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return cost.forward_tp_comm_seconds;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return cost.backward_tp_comm_seconds;
    default:
      return 0.0;
  }
}

// Exposed cp attention traffic after the op (planner::cp_attention_comm: the part of the ring
// transfers the attention compute does not hide, or the Ulysses all-to-alls); W has none.
double cp_seconds(const planner::ChunkCost& cost, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return cost.forward_cp_comm_seconds;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return cost.backward_cp_comm_seconds;
    default:
      return 0.0;
  }
}

// MoE all-to-alls (dispatch and combine) of the op, exposed like the tp part (the planner's
// ChunkCost ep seconds: moe_dispatch_combine_seconds per layer, either dispatcher).
double ep_seconds(const planner::ChunkCost& cost, OpKind kind) {
  switch (kind) {
    case OpKind::kForward:
      return cost.forward_ep_comm_seconds;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      return cost.backward_ep_comm_seconds;
    default:
      return 0.0;
  }
}

}  // namespace

Builder::Builder(const SimulationInput& input)
    : input_(input),
      layout_(input.layout),
      num_micro_batches_(input.schedule.num_micro_batches),
      vpp_(input.layout.vpp) {}

BuiltGraph Builder::build() {
  validate();
  place_ranks();
  graph_ = std::make_unique<TaskGraph>(static_cast<int32_t>(ranks_.size()));
  add_links();
  states_.resize(ranks_.size());
  // About two tasks per op (compute and its tp comm), a few per bucket collective (member task,
  // share of a join), two per piece where buckets cut ops (its compute and its share of the
  // op's communication); edges about twice that.
  size_t estimate = 0;
  for (const SimulatedRank& rank : ranks_) {
    const StageCosts& costs = input_.stages[rank.coords.pp_rank];
    const size_t ops = input_.schedule.stages[rank.coords.pp_rank].size();
    estimate +=
        2 * ops + 8 + 3 * (costs.grad_buckets.size() + costs.param_buckets.size()) +
        2 * ops *
            (std::max(costs.chunk_param_buckets.size(),
                      costs.chunk_param_backward_buckets.value_or(std::vector<Bucket>{}).size()) +
             costs.chunk_grad_buckets.size() + costs.chunk_root_param_buckets.size() +
             costs.chunk_root_grad_buckets.size());
  }
  if (input_.with_trace && estimate > static_cast<size_t>(kMaxTraceTasks)) {
    throw InputError(fmt::format(
        "{}: --trace: the replay would hold about {} tasks, over the trace's limit of {} (~{:.1f} "
        "GB of JSON; Perfetto's UI holds about 2 GB){}",
        input_.source, estimate, kMaxTraceTasks, static_cast<double>(kMaxTraceTasks) * 150e-9,
        input_.all_ranks ? " (trace one rank per stage: without --all-ranks)" : ""));
  }
  if (estimate > static_cast<size_t>(kMaxTasks)) {
    const double gib = static_cast<double>(kBytesPerTask) / static_cast<double>(kBytesPerGiB);
    throw InputError(fmt::format(
        "{}: {}: the task graph would hold about {} tasks (~{:.0f} GiB), over the simulator's "
        "limit of {} (~{:.0f} GiB){}",
        input_.source, input_.all_ranks ? "all_ranks" : "layout", estimate,
        static_cast<double>(estimate) * gib, kMaxTasks, static_cast<double>(kMaxTasks) * gib,
        input_.all_ranks ? " (simulate one rank per stage instead)"
                         : " (fewer micro-batches: a smaller --global-batch or a larger "
                           "--micro-batch)"));
  }
  graph_->reserve(estimate, 2 * estimate);
  for (RankState& state : states_) {
    state.transfer_to.assign(static_cast<size_t>(2 * num_micro_batches_ * vpp_), -1);
  }
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    build_op_list(static_cast<int32_t>(rank));
  }
  connect_receives();
  add_step_end();
  return BuiltGraph{std::move(graph_), std::move(ranks_)};
}

void Builder::validate() const {
  const int64_t pp = layout_.pp;
  if (input_.schedule.pp != pp || static_cast<int64_t>(input_.schedule.stages.size()) != pp) {
    throw InputError(fmt::format("{}: schedule: built for pp = {}, layout has pp = {} ({})",
                                 input_.source, input_.schedule.pp, pp,
                                 input_.schedule.stages.size()));
  }
  if (input_.schedule.vpp != vpp_) {
    throw InputError(fmt::format("{}: schedule: built for vpp = {}, layout has vpp = {}",
                                 input_.source, input_.schedule.vpp, vpp_));
  }
  if (static_cast<int64_t>(input_.stages.size()) != pp) {
    throw InputError(fmt::format("{}: stages: expected one per pipeline stage, {} ({})",
                                 input_.source, pp, input_.stages.size()));
  }
  for (int64_t s = 0; s < pp; ++s) {
    if (static_cast<int64_t>(input_.stages[s].chunks.size()) != vpp_) {
      throw InputError(fmt::format("{}: stages[{}].chunks: expected vpp = {} chunks ({})",
                                   input_.source, s, vpp_, input_.stages[s].chunks.size()));
    }
  }
  for (int64_t s = 0; s < pp; ++s) {
    const StageCosts& costs = input_.stages[s];
    // Gradients are reduced once a step (ZeRO 0-1) or per op (ZeRO 2-3), parameters gathered
    // once a step (ZeRO 1-2) or per op (ZeRO-3): never both ways, except a ZeRO-2 stage's
    // expert gradients, once a step beside its per-op dense ones.
    const bool per_op_grads = (!costs.chunk_grad_buckets.empty() && input_.layout.zero != 2) ||
                              !costs.chunk_root_grad_buckets.empty();
    const bool per_op_params =
        !costs.chunk_param_buckets.empty() || !costs.chunk_root_param_buckets.empty() ||
        (costs.chunk_param_backward_buckets && !costs.chunk_param_backward_buckets->empty());
    if (!costs.grad_buckets.empty() && per_op_grads) {
      throw InputError(fmt::format(
          "{}: stages[{}]: gradients reduced both once per step and per op", input_.source, s));
    }
    if (!costs.param_buckets.empty() && per_op_params) {
      throw InputError(fmt::format(
          "{}: stages[{}]: parameters gathered both once per step and per op", input_.source, s));
    }
  }
  if (input_.gpus_per_node < 1) {
    throw InputError(fmt::format("{}: gpus_per_node: must be at least 1 ({})", input_.source,
                                 input_.gpus_per_node));
  }
}

int32_t Builder::rank_index(const RankCoords& coords) const {
  if (input_.all_ranks) {
    return static_cast<int32_t>(planner::global_rank(layout_, coords));
  }
  return static_cast<int32_t>(coords.pp_rank);
}

void Builder::place_ranks() {
  const int64_t num_gpus = layout_.num_gpus();
  const int64_t per_node = input_.gpus_per_node;
  if (input_.all_ranks) {
    for (int64_t r = 0; r < num_gpus; ++r) {
      ranks_.push_back(SimulatedRank{r, planner::rank_coords(layout_, r), r / per_node, 1});
    }
  } else {
    for (int64_t s = 0; s < layout_.pp; ++s) {
      const RankCoords coords{.pp_rank = s};
      const int64_t r = planner::global_rank(layout_, coords);
      const int64_t node = r / per_node;
      int64_t same_stage = 0;  // ranks of stage s on this node: what the representative stands for
      for (int64_t q = node * per_node; q < std::min(num_gpus, (node + 1) * per_node); ++q) {
        same_stage += planner::rank_coords(layout_, q).pp_rank == s;
      }
      ranks_.push_back(SimulatedRank{r, coords, node, same_stage});
    }
  }
  dp_spans_nodes_.resize(ranks_.size());
  dp_shares_node_.resize(ranks_.size());
  cp_spans_nodes_.resize(ranks_.size());
  cp_shares_node_.resize(ranks_.size());
  ep_spans_nodes_.resize(ranks_.size());
  ep_shares_node_.resize(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    // The gradient group is dp x cp (planner::grad_group_size).
    RankCoords member = ranks_[i].coords;
    for (member.dp_rank = 0; member.dp_rank < layout_.dp; ++member.dp_rank) {
      for (member.cp_rank = 0; member.cp_rank < layout_.cp; ++member.cp_rank) {
        const bool same_node = planner::global_rank(layout_, member) / per_node == ranks_[i].node;
        const bool self = member.dp_rank == ranks_[i].coords.dp_rank &&
                          member.cp_rank == ranks_[i].coords.cp_rank;
        dp_spans_nodes_[i] = dp_spans_nodes_[i] || !same_node;
        dp_shares_node_[i] = dp_shares_node_[i] || (same_node && !self);
        if (member.dp_rank == ranks_[i].coords.dp_rank) {
          cp_spans_nodes_[i] = cp_spans_nodes_[i] || !same_node;
          cp_shares_node_[i] = cp_shares_node_[i] || (same_node && !self);
        }
      }
    }
    // The ep group as the planner lays it (ep ranks etp apart: planner::expert_parallel_ranks).
    for (const int64_t member : planner::expert_parallel_ranks(layout_, ranks_[i].global_rank)) {
      const bool same_node = member / per_node == ranks_[i].node;
      ep_spans_nodes_[i] = ep_spans_nodes_[i] || !same_node;
      ep_shares_node_[i] = ep_shares_node_[i] || (same_node && member != ranks_[i].global_rank);
    }
  }
}

// Links that concurrent transfers share: per node a NIC (egress and ingress), carrying
// gpus_per_node line rates, one rail per GPU; per GPU its NVLink ports (egress and ingress).
void Builder::add_links() {
  const auto per_node = static_cast<double>(input_.gpus_per_node);
  for (const SimulatedRank& rank : ranks_) {
    if (nic_of_node_.find(rank.node) == nic_of_node_.end()) {
      nic_of_node_[rank.node] = graph_->add_link(per_node);
      graph_->add_link(per_node);
    }
    nvlink_of_rank_.push_back(graph_->add_link(1.0));
    graph_->add_link(1.0);
  }
}

void Builder::set_collective_flow(int32_t task, int32_t rank, bool nvlink, bool nic) {
  std::vector<std::pair<int32_t, double>> links;
  if (nvlink) {
    links.emplace_back(nvlink_out(rank), 1.0);
    links.emplace_back(nvlink_in(rank), 1.0);
  }
  if (nic) {
    const int64_t node = ranks_[rank].node;
    const auto weight = static_cast<double>(ranks_[rank].nic_weight);
    links.emplace_back(nic_out(node), weight);
    links.emplace_back(nic_in(node), weight);
  }
  if (!links.empty()) {
    graph_->set_flow(task, links);
  }
}

int32_t Builder::add_task(TaskKind kind, StreamKind stream, int32_t rank, double seconds) {
  TaskRecord task;
  task.kind = kind;
  task.stream = stream;
  task.rank = rank;
  task.alone_seconds = seconds;
  return graph_->add_task(task);
}

// Appends `task` to the rank's program order.
void Builder::chain(RankState& state, int32_t task) {
  if (state.last >= 0) {
    graph_->add_edge(state.last, task);
  }
  state.last = task;
}

int32_t Builder::receive_key(bool gradient, int64_t micro_batch, int64_t chunk) const {
  return static_cast<int32_t>(((gradient ? 1 : 0) * num_micro_batches_ + micro_batch) * vpp_ +
                              chunk);
}

// Pieces of the ops that carry bucket boundaries, by op index.
std::map<int32_t, std::vector<Piece>> Builder::carriers(const std::vector<PipelineOp>& ops,
                                                        const StageCosts& costs,
                                                        OpKind carrier_kind, bool last_of_chunk,
                                                        const std::vector<Bucket>& buckets,
                                                        BucketEdge edge) const {
  std::map<int32_t, std::vector<Piece>> result;
  if (buckets.empty()) {
    return result;
  }
  std::vector<int32_t> chosen(static_cast<size_t>(vpp_), -1);
  for (int32_t i = 0; i < static_cast<int32_t>(ops.size()); ++i) {
    if (ops[i].kind == carrier_kind && (last_of_chunk || chosen[ops[i].chunk] < 0)) {
      chosen[ops[i].chunk] = i;
    }
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<double> seconds;
  std::vector<int64_t> bytes;
  for (int32_t i : chosen) {
    if (i < 0) {
      throw RuntimeError(fmt::format("{}: schedule: a chunk has no {} op", input_.source,
                                     planner::to_string(carrier_kind)));
    }
    seconds.push_back(compute_seconds(costs.chunks[ops[i].chunk], carrier_kind));
  }
  for (const Bucket& bucket : buckets) {
    bytes.push_back(bucket.bytes);
  }
  auto pieces = split_carriers(seconds, bytes, edge);
  for (size_t j = 0; j < chosen.size(); ++j) {
    result.emplace(chosen[j], std::move(pieces[j]));
  }
  return result;
}

Builder::OpListContext Builder::op_list_context(int32_t rank) {
  const int64_t stage = ranks_[rank].coords.pp_rank;
  const std::vector<PipelineOp>& ops = input_.schedule.stages[stage];
  const StageCosts& costs = input_.stages[stage];
  RankState& state = states_[rank];
  state.grad_ready.assign(costs.grad_buckets.size(), -1);
  state.param_users.assign(costs.param_buckets.size(), {});
  const bool split = std::any_of(ops.begin(), ops.end(), [](const PipelineOp& op) {
    return op.kind == OpKind::kBackwardWeight;
  });
  OpListContext context;
  context.gradient_kind = split ? OpKind::kBackwardWeight : OpKind::kBackward;
  if (input_.overlap_grad_reduce) {
    context.grad_carriers = carriers(ops, costs, context.gradient_kind, true, costs.grad_buckets,
                                     BucketEdge::kReadyAtEnd);
  }
  if (input_.overlap_param_gather) {
    context.param_carriers = carriers(ops, costs, OpKind::kForward, false, costs.param_buckets,
                                      BucketEdge::kNeededAtStart);
  }
  context.layer_gathers = costs.chunk_param_buckets;
  context.layer_gathers_backward =
      costs.chunk_param_backward_buckets.value_or(costs.chunk_param_buckets);
  context.root_gathers = costs.chunk_root_param_buckets;
  context.layer_reduces = costs.chunk_grad_buckets;
  context.root_reduces = costs.chunk_root_grad_buckets;
  return context;
}

namespace {

std::vector<int64_t> bytes_of(const std::vector<Bucket>& buckets) {
  std::vector<int64_t> bytes;
  for (const Bucket& bucket : buckets) {
    bytes.push_back(bucket.bytes);
  }
  return bytes;
}

std::vector<double> seconds_of(const std::vector<Bucket>& buckets) {
  std::vector<double> seconds;
  for (const Bucket& bucket : buckets) {
    seconds.push_back(bucket.seconds);
  }
  return seconds;
}

}  // namespace

std::vector<OpPiece> Builder::compute_pieces(int32_t rank, int32_t index, const PipelineOp& op,
                                             OpListContext& context, std::vector<int32_t>*& needs,
                                             std::vector<int32_t>*& ready) {
  RankState& state = states_[rank];
  const double seconds =
      compute_seconds(input_.stages[ranks_[rank].coords.pp_rank].chunks[op.chunk], op.kind);
  // ZeRO-3: per-layer gathers before every F and B (B needs the weights for the input
  // gradient; W does not), per-layer reduce-scatters after every gradient-producing op. FSDP's
  // root unit (StageCosts::chunk_root_param_buckets) is gathered before the F only, needed by
  // its first piece (the embedding before the first layer is a lookup), and reduced after its
  // last piece, after the layers.
  // DeepSpeed gathers other calls before a B than before an F (StageCosts).
  const std::vector<Bucket>& layer_gathers =
      op.kind == OpKind::kForward ? context.layer_gathers : context.layer_gathers_backward;
  // Under torchtitan's pipelining (zero3_gathers_once_per_step) a chunk gathers in its first
  // forward only and reduce-scatters after its last backward only, all after that op.
  const bool once_per_step = input_.zero3_gathers_once_per_step;
  const int64_t last_micro_batch = input_.layout.num_micro_batches() - 1;
  const bool root_gather = op.kind == OpKind::kForward && !context.root_gathers.empty() &&
                           (!once_per_step || op.micro_batch == 0);
  const bool gathers = ((!layer_gathers.empty() && op.kind != OpKind::kBackwardWeight &&
                         (!once_per_step || op.micro_batch == 0)) ||
                        root_gather);
  const bool reduces = (!context.layer_reduces.empty() || !context.root_reduces.empty()) &&
                       op.kind == context.gradient_kind &&
                       (!once_per_step || op.micro_batch == last_micro_batch);
  const bool reduces_inside_op = reduces && input_.overlap_grad_reduce && !once_per_step;
  std::vector<OpPiece> pieces;
  if (gathers || reduces) {
    pieces = split_op(seconds, gathers ? bytes_of(layer_gathers) : std::vector<int64_t>{},
                      reduces_inside_op ? bytes_of(context.layer_reduces) : std::vector<int64_t>{});
    if (gathers) {
      std::vector<double> gather_seconds;
      if (root_gather) {
        // The root's buckets come first on the gather stream: shift the layers' indices.
        for (OpPiece& piece : pieces) {
          for (int32_t& k : piece.needs) {
            k += static_cast<int32_t>(context.root_gathers.size());
          }
        }
        for (int32_t k = 0; k < static_cast<int32_t>(context.root_gathers.size()); ++k) {
          pieces.front().needs.insert(pieces.front().needs.begin() + k, k);
        }
        gather_seconds = seconds_of(context.root_gathers);
      }
      for (double s : seconds_of(layer_gathers)) {
        gather_seconds.push_back(s);
      }
      // Prefetch one op ahead: gathers may start once the op before the previous one ends;
      // without overlap, or for an op that starts a pass (sharded_pass_boundaries: a forward;
      // a backward too under zero3_backward_pass_starts), once the previous op ends (the
      // planner exposes the first gather of every such op).
      const std::vector<int32_t>& ends = context.op_ends;
      const bool pass_start = input_.sharded_pass_boundaries &&
                              (op.kind == OpKind::kForward || input_.zero3_backward_pass_starts);
      const size_t back = input_.overlap_grad_reduce && !pass_start ? 2 : 1;
      state.gather_gates.push_back(ends.size() >= back ? ends[ends.size() - back] : -1);
      state.gather_after_reduce.push_back(
          pass_start ? static_cast<int32_t>(state.reduce_ready.size()) - 1 : -1);
      needs = &state.gather_users.emplace_back(gather_seconds.size(), -1);
      state.gather_seconds.push_back(std::move(gather_seconds));
    }
    if (reduces) {
      std::vector<double> reduce_seconds = seconds_of(context.layer_reduces);
      const auto first_root = static_cast<int32_t>(reduce_seconds.size());
      for (double s : seconds_of(context.root_reduces)) {
        reduce_seconds.push_back(s);
      }
      ready = &state.reduce_ready.emplace_back(reduce_seconds.size(), -1);
      state.reduce_blocks.push_back(-1);
      const int32_t first_after_op = reduces_inside_op ? first_root : 0;
      for (int32_t k = first_after_op; k < static_cast<int32_t>(reduce_seconds.size()); ++k) {
        pieces.back().ready.push_back(k);  // after the op
      }
      state.reduce_seconds.push_back(std::move(reduce_seconds));
    }
  } else if (auto it = context.grad_carriers.find(index); it != context.grad_carriers.end()) {
    for (const Piece& piece : it->second) {
      pieces.push_back(OpPiece{piece.seconds, {}, piece.buckets});
    }
    ready = &state.grad_ready;
  } else if (auto it2 = context.param_carriers.find(index); it2 != context.param_carriers.end()) {
    for (const Piece& piece : it2->second) {
      pieces.push_back(OpPiece{piece.seconds, piece.buckets, {}});
    }
  } else {
    pieces.push_back(OpPiece{seconds, {}, {}});
  }
  return pieces;
}

void Builder::describe_task(int32_t task, int32_t index, const PipelineOp& op) {
  TaskRecord& record = graph_->task(task);
  record.op_index = index;
  record.micro_batch = static_cast<int32_t>(op.micro_batch);
  record.chunk = static_cast<int32_t>(op.chunk);
}

// `share` of an op's exposed tp, cp and ep communication, on the compute stream (tp on its own
// stream with overlap_tp_comm), after what the rank has queued.
void Builder::add_op_communication(int32_t rank, int32_t index, const PipelineOp& op,
                                   double share) {
  RankState& state = states_[rank];
  const planner::ChunkCost& cost = input_.stages[ranks_[rank].coords.pp_rank].chunks[op.chunk];
  if (const double tp = share * tp_seconds(cost, op.kind); tp > 0) {
    const StreamKind stream = input_.overlap_tp_comm ? StreamKind::kTpComm : StreamKind::kCompute;
    const int32_t task = add_task(TaskKind::kTpComm, stream, rank, tp);
    describe_task(task, index, op);
    chain(state, task);
  }
  if (const double cp = share * cp_seconds(cost, op.kind); cp > 0) {
    // On the compute stream: attention waits for the chunk it computes on. Its links: NVLink
    // when the cp ring (or all-to-all group) stays in the node, the node's NIC when it spans
    // nodes, loaded with every member's share as an all-to-all loads every NIC of its group.
    const int32_t task = add_task(TaskKind::kCpComm, StreamKind::kCompute, rank, cp);
    describe_task(task, index, op);
    set_collective_flow(task, rank, !cp_spans_nodes_[rank] || cp_shares_node_[rank],
                        cp_spans_nodes_[rank]);
    chain(state, task);
  }
  if (const double ep =
          share * merged_ep_seconds(input_.stages[ranks_[rank].coords.pp_rank].chunks, op);
      ep > 0) {
    // The all-to-all loads every link of its ep group: NVLink when members share the node,
    // the node's NIC when the group spans nodes (all ranks of the node send at once).
    const int32_t task = add_task(TaskKind::kEpAllToAll, StreamKind::kCompute, rank, ep);
    set_collective_flow(task, rank, ep_shares_node_[rank], ep_spans_nodes_[rank]);
    describe_task(task, index, op);
    chain(state, task);
  }
}

// The op's exposed all-to-alls. overlap_moe_expert_parallel_comm (pp 1): Megatron-Core merges
// forward i + 1 with backward i (combined_1f1b_schedule_for_no_pipelining), adjacent ops of the
// pp 1 op list; the pair runs shorter by the planner's ep_overlap_saved_seconds (the merged
// layers' two-stream replay, planner::ep_overlap_layers_seconds), taken off the forward's
// all-to-alls, the rest off the backward's. The first forward and the last backward keep theirs.
// At pp > 1 (interleaved) the op list marks the merged pairs (PipelineOp::merged_chunk); the
// pair saves planner::ep_overlap_pair_saved_seconds of its forward and backward chunks, split
// the same way.
double Builder::merged_ep_seconds(const std::vector<planner::ChunkCost>& chunks,
                                  const PipelineOp& op) const {
  const planner::ChunkCost& cost = chunks[op.chunk];
  const double ep = ep_seconds(cost, op.kind);
  if (op.merged_chunk >= 0) {
    const planner::ChunkCost& forward =
        op.kind == OpKind::kForward ? cost : chunks[op.merged_chunk];
    const planner::ChunkCost& backward =
        op.kind == OpKind::kForward ? chunks[op.merged_chunk] : cost;
    const double saved = planner::ep_overlap_pair_saved_seconds(forward, backward);
    const double forward_share = std::min(saved, forward.forward_ep_comm_seconds);
    return op.kind == OpKind::kForward ? ep - forward_share : ep - (saved - forward_share);
  }
  const double saved = cost.ep_overlap_saved_seconds;
  if (saved <= 0 || layout_.pp != 1) {
    return ep;
  }
  const double forward_share = std::min(saved, cost.forward_ep_comm_seconds);
  if (op.kind == OpKind::kForward && op.micro_batch >= 1) {
    return ep - forward_share;
  }
  if (op.kind == OpKind::kBackward && op.micro_batch + 1 < num_micro_batches_) {
    return ep - (saved - forward_share);
  }
  return ep;
}

void Builder::add_compute_op(int32_t rank, int32_t index, const PipelineOp& op,
                             OpListContext& context) {
  RankState& state = states_[rank];
  // Without overlap, or at a ZeRO-2/3 pass boundary (sharded_pass_boundaries), the op waits for
  // the previous gradient op's reduce-scatters.
  const bool waits_for_reduce =
      !input_.overlap_grad_reduce || (input_.sharded_pass_boundaries && input_.layout.zero >= 2);
  const int32_t blocked_by =
      waits_for_reduce && !state.reduce_blocks.empty() && state.reduce_blocks.back() < 0
          ? static_cast<int32_t>(state.reduce_blocks.size()) - 1
          : -1;
  std::vector<int32_t>* needs = nullptr;  // [bucket] -> piece task
  std::vector<int32_t>* ready = nullptr;
  const std::vector<OpPiece> pieces = compute_pieces(rank, index, op, context, needs, ready);
  // The op's exposed tp, cp and ep communication stands for collectives spread through its
  // layers. An op cut at ZeRO-3's per-layer gathers and reduce-scatters runs a share of it
  // after each piece, in proportion to the piece's compute, so the gather stream paces against
  // compute and communication, layer by layer, as the planner's per-unit f_u and b_u do
  // (estimate.cpp zero3_exposed_per_micro_batch); any other op runs it after its compute,
  // ZeRO 2's too, whose per-op reduce-scatter tail the planner takes against the whole op
  // (reduce_tail_seconds). (Spread through a ZeRO-2 MoE op, the expert all-to-alls would share
  // the NIC with the reduce-scatters, which the planner does not model: +4% to +7% on
  // DeepSeek-V3's and Qwen3-30B-A3B's five best plans.) Under ZeRO 3 only split_op cuts an op
  // (its once-a-step bucket lists are empty: the planner refuses MoE plans, moe_zero3).
  const bool per_layer = input_.layout.zero == 3 && pieces.size() > 1;
  double compute_total = 0;
  for (const OpPiece& piece : pieces) {
    compute_total += piece.seconds;
  }
  for (const OpPiece& piece : pieces) {
    const int32_t task = add_task(task_kind(op.kind), StreamKind::kCompute, rank, piece.seconds);
    describe_task(task, index, op);
    chain(state, task);
    if (blocked_by >= 0 && &piece == &pieces.front()) {
      state.reduce_blocks[blocked_by] = task;
    }
    for (int32_t k : piece.needs) {
      if (needs != nullptr) {
        (*needs)[k] = task;
      } else {
        state.param_users[k].push_back(task);
      }
    }
    if (&piece != &pieces.back()) {
      for (int32_t k : piece.ready) {
        (*ready)[k] = task;
      }
    }
    if (per_layer) {
      add_op_communication(rank, index, op,
                           compute_total > 0 ? piece.seconds / compute_total
                                             : 1.0 / static_cast<double>(pieces.size()));
    }
  }
  if (!per_layer) {
    add_op_communication(rank, index, op, 1.0);
  }
  // The buckets the last piece completes are complete only when the whole op is, its
  // communication included, as the planner has them (ready when the backward ends).
  if (!pieces.empty()) {
    for (int32_t k : pieces.back().ready) {
      (*ready)[k] = state.last;
    }
  }
  // An op that reduces per op (ZeRO 2) and carries once-a-step buckets too (a MoE stage's
  // expert gradients, planner::expert_dp_buckets): those are complete when the op is.
  if (ready != &state.grad_ready) {
    if (auto it = context.grad_carriers.find(index); it != context.grad_carriers.end()) {
      for (const Piece& piece : it->second) {
        for (int32_t k : piece.buckets) {
          state.grad_ready[k] = state.last;
        }
      }
    }
  }
  context.op_ends.push_back(state.last);
}

void Builder::build_op_list(int32_t rank) {
  const int64_t stage = ranks_[rank].coords.pp_rank;
  const std::vector<PipelineOp>& ops = input_.schedule.stages[stage];
  RankState& state = states_[rank];
  OpListContext context = op_list_context(rank);
  for (int32_t index = 0; index < static_cast<int32_t>(ops.size()); ++index) {
    const PipelineOp& op = ops[index];
    if (op.chunk < 0 || op.chunk >= vpp_ || op.micro_batch < 0 ||
        op.micro_batch >= num_micro_batches_) {
      throw RuntimeError(fmt::format("{}: schedule: stage {} op {}: micro-batch {} chunk {}",
                                     input_.source, stage, index, op.micro_batch, op.chunk));
    }
    if (input_.paired_p2p) {
      if (is_compute_op(op.kind)) {
        end_transfer_run(rank);
      } else {
        if (state.transfer_run_last_op < 0) {  // the run starts here
          state.transfer_run_post = state.last;
        }
        state.transfer_run_last_op = index;
      }
    }
    if (is_compute_op(op.kind)) {
      add_compute_op(rank, index, op, context);
    } else if (op.kind == OpKind::kSendActivation || op.kind == OpKind::kSendGradient) {
      add_send(rank, index, op);
    } else {
      const int32_t task = add_task(TaskKind::kRecvWait, StreamKind::kCompute, rank, 0.0);
      describe_task(task, index, op);
      state.receive_posts.push_back(input_.paired_p2p ? state.transfer_run_post : state.last);
      chain(state, task);
      state.receives.emplace_back(
          task, receive_key(op.kind == OpKind::kRecvGradient, op.micro_batch, op.chunk));
    }
  }
  end_transfer_run(rank);
  if (!input_.overlap_grad_reduce) {
    std::fill(state.grad_ready.begin(), state.grad_ready.end(), state.last);
  }
}

void Builder::add_send(int32_t rank, int32_t index, const PipelineOp& op) {
  const RankCoords& coords = ranks_[rank].coords;
  const bool gradient = op.kind == OpKind::kSendGradient;
  // Activations go to virtual stage v + 1, gradients to v - 1.
  const int64_t pp = layout_.pp;
  const int64_t target = planner::virtual_stage(pp, coords.pp_rank, op.chunk) + (gradient ? -1 : 1);
  if (target < 0 || target >= pp * vpp_ || target % pp != op.peer_stage) {
    throw RuntimeError(fmt::format(
        "{}: schedule: stage {} op {}: {} to stage {} does not reach virtual stage {}",
        input_.source, coords.pp_rank, index, planner::to_string(op.kind), op.peer_stage, target));
  }
  RankCoords peer_coords = coords;
  peer_coords.pp_rank = target % pp;
  const int32_t peer = rank_index(peer_coords);
  const StageCosts& costs = input_.stages[coords.pp_rank];
  const int32_t task = add_task(
      TaskKind::kPpTransfer, gradient ? StreamKind::kPpBackward : StreamKind::kPpForward, rank,
      gradient ? costs.gradient_transfer_seconds.value_or(costs.transfer_seconds)
               : costs.transfer_seconds);
  TaskRecord& record = graph_->task(task);
  record.op_index = index;
  record.micro_batch = static_cast<int32_t>(op.micro_batch);
  record.chunk = static_cast<int32_t>(op.chunk);
  if (input_.paired_p2p) {
    // Part of the run's one call: issued with it, waited for at its end (end_transfer_run).
    if (states_[rank].transfer_run_post >= 0) {
      graph_->add_edge(states_[rank].transfer_run_post, task);
    }
    states_[rank].transfer_run_sends.push_back(task);
  } else if (input_.blocking_sends) {
    chain(states_[rank], task);  // the next op waits for the send (DeepSpeed p2p.send)
  } else if (states_[rank].last >= 0) {
    graph_->add_edge(states_[rank].last, task);  // sends are buffered: program order goes on
  }
  if (ranks_[peer].node != ranks_[rank].node) {
    const auto weight = static_cast<double>(ranks_[rank].nic_weight);
    graph_->set_flow(task,
                     {{nic_out(ranks_[rank].node), weight}, {nic_in(ranks_[peer].node), weight}});
  } else {
    graph_->set_flow(task, {{nvlink_out(rank), 1.0}, {nvlink_in(peer), 1.0}});
  }
  int32_t& slot = states_[peer].transfer_to[receive_key(gradient, op.micro_batch, target / pp)];
  if (slot >= 0) {
    throw RuntimeError(fmt::format("{}: schedule: stage {} sends {} of micro-batch {} twice",
                                   input_.source, coords.pp_rank, planner::to_string(op.kind),
                                   op.micro_batch));
  }
  slot = task;
}

// paired_p2p: the op after a run of transfer ops waits for the run's sends too (a zero-length
// wait on the compute stream).
void Builder::end_transfer_run(int32_t rank) {
  RankState& state = states_[rank];
  if (!state.transfer_run_sends.empty()) {
    const int32_t wait = add_task(TaskKind::kRecvWait, StreamKind::kCompute, rank, 0.0);
    const int32_t index = state.transfer_run_last_op;
    describe_task(wait, index, input_.schedule.stages[ranks_[rank].coords.pp_rank][index]);
    for (const int32_t send : state.transfer_run_sends) {
      graph_->add_edge(send, wait);
    }
    chain(state, wait);
    state.transfer_run_sends.clear();
  }
  state.transfer_run_last_op = -1;
}

void Builder::connect_receives() {
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    const RankState& state = states_[rank];
    for (size_t i = 0; i < state.receives.size(); ++i) {
      const auto& [wait, key] = state.receives[i];
      const int32_t transfer = state.transfer_to[key];
      if (transfer < 0) {
        const TaskRecord& record = graph_->task(wait);
        throw RuntimeError(fmt::format(
            "{}: schedule: stage {} receives micro-batch {} chunk {} that is never sent",
            input_.source, ranks_[rank].coords.pp_rank, record.micro_batch, record.chunk));
      }
      graph_->add_edge(transfer, wait);
      // Late receives: the data moves once the receiver is there to take it.
      if ((input_.late_receives || input_.paired_p2p) && state.receive_posts[i] >= 0) {
        graph_->add_edge(state.receive_posts[i], transfer);
      }
      graph_->task(transfer).peer = wait;
      graph_->task(wait).peer = transfer;
    }
  }
}

BuiltGraph build_task_graph(const SimulationInput& input) {
  return Builder(input).build();
}

}  // namespace meshplan::simulator
