#pragma once
// Temporary output files (`<path>.tmp.<pid>`, json_io.h and output_set.h) removed when the
// process is stopped by SIGINT, SIGTERM or SIGHUP before they are renamed into place, so a
// killed run leaves nothing behind.

#include <string>

namespace meshplan {

/// Installs the handlers (once; main calls it before any work). Each removes the registered
/// temporaries, then restores the default action and re-raises the signal.
void remove_temporaries_on_signals();

/// Registers `path` (at most kMaxRegisteredTemporaries at once; beyond that the file is simply
/// not removed on a signal) until unregister_temporary.
void register_temporary(const std::string& path);
void unregister_temporary(const std::string& path);

inline constexpr int kMaxRegisteredTemporaries = 64;

}  // namespace meshplan
