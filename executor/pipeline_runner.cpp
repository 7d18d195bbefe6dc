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
  int peer = -1;  // pp-group rank of the receiving stage
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

namespace {

// One stage's op list for one step: the micro-batches in flight, the sends not yet complete,
// and the loss of the micro-batches whose last virtual stage is here.
class StageRun {
 public:
  explicit StageRun(const PipelineStep& step)
      : step_(step),
        ctx_(step.ctx),
        d_(step.ctx.dims),
        num_virtual_stages_(static_cast<int>(step.schedule.pp * step.schedule.vpp)),
        rows_(static_cast<int64_t>(step.ctx.dims.N_local) * step.ctx.dims.C),
        // Megatron-LM's scatter/gather (Narayanan et al. 2021, Sec. 4.1): without sequence
        // parallelism every tp rank holds the same tensor, so each sends only its 1/tp block and
        // the receiving stage all-gathers the blocks over tp.
        block_(step.scatter_gather ? rows_ / step.ctx.dims.tp : rows_) {}

  /// Runs every op in the list's order; returns the loss sum (see run_pipeline_step).
  double run();

 private:
  using Key = std::pair<int64_t, int64_t>;  // (micro-batch, chunk)

  void run_op_(const planner::PipelineOp& op);
  void forward_(const planner::PipelineOp& op, const ModelChunk& chunk);
  void backward_(const planner::PipelineOp& op, const ModelChunk& chunk);
  void backward_weight_(const planner::PipelineOp& op, const ModelChunk& chunk);
  void send_tensor_(Tensor tensor, int peer, int tag);
  Tensor receive_tensor_(int peer, int tag);
  void release_completed_sends_();
  void release_if_done_(const Key& key);
  void finish_();
  int tag_(const planner::PipelineOp& op, int receiver, bool gradient) const {
    return transfer_tag(op.micro_batch, receiver, gradient, num_virtual_stages_);
  }

  const PipelineStep& step_;
  const RankContext& ctx_;
  const ShardDims& d_;
  const int num_virtual_stages_;
  const int64_t rows_;   // elements of one pipeline tensor
  const int64_t block_;  // elements one send carries
  std::map<Key, InFlight> in_flight_;
  std::vector<PendingSend> sends_;
  double loss_sum_ = 0;
};

double StageRun::run() {
  for (const planner::PipelineOp& op : step_.schedule.stages[static_cast<size_t>(step_.stage)]) {
    release_completed_sends_();
    run_op_(op);
  }
  finish_();
  return loss_sum_;
}

// One op of the list: transfers here, compute in the helpers.
void StageRun::run_op_(const planner::PipelineOp& op) {
  const Key key = std::make_pair(op.micro_batch, op.chunk);
  const ModelChunk& chunk = step_.chunks[static_cast<size_t>(op.chunk)];
  const int v = chunk.placement().virtual_stage;
  const int peer = static_cast<int>(op.peer_stage);
  switch (op.kind) {
    case OpKind::kRecvActivation:
      in_flight_[key].received = receive_tensor_(peer, tag_(op, v, false));
      break;
    case OpKind::kForward:
      forward_(op, chunk);
      break;
    case OpKind::kSendActivation:
      // The output is not needed by this rank's backward: it leaves with the send.
      send_tensor_(std::move(in_flight_.at(key).state.residuals.back()), peer,
                   tag_(op, v + 1, false));
      break;
    case OpKind::kRecvGradient:
      in_flight_.at(key).d_output = receive_tensor_(peer, tag_(op, v, true));
      break;
    case OpKind::kBackward:
    case OpKind::kBackwardInput:
      backward_(op, chunk);
      break;
    case OpKind::kBackwardWeight:
      backward_weight_(op, chunk);
      break;
    case OpKind::kSendGradient: {
      InFlight& f = in_flight_.at(key);
      send_tensor_(std::move(f.state.d_input), peer, tag_(op, v - 1, true));
      f.input_gradient_consumed = true;
      release_if_done_(key);
      break;
    }
  }
}

// F: the micro-batch's tokens where the chunk embeds or scores them, then the chunk's forward.
void StageRun::forward_(const planner::PipelineOp& op, const ModelChunk& chunk) {
  InFlight& f = in_flight_[std::make_pair(op.micro_batch, op.chunk)];
  const ChunkPlacement& placement = chunk.placement();
  const int64_t first = step_.first_sample + op.micro_batch * d_.B;
  if (placement.has_embedding) {
    f.state.tokens = Buffer<int32_t>(&ctx_.memory, d_.N);
  }
  if (placement.has_head) {
    f.state.targets = Buffer<int32_t>(&ctx_.memory, d_.N);
  }
  if (placement.has_embedding || placement.has_head) {
    fill_micro_batch(step_.data, first, d_.S, d_.positions, d_.B, f.state.tokens.data(),
                     f.state.targets.data());
  }
  if (step_.acquire_weights) {
    step_.acquire_weights(static_cast<int>(op.chunk));
  }
  chunk.forward(&f.state, std::move(f.received), ctx_);
  if (step_.release_weights) {
    step_.release_weights(static_cast<int>(op.chunk));
  }
  loss_sum_ += f.state.loss_sum;
}

// B (with W for kBackward): the chunk's input gradient, and its weight gradients if whole.
void StageRun::backward_(const planner::PipelineOp& op, const ModelChunk& chunk) {
  const Key key = std::make_pair(op.micro_batch, op.chunk);
  InFlight& f = in_flight_.at(key);
  const ChunkPlacement& placement = chunk.placement();
  const bool with_weight = op.kind == OpKind::kBackward;
  step_.sync.before_gradient_write(static_cast<int>(op.chunk));
  if (step_.acquire_weights) {
    step_.acquire_weights(static_cast<int>(op.chunk));
  }
  chunk.backward_input(&f.state, placement.has_head ? nullptr : f.d_output.data(), with_weight,
                       ctx_);
  if (step_.release_weights) {
    step_.release_weights(static_cast<int>(op.chunk));
  }
  f.d_output.reset();
  if (with_weight) {
    f.weights_done = true;
    step_.sync.micro_batch_done(static_cast<int>(op.chunk));
  }
  // The first virtual stage's input gradient feeds its own embedding's W.
  f.input_gradient_consumed = placement.has_embedding ? f.weights_done : false;
  release_if_done_(key);
}

// W of a zero-bubble schedule: the weight gradients alone (it reads no weights).
void StageRun::backward_weight_(const planner::PipelineOp& op, const ModelChunk& chunk) {
  const Key key = std::make_pair(op.micro_batch, op.chunk);
  InFlight& f = in_flight_.at(key);
  step_.sync.before_gradient_write(static_cast<int>(op.chunk));
  chunk.backward_weight(&f.state, ctx_);
  f.weights_done = true;
  if (chunk.placement().has_embedding) {
    f.input_gradient_consumed = true;
  }
  step_.sync.micro_batch_done(static_cast<int>(op.chunk));
  release_if_done_(key);
}

// Starts a non-blocking send of `tensor` (this rank's 1/tp block of it under scatter/gather).
void StageRun::send_tensor_(Tensor tensor, int peer, int tag) {
  PendingSend send;
  if (step_.scatter_gather) {
    send.payload = ctx_.tensor(block_);
    std::copy_n(tensor.data() + d_.tp_rank * block_, block_, send.payload.data());
  } else {
    send.payload = std::move(tensor);
  }
  send.request = ctx_.groups.isend(send.payload.data(), block_, peer, tag);
  send.peer = peer;
  sends_.push_back(std::move(send));
}

// Blocks for a whole pipeline tensor (all-gathered over tp under scatter/gather).
Tensor StageRun::receive_tensor_(int peer, int tag) {
  Tensor full = ctx_.tensor(rows_);
  if (!step_.scatter_gather) {
    ctx_.groups.recv(full.data(), rows_, peer, tag);
    return full;
  }
  Tensor part = ctx_.tensor(block_);
  ctx_.groups.recv(part.data(), block_, peer, tag);
  ctx_.groups.all_gather(CommGroup::kTp, full.data(), part.data(), block_);
  return full;
}

// Frees the payloads of the sends that have completed (the buffers count as live until then).
void StageRun::release_completed_sends_() {
  for (auto it = sends_.begin(); it != sends_.end();) {
    int done = 0;
    MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done != 0 ? sends_.erase(it) : it + 1;
  }
}

// Drops a micro-batch's state once its weight and input gradients are both used.
void StageRun::release_if_done_(const Key& key) {
  const InFlight& f = in_flight_.at(key);
  if (f.weights_done && f.input_gradient_consumed) {
    in_flight_.erase(key);
  }
}

// Completes the sends; every micro-batch must have finished its backward.
void StageRun::finish_() {
  for (PendingSend& send : sends_) {
    ctx_.groups.wait_send(&send.request, send.peer);
  }
  if (!in_flight_.empty()) {
    throw RuntimeError(
        fmt::format("rank {}: the op list of stage {} left {} micro-batch(es) without a backward",
                    world_rank(), step_.stage, in_flight_.size()));
  }
}

}  // namespace

double run_pipeline_step(const PipelineStep& step) {
  return StageRun(step).run();
}

}  // namespace meshplan::executor
