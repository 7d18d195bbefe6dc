// Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm, with or without
// --delay-wgrad-compute): a forward merged with the previous micro-batch's backward, layer by
// layer, on two streams (docs/research/ep-a2a-overlap.md). chunk_cost (compute_cost.cpp) fills
// each chunk's ep_overlap_layers; the schedule's pairs are timed here.

#include <algorithm>
#include <vector>

#include "meshplan/cost_model.h"

namespace meshplan::planner {

// The two streams of TransformerLayerSchedulePlan.run (Megatron-LM d98e8a64
// models/common/model_chunk_schedule_plan.py): comm_stream runs combine_bwd, dispatch_fwd,
// dispatch_bwd, combine_fwd; comp_stream pre_dispatch_fwd, mlp_bwd, mlp_fwd, pre_dispatch_bwd,
// issued in the order combine_bwd, pre_dispatch_fwd, mlp_bwd, dispatch_fwd, dispatch_bwd,
// mlp_fwd, combine_fwd, pre_dispatch_bwd. Every node waits for its micro-batch's event, recorded
// after that micro-batch's previous node (pipeline_parallel/utils.py ScheduleNode
// stream_acquire_context), and for what its stream ran before.
// delay_wgrad_compute: mlp.backward_dw right after mlp_bwd and pre_dispatch_computation
// .backward_dw at the layer's end (the chunk's last backward layer's at the chunk's end, also
// last on the computation stream) run on the computation stream without the event
// (models/common/utils.py backward_dw), so they hold the stream, not the micro-batch.
// An MTP layer's mtp_post_process runs on the computation stream first in its backward (before
// combine_bwd) and, in its forward, after combine_fwd and the backward layer's pre_dispatch_bwd,
// before that layer's delayed weight gradient (TransformerLayerSchedulePlan.run).
double ep_overlap_layers_seconds(const std::vector<EpOverlapLayer>& forward,
                                 const std::vector<EpOverlapLayer>& backward, bool delay_wgrad) {
  double compute_free = 0, comm_free = 0;        // when each stream is idle
  double forward_ready = 0, backward_ready = 0;  // when each micro-batch's last node ended
  const auto run = [](double& stream_free, double& ready, double seconds) {
    ready = std::max(stream_free, ready) + seconds;
    stream_free = ready;
  };
  const size_t layers = std::max(forward.size(), backward.size());
  for (size_t i = 0; i < layers; ++i) {
    const EpOverlapLayer* f = i < forward.size() ? &forward[i] : nullptr;
    const EpOverlapLayer* b = i < backward.size() ? &backward[i] : nullptr;
    if (b != nullptr && b->post_backward_seconds > 0) {  // a decoder layer's is a no-op node
      run(compute_free, backward_ready, b->post_backward_seconds);
    }
    if (b != nullptr) {
      run(comm_free, backward_ready, b->combine_seconds);
    }
    if (f != nullptr) {
      run(compute_free, forward_ready, f->attention_forward_seconds);
    }
    if (b != nullptr) {
      run(compute_free, backward_ready,
          b->mlp_backward_seconds - (delay_wgrad ? b->mlp_weight_seconds : 0.0));
    }
    if (f != nullptr) {
      run(comm_free, forward_ready, f->dispatch_seconds);
    }
    if (b != nullptr && delay_wgrad) {
      compute_free += b->mlp_weight_seconds;  // after mlp_bwd on the stream, outside the chain
    }
    if (b != nullptr) {
      run(comm_free, backward_ready, b->dispatch_seconds);
    }
    if (f != nullptr) {
      run(compute_free, forward_ready, f->mlp_forward_seconds);
      run(comm_free, forward_ready, f->combine_seconds);
    }
    if (b != nullptr) {
      run(compute_free, backward_ready,
          b->attention_backward_seconds - (delay_wgrad ? b->attention_weight_seconds : 0.0));
    }
    if (f != nullptr && f->post_forward_seconds > 0) {
      run(compute_free, forward_ready, f->post_forward_seconds);
    }
    if (b != nullptr && delay_wgrad) {
      compute_free += b->attention_weight_seconds;
    }
  }
  return std::max(compute_free, comm_free);
}

double ep_overlap_pair_saved_seconds(const ChunkCost& forward, const ChunkCost& backward) {
  double forward_serial = 0;
  for (const EpOverlapLayer& node : forward.ep_overlap_layers) {
    forward_serial += node.attention_forward_seconds + node.mlp_forward_seconds +
                      node.dispatch_seconds + node.combine_seconds + node.post_forward_seconds;
  }
  const std::vector<EpOverlapLayer> backward_layers(backward.ep_overlap_layers.rbegin(),
                                                    backward.ep_overlap_layers.rend());
  const bool delay = backward.ep_overlap_delay_wgrad;
  const double backward_alone = ep_overlap_layers_seconds({}, backward_layers, delay);
  return std::max(0.0,
                  forward_serial + backward_alone -
                      ep_overlap_layers_seconds(forward.ep_overlap_layers, backward_layers, delay));
}

bool ep_overlap_schedule(const Layout& layout, const PlanOptions& options) {
  return options.overlap_moe_expert_parallel_comm && layout.pp > 1 &&
         layout.schedule == ScheduleKind::kInterleaved;
}

}  // namespace meshplan::planner
