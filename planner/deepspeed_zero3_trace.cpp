// DeepSpeed ZeRO-3's parameter coordinator replayed over one micro-batch (dp_buckets.h,
// deepspeed_zero3_trace): which parameters are gathered at once, and which gathers the
// backward skips because a parameter was kept from its forward.

#include <algorithm>
#include <limits>
#include <vector>

#include "meshplan/dp_buckets.h"
#include "model_shape.h"

namespace meshplan::planner {

namespace {

// One entry of DeepSpeed's module trace (`__submodule_order`) that holds a partitioned
// parameter: the parameter (an index) and its per-rank elements (ds_numel).
struct TraceEntry {
  int64_t param = 0;
  int64_t elements = 0;
  int64_t module = -1;     // its place in its layer's module list; -1 outside the layers
  bool backward = false;   // its backward: its gradient is produced
  bool recompute = false;  // its forward again, inside the layer's backward
};

// The module trace of one forward and backward on one rank of stage `stage`: the hooks of
// parameter_offload.py fire pre-forward (fetch) and post-forward (release) for each module, and
// again around its backward; under full recompute the checkpointed layer's forward runs again
// before its backward (deepspeed/runtime/activation_checkpointing/checkpointing.py
// CheckpointFunction.backward calls the layer's forward, whose module hooks fetch again), and
// with recompute_group_layers N (activation_checkpoint_interval) the whole group's forward runs
// again before the backward of its last layer.
std::vector<TraceEntry> module_trace(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, const PlanOptions& options) {
  const int64_t tp = layout.tp;
  int64_t next_param = 0;
  std::vector<TraceEntry> forward;
  const auto add = [&](int64_t param, int64_t elements, int64_t module = -1) {
    if (elements > kDeepSpeedPersistenceThreshold) {
      forward.push_back({param, elements, module});
    }
  };
  const int64_t vocab_elements = padded_vocab_size(model, tp, options) / tp * model.hidden_size;
  const int64_t embedding_param = next_param++;
  const bool first_stage = stage == 0;
  const bool last_stage = stage == layout.pp - 1;
  if (first_stage) {
    add(embedding_param, vocab_elements);
    // Learned positions: one table on every tp rank (Megatron's Embedding).
    add(next_param++, models::count_parameters(model).position_embedding);
  }
  // Each layer's modules in forward order; its forward entries, so its recompute and backward
  // can be replayed from them; and the first layer (an index into layer_entries) of its
  // checkpointed group, recompute_group_layers of its chunk's layers from the chunk's first.
  std::vector<std::pair<size_t, size_t>> layer_entries;
  std::vector<size_t> group_first;
  const int64_t group_layers = std::max<int64_t>(layout.recompute_group_layers, 1);
  for (int64_t chunk = 0; chunk < layout.vpp; ++chunk) {
    const LayerRange range = chunk_layers(model, layout, stage, chunk);
    const size_t chunk_first = layer_entries.size();
    for (int64_t layer = range.first; layer < range.end; ++layer) {
      group_first.push_back(
          chunk_first + static_cast<size_t>((layer - range.first) / group_layers * group_layers));
      const size_t begin = forward.size();
      const std::vector<int64_t> modules =
          deepspeed_gathered_module_elements(model, tp, model.is_moe_layer(layer));
      for (size_t module = 0; module < modules.size(); ++module) {
        // The all-persistent {1} is no entry.
        add(next_param++, modules[module], static_cast<int64_t>(module));
      }
      layer_entries.emplace_back(begin, forward.size());
    }
  }
  size_t head_entry = forward.size();
  if (last_stage) {
    // The LM head: the embedding's own weight when tied (Megatron's parallel_lm_logits).
    add(model.tied_embeddings ? embedding_param : next_param++, vocab_elements);
  }
  std::vector<TraceEntry> trace = forward;
  const auto add_backward = [&](size_t index) {
    TraceEntry entry = forward[index];
    entry.backward = true;
    trace.push_back(entry);
  };
  if (head_entry < forward.size()) {
    add_backward(head_entry);
  }
  const bool recompute = layout.recompute == Recompute::kFull;
  for (size_t layer = layer_entries.size(); layer-- > 0;) {
    // The backward of a group's last layer runs the forward of the whole group again.
    const bool group_last =
        layer + 1 == layer_entries.size() || group_first[layer + 1] != group_first[layer];
    if (recompute && group_last) {
      for (size_t member = group_first[layer]; member <= layer; ++member) {
        for (size_t index = layer_entries[member].first; index < layer_entries[member].second;
             ++index) {
          TraceEntry entry = forward[index];
          entry.recompute = true;
          trace.push_back(entry);
        }
      }
    }
    for (size_t index = layer_entries[layer].second; index > layer_entries[layer].first; --index) {
      add_backward(index - 1);
    }
  }
  const size_t embedding_end = layer_entries.empty() ? head_entry : layer_entries.front().first;
  for (size_t index = embedding_end; index > 0; --index) {
    add_backward(index - 1);
  }
  return trace;
}

}  // namespace

DeepSpeedZero3Trace deepspeed_zero3_trace(const models::TransformerConfig& model,
                                          const Layout& layout, int64_t stage,
                                          const PlanOptions& options) {
  const std::vector<TraceEntry> trace = module_trace(model, layout, stage, options);
  const size_t n = trace.size();
  DeepSpeedZero3Trace out;
  if (n == 0) {
    return out;
  }
  int64_t num_params = 0;
  for (const TraceEntry& entry : trace) {
    num_params = std::max(num_params, entry.param + 1);
  }
  // Elements of the trace before entry i, and the next entry using the same parameter.
  std::vector<int64_t> before(n + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    before[i + 1] = before[i] + trace[i].elements;
  }
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  std::vector<size_t> next_use(n, kNone);
  std::vector<size_t> last_seen(static_cast<size_t>(num_params), kNone);
  for (size_t i = n; i > 0; --i) {
    const auto param = static_cast<size_t>(trace[i - 1].param);
    next_use[i - 1] = last_seen[param];
    last_seen[param] = i - 1;
  }
  // partitioned_param_coordinator.py (DeepSpeed v0.16.5, 38327e07): reset_step at each forward
  // empties the fetch queue and the marks; the replay starts with nothing gathered, and ends so
  // (a parameter's last use has no reuse ahead), so every micro-batch replays alike.
  std::vector<bool> available(static_cast<size_t>(num_params), false);
  std::vector<int64_t> marked_use(static_cast<size_t>(num_params),
                                  std::numeric_limits<int64_t>::min());
  int64_t available_elements = 0;
  size_t queue = 0;  // the next entry of the parameter fetch queue
  const auto gather = [&](const TraceEntry& entry) {
    available[static_cast<size_t>(entry.param)] = true;
    available_elements += entry.elements;
    const bool again = entry.backward || entry.recompute;
    (again ? out.backward_gathered_elements : out.forward_gathered_elements) += entry.elements;
    if (again && entry.module >= 0) {
      const auto module = static_cast<size_t>(entry.module);
      if (out.backward_module_gathers.size() <= module) {
        out.backward_module_gathers.resize(module + 1, 0);
      }
      ++out.backward_module_gathers[module];
    }
  };
  for (size_t step = 0; step < n; ++step) {
    const TraceEntry& current = trace[step];
    const auto param = static_cast<size_t>(current.param);
    // fetch_sub_module: gather the module's parameters if not available, then pop them off the
    // fetch queue unless a prefetch already passed this use.
    if (!available[param]) {
      gather(current);
    }
    if (marked_use[param] < static_cast<int64_t>(step)) {
      marked_use[param] = static_cast<int64_t>(step);
      queue = step + 1;
    }
    // Prefetch: parameters not available, in trace order, until stage3_prefetch_bucket_size
    // elements are under way, capped at stage3_max_live_parameters less those available;
    // available ones passed on the way are marked with their use (lines 380-412).
    const int64_t budget = std::min(kDeepSpeedMaxLiveParameters - available_elements,
                                    kDeepSpeedPrefetchBucketElements);
    int64_t prefetching = 0;
    std::vector<size_t> to_gather;
    while (queue < n && prefetching < budget) {
      const TraceEntry& ahead = trace[queue];
      const auto ahead_param = static_cast<size_t>(ahead.param);
      marked_use[ahead_param] = std::max(marked_use[ahead_param], static_cast<int64_t>(queue));
      if (!available[ahead_param] &&
          std::none_of(to_gather.begin(), to_gather.end(),
                       [&](size_t i) { return trace[i].param == ahead.param; })) {
        to_gather.push_back(queue);
        prefetching += ahead.elements;
      }
      ++queue;
    }
    for (const size_t index : to_gather) {
      gather(trace[index]);
    }
    out.peak_gathered_elements = std::max(out.peak_gathered_elements, available_elements);
    if (current.backward) {
      out.largest_gradient_elements = std::max(out.largest_gradient_elements, current.elements);
    }
    // release_sub_module at step_id = step + 1 (__params_to_release): kept if a prefetch marked a
    // later use, or if the parameter is used again within stage3_max_reuse_distance elements of
    // the trace ahead.
    const int64_t release_step = static_cast<int64_t>(step) + 1;
    const size_t reuse = next_use[step];
    const bool kept =
        marked_use[param] > release_step ||
        (reuse != kNone && before[reuse] - before[step + 1] < kDeepSpeedMaxReuseDistance);
    if (!kept) {
      available[param] = false;
      available_elements -= current.elements;
    }
  }
  return out;
}

}  // namespace meshplan::planner
