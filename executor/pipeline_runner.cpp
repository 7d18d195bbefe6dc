#include "pipeline_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "meshplan/errors.h"
#include "mpi_check.h"

namespace meshplan::executor {

namespace {

using planner::OpKind;

// One (micro-batch, chunk) in flight on this rank.
struct InFlight {
  ChunkState state;
  Tensor received;  // activation received for the forward
  Tensor d_output;  // gradient received for the backward
  bool weights_done = false;
  bool input_gradient_consumed = false;  // sent upstream, or not needed (first virtual stage)
};

struct PendingSend {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor payload;
};

}  // namespace

int transfer_tag(int64_t micro_batch, int receiver, bool gradient, int num_virtual_stages) {
  return static_cast<int>((micro_batch * num_virtual_stages + receiver) * 2 + (gradient ? 1 : 0));
}

void check_tag_range(const planner::PipelineSchedule& schedule) {
  const int num_virtual_stages = static_cast<int>(schedule.pp * schedule.vpp);
  const int64_t largest =
      (schedule.num_micro_batches * num_virtual_stages + num_virtual_stages) * 2 + 1;
  int* tag_ub = nullptr;
  int found = 0;
  MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found));
  if (found != 0 && largest > *tag_ub) {
    throw InputError(
        fmt::format("layout: too many micro-batches for MPI's tag range ({} tags > MPI_TAG_UB {})",
                    largest, *tag_ub));
  }
}

double run_pipeline_step(const PipelineStep& step) {
  const RankContext& ctx = step.ctx;
  const ShardDims& d = ctx.dims;
  const int num_virtual_stages = static_cast<int>(step.schedule.pp * step.schedule.vpp);
  const int64_t rows = static_cast<int64_t>(d.N_local) * d.C;
  std::map<std::pair<int64_t, int64_t>, InFlight> in_flight;
  std::vector<PendingSend> sends;
  double loss_sum = 0;
  auto release_if_done = [&](const std::pair<int64_t, int64_t>& key) {
    const InFlight& f = in_flight.at(key);
    if (f.weights_done && f.input_gradient_consumed) {
      in_flight.erase(key);
    }
  };

  // Megatron-LM's scatter/gather (Narayanan et al. 2021, Sec. 4.1): without sequence
  // parallelism every tp rank holds the same tensor, so each sends only its 1/tp block and the
  // receiving stage all-gathers the blocks over tp.
  const int64_t block = step.scatter_gather ? rows / d.tp : rows;
  auto send_tensor = [&](Tensor tensor, int peer, int tag) {
    PendingSend send;
    if (step.scatter_gather) {
      send.payload = ctx.tensor(block);
      std::copy_n(tensor.data() + d.tp_rank * block, block, send.payload.data());
    } else {
      send.payload = std::move(tensor);
    }
    send.request = ctx.groups.isend(send.payload.data(), block, peer, tag);
    sends.push_back(std::move(send));
  };
  auto receive_tensor = [&](int peer, int tag) {
    Tensor full = ctx.tensor(rows);
    if (!step.scatter_gather) {
      ctx.groups.recv(full.data(), rows, peer, tag);
      return full;
    }
    Tensor part = ctx.tensor(block);
    ctx.groups.recv(part.data(), block, peer, tag);
    ctx.groups.all_gather(CommGroup::kTp, full.data(), part.data(), block);
    return full;
  };

  // Frees the payloads of the sends that have completed (the buffers count as live until then).
  auto release_completed_sends = [&sends]() {
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 0;
      MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
      it = done != 0 ? sends.erase(it) : it + 1;
    }
  };

  for (const planner::PipelineOp& op : step.schedule.stages[static_cast<size_t>(step.stage)]) {
    release_completed_sends();
    const auto key = std::make_pair(op.micro_batch, op.chunk);
    const ModelChunk& chunk = step.chunks[static_cast<size_t>(op.chunk)];
    const ChunkPlacement& placement = chunk.placement();
    const int v = placement.virtual_stage;
    switch (op.kind) {
      case OpKind::kRecvActivation: {
        in_flight[key].received =
            receive_tensor(static_cast<int>(op.peer_stage),
                           transfer_tag(op.micro_batch, v, false, num_virtual_stages));
        break;
      }
      case OpKind::kForward: {
        InFlight& f = in_flight[key];
        const int64_t first = step.first_sample + op.micro_batch * d.B;
        if (placement.has_embedding) {
          f.state.tokens = Buffer<int32_t>(&ctx.memory, d.N);
        }
        if (placement.has_head) {
          f.state.targets = Buffer<int32_t>(&ctx.memory, d.N);
        }
        if (placement.has_embedding || placement.has_head) {
          fill_micro_batch(step.data, first, d.T, d.B, f.state.tokens.data(),
                           f.state.targets.data());
        }
        if (step.acquire_weights) {
          step.acquire_weights(static_cast<int>(op.chunk));
        }
        chunk.forward(&f.state, std::move(f.received), ctx);
        if (step.release_weights) {
          step.release_weights(static_cast<int>(op.chunk));
        }
        loss_sum += f.state.loss_sum;
        break;
      }
      case OpKind::kSendActivation: {
        // The output is not needed by this rank's backward: it leaves with the send.
        send_tensor(std::move(in_flight.at(key).state.residuals.back()),
                    static_cast<int>(op.peer_stage),
                    transfer_tag(op.micro_batch, v + 1, false, num_virtual_stages));
        break;
      }
      case OpKind::kRecvGradient: {
        in_flight.at(key).d_output =
            receive_tensor(static_cast<int>(op.peer_stage),
                           transfer_tag(op.micro_batch, v, true, num_virtual_stages));
        break;
      }
      case OpKind::kBackward:
      case OpKind::kBackwardInput: {
        InFlight& f = in_flight.at(key);
        const bool with_weight = op.kind == OpKind::kBackward;
        step.sync.before_gradient_write(static_cast<int>(op.chunk));
        if (step.acquire_weights) {
          step.acquire_weights(static_cast<int>(op.chunk));
        }
        chunk.backward_input(&f.state, placement.has_head ? nullptr : f.d_output.data(),
                             with_weight, ctx);
        if (step.release_weights) {
          step.release_weights(static_cast<int>(op.chunk));
        }
        f.d_output.reset();
        if (with_weight) {
          f.weights_done = true;
          step.sync.micro_batch_done(static_cast<int>(op.chunk));
        }
        // The first virtual stage's input gradient feeds its own embedding's W.
        f.input_gradient_consumed = placement.has_embedding ? f.weights_done : false;
        release_if_done(key);
        break;
      }
      case OpKind::kBackwardWeight: {
        InFlight& f = in_flight.at(key);
        step.sync.before_gradient_write(static_cast<int>(op.chunk));
        chunk.backward_weight(&f.state, ctx);  // reads no weights
        f.weights_done = true;
        if (placement.has_embedding) {
          f.input_gradient_consumed = true;
        }
        step.sync.micro_batch_done(static_cast<int>(op.chunk));
        release_if_done(key);
        break;
      }
      case OpKind::kSendGradient: {
        InFlight& f = in_flight.at(key);
        send_tensor(std::move(f.state.d_input), static_cast<int>(op.peer_stage),
                    transfer_tag(op.micro_batch, v - 1, true, num_virtual_stages));
        f.input_gradient_consumed = true;
        release_if_done(key);
        break;
      }
    }
  }
  for (PendingSend& send : sends) {
    MPI_CHECK(MPI_Wait(&send.request, MPI_STATUS_IGNORE));
  }
  if (!in_flight.empty()) {
    throw RuntimeError(
        fmt::format("rank {}: the op list of stage {} left {} micro-batch(es) without a backward",
                    world_rank(), step.stage, in_flight.size()));
  }
  return loss_sum;
}

}  // namespace meshplan::executor
