// plan --emit slurm: an sbatch script that runs `meshplan execute` on a saved plan, one MPI rank
// per task (sbatch --nodes, --ntasks-per-node, --cpus-per-task; srun --cpu-bind=cores).

#include <fmt/format.h>

#include "emit_common.h"
#include "meshplan/emit.h"
#include "meshplan/executor.h"

namespace meshplan::reports {

std::string emit_slurm(const planner::Plan& plan, const std::string& plan_path) {
  constexpr EmitTarget kTarget = EmitTarget::kSlurm;
  // The executor's own check (fp32 CPU ranks, what its kernels implement): a plan it refuses
  // gets no script. A GPU executor would add --gpus-per-node and --gpu-bind here.
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
  out += "set -euo pipefail\n";
  out += fmt::format("srun --ntasks={} --cpu-bind=cores --mpi=pmix meshplan execute '{}' \"$@\"\n",
                     plan.num_gpus, plan_path);
  return out;
}

}  // namespace meshplan::reports
