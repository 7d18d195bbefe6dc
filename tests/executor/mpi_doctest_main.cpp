// doctest main for the executor tests: MPI is initialised once around the whole run, so test
// cases can use MPI_COMM_SELF (one real rank) or MPI_COMM_WORLD (under mpirun). Only world rank 0
// reports, so a run under mpirun prints one summary; every rank returns the worst result.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstring>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  doctest::Context context(argc, argv);
  // Run plainly (one rank, no suite named), the binary runs the single-process tests only; the
  // mpi<N> suites are for `mpirun -np N executor_tests --test-suite=mpi<N>`.
  bool suite_named = false;
  for (int i = 1; i < argc; i++) {
    suite_named = suite_named || std::strstr(argv[i], "-ts") != nullptr ||
                  std::strstr(argv[i], "test-suite") != nullptr;
  }
  if (size == 1 && !suite_named) {
    context.addFilter("test-suite-exclude", "mpi*");
  }
  if (rank != 0) {
    context.setOption("out", "/dev/null");
  }
  int result = context.run();
  // Every rank must agree on failure, so that mpirun's exit status reflects any rank's failure.
  int any_failed = 0;
  MPI_Allreduce(&result, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any_failed;
}
