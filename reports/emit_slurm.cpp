// plan --emit slurm: an sbatch script that runs `meshplan execute` on a saved plan, one MPI rank
// per task (sbatch --nodes, --ntasks-per-node, --cpus-per-task, --gpus-per-node for a GPU
// cluster's plan; srun --cpu-bind=cores).

#include <fmt/format.h>

#include "emit_common.h"
#include "meshplan/emit.h"
#include "meshplan/executor.h"

namespace meshplan::reports {

std::string emit_slurm(const planner::Plan& plan, const std::string& plan_path) {
  constexpr EmitTarget kTarget = EmitTarget::kSlurm;
  // The executor's own check (what its kernels implement): a plan it refuses gets no script.
  try {
    executor::validate_plan_for_executor(plan, plan_path);
  } catch (const InputError& e) {
    throw InputError(fmt::format("--emit slurm: {}", e.what()));
  }
  if (plan_path.find('\'') != std::string::npos) {
    emit_detail::refuse(kTarget, "--save-plan", "a path with a single quote", plan_path);
  }
  const emit_detail::NodeShape nodes = emit_detail::node_shape(plan, kTarget);
  std::string out = "#!/usr/bin/env bash\n" + emit_detail::plan_comment(plan, kTarget, "#");
  out += "# Arguments to this script go on to meshplan execute (--steps, --json, --data, ...).\n";
  out += fmt::format("#SBATCH --job-name=meshplan-{}\n", plan.model.name);
  out += fmt::format("#SBATCH --nodes={}\n", nodes.num_nodes);
  out += fmt::format("#SBATCH --ntasks-per-node={}\n", nodes.ranks_per_node);
  out += "#SBATCH --cpus-per-task=1\n";
  if (!models::is_cpu_cluster(plan.cluster)) {
    // A GPU cluster's plan runs on the GPU executor: every rank sees its node's GPUs and takes
    // the one of its node-local rank (executor/gpu/gpu_execute.cpp, cudaSetDevice), so the GPUs
    // are the job's, not bound per task.
    out += fmt::format("#SBATCH --gpus-per-node={}\n", nodes.ranks_per_node);
  }
  out += "set -euo pipefail\n";
  out += fmt::format("srun --ntasks={} --cpu-bind=cores --mpi=pmix meshplan execute '{}' \"$@\"\n",
                     plan.num_gpus, plan_path);
  return out;
}

}  // namespace meshplan::reports
