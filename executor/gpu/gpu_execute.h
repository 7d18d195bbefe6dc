#pragma once
// meshplan execute on GPUs (issue 13): the driver execute_plan hands a GPU cluster's plan to.
// One GPU per rank, fp32, tp = pp = 1, ZeRO 0 data parallelism over NCCL (gpu_trainer.h); every
// other part of a plan the CPU executor runs is refused by name here, never run differently.

#include <mpi.h>

#include <string>

#include "meshplan/executor.h"

namespace meshplan::executor::gpu {

/// Throws InputError "<source>: <field>: the GPU executor ... (issue 13) (<value>)" for what the
/// GPU executor does not run: precision other than fp32, FP8 GEMMs, tp, pp, vpp, cp or ep above 1,
/// sequence parallelism, ZeRO 1-3, recompute, attention without flash, a sliding window shorter
/// than seq_length or a GeGLU MLP (refuse_model_for_gpu_executor), the zero-bubble schedule,
/// head dims above the flash kernel's 256, micro_batch x heads above its grid's 65535.
void validate_plan_for_gpu(const planner::Plan& plan, const std::string& source);

/// Binds this rank to GPU `local rank` (its index among the ranks of its node, from
/// MPI_Comm_split_type shared) and returns that device. Throws RuntimeError naming the rank when
/// no GPU is visible or the node runs more ranks than it has visible GPUs.
int select_device(MPI_Comm world);

/// execute_plan for a plan validate_plan_for_gpu accepted (collective over `world`): the same
/// report, with measured memory = the device arena's high-water mark and device_used_bytes =
/// cudaMemGetInfo's. Refuses --checkpoint-dir (InputError): no GPU checkpoints yet.
ExecuteReport execute_plan_on_gpu(const planner::Plan& plan, const ExecuteOptions& options,
                                  MPI_Comm world, const ExecuteCallbacks& callbacks);

}  // namespace meshplan::executor::gpu
