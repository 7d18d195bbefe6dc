#pragma once
// The executor's own watchdog: every wait on a collective or a pipeline transfer has a deadline,
// so a rank that dies, stops (SIGSTOP) or hangs is found without the launcher's help (srun, a
// hung process that never exits). Waits poll MPI_Test (MPI nonblocking operations progress while
// tested, MPI-3.1 section 3.7.4) until the request completes or the deadline passes; past it the
// wait throws RuntimeError naming this rank, what it waited for and the world ranks it waited on,
// and the CLI aborts the job (MPI_Abort), as PyTorch's NCCL watchdog does for a timed-out
// collective (torch.distributed's `timeout`, default 10 minutes for NCCL).

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

namespace meshplan::executor {

class Watchdog {
 public:
  /// `timeout_seconds` > 0: the longest any one wait may take.
  explicit Watchdog(double timeout_seconds);

  double timeout_seconds() const { return timeout_seconds_; }

  /// Completes `request` (MPI_REQUEST_NULL returns at once). Past the deadline throws
  /// RuntimeError "rank R: watchdog: no progress for T s waiting for <describe()>"; `describe` is
  /// called only then, so building its text costs nothing on the normal path.
  void wait(MPI_Request* request, const std::function<std::string()>& describe) const;

  /// Completes every request in `requests` under one deadline, as wait().
  void wait_all(std::vector<MPI_Request>* requests,
                const std::function<std::string()>& describe) const;

 private:
  double timeout_seconds_;
};

/// "world ranks 0, 2, 4" for the members of `comm` (for the watchdog's message).
std::string world_ranks_of(MPI_Comm comm);

/// The world rank of rank `rank` of `comm`.
int world_rank_of(MPI_Comm comm, int rank);

}  // namespace meshplan::executor
