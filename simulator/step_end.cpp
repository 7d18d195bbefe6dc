// The end of the step: data-parallel collectives (bucketed, joined across the group when every
// rank is simulated), the tied-embedding sync, the gradient-norm barrier and the optimizer step.

#include <fmt/format.h>

#include "builder.h"
#include "meshplan/errors.h"

namespace meshplan::simulator {

using planner::RankCoords;

// One collective over `members` (rank indices of one group): a task per member on `stream`.
// With several members they start together, after a join of all their `ready` tasks.
std::vector<int32_t> Builder::add_collective(const std::vector<int32_t>& members,
                                             const std::vector<std::vector<int32_t>>& ready,
                                             TaskKind kind, StreamKind stream, double seconds,
                                             int32_t bucket, Group group) {
  int32_t join = -1;
  if (members.size() > 1) {
    join = add_task(TaskKind::kJoin, StreamKind::kNone, -1, 0.0);
    for (const auto& tasks : ready) {
      for (int32_t task : tasks) {
        graph_->add_edge(task, join);
      }
    }
  }
  std::vector<int32_t> created;
  for (size_t i = 0; i < members.size(); ++i) {
    const int32_t rank = members[i];
    const int32_t task = add_task(kind, stream, rank, seconds);
    graph_->task(task).bucket = bucket;
    if (join >= 0) {
      graph_->add_edge(join, task);
    } else {
      for (int32_t dependency : ready[i]) {
        graph_->add_edge(dependency, task);
      }
    }
    if (group == Group::kDataParallel) {
      set_collective_flow(task, rank, dp_shares_node_[rank], dp_spans_nodes_[rank]);
    } else {
      const bool apart = ranks_[members.front()].node != ranks_[members.back()].node;
      set_collective_flow(task, rank, !apart, apart);
    }
    created.push_back(task);
  }
  return created;
}

// Data-parallel groups among the simulated ranks: same (tp, pp), all dp ranks.
std::vector<std::vector<int32_t>> Builder::dp_groups() const {
  std::map<std::pair<int64_t, int64_t>, std::vector<int32_t>> groups;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    groups[{ranks_[i].coords.pp_rank, ranks_[i].coords.tp_rank}].push_back(static_cast<int32_t>(i));
  }
  std::vector<std::vector<int32_t>> result;
  for (auto& [key, members] : groups) {
    result.push_back(std::move(members));
  }
  return result;
}

void Builder::add_param_gathers(const std::vector<int32_t>& members, bool after_optimizer) {
  const StageCosts& costs = input_.stages[ranks_[members[0]].coords.pp_rank];
  for (int32_t k = 0; k < static_cast<int32_t>(costs.param_buckets.size()); ++k) {
    std::vector<std::vector<int32_t>> ready(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      if (after_optimizer) {
        ready[i].push_back(states_[members[i]].optimizer);
      }
    }
    const auto tasks = add_collective(members, ready, TaskKind::kParamGather, StreamKind::kDpGather,
                                      costs.param_buckets[k].seconds, k, Group::kDataParallel);
    for (size_t i = 0; i < members.size(); ++i) {
      for (int32_t user : states_[members[i]].param_users[k]) {
        graph_->add_edge(tasks[i], user);
      }
    }
  }
}

// ZeRO-3: every gather and reduce-scatter the op lists asked for, in op order, so that each
// stream issues them in program order.
void Builder::add_zero3_collectives(const std::vector<int32_t>& members) {
  // The members run the same op list (one stage), so the first one's bucket lists are all's.
  const RankState& first = states_[members[0]];
  const size_t num_gathers = first.gather_users.size();
  // [op][member] the op's first gather, which may wait for a gradient op's reduce-scatters.
  std::vector<std::vector<int32_t>> first_gathers(num_gathers);
  for (size_t op = 0; op < num_gathers; ++op) {
    const std::vector<double>& gathers = first.gather_seconds[op];
    for (int32_t k = 0; k < static_cast<int32_t>(gathers.size()); ++k) {
      std::vector<std::vector<int32_t>> ready(members.size());
      for (size_t i = 0; i < members.size(); ++i) {
        const int32_t gate = states_[members[i]].gather_gates[op];
        if (k == 0 && gate >= 0) {
          ready[i].push_back(gate);  // later buckets follow on the stream
        }
      }
      const auto tasks = add_collective(members, ready, TaskKind::kParamGather,
                                        StreamKind::kDpGather, gathers[k], k, Group::kDataParallel);
      for (size_t i = 0; i < members.size(); ++i) {
        graph_->add_edge(tasks[i], states_[members[i]].gather_users[op][k]);
      }
      if (k == 0) {
        first_gathers[op] = tasks;
      }
    }
  }
  const size_t num_reduces = first.reduce_ready.size();
  std::vector<std::vector<int32_t>> last_reduces(num_reduces);  // [op][member]
  for (size_t op = 0; op < num_reduces; ++op) {
    const std::vector<double>& reduces = first.reduce_seconds[op];
    for (int32_t k = 0; k < static_cast<int32_t>(reduces.size()); ++k) {
      std::vector<std::vector<int32_t>> ready;
      for (int32_t rank : members) {
        ready.push_back({states_[rank].reduce_ready[op][k]});
      }
      const auto tasks = add_collective(members, ready, TaskKind::kGradReduce, StreamKind::kDpComm,
                                        reduces[k], k, Group::kDataParallel);
      for (size_t i = 0; i < members.size(); ++i) {
        states_[members[i]].grads_done = tasks[i];
        const int32_t blocked = states_[members[i]].reduce_blocks[op];
        if (blocked >= 0 && k + 1 == static_cast<int32_t>(reduces.size())) {
          graph_->add_edge(tasks[i], blocked);  // a blocking reduce-scatter (no overlap)
        }
      }
      if (k + 1 == static_cast<int32_t>(reduces.size())) {
        last_reduces[op] = tasks;
      }
    }
  }
  // An op that starts a pass (sharded_pass_boundaries): its gathers start after the last
  // gradient op's reduce-scatters.
  for (size_t op = 0; op < num_gathers; ++op) {
    const int32_t after = first.gather_after_reduce[op];
    if (after < 0 || first_gathers[op].empty() ||
        last_reduces.at(static_cast<size_t>(after)).empty()) {
      continue;
    }
    for (size_t i = 0; i < members.size(); ++i) {
      graph_->add_edge(last_reduces.at(static_cast<size_t>(after))[i], first_gathers[op][i]);
    }
  }
}

void Builder::add_step_end() {
  const auto groups = dp_groups();
  for (const auto& members : groups) {
    add_zero3_collectives(members);
  }
  if (input_.overlap_param_gather) {
    for (const auto& members : groups) {
      add_param_gathers(members, false);
    }
  }
  for (const auto& members : groups) {
    const StageCosts& costs = input_.stages[ranks_[members[0]].coords.pp_rank];
    for (int32_t k = 0; k < static_cast<int32_t>(costs.grad_buckets.size()); ++k) {
      std::vector<std::vector<int32_t>> ready;
      for (int32_t rank : members) {
        ready.push_back({states_[rank].grad_ready[k]});
      }
      const auto tasks = add_collective(members, ready, TaskKind::kGradReduce, StreamKind::kDpComm,
                                        costs.grad_buckets[k].seconds, k, Group::kDataParallel);
      for (size_t i = 0; i < members.size(); ++i) {
        states_[members[i]].grads_done = tasks[i];
      }
    }
  }
  add_embedding_sync();
  // Gradient-norm barrier: Megatron-LM clips by the global gradient norm (clip_grad = 1.0),
  // one all-reduce of a scalar over all ranks before any optimizer step; the planner does not
  // cost that latency-only all-reduce, so the barrier takes no time.
  const int32_t barrier = add_task(TaskKind::kJoin, StreamKind::kNone, -1, 0.0);
  for (const RankState& state : states_) {
    for (int32_t task : {state.last, state.grads_done}) {
      if (task >= 0) {
        graph_->add_edge(task, barrier);
      }
    }
  }
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    const StageCosts& costs = input_.stages[ranks_[rank].coords.pp_rank];
    RankState& state = states_[rank];
    state.optimizer = add_task(TaskKind::kOptimizerStep, StreamKind::kCompute,
                               static_cast<int32_t>(rank), costs.optimizer_step_seconds);
    graph_->add_edge(barrier, state.optimizer);
  }
  if (!input_.overlap_param_gather) {
    for (const auto& members : groups) {
      add_param_gathers(members, true);
    }
  }
}

// Tied embeddings with pp > 1: the first and last stage all-reduce the word-embedding
// gradient once their own gradients are reduced.
void Builder::add_embedding_sync() {
  const int64_t pp = layout_.pp;
  const StageCosts& first = input_.stages.front();
  const StageCosts& last = input_.stages.back();
  if (first.has_embedding_sync != last.has_embedding_sync) {
    throw InputError(fmt::format(
        "{}: stages: has_embedding_sync: first and last stage disagree (tied embeddings)",
        input_.source));
  }
  if (pp < 2 || !first.has_embedding_sync) {
    return;
  }
  for (size_t rank = 0; rank < ranks_.size(); ++rank) {
    if (ranks_[rank].coords.pp_rank != 0) {
      continue;
    }
    RankCoords partner_coords = ranks_[rank].coords;
    partner_coords.pp_rank = pp - 1;
    const std::vector<int32_t> pair{static_cast<int32_t>(rank), rank_index(partner_coords)};
    std::vector<std::vector<int32_t>> ready;
    for (int32_t member : pair) {
      const RankState& state = states_[member];
      ready.push_back({state.last});
      if (state.grads_done >= 0) {
        ready.back().push_back(state.grads_done);
      }
    }
    const auto tasks = add_collective(pair, ready, TaskKind::kEmbeddingSync, StreamKind::kDpComm,
                                      first.embedding_sync_seconds, -1, Group::kEmbeddingPair);
    for (size_t i = 0; i < pair.size(); ++i) {
      states_[pair[i]].grads_done = tasks[i];
    }
  }
}

}  // namespace meshplan::simulator
