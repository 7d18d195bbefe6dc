#pragma once
// Every MPI call goes through MPI_CHECK (as llm.c's mpiCheck): on failure it throws RuntimeError
// naming this rank, the call, file:line and MPI's error text. Communicators are switched to
// MPI_ERRORS_RETURN (set_errors_return) so failures come back here instead of aborting.

#include <mpi.h>

#include <string>

namespace meshplan::executor {

/// Throws RuntimeError "rank R: <call> failed (<file>:<line>): <MPI error string>".
[[noreturn]] void throw_mpi_error(int code, const char* call, const char* file, int line);

void set_errors_return(MPI_Comm comm);

/// This process's rank in MPI_COMM_WORLD (for error messages).
int world_rank();

}  // namespace meshplan::executor

#define MPI_CHECK(call)                                                                  \
  do {                                                                                   \
    const int mpi_check_code_ = (call);                                                  \
    if (mpi_check_code_ != MPI_SUCCESS) {                                                \
      ::meshplan::executor::throw_mpi_error(mpi_check_code_, #call, __FILE__, __LINE__); \
    }                                                                                    \
  } while (false)
