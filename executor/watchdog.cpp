#include "watchdog.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "meshplan/errors.h"
#include "mpi_check.h"

namespace meshplan::executor {

namespace {

using Clock = std::chrono::steady_clock;

// Polling: test back to back for the first spin_period (a pipeline hand-off on one node takes
// microseconds), then sleep between tests so that oversubscribed ranks (mpirun
// --oversubscribe on a few cores) leave the CPU to the rank they wait for.
constexpr auto kSpinPeriod = std::chrono::microseconds(200);
constexpr auto kPollSleep = std::chrono::microseconds(50);

// Calls `test` until it returns true or the deadline passes; false on timeout.
template <typename Test>
bool poll_until(double timeout_seconds, Test test) {
  const Clock::time_point start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_seconds));
  while (!test()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) {
      return false;
    }
    if (now - start > kSpinPeriod) {
      std::this_thread::sleep_for(kPollSleep);
    }
  }
  return true;
}

[[noreturn]] void throw_timeout(double timeout_seconds, const std::string& subject) {
  throw RuntimeError(fmt::format("rank {}: watchdog: no progress for {:g} s waiting for {}",
                                 world_rank(), timeout_seconds, subject));
}

}  // namespace

Watchdog::Watchdog(double timeout_seconds) : timeout_seconds_(timeout_seconds) {}

void Watchdog::wait(MPI_Request* request, const std::function<std::string()>& describe) const {
  const bool done = poll_until(timeout_seconds_, [request] {
    int flag = 0;
    MPI_CHECK(MPI_Test(request, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  });
  if (!done) {
    throw_timeout(timeout_seconds_, describe());
  }
}

void Watchdog::wait_all(std::vector<MPI_Request>* requests,
                        const std::function<std::string()>& describe) const {
  const bool done = poll_until(timeout_seconds_, [requests] {
    int flag = 0;
    MPI_CHECK(MPI_Testall(static_cast<int>(requests->size()), requests->data(), &flag,
                          MPI_STATUSES_IGNORE));
    return flag != 0;
  });
  if (!done) {
    throw_timeout(timeout_seconds_, describe());
  }
}

int world_rank_of(MPI_Comm comm, int rank) {
  MPI_Group group = MPI_GROUP_NULL;
  MPI_Group world_group = MPI_GROUP_NULL;
  MPI_CHECK(MPI_Comm_group(comm, &group));
  MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
  int world = MPI_UNDEFINED;
  MPI_CHECK(MPI_Group_translate_ranks(group, 1, &rank, world_group, &world));
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

std::string world_ranks_of(MPI_Comm comm) {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  std::string text = size == 1 ? "world rank " : "world ranks ";
  for (int r = 0; r < size; ++r) {
    text += (r == 0 ? "" : ", ") + std::to_string(world_rank_of(comm, r));
  }
  return text;
}

}  // namespace meshplan::executor
