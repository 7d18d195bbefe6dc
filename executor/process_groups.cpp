#include "process_groups.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "meshplan/errors.h"
#include "mpi_check.h"

namespace meshplan::executor {

namespace {

constexpr int64_t kFloatBytes = 4;  // fp32

int to_int_count(int64_t count) {
  if (count > INT_MAX) {
    throw RuntimeError(fmt::format("rank {}: message of {} elements exceeds MPI's int count",
                                   world_rank(), count));
  }
  return static_cast<int>(count);
}

MPI_Comm split(MPI_Comm world, int color, int key) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(world, color, key, &comm));
  if (comm != MPI_COMM_NULL) {
    set_errors_return(comm);
  }
  return comm;
}

}  // namespace

ProcessGroups::ProcessGroups(const planner::Layout& layout, bool tied_embeddings, MPI_Comm world,
                             double collective_timeout_seconds)
    : world_(world), watchdog_(collective_timeout_seconds) {
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  coords_ = planner::rank_coords(layout, rank_);
  const int tp = static_cast<int>(coords_.tp_rank);
  const int cp = static_cast<int>(coords_.cp_rank);
  const int dp = static_cast<int>(coords_.dp_rank);
  const int pp = static_cast<int>(coords_.pp_rank);
  const int num_dp = static_cast<int>(layout.dp);
  const int num_tp = static_cast<int>(layout.tp);
  const int num_cp = static_cast<int>(layout.cp);
  // Same color = same group; the key orders ranks by their coordinate in that group. The dp
  // group is the gradient group dp x cp (planner::grad_group_size), ordered cp fastest as the
  // global ranks are (Megatron-Core's dp_cp_group).
  const int dp_cp = dp * num_cp + cp;
  tp_ = split(world, pp * num_dp * num_cp + dp_cp, tp);
  dp_ = split(world, pp * num_tp + tp, dp_cp);
  pp_ = split(world, dp_cp * num_tp + tp, pp);
  cp_ = split(world, (pp * num_dp + dp) * num_tp + tp, cp);
  // Megatron-Core's expert ranks tp-ep-dp-pp: ep consecutive ranks of the dp x cp group form
  // an ep group; the ranks at the same ep position form the expert data parallel group.
  const int num_ep = static_cast<int>(layout.ep);
  const int num_edp = num_dp * num_cp / num_ep;
  ep_ = split(world, (pp * num_tp + tp) * num_edp + dp_cp / num_ep, dp_cp % num_ep);
  expert_dp_ = split(world, (pp * num_tp + tp) * num_ep + dp_cp % num_ep, dp_cp / num_ep);
  const bool embedding_member =
      tied_embeddings && layout.pp > 1 && (pp == 0 || pp == layout.pp - 1);
  embedding_ = split(world, embedding_member ? dp_cp * num_tp + tp : MPI_UNDEFINED, pp);
}

ProcessGroups::~ProcessGroups() {
  for (MPI_Comm* comm : {&tp_, &dp_, &pp_, &embedding_, &cp_, &ep_, &expert_dp_}) {
    if (*comm != MPI_COMM_NULL) {
      MPI_Comm_free(comm);
    }
  }
}

MPI_Comm ProcessGroups::comm(CommGroup group) const {
  switch (group) {
    case CommGroup::kTp:
      return tp_;
    case CommGroup::kPp:
      return pp_;
    case CommGroup::kDp:
      return dp_;
    case CommGroup::kEmbedding:
      return embedding_;
    case CommGroup::kCp:
      return cp_;
    case CommGroup::kEp:
      return ep_;
    case CommGroup::kExpertDp:
      return expert_dp_;
    case CommGroup::kDpShard:  // hybrid sharding: refused by validate_plan_for_executor
    case CommGroup::kDpReplicate:
      return MPI_COMM_NULL;
  }
  return MPI_COMM_NULL;
}

int ProcessGroups::size(CommGroup group) const {
  const MPI_Comm c = comm(group);
  if (c == MPI_COMM_NULL) {
    return 0;
  }
  int n = 0;
  MPI_CHECK(MPI_Comm_size(c, &n));
  return n;
}

int ProcessGroups::group_rank(CommGroup group) const {
  const MPI_Comm c = comm(group);
  int r = 0;
  if (c != MPI_COMM_NULL) {
    MPI_CHECK(MPI_Comm_rank(c, &r));
  }
  return r;
}

void ProcessGroups::cp_ring_shift(float* received, const float* sent, int64_t count) {
  const int n = size(CommGroup::kCp);
  const int r = group_rank(CommGroup::kCp);
  MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_CHECK(MPI_Irecv(received, to_int_count(count), MPI_FLOAT, (r + n - 1) % n, kCpRingTag, cp_,
                      &requests[0]));
  MPI_CHECK(
      MPI_Isend(sent, to_int_count(count), MPI_FLOAT, (r + 1) % n, kCpRingTag, cp_, &requests[1]));
  std::vector<MPI_Request> pending(requests, requests + 2);
  wait_all(&pending, CommGroup::kCp, "ring send/receive");
  this->count(CollectiveKind::kSendRecv, CommGroup::kCp, count * kFloatBytes);
}

void ProcessGroups::count(CollectiveKind kind, CommGroup group, int64_t bytes) {
  Traffic& traffic = traffic_[{kind, group}];
  traffic.bytes += bytes;
  traffic.calls += 1;
}

void ProcessGroups::all_reduce_sum(CommGroup group, float* buffer, int64_t count) {
  MPI_Request request = iall_reduce_(group, buffer, count, MPI_SUM);
  if (request != MPI_REQUEST_NULL) {
    wait(&request, group, "all-reduce");
  }
}

void ProcessGroups::all_reduce_max(CommGroup group, float* buffer, int64_t count) {
  MPI_Request request = iall_reduce_(group, buffer, count, MPI_MAX);
  if (request != MPI_REQUEST_NULL) {
    wait(&request, group, "all-reduce (max)");
  }
}

void ProcessGroups::all_gather(CommGroup group, float* out, const float* in, int64_t count) {
  const int n = size(group);
  if (n <= 1) {
    std::copy(in, in + count, out);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(in, to_int_count(count), MPI_FLOAT, out, to_int_count(count), MPI_FLOAT,
                           comm(group), &request));
  wait(&request, group, "all-gather");
  this->count(CollectiveKind::kAllGather, group, n * count * kFloatBytes);
}

void ProcessGroups::reduce_scatter(CommGroup group, float* out, const float* in, int64_t count) {
  const int n = size(group);
  if (n <= 1) {
    std::copy(in, in + count, out);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ireduce_scatter_block(in, out, to_int_count(count), MPI_FLOAT, MPI_SUM, comm(group),
                                      &request));
  wait(&request, group, "reduce-scatter");
  this->count(CollectiveKind::kReduceScatter, group, n * count * kFloatBytes);
}

void ProcessGroups::all_gather_counts(CommGroup group, int64_t* out, const int64_t* in,
                                      int64_t count) {
  const int n = size(group);
  if (n <= 1) {
    std::copy(in, in + count, out);
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallgather(in, to_int_count(count), MPI_INT64_T, out, to_int_count(count),
                           MPI_INT64_T, comm(group), &request));
  wait(&request, group, "token-count all-gather");
  this->count(CollectiveKind::kAllGather, group, n * count * 8);
}

void ProcessGroups::all_reduce_counts(CommGroup group, int64_t* buffer, int64_t count) {
  if (size(group) <= 1) {
    return;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, to_int_count(count), MPI_INT64_T, MPI_SUM,
                           comm(group), &request));
  wait(&request, group, "token-count all-reduce");
  this->count(CollectiveKind::kAllReduce, group, count * 8);
}

void ProcessGroups::all_to_all_v(CommGroup group, float* received,
                                 const std::vector<int64_t>& recv_rows, const float* sent,
                                 const std::vector<int64_t>& send_rows, int64_t row_floats) {
  const int n = size(group);
  std::vector<int> send_counts(static_cast<size_t>(n)), send_offsets(static_cast<size_t>(n));
  std::vector<int> recv_counts(static_cast<size_t>(n)), recv_offsets(static_cast<size_t>(n));
  int64_t send_total = 0;
  int64_t recv_total = 0;
  for (size_t r = 0; r < static_cast<size_t>(n); r++) {
    send_offsets[r] = to_int_count(send_total);
    send_counts[r] = to_int_count(send_rows[r] * row_floats);
    send_total += send_rows[r] * row_floats;
    recv_offsets[r] = to_int_count(recv_total);
    recv_counts[r] = to_int_count(recv_rows[r] * row_floats);
    recv_total += recv_rows[r] * row_floats;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ialltoallv(sent, send_counts.data(), send_offsets.data(), MPI_FLOAT, received,
                           recv_counts.data(), recv_offsets.data(), MPI_FLOAT, comm(group),
                           &request));
  wait(&request, group, "all-to-all");
  this->count(CollectiveKind::kAllToAll, group, send_total * kFloatBytes);
}

MPI_Request ProcessGroups::iall_reduce_sum(CommGroup group, float* buffer, int64_t count) {
  return iall_reduce_(group, buffer, count, MPI_SUM);
}

MPI_Request ProcessGroups::iall_reduce_(CommGroup group, float* buffer, int64_t count, MPI_Op op) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (size(group) <= 1) {
    return request;
  }
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buffer, to_int_count(count), MPI_FLOAT, op, comm(group),
                           &request));
  this->count(CollectiveKind::kAllReduce, group, count * kFloatBytes);
  return request;
}

MPI_Request ProcessGroups::ireduce_scatter_in_place(CommGroup group, float* buffer, int64_t count) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int n = size(group);
  if (n <= 1) {
    return request;
  }
  MPI_CHECK(MPI_Ireduce_scatter_block(MPI_IN_PLACE, buffer, to_int_count(count), MPI_FLOAT, MPI_SUM,
                                      comm(group), &request));
  this->count(CollectiveKind::kReduceScatter, group, n * count * kFloatBytes);
  return request;
}

MPI_Request ProcessGroups::iall_gather_in_place(CommGroup group, float* buffer, int64_t count) {
  MPI_Request request = MPI_REQUEST_NULL;
  const int n = size(group);
  if (n <= 1) {
    return request;
  }
  MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buffer, to_int_count(count),
                           MPI_FLOAT, comm(group), &request));
  this->count(CollectiveKind::kAllGather, group, n * count * kFloatBytes);
  return request;
}

MPI_Request ProcessGroups::isend(const float* buffer, int64_t count, int peer_stage, int tag) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Isend(buffer, to_int_count(count), MPI_FLOAT, peer_stage, tag, pp_, &request));
  this->count(CollectiveKind::kSendRecv, CommGroup::kPp, count * kFloatBytes);
  return request;
}

void ProcessGroups::recv(float* buffer, int64_t count, int peer_stage, int tag) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Irecv(buffer, to_int_count(count), MPI_FLOAT, peer_stage, tag, pp_, &request));
  watchdog_.wait(&request, [this, peer_stage] {
    return fmt::format("a pipeline receive from stage {} (world rank {})", peer_stage,
                       world_rank_of(pp_, peer_stage));
  });
}

void ProcessGroups::wait(MPI_Request* request, CommGroup group, const char* what) const {
  watchdog_.wait(request, [this, group, what] {
    return fmt::format("{} {} ({})", planner::to_string(group), what, world_ranks_of(comm(group)));
  });
}

void ProcessGroups::wait_all(std::vector<MPI_Request>* requests, CommGroup group,
                             const char* what) const {
  watchdog_.wait_all(requests, [this, group, what] {
    return fmt::format("{} {} ({})", planner::to_string(group), what, world_ranks_of(comm(group)));
  });
}

void ProcessGroups::wait_send(MPI_Request* request, int peer_stage) const {
  watchdog_.wait(request, [this, peer_stage] {
    return fmt::format("a pipeline send to stage {} (world rank {})", peer_stage,
                       world_rank_of(pp_, peer_stage));
  });
}

void ProcessGroups::wait_world(MPI_Request* request, const char* what) const {
  watchdog_.wait(request,
                 [this, what] { return fmt::format("{} ({})", what, world_ranks_of(world_)); });
}

}  // namespace meshplan::executor
