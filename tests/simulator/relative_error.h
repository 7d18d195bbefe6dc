#pragma once
// |simulated - analytic| / analytic: how far the replay is from the planner's closed form.

#include <cmath>

namespace meshplan::simulator {

inline double relative(double simulated, double analytic) {
  return std::abs(simulated - analytic) / analytic;
}

}  // namespace meshplan::simulator
