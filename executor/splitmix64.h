#pragma once
// splitmix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators",
// OOPSLA; the constants of Vigna's splitmix64.c): a counter-based generator whose output for
// counter x is a well-mixed 64-bit hash of x, so any element of a stream can be drawn without
// drawing the others. Parameter initialisation and the synthetic data both draw from it.

#include <cstdint>

namespace meshplan::executor {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace meshplan::executor
