#pragma once
// Errors every rank agrees on. An input problem seen by some ranks only (a file one rank cannot
// read) must not leave the others waiting in a collective: each rank contributes its error (or
// none), the lowest failing rank's message is shared, and every rank throws the same InputError.

#include <mpi.h>

#include <string>

#include "meshplan/executor.h"

namespace meshplan::executor {

/// Collective. Throws InputError(message of the lowest rank with a non-empty `local_error`) on
/// every rank if any rank has one; returns normally otherwise.
/// Every wait has the watchdog's deadline `timeout_seconds` (executor/watchdog.h).
void agree_on_input_errors(MPI_Comm world, const std::string& local_error,
                           double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

/// Collective: `text` as world rank 0 has it, on every rank.
std::string broadcast_string(MPI_Comm world, const std::string& text,
                             double timeout_seconds = kDefaultCollectiveTimeoutSeconds);

}  // namespace meshplan::executor
