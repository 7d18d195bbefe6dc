#pragma once
// NCCL communicators for the GPU executor, one per process group of the CPU executor's
// ProcessGroups (tp, pp, dp, embedding), each made with ncclCommInitRank from a unique id that
// the group's rank 0 creates and MPI_Bcast sends over the group's MPI communicator (NCCL's
// documented MPI bootstrap, NCCL User Guide "Creating a communicator with options" / examples).
// The collectives count calls and bytes exactly as ProcessGroups does (nccl-tests' "size"), so
// the GPU path is checked against the planner's inventory the same way. Groups of one rank issue
// nothing and count nothing.

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <map>
#include <string>

#include "process_groups.h"

namespace meshplan::executor::gpu {

/// One line naming the NCCL call, file:line, NCCL's error text and the rank.
#define MESHPLAN_NCCL_CHECK(call)                                                   \
  do {                                                                              \
    const ncclResult_t meshplan_status_ = (call);                                   \
    if (meshplan_status_ != ncclSuccess) {                                          \
      ::meshplan::executor::gpu::throw_check_failure(                               \
          "NCCL", #call, ncclGetErrorString(meshplan_status_), __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

class NcclGroups {
 public:
  /// Collective over every rank of `groups.world()`; the current CUDA device must be set.
  explicit NcclGroups(const ProcessGroups& groups);
  ~NcclGroups();
  NcclGroups(const NcclGroups&) = delete;
  NcclGroups& operator=(const NcclGroups&) = delete;

  void all_reduce_sum(CommGroup group, float* buffer, int64_t count, cudaStream_t stream);
  /// out (size * count) = every rank's in (count), in rank order.
  void all_gather(CommGroup group, float* out, const float* in, int64_t count, cudaStream_t stream);
  /// out (count) = this rank's block of the sum of every rank's in (size * count).
  void reduce_scatter(CommGroup group, float* out, const float* in, int64_t count,
                      cudaStream_t stream);
  /// Pipeline point-to-point on the pp group (`peer_stage` is the other pipeline rank).
  void send(const float* buffer, int64_t count, int peer_stage, cudaStream_t stream);
  void recv(float* buffer, int64_t count, int peer_stage, cudaStream_t stream);

  const TrafficCounts& traffic() const { return traffic_; }
  /// Forget the counts (at the start of each step, as ProcessGroups::reset_traffic).
  void reset_traffic() { traffic_.clear(); }

 private:
  ncclComm_t comm(CommGroup group) const;
  int size(CommGroup group) const;
  void count(CollectiveKind kind, CommGroup group, int64_t bytes);

  const ProcessGroups& groups_;
  std::map<CommGroup, ncclComm_t> comms_;
  TrafficCounts traffic_;
};

}  // namespace meshplan::executor::gpu
