// executor/splitmix64.h against published outputs of Vigna's splitmix64.c (the generator's
// state advances by the golden gamma 0x9e3779b97f4a7c15 and each output is splitmix64(state
// before the advance), so output k of a generator seeded s is splitmix64(s + k gamma)).
#include "splitmix64.h"

#include <doctest/doctest.h>

namespace meshplan::executor {
namespace {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;

TEST_CASE("splitmix64 reproduces the reference generator's outputs") {
  // Seed 0: the first two outputs of the reference generator.
  CHECK(splitmix64(0) == 0xe220a8397b1dcdafULL);
  CHECK(splitmix64(kGamma) == 0x6e789e6aa1b965f4ULL);
  // Seed 1234567: the first two outputs, the vector ports of splitmix64.c test against.
  CHECK(splitmix64(1234567) == 6457827717110365317ULL);
  CHECK(splitmix64(1234567 + kGamma) == 3203168211198807973ULL);
}

}  // namespace
}  // namespace meshplan::executor
