#pragma once
// This rank's MPI process groups, built from the plan's rank placement with MPI_Comm_split
// (tp, pp, dp, cp, Megatron-LM's 2-rank embedding group of the first and last pipeline stage,
// and for mixture-of-experts the ep group and the expert data parallel group),
// and the collectives the executor issues on them. Every collective counts one call and its
// message bytes by (kind, group) in nccl-tests' sense of "size": the whole buffer of an all-reduce,
// the gathered output of an all-gather, the whole input of a reduce-scatter, the payload of a send.
// Groups of one rank issue nothing and count nothing.

#include <mpi.h>

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/layout.h"
#include "watchdog.h"

namespace meshplan::executor {

using planner::CollectiveKind;
using planner::CommGroup;

/// What this rank issued of one (kind, group).
struct Traffic {
  int64_t bytes = 0;  // message bytes, summed over the calls
  int64_t calls = 0;  // collectives (or sends) issued
  bool operator==(const Traffic&) const = default;
};
using TrafficCounts = std::map<std::pair<CollectiveKind, CommGroup>, Traffic>;

class ProcessGroups {
 public:
  /// Collective over `world`, whose size must be layout.num_gpus().
  /// Every wait on these groups has the deadline `collective_timeout_seconds` (the watchdog).
  ProcessGroups(const planner::Layout& layout, bool tied_embeddings, MPI_Comm world,
                double collective_timeout_seconds);
  ~ProcessGroups();
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;

  int rank() const { return rank_; }
  const planner::RankCoords& coords() const { return coords_; }
  MPI_Comm world() const { return world_; }
  /// Size of `group` as seen from this rank (the embedding group is 0 off the first/last stage).
  int size(CommGroup group) const;
  MPI_Comm comm(CommGroup group) const;

  void all_reduce_sum(CommGroup group, float* buffer, int64_t count);
  void all_reduce_max(CommGroup group, float* buffer, int64_t count);
  /// out (size * count) = every rank's in (count), in rank order.
  void all_gather(CommGroup group, float* out, const float* in, int64_t count);
  /// out (count) = this rank's block of the sum of every rank's in (size * count).
  void reduce_scatter(CommGroup group, float* out, const float* in, int64_t count);
  /// Non-blocking forms, for the data-parallel reduction that overlaps the backward and the
  /// ZeRO-1 parameter gather that overlaps the next forward.
  MPI_Request iall_reduce_sum(CommGroup group, float* buffer, int64_t count);
  /// In place, for the ZeRO-1 buckets: `buffer` holds size * count elements; the reduce-scatter
  /// leaves this rank's block of the sum in buffer[0, count), the all-gather sends this rank's
  /// block from buffer[rank * count, (rank + 1) * count) and fills the rest.
  MPI_Request ireduce_scatter_in_place(CommGroup group, float* buffer, int64_t count);
  MPI_Request iall_gather_in_place(CommGroup group, float* buffer, int64_t count);

  /// Mixture-of-experts token counts (int64, as Megatron-Core's routing_map.sum()):
  /// out (size * count) = every rank's in (count), in rank order; counted as an all-gather of
  /// size * count * 8 bytes.
  void all_gather_counts(CommGroup group, int64_t* out, const int64_t* in, int64_t count);
  /// buffer (count) = the sum over the group, in place; counted as an all-reduce of count * 8 B.
  void all_reduce_counts(CommGroup group, int64_t* buffer, int64_t count);
  /// MPI_Alltoallv of rows of `row_floats` floats: send_rows[j] rows of `sent` (in rank order)
  /// go to rank j, recv_rows[i] rows from rank i land in `received` (in rank order). Counted as
  /// one all-to-all of this rank's send bytes, sum(send_rows) * row_floats * 4 (nccl-tests'
  /// alltoall "size": the whole send buffer).
  void all_to_all_v(CommGroup group, float* received, const std::vector<int64_t>& recv_rows,
                    const float* sent, const std::vector<int64_t>& send_rows, int64_t row_floats);

  /// This rank's index in `group` (0 where it has none).
  int group_rank(CommGroup group) const;
  /// Context-parallel ring step: sends `sent` (count) to the next cp rank and receives the
  /// previous one's into `received` (count), counted as one send of count floats.
  void cp_ring_shift(float* received, const float* sent, int64_t count);

  /// Point-to-point on the pp group: sends never block (the request completes later),
  /// receives block. `peer_stage` is the other pipeline rank.
  MPI_Request isend(const float* buffer, int64_t count, int peer_stage, int tag);
  void recv(float* buffer, int64_t count, int peer_stage, int tag);

  /// Complete requests under the watchdog's deadline; past it they throw RuntimeError naming
  /// this rank, `what` ("dp all-reduce") and the world ranks of the group (or the peer) waited on.
  void wait(MPI_Request* request, CommGroup group, const char* what) const;
  void wait_all(std::vector<MPI_Request>* requests, CommGroup group, const char* what) const;
  /// A pipeline send to (pp group) rank `peer_stage`.
  void wait_send(MPI_Request* request, int peer_stage) const;
  /// A request on the world communicator.
  void wait_world(MPI_Request* request, const char* what) const;
  const Watchdog& watchdog() const { return watchdog_; }

  const TrafficCounts& traffic() const { return traffic_; }
  void reset_traffic() { traffic_.clear(); }

 private:
  void count(CollectiveKind kind, CommGroup group, int64_t bytes);
  // In-place non-blocking all-reduce with `op`, counted; MPI_REQUEST_NULL when the group is 1.
  MPI_Request iall_reduce_(CommGroup group, float* buffer, int64_t count, MPI_Op op);

  MPI_Comm world_;
  Watchdog watchdog_;
  int rank_ = 0;
  planner::RankCoords coords_;
  MPI_Comm tp_ = MPI_COMM_NULL;
  MPI_Comm pp_ = MPI_COMM_NULL;
  MPI_Comm dp_ = MPI_COMM_NULL;
  MPI_Comm embedding_ = MPI_COMM_NULL;
  MPI_Comm cp_ = MPI_COMM_NULL;
  MPI_Comm ep_ = MPI_COMM_NULL;
  MPI_Comm expert_dp_ = MPI_COMM_NULL;
  static constexpr int kCpRingTag = 7;  // the cp communicator carries nothing else
  TrafficCounts traffic_;
};

}  // namespace meshplan::executor
