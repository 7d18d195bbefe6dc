#pragma once
// Errors every rank agrees on. An input problem seen by some ranks only (a file one rank cannot
// read) must not leave the others waiting in a collective: each rank contributes its error (or
// none), the lowest failing rank's message is shared, and every rank throws the same InputError.

#include <mpi.h>

#include <string>

namespace meshplan::executor {

/// Collective. Throws InputError(message of the lowest rank with a non-empty `local_error`) on
/// every rank if any rank has one; returns normally otherwise.
void agree_on_input_errors(MPI_Comm world, const std::string& local_error);

/// Collective: `text` as world rank 0 has it, on every rank.
std::string broadcast_string(MPI_Comm world, const std::string& text);

}  // namespace meshplan::executor
