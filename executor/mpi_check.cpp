#include "mpi_check.h"

#include <fmt/format.h>

#include "meshplan/errors.h"

namespace meshplan::executor {

int world_rank() {
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void throw_mpi_error(int code, const char* call, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw RuntimeError(fmt::format("rank {}: {} failed ({}:{}): {}", world_rank(), call, file, line,
                                 std::string(text, static_cast<size_t>(length))));
}

void set_errors_return(MPI_Comm comm) {
  MPI_CHECK(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN));
}

}  // namespace meshplan::executor
