// NcclGroups against ProcessGroups (the CPU executor's MPI collectives) under real mpirun -np 2:
// the same all-reduce, all-gather, reduce-scatter and pipeline send/recv on the same inputs give
// the same values and count the same calls and bytes. NCCL refuses two ranks of one
// communicator on one GPU ("Duplicate GPU"), so the test needs 2 visible GPUs; with fewer every
// rank exits 77 and ctest reports the entry skipped (label `gpu`).

#define DOCTEST_CONFIG_IMPLEMENT
#include "gpu/nccl_groups.h"

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "gpu/cuda_check.h"
#include "process_groups.h"

namespace ex = meshplan::executor;
namespace gpu = meshplan::executor::gpu;
using meshplan::planner::CommGroup;

namespace {

std::vector<float> on_device_and_back(const std::vector<float>& host,
                                      void (*body)(float*, int64_t, void*), void* context) {
  float* device = nullptr;
  MESHPLAN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device), host.size() * sizeof(float)));
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  body(device, static_cast<int64_t>(host.size()), context);
  std::vector<float> back(host.size());
  MESHPLAN_CUDA_CHECK(cudaDeviceSynchronize());
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(back.data(), device, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  cudaFree(device);
  return back;
}

}  // namespace

TEST_CASE("NCCL all-reduce, all-gather and reduce-scatter on dp 2 equal MPI's, calls and bytes") {
  meshplan::planner::Layout layout;
  layout.dp = 2;
  layout.global_batch = 2;
  ex::ProcessGroups groups(layout, false, MPI_COMM_WORLD, 60.0);
  gpu::NcclGroups nccl(groups);
  const int rank = groups.rank();
  std::vector<float> values(64);
  for (size_t i = 0; i < values.size(); i++) {
    values[i] = static_cast<float>(rank * 100 + static_cast<int>(i)) * 0.5f;
  }
  std::vector<float> mpi_sum = values;
  groups.all_reduce_sum(CommGroup::kDp, mpi_sum.data(), 64);
  struct Context {
    gpu::NcclGroups* nccl;
  } context{&nccl};
  const auto nccl_sum = on_device_and_back(
      values,
      [](float* device, int64_t count, void* c) {
        static_cast<Context*>(c)->nccl->all_reduce_sum(CommGroup::kDp, device, count, nullptr);
      },
      &context);
  CHECK(nccl_sum == mpi_sum);  // two fp32 addends: the sum is exact either way

  std::vector<float> mpi_gathered(128);
  groups.all_gather(CommGroup::kDp, mpi_gathered.data(), values.data(), 64);
  std::vector<float> mpi_scattered(32);
  groups.reduce_scatter(CommGroup::kDp, mpi_scattered.data(), values.data(), 32);
  float* d_in = nullptr;
  float* d_out = nullptr;
  MESHPLAN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_in), 64 * sizeof(float)));
  MESHPLAN_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d_out), 128 * sizeof(float)));
  MESHPLAN_CUDA_CHECK(cudaMemcpy(d_in, values.data(), 64 * sizeof(float), cudaMemcpyHostToDevice));
  nccl.all_gather(CommGroup::kDp, d_out, d_in, 64, nullptr);
  std::vector<float> nccl_gathered(128);
  MESHPLAN_CUDA_CHECK(cudaDeviceSynchronize());
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(nccl_gathered.data(), d_out, 128 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(nccl_gathered == mpi_gathered);
  nccl.reduce_scatter(CommGroup::kDp, d_out, d_in, 32, nullptr);
  std::vector<float> nccl_scattered(32);
  MESHPLAN_CUDA_CHECK(cudaDeviceSynchronize());
  MESHPLAN_CUDA_CHECK(
      cudaMemcpy(nccl_scattered.data(), d_out, 32 * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(nccl_scattered == mpi_scattered);
  cudaFree(d_in);
  cudaFree(d_out);
  CHECK(nccl.traffic() == groups.traffic());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int devices = 0;
  const cudaError_t status = cudaGetDeviceCount(&devices);
  int usable = status == cudaSuccess && devices >= 2 ? 1 : 0;
  int all_usable = 0;
  MPI_Allreduce(&usable, &all_usable, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_usable == 0) {
    if (rank == 0) {
      std::printf("nccl_groups_tests: skipped: needs 2 visible CUDA devices (found %d%s)\n",
                  status == cudaSuccess ? devices : 0,
                  status == cudaSuccess ? "" : ", no CUDA driver");
    }
    MPI_Finalize();
    return 77;
  }
  gpu::set_check_rank(rank);
  MESHPLAN_CUDA_CHECK(cudaSetDevice(rank % devices));
  doctest::Context context(argc, argv);
  if (rank != 0) {
    context.setOption("out", "/dev/null");
  }
  int result = context.run();
  int any_failed = 0;
  MPI_Allreduce(&result, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
