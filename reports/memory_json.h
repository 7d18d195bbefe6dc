#pragma once
// A stage's memory breakdown as the JSON object the plan and sweep reports write (bytes).

#include <nlohmann/json.hpp>

#include "meshplan/cost_model.h"

namespace meshplan::reports {

inline nlohmann::json memory_json(const planner::MemoryBreakdown& memory) {
  return {
      {"weights_bytes", memory.weights_bytes},     {"gradients_bytes", memory.gradients_bytes},
      {"optimizer_bytes", memory.optimizer_bytes}, {"activations_bytes", memory.activations_bytes},
      {"reserved_bytes", memory.reserved_bytes},   {"total_bytes", memory.total_bytes()}};
}

}  // namespace meshplan::reports
