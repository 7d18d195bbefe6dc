#include "gpu/nccl_groups.h"

#include <stdexcept>

#include "gpu/cuda_check.h"
#include "mpi_check.h"

namespace meshplan::executor::gpu {

namespace {

// ncclCommInitRank over `group`: its rank 0 makes the id, MPI_Bcast hands it to the others.
ncclComm_t init_comm(MPI_Comm group) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(group, &rank);
  MPI_Comm_size(group, &size);
  ncclUniqueId id{};
  if (rank == 0) {
    MESHPLAN_NCCL_CHECK(ncclGetUniqueId(&id));
  }
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, group);
  ncclComm_t comm = nullptr;
  MESHPLAN_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  return comm;
}

}  // namespace

NcclGroups::NcclGroups(const ProcessGroups& groups) : groups_(groups) {
  for (CommGroup group : {CommGroup::kTp, CommGroup::kPp, CommGroup::kDp, CommGroup::kEmbedding}) {
    const MPI_Comm mpi = groups.comm(group);
    if (mpi != MPI_COMM_NULL && groups.size(group) > 1) {
      comms_[group] = init_comm(mpi);
    }
  }
}

NcclGroups::~NcclGroups() {
  for (auto& [group, comm] : comms_) {
    ncclCommDestroy(comm);
  }
}

int NcclGroups::size(CommGroup group) const {
  return groups_.size(group);
}

ncclComm_t NcclGroups::comm(CommGroup group) const {
  const auto found = comms_.find(group);
  if (found == comms_.end()) {
    throw std::logic_error("NcclGroups: no communicator for group " + planner::to_string(group));
  }
  return found->second;
}

void NcclGroups::count(CollectiveKind kind, CommGroup group, int64_t bytes) {
  Traffic& traffic = traffic_[{kind, group}];
  traffic.bytes += bytes;
  traffic.calls += 1;
}

void NcclGroups::all_reduce_sum(CommGroup group, float* buffer, int64_t count,
                                cudaStream_t stream) {
  if (size(group) <= 1) {
    return;
  }
  MESHPLAN_NCCL_CHECK(ncclAllReduce(buffer, buffer, static_cast<size_t>(count), ncclFloat32,
                                    ncclSum, comm(group), stream));
  this->count(CollectiveKind::kAllReduce, group, count * 4);
}

void NcclGroups::all_gather(CommGroup group, float* out, const float* in, int64_t count,
                            cudaStream_t stream) {
  const int n = size(group);
  if (n <= 1) {
    MESHPLAN_CUDA_CHECK(
        cudaMemcpyAsync(out, in, static_cast<size_t>(count) * 4, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  MESHPLAN_NCCL_CHECK(
      ncclAllGather(in, out, static_cast<size_t>(count), ncclFloat32, comm(group), stream));
  this->count(CollectiveKind::kAllGather, group, count * n * 4);
}

void NcclGroups::reduce_scatter(CommGroup group, float* out, const float* in, int64_t count,
                                cudaStream_t stream) {
  const int n = size(group);
  if (n <= 1) {
    MESHPLAN_CUDA_CHECK(
        cudaMemcpyAsync(out, in, static_cast<size_t>(count) * 4, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  MESHPLAN_NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(count), ncclFloat32, ncclSum,
                                        comm(group), stream));
  this->count(CollectiveKind::kReduceScatter, group, count * n * 4);
}

void NcclGroups::send(const float* buffer, int64_t count, int peer_stage, cudaStream_t stream) {
  MESHPLAN_NCCL_CHECK(ncclSend(buffer, static_cast<size_t>(count), ncclFloat32, peer_stage,
                               comm(CommGroup::kPp), stream));
  this->count(CollectiveKind::kSendRecv, CommGroup::kPp, count * 4);
}

void NcclGroups::recv(float* buffer, int64_t count, int peer_stage, cudaStream_t stream) {
  MESHPLAN_NCCL_CHECK(ncclRecv(buffer, static_cast<size_t>(count), ncclFloat32, peer_stage,
                               comm(CommGroup::kPp), stream));
}

}  // namespace meshplan::executor::gpu
