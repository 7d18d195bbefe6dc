#include "meshplan/temporary_files.h"

#include <unistd.h>

#include <array>
#include <atomic>
#include <csignal>
#include <cstring>

namespace meshplan {
namespace {

// Fixed storage the handler can read without allocating: a slot is claimed by flipping its flag
// from 0 to 1 (writing the path) and published by setting it to 2; the handler unlinks the
// published slots only (unlink is async-signal-safe, POSIX.1-2017 Sec. 2.4.3).
constexpr size_t kMaxPathBytes = 4096;
std::array<std::array<char, kMaxPathBytes>, kMaxRegisteredTemporaries> paths;
std::array<std::atomic<int>, kMaxRegisteredTemporaries> states;  // 0 free, 1 writing, 2 set

void remove_and_reraise(int signal) {
  for (int i = 0; i < kMaxRegisteredTemporaries; ++i) {
    if (states[static_cast<size_t>(i)].load() == 2) {
      ::unlink(paths[static_cast<size_t>(i)].data());
    }
  }
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void remove_temporaries_on_signals() {
  for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
    std::signal(signal, remove_and_reraise);
  }
}

void register_temporary(const std::string& path) {
  if (path.size() >= kMaxPathBytes) {
    return;
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    int expected = 0;
    if (states[i].compare_exchange_strong(expected, 1)) {
      std::memcpy(paths[i].data(), path.c_str(), path.size() + 1);
      states[i].store(2);
      return;
    }
  }
}

void unregister_temporary(const std::string& path) {
  for (size_t i = 0; i < paths.size(); ++i) {
    if (states[i].load() == 2 && path == paths[i].data()) {
      states[i].store(0);
      return;
    }
  }
}

}  // namespace meshplan
