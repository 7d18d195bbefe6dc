#pragma once

#include <stdexcept>
#include <string>

namespace meshplan {

/// Bad user input: a file, a flag, a field. The message is one line:
/// `<source>: <field path>: <what is wrong> (<value>)`. The CLI exits 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A failure while running: a lost rank, an MPI error, an unwritable file. Names the rank where
/// there is one. The CLI exits 1.
class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace meshplan
