// meshplan calibrate's measurements (calibrate.h): the executor's own GEMM (ops/linear), a
// STREAM-like triad, and MPI collectives checked element by element, as nccl-tests does.

#include "meshplan/calibrate.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "mpi_check.h"
#include "ops/linear.h"

namespace meshplan::executor {

namespace {

// Slowest rank's value of `seconds` (every rank gets it).
double slowest(double seconds, MPI_Comm world) {
  double result = 0;
  MPI_CHECK(MPI_Allreduce(&seconds, &result, 1, MPI_DOUBLE, MPI_MAX, world));
  return result;
}

// Mean time of one out (m, n) = inp (m, k) weight (n, k)^T over repetitions filling
// `budget_seconds` (at least 3); all ranks run at once, as they do while training. The mean, not
// the best: on a shared or oversubscribed host a rank gets a share of a core, and a training
// step pays that share.
GemmSample measure_gemm(int m, int n, int k, double budget_seconds, MPI_Comm world) {
  std::vector<float> inp(static_cast<size_t>(m) * k, 0.5f);
  std::vector<float> weight(static_cast<size_t>(n) * k, 0.25f);
  std::vector<float> out(static_cast<size_t>(m) * n);
  linear_forward<float>(out.data(), inp.data(), weight.data(), nullptr, m, k, n);  // warm-up
  MPI_CHECK(MPI_Barrier(world));
  const double start = MPI_Wtime();
  int repetitions = 0;
  while (repetitions < 3 || MPI_Wtime() - start < budget_seconds) {
    linear_forward<float>(out.data(), inp.data(), weight.data(), nullptr, m, k, n);
    repetitions++;
  }
  return {m, n, k, slowest((MPI_Wtime() - start) / repetitions, world)};
}

TriadSample measure_triad(int64_t elements, MPI_Comm world) {
  std::vector<float> a(static_cast<size_t>(elements)), b(a.size(), 1.0f), c(a.size(), 2.0f);
  const float scalar = 3.0f;
  MPI_CHECK(MPI_Barrier(world));
  const double t0 = MPI_Wtime();
  // Each repetition reads what the one before wrote (a = b + s c, then b = a + s c, ...): five
  // identical passes into one array are dead stores a compiler may drop, which read as five
  // times the bandwidth (110 GB/s per rank on a 2-core host before this).
  constexpr int kRepetitions = 5;
  for (int repetition = 0; repetition < kRepetitions; repetition++) {
    std::vector<float>& out = repetition % 2 == 0 ? a : b;
    const std::vector<float>& in = repetition % 2 == 0 ? b : a;
    for (size_t i = 0; i < out.size(); i++) {
      out[i] = in[i] + scalar * c[i];
    }
  }
  const double seconds = (MPI_Wtime() - t0) / kRepetitions;  // the mean, as for GEMMs
  // Keep the stores observable: b starts at 1 and each pass adds 3 x 2, so the fifth, into a,
  // leaves 1 + 5 x 6 = 31 (exact in fp32).
  if (a.front() != 31.0f || a.back() != 31.0f) {
    throw RuntimeError(
        fmt::format("rank {}: triad computed {} instead of 31", world_rank(), a.front()));
  }
  return {elements, slowest(seconds, world)};
}

// Runs `kind` once on buffers of `count` fp32 elements (nccl-tests size / 4), inputs filled
// with small integers so every expected output is exact; returns the wrong elements.
int64_t run_collective(CalibrationCollective kind, int64_t count, int rank, int n,
                       std::vector<float>& send, std::vector<float>& recv, MPI_Comm world) {
  const int c = static_cast<int>(count);
  const int block = c / n;
  int64_t wrong = 0;
  switch (kind) {
    case CalibrationCollective::kAllReduce:
      std::fill_n(send.begin(), c, static_cast<float>(rank + 1));
      MPI_CHECK(MPI_Allreduce(send.data(), recv.data(), c, MPI_FLOAT, MPI_SUM, world));
      for (int i = 0; i < c; i++) {
        wrong += recv[i] != static_cast<float>(n * (n + 1) / 2);
      }
      break;
    case CalibrationCollective::kAllGather:
      std::fill_n(send.begin(), block, static_cast<float>(rank + 1));
      MPI_CHECK(MPI_Allgather(send.data(), block, MPI_FLOAT, recv.data(), block, MPI_FLOAT, world));
      for (int i = 0; i < block * n; i++) {
        wrong += recv[i] != static_cast<float>(i / block + 1);
      }
      break;
    case CalibrationCollective::kReduceScatter:
      std::fill_n(send.begin(), block * n, static_cast<float>(rank + 1));
      MPI_CHECK(
          MPI_Reduce_scatter_block(send.data(), recv.data(), block, MPI_FLOAT, MPI_SUM, world));
      for (int i = 0; i < block; i++) {
        wrong += recv[i] != static_cast<float>(n * (n + 1) / 2);
      }
      break;
    case CalibrationCollective::kAllToAll:
      for (int i = 0; i < block * n; i++) {
        send[i] = static_cast<float>(rank * n + i / block);  // block j goes to rank j
      }
      MPI_CHECK(MPI_Alltoall(send.data(), block, MPI_FLOAT, recv.data(), block, MPI_FLOAT, world));
      for (int i = 0; i < block * n; i++) {
        wrong += recv[i] != static_cast<float>((i / block) * n + rank);
      }
      break;
    case CalibrationCollective::kSendRecv:
      // nccl-tests sendrecv: to the next rank, from the previous one, in a ring.
      std::fill_n(send.begin(), c, static_cast<float>(rank + 1));
      MPI_CHECK(MPI_Sendrecv(send.data(), c, MPI_FLOAT, (rank + 1) % n, 0, recv.data(), c,
                             MPI_FLOAT, (rank + n - 1) % n, 0, world, MPI_STATUS_IGNORE));
      for (int i = 0; i < c; i++) {
        wrong += recv[i] != static_cast<float>((rank + n - 1) % n + 1);
      }
      break;
  }
  return wrong;
}

CollectiveSample measure_collective(CalibrationCollective kind, int64_t size_bytes, int iterations,
                                    MPI_Comm world) {
  int rank = 0;
  int n = 1;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &n));
  const int64_t count = size_bytes / 4;
  std::vector<float> send(static_cast<size_t>(count)), recv(static_cast<size_t>(count));
  int64_t wrong = run_collective(kind, count, rank, n, send, recv, world);  // warm-up, checked
  MPI_CHECK(MPI_Barrier(world));
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iterations; i++) {
    wrong += run_collective(kind, count, rank, n, send, recv, world);
  }
  const double seconds = slowest((MPI_Wtime() - t0) / iterations, world);
  long long total_wrong = 0;
  const long long mine = wrong;
  MPI_CHECK(MPI_Allreduce(&mine, &total_wrong, 1, MPI_LONG_LONG, MPI_SUM, world));
  return {kind, size_bytes, count, seconds, total_wrong};
}

}  // namespace

std::string to_string(CalibrationCollective kind) {
  switch (kind) {
    case CalibrationCollective::kAllReduce:
      return "all_reduce";
    case CalibrationCollective::kAllGather:
      return "all_gather";
    case CalibrationCollective::kReduceScatter:
      return "reduce_scatter";
    case CalibrationCollective::kAllToAll:
      return "alltoall";
    case CalibrationCollective::kSendRecv:
      return "sendrecv";
  }
  return "?";
}

double bus_bandwidth_factor(CalibrationCollective kind, int64_t num_ranks) {
  const double n = static_cast<double>(num_ranks);
  switch (kind) {
    case CalibrationCollective::kAllReduce:
      return 2.0 * (n - 1.0) / n;
    case CalibrationCollective::kAllGather:
    case CalibrationCollective::kReduceScatter:
    case CalibrationCollective::kAllToAll:
      return (n - 1.0) / n;
    case CalibrationCollective::kSendRecv:
      return 1.0;
  }
  return 0.0;
}

Measurements measure_machine(const CalibrationOptions& options, MPI_Comm world) {
  set_errors_return(world);
  int n = 1;
  MPI_CHECK(MPI_Comm_size(world, &n));
  Measurements result;
  result.num_ranks = n;
  // Square GEMMs from 16 to 512 (quick: 256), and the executor's tall shapes (tokens x h).
  const double budget_seconds = options.quick ? 0.02 : 0.05;
  for (int d = 16; d <= (options.quick ? 256 : 512); d *= 2) {
    result.gemm.push_back(measure_gemm(d, d, d, budget_seconds, world));
  }
  for (int d : {64, 128}) {
    result.gemm.push_back(measure_gemm(1024, d, d, budget_seconds, world));
  }
  // 3 x 64 MiB per rank, --quick too (a pass takes milliseconds). STREAM's rule is arrays of at
  // least 4 x the cache they could sit in (McCalpin, stream.c, "STREAM_ARRAY_SIZE"); a rank's
  // last-level cache is a core complex's 32 MiB on current EPYCs, a socket's 60-112 MB shared by
  // its ranks on Xeons. --quick's old 3 x 4 MiB sat in cache and read 9.9-44 GB/s per rank
  // between runs on this project's CI host, against 10.6-13.9 GB/s at 3 x 16 MiB.
  constexpr int64_t kTriadArrayElements = (int64_t{64} << 20) / sizeof(float);
  result.triad = measure_triad(kTriadArrayElements, world);
  // Message sizes 4^i KiB, rounded to a multiple of 4 n bytes so every block is whole.
  const int64_t quantum = 4 * static_cast<int64_t>(n);
  for (int64_t size = 1024; size <= options.max_message_bytes; size *= 4) {
    const int64_t bytes = std::max(quantum, size / quantum * quantum);
    const int iterations = static_cast<int>(std::clamp<int64_t>(
        (options.quick ? 4 : 16) * (1 << 20) / bytes, 3, options.quick ? 20 : 50));
    for (CalibrationCollective kind :
         {CalibrationCollective::kAllReduce, CalibrationCollective::kAllGather,
          CalibrationCollective::kReduceScatter, CalibrationCollective::kAllToAll,
          CalibrationCollective::kSendRecv}) {
      result.collectives.push_back(measure_collective(kind, bytes, iterations, world));
    }
  }
  return result;
}

}  // namespace meshplan::executor
