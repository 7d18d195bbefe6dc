#include "collective_agreement.h"

#include <fmt/format.h>

#include "meshplan/errors.h"
#include "mpi_check.h"
#include "watchdog.h"

namespace meshplan::executor {

namespace {

std::string broadcast_from(MPI_Comm world, const std::string& text, int root,
                           const Watchdog& watchdog) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  const auto describe = [world, root] {
    return fmt::format("a broadcast from world rank {} ({})", world_rank_of(world, root),
                       world_ranks_of(world));
  };
  long long length = rank == root ? static_cast<long long>(text.size()) : 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibcast(&length, 1, MPI_LONG_LONG, root, world, &request));
  watchdog.wait(&request, describe);
  std::string result = rank == root ? text : std::string(static_cast<size_t>(length), '\0');
  if (length > 0) {
    MPI_CHECK(MPI_Ibcast(result.data(), static_cast<int>(length), MPI_CHAR, root, world, &request));
    watchdog.wait(&request, describe);
  }
  return result;
}

}  // namespace

void agree_on_input_errors(MPI_Comm world, const std::string& local_error, double timeout_seconds) {
  const Watchdog watchdog(timeout_seconds);
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world, &request));
  watchdog.wait(&request, [world] {
    return fmt::format("the agreement on input errors ({})", world_ranks_of(world));
  });
  if (first < size) {
    throw InputError(broadcast_from(world, local_error, first, watchdog));
  }
}

std::string broadcast_string(MPI_Comm world, const std::string& text, double timeout_seconds) {
  return broadcast_from(world, text, 0, Watchdog(timeout_seconds));
}

}  // namespace meshplan::executor
