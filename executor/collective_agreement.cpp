#include "collective_agreement.h"

#include "meshplan/errors.h"
#include "mpi_check.h"

namespace meshplan::executor {

namespace {

std::string broadcast_from(MPI_Comm world, const std::string& text, int root) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  long long length = rank == root ? static_cast<long long>(text.size()) : 0;
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_LONG_LONG, root, world));
  std::string result = rank == root ? text : std::string(static_cast<size_t>(length), '\0');
  if (length > 0) {
    MPI_CHECK(MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, root, world));
  }
  return result;
}

}  // namespace

void agree_on_input_errors(MPI_Comm world, const std::string& local_error) {
  int rank = 0;
  int size = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  const int mine = local_error.empty() ? size : rank;
  int first = size;
  MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, world));
  if (first < size) {
    throw InputError(broadcast_from(world, local_error, first));
  }
}

std::string broadcast_string(MPI_Comm world, const std::string& text) {
  return broadcast_from(world, text, 0);
}

}  // namespace meshplan::executor
