#pragma once
// Shared by the doctest suites: the message of the InputError a call throws.

#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "meshplan/errors.h"

namespace meshplan::test {

/// The message of the InputError `call` throws; fails the test and returns "" if it throws
/// nothing or something else.
template <typename Call>
std::string input_error(Call&& call) {
  try {
    call();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected InputError, got another exception: " << e.what());
    return "";
  }
  FAIL("expected InputError, nothing was thrown");
  return "";
}

}  // namespace meshplan::test
