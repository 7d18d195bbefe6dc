#pragma once
// Builds the task graph of one training step from a SimulationInput: per simulated rank the
// tasks of its stage's op list (compute, exposed tensor-parallel communication, receives), the
// pipeline transfers between neighbouring stages, the data-parallel bucket collectives that
// overlap the last backward, the embedding sync, a gradient-norm barrier and the optimizer step.

#include <memory>
#include <vector>

#include "meshplan/simulator.h"
#include "task_graph.h"

namespace meshplan::simulator {

struct BuiltGraph {
  std::unique_ptr<TaskGraph> graph;  // held by pointer: Boost graphs copy on assignment
  std::vector<SimulatedRank> ranks;
};

/// Throws InputError when the input is inconsistent (stage or chunk counts, a schedule for
/// another pp or vpp), RuntimeError when the op lists do not pair sends with receives.
BuiltGraph build_task_graph(const SimulationInput& input);

}  // namespace meshplan::simulator
