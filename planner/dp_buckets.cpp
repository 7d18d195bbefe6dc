// A stage's data-parallel calls bucket by bucket (dp_buckets.h): the estimate, the collective
// inventory and the simulator all take their data-parallel volumes and times from here.

#include "meshplan/dp_buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "estimate_internal.h"
#include "memory.h"
#include "meshplan/errors.h"
#include "model_shape.h"

namespace meshplan::planner {

int64_t zero_padded_count(int64_t count, int64_t dp) {
  return (count + dp - 1) / dp * dp;
}

int64_t dp_buffer_count(const Layout& layout, int64_t count) {
  if (!zero_shards_optimizer(layout)) {
    return count;
  }
  const int64_t group = zero_shard_group_size(layout);
  return zero_padded_count(count, zero_shards_gradients(layout) ? group * layout.vpp : group);
}

int64_t dp_full_bucket_bytes(const Layout& layout, int64_t element_bytes, int64_t bucket_bytes) {
  const int64_t block_bytes =
      element_bytes * (zero_shards_optimizer(layout) ? zero_shard_group_size(layout) : 1);
  return std::max<int64_t>(1, bucket_bytes / block_bytes) * block_bytes;
}

bool zero_grad_all_reduce(const Layout& layout, const PlanOptions& options) {
  return options.framework == Framework::kDeepSpeed &&
         grad_all_reduce_option_applies(layout.zero) && options.deepspeed_grad_all_reduce;
}

bool parameter_gather_overlapped(const Layout& layout, const PlanOptions& options) {
  const bool zero12 = layout.zero == 1 || layout.zero == 2;
  return options.overlap_param_gather && !(zero12 && options.framework == Framework::kDeepSpeed);
}

GradReduceDtype default_grad_reduce_dtype(Framework framework, const Layout& layout) {
  switch (framework) {
    case Framework::kMegatron:
      return layout.zero <= 1 ? GradReduceDtype::kFp32 : GradReduceDtype::kBf16;
    case Framework::kFsdp:
      return GradReduceDtype::kFp32;
    case Framework::kDeepSpeed:
    case Framework::kMeshplan:
      break;
  }
  return GradReduceDtype::kBf16;
}

int64_t grad_reduce_element_bytes(const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options) {
  const int64_t e = element_bytes(cluster);
  if (e >= 4) {
    return e;  // fp32 training: nothing narrower to reduce in
  }
  const GradReduceDtype dtype =
      options.grad_reduce_dtype.value_or(default_grad_reduce_dtype(options.framework, layout));
  return dtype == GradReduceDtype::kFp32 ? 4 : e;
}

// Mirrors the branches of dp_buckets below: megatron_zero01_buckets (`bucketed`), ZeRO 2's
// `per_layer`, ZeRO 3's `deepspeed ? bucket_sizes : per_layer_sizes`.
std::string dp_bucket_size_inert_reason(const Layout& layout, const PlanOptions& options) {
  if (grad_group_size(layout) == 1) {
    return "dp x cp is 1: no gradient reduce";
  }
  const bool megatron = options.framework == Framework::kMegatron;
  if (layout.zero <= 1 && megatron && !options.overlap_grad_reduce) {
    return "megatron without overlap_grad_reduce reduces each model chunk as one bucket";
  }
  if (layout.zero == 2 && megatron) {
    return "Megatron-FSDP reduces ZeRO-2 gradients one bucket per layer";
  }
  if (layout.zero == 3 && options.framework != Framework::kDeepSpeed) {
    return fmt::format("{} reduces ZeRO-3 gradients one bucket per layer",
                       to_string(options.framework));
  }
  return "";
}

int64_t dp_bucket_bytes(const models::ClusterConfig& cluster, const Layout& layout,
                        const PlanOptions& options) {
  if (options.bucket_bytes) {
    return *options.bucket_bytes;
  }
  if (options.framework == Framework::kDeepSpeed) {
    return kDeepSpeedBucketElements * grad_reduce_element_bytes(cluster, layout, options);
  }
  if (options.framework != Framework::kMegatron) {
    return kDefaultBucketBytes;
  }
  // Megatron-LM training.py resolve_ddp_bucket_size (d98e8a64; the formula since 0fda386c,
  // 2024-04-11, a fixed 40,000,000 before): bucket_size = max(40,000,000, 1,000,000 x the
  // dp x cp group size) parameters when --ddp-bucket-size is not given, "to ensure that chunks
  // used in NCCL ring-reduce implementations are large enough to remain bandwidth-bound"
  // (core/distributed/distributed_data_parallel.py); each parameter moves in the reduce dtype.
  const int64_t parameters = std::max(kMegatronMinBucketParameters,
                                      kMegatronBucketParametersPerRank * grad_group_size(layout));
  return parameters * grad_reduce_element_bytes(cluster, layout, options);
}

namespace {

std::vector<SizeRun> non_empty(std::initializer_list<SizeRun> runs) {
  std::vector<SizeRun> out;
  for (const SizeRun& run : runs) {
    if (run.bytes > 0 && run.count > 0) {
      out.push_back(run);
    }
  }
  return out;
}

}  // namespace

std::vector<SizeRun> bucket_sizes(int64_t total_bytes, int64_t bucket_bytes) {
  return non_empty({{bucket_bytes, total_bytes / bucket_bytes}, {total_bytes % bucket_bytes, 1}});
}

std::vector<SizeRun> even_split(int64_t total_bytes, int64_t num_parts) {
  const int64_t floor = total_bytes / num_parts;
  const int64_t larger = total_bytes % num_parts;
  return non_empty({{floor + 1, larger}, {floor, num_parts - larger}});
}

namespace {

// Each run's calls over `group` (the gradient group, or under hybrid sharding the shard group).
std::vector<DpBucket> costed(const models::ClusterConfig& cluster, const Layout& layout,
                             int64_t stage, CollectiveKind kind, const std::vector<SizeRun>& sizes,
                             CommGroup group = CommGroup::kDp) {
  std::vector<DpBucket> buckets;
  for (const SizeRun& run : sizes) {
    buckets.push_back(
        DpBucket{run.bytes, kind, group,
                 stage_collective_seconds(cluster, layout, kind, group, stage, run.bytes),
                 run.count, run.layer_run, run.layers});
  }
  return buckets;
}

// The group ZeRO's gathers and reduce-scatters run over: the gradient group, or under hybrid
// sharding its shard group (fsdp's ZeRO 3, megatron's ZeRO 1; check_framework).
CommGroup zero_comm_group(const Layout& layout) {
  return hybrid_sharded(layout) ? CommGroup::kDpShard : CommGroup::kDp;
}

// Hybrid sharding: each reduce-scatter's output, bytes / shard group, all-reduced over the
// replicas after it (DpBucket::replicate_bytes).
void add_replica_all_reduce(const models::ClusterConfig& cluster, const Layout& layout,
                            int64_t stage, std::vector<DpBucket>& reduce_scatters) {
  for (DpBucket& bucket : reduce_scatters) {
    bucket.replicate_bytes = bucket.bytes / zero_shard_group_size(layout);
    bucket.replicate_seconds =
        stage_collective_seconds(cluster, layout, CollectiveKind::kAllReduce,
                                 CommGroup::kDpReplicate, stage, bucket.replicate_bytes);
    bucket.seconds += bucket.replicate_seconds;
  }
}

}  // namespace

std::vector<DpBucket> calls_in_order(const std::vector<DpBucket>& runs) {
  std::vector<DpBucket> calls;
  size_t first = 0;
  while (first < runs.size()) {
    size_t end = first + 1;
    const int64_t group = runs[first].layer_run;
    while (group >= 0 && end < runs.size() && runs[end].layer_run == group) {
      ++end;
    }
    const int64_t layers = group >= 0 ? std::max<int64_t>(1, runs[first].layers) : 1;
    for (int64_t k = 0; k < layers; ++k) {
      for (size_t i = first; i < end; ++i) {
        const int64_t n = runs[i].num_calls;
        const int64_t here = group >= 0 ? (k + 1) * n / layers - k * n / layers : n;
        DpBucket call = runs[i];
        call.num_calls = 1;
        calls.insert(calls.end(), static_cast<size_t>(std::max<int64_t>(0, here)), call);
      }
    }
    first = end;
  }
  return calls;
}

namespace {

// One chunk share of `chunk_bytes` cut into one bucket per layer: an even split of its dp
// blocks over the chunk's layers (the most any chunk of the stage holds; at least one).
std::vector<SizeRun> per_layer_sizes(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, int64_t chunk_bytes, int64_t element_bytes) {
  const int64_t block_bytes = zero_shard_group_size(layout) * element_bytes;
  const int64_t layers = std::max<int64_t>(1, max_chunk_layer_count(model, layout, stage));
  std::vector<SizeRun> per_layer = even_split(chunk_bytes / block_bytes, layers);
  for (SizeRun& run : per_layer) {
    run.bytes *= block_bytes;
  }
  return per_layer;
}

// One layer's calls of `per_layer` bytes each cut into one call per module, in proportion to the
// modules' elements, in whole dp blocks of `block_bytes` (the last module takes the rest), so the
// calls still sum to the layer's bytes exactly; module by module, the layer runs in turn. With
// `module_calls` (module i called module_calls[i] times over all the layers, missing places 0),
// each module's calls are those instead of one per layer, shared over the runs in proportion to
// their layers (the last run takes the rest).
std::vector<SizeRun> per_module_sizes(const std::vector<SizeRun>& per_layer,
                                      const std::vector<int64_t>& module_elements,
                                      int64_t block_bytes,
                                      const std::vector<int64_t>* module_calls = nullptr) {
  int64_t layer_elements = 0;
  for (const int64_t elements : module_elements) {
    layer_elements += elements;
  }
  int64_t layers = 0;
  for (const SizeRun& layer : per_layer) {
    layers += layer.count;
  }
  std::vector<int64_t> calls_left(module_elements.size(), 0);
  for (size_t i = 0; module_calls != nullptr && i < module_calls->size() && i < calls_left.size();
       ++i) {
    calls_left[i] = (*module_calls)[i];
  }
  std::vector<SizeRun> sizes;
  for (size_t run = 0; run < per_layer.size(); ++run) {
    const SizeRun& layer = per_layer[run];
    const int64_t blocks = layer.bytes / block_bytes;
    int64_t left = blocks;
    for (size_t i = 0; i < module_elements.size(); ++i) {
      const bool last = i + 1 == module_elements.size();
      const auto share = static_cast<int64_t>(static_cast<double>(blocks) *
                                              static_cast<double>(module_elements[i]) /
                                              static_cast<double>(layer_elements));
      const int64_t module_blocks = last ? left : std::min(left, share);
      left -= module_blocks;
      int64_t count = layer.count;
      if (module_calls != nullptr) {
        const int64_t total = i < module_calls->size() ? (*module_calls)[i] : 0;
        count = run + 1 == per_layer.size() ? calls_left[i] : total * layer.count / layers;
        calls_left[i] -= count;
      }
      if (module_blocks > 0 && count > 0) {
        sizes.push_back(
            {module_blocks * block_bytes, count, static_cast<int64_t>(run), layer.count});
      }
    }
  }
  return sizes;
}

// Non-expert parameters of a stage's model chunks, in dp blocks of `block` elements summing to
// the stage's `count` buffer elements exactly, in the order their last backward ends
// (chunks vpp-1 ... 0 of the interleaved schedule's last micro-batch). Chunks after the first
// hold their layers (plus the LM head and final norm on the last stage's last chunk, the
// stage's remainder when it is not stage 0); chunk 0 holds the rest (the embedding on stage 0).
std::vector<int64_t> chunk_counts_last_ready_last(const models::TransformerConfig& model,
                                                  const Layout& layout, int64_t stage,
                                                  int64_t count, int64_t block) {
  const LayerParameters dense = layer_parameters(model, layout.tp);
  const LayerParameters moe =
      model.is_moe() ? layer_parameters(model, layout.tp, true, layout.ep, layout.etp) : dense;
  const auto layer_count = [&](int64_t chunk) {
    const LayerRange range = chunk_layers(model, layout, stage, chunk);
    const int64_t num_moe = range.num_moe(model);
    return (dense.sharded + dense.replicated) * (range.count() - num_moe) +
           (moe.sharded + moe.replicated) * num_moe;
  };
  std::vector<int64_t> counts;
  int64_t left = count;
  for (int64_t chunk = layout.vpp - 1; chunk > 0; --chunk) {
    int64_t elements = layer_count(chunk);
    if (chunk == layout.vpp - 1 && stage == layout.pp - 1 && stage != 0) {
      int64_t layers = 0;
      for (int64_t c = 0; c < layout.vpp; ++c) {
        layers += layer_count(c);
      }
      elements += std::max<int64_t>(0, count - layers);  // LM head and final norm
    }
    const int64_t blocks = std::min((elements + block - 1) / block, left / block);
    counts.push_back(blocks * block);
    left -= blocks * block;
  }
  counts.push_back(left);
  return counts;
}

// Elements of one chunk share of the root unit's parameters, rounded up to whole dp blocks (FSDP
// pads each unit's flat parameter to a multiple of the shard group): the stage's parameters
// outside the layers, without the final norm and LM head unless they are in the root
// (fsdp_head_in_root; else they stay spread over the layers' units, overlapped like them).
int64_t fsdp_root_unit_elements(const models::TransformerConfig& model, const Layout& layout,
                                const PlanOptions& options, int64_t stage) {
  const StageParameters root = fsdp_head_in_root(options)
                                   ? stage_outside_layer_parameters(model, layout, stage, options)
                                   : stage_embedding_parameters(model, layout, stage, options);
  const int64_t elements = root.sharded + root.replicated;
  const int64_t share = (elements + layout.vpp - 1) / layout.vpp;
  return zero_padded_count(share, zero_shard_group_size(layout));
}

// Megatron-Core's ZeRO 0/1 buckets (training.py d98e8a64 lines 2505-2514, disable_bucketing
// for chunks after the first since 5d745a79, 2023-10-23; distributed_data_parallel.py lines
// 160-171): each model chunk is its own DDP buffer; only pipeline rank 0's first chunk is cut
// into `bucket` buckets, every other chunk is one bucket ("data-parallel communication on
// these stages is not on the critical path"), and without overlap_grad_reduce bucket_size is
// None, one bucket per chunk, as Megatron-LM 2021-22 all-reduced each chunk's contiguous
// buffer after the backward (megatron/model/distributed.py allreduce_gradients, 48a5e0da).
// `bytes_of(elements)` gives a chunk's bytes; runs in the order the chunks' gradients are ready.
template <typename BytesOf>
std::vector<SizeRun> megatron_chunk_sizes(const std::vector<int64_t>& chunk_counts, bool bucketed,
                                          int64_t bucket, BytesOf bytes_of) {
  std::vector<SizeRun> sizes;
  for (size_t i = 0; i < chunk_counts.size(); ++i) {
    const int64_t bytes = bytes_of(chunk_counts[i], i);
    const bool first_chunk = i + 1 == chunk_counts.size();
    const std::vector<SizeRun> runs =
        bucketed && first_chunk ? bucket_sizes(bytes, bucket) : non_empty({{bytes, 1}});
    sizes.insert(sizes.end(), runs.begin(), runs.end());
  }
  return sizes;
}

// Megatron-Core's ZeRO 0/1 calls of a stage whose buffer holds `count` elements, of which
// `fp8_weights` are gathered in 1 byte (megatron_chunk_sizes; full buckets of `grad_bucket`
// gradient bytes, the parameter buckets the same elements).
DpBuckets megatron_zero01_buckets(const models::TransformerConfig& model,
                                  const models::ClusterConfig& cluster, const Layout& layout,
                                  const PlanOptions& options, int64_t stage, int64_t count,
                                  int64_t fp8_weights, int64_t grad_bucket) {
  const int64_t e = element_bytes(cluster);
  const int64_t g = grad_reduce_element_bytes(cluster, layout, options);
  const std::vector<int64_t> chunks = chunk_counts_last_ready_last(
      model, layout, stage, count,
      zero_shards_optimizer(layout) ? zero_shard_group_size(layout) : 1);
  const bool bucketed = stage == 0 && options.overlap_grad_reduce;
  const auto grad_of = [&](int64_t elements, size_t) { return elements * g; };
  // The fp8 saving apportioned to the chunks by their elements (the last one exact).
  int64_t fp8_left = fp8_weights;
  const auto param_of = [&](int64_t elements, size_t i) {
    const int64_t fp8 = i + 1 == chunks.size() ? fp8_left : fp8_weights * elements / count;
    fp8_left -= fp8;
    return elements * e - fp8 * (e - 1);
  };
  // --num-distributed-optimizer-instances (hybrid_sharded): each bucket reduce-scattered within
  // its instance, then its shard all-reduced across the instances, one after the other on the
  // communication stream (param_and_grad_buffer.py start_grad_sync, d98e8a64); the parameters
  // gathered within the instance.
  const CommGroup group = zero_comm_group(layout);
  DpBuckets out;
  out.step_grad =
      costed(cluster, layout, stage,
             layout.zero == 0 ? CollectiveKind::kAllReduce : CollectiveKind::kReduceScatter,
             megatron_chunk_sizes(chunks, bucketed, grad_bucket, grad_of), group);
  if (layout.zero == 1) {
    out.step_param =
        costed(cluster, layout, stage, CollectiveKind::kAllGather,
               megatron_chunk_sizes(chunks, bucketed, grad_bucket / g * e, param_of), group);
  }
  if (hybrid_sharded(layout)) {
    add_replica_all_reduce(cluster, layout, stage, out.step_grad);
  }
  return out;
}

}  // namespace

std::vector<int64_t> deepspeed_gathered_module_elements(const models::TransformerConfig& model,
                                                        int64_t tp, bool moe_layer) {
  // partitioned_param_coordinator.py fetch_sub_module (DeepSpeed 0.19.6): each module's own
  // parameters are all-gathered in one coalesced call as its forward (or its recompute) starts,
  // and prefetched one call per module ahead (stage3_prefetch_bucket_size 5e7 elements: the
  // next module's, as a large module alone fills it); persistent parameters make no call.
  const int64_t h = model.hidden_size;
  const int64_t fc1_per_f = models::is_gated(model.activation) ? 2 : 1;
  std::vector<int64_t> modules;
  const auto add = [&](int64_t elements) {
    if (elements > kDeepSpeedPersistenceThreshold) {
      modules.push_back(elements);
    }
  };
  const auto add_mlp = [&](int64_t f) {
    add(h * fc1_per_f * f / tp);
    add(f * h / tp);
  };
  const int64_t a = model.num_attention_heads;
  if (model.is_mla()) {
    // Megatron-Core MLA (layer_parameters): the down projections on every tp rank, the up
    // projections and linear_proj tp-sharded.
    const int64_t qk_head = model.qk_nope_head_dim + model.qk_rope_head_dim;
    if (model.q_lora_rank > 0) {
      add(h * model.q_lora_rank);
      add(model.q_lora_rank * a * qk_head / tp);
    } else {
      add(h * a * qk_head / tp);
    }
    add(h * (model.kv_lora_rank + model.qk_rope_head_dim));
    add(model.kv_lora_rank * a * (model.qk_nope_head_dim + model.v_head_dim) / tp);
    add(a * model.v_head_dim * h / tp);
  } else {
    const int64_t d = model.head_dim;
    add(h * (a + 2 * model.num_kv_heads) * d / tp);
    add(a * d * h / tp);
  }
  if (!moe_layer) {
    add_mlp(model.ffn_hidden_size);
  } else {
    add(model.num_experts * h);
    for (int64_t shared = 0; shared < model.num_shared_experts; ++shared) {
      add_mlp(model.shared_expert_ffn_hidden_size);
    }
  }
  if (modules.empty()) {
    modules.push_back(1);  // all persistent: costed as one call of the layer's bytes
  }
  return modules;
}

bool zero3_gathers_once_per_step(const Layout& layout, const PlanOptions& options) {
  return options.framework == Framework::kFsdp && layout.pp > 1 && layout.zero == 3;
}

bool zero3_backward_gathers_start_a_pass(const Layout& layout, const PlanOptions& options) {
  return options.framework == Framework::kMegatron && layout.pp > 1 && layout.zero == 3;
}

int64_t chunk_list_rounds(const Layout& layout, const PlanOptions& options) {
  return zero3_gathers_once_per_step(layout, options) ? layout.vpp
                                                      : layout.num_micro_batches() * layout.vpp;
}

DpBuckets dp_buckets(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage) {
  const int64_t bucket_bytes = dp_bucket_bytes(cluster, layout, options);
  if (bucket_bytes < 1) {
    throw InputError(fmt::format("bucket_bytes: must be positive ({})", bucket_bytes));
  }
  DpBuckets out;
  if (grad_group_size(layout) <= 1) {
    return out;
  }
  // Expert parameters reduce over the expert data parallel group instead (expert_dp_buckets).
  const int64_t parameters = stage_parameter_count(model, layout, stage, options) -
                             stage_expert_parameter_count(model, layout, stage, options);
  const int64_t e = element_bytes(cluster);
  // Gradients move in the reduce dtype (grad_reduce_element_bytes), parameters in e; a
  // parameter bucket holds the elements of its gradient bucket (Megatron-Core's buckets count
  // parameters, bucket_size, and gather the param buffer over the grad buffer's ranges).
  const int64_t g = grad_reduce_element_bytes(cluster, layout, options);
  const int64_t grad_bucket = dp_full_bucket_bytes(layout, g, bucket_bytes);
  const int64_t param_bucket = grad_bucket / g * e;
  // DeepSpeed's ZeRO 1-2 all-reduce each bucket (zero_grad_all_reduce); elsewhere ZeRO reduces
  // at a reduce-scatter's bytes.
  const auto kRS = zero_grad_all_reduce(layout, options) ? CollectiveKind::kAllReduce
                                                         : CollectiveKind::kReduceScatter;
  const auto kAG = CollectiveKind::kAllGather;
  const int64_t count = dp_buffer_count(layout, parameters);
  const int64_t grad_bytes = count * g;
  // ZeRO 2-3: one chunk's share of the stage, whole dp blocks (dp_buffer_count).
  const int64_t chunk_grad_bytes = grad_bytes / layout.vpp;
  const int64_t chunk_param_bytes = count * e / layout.vpp;
  // --fp8-param-gather: the fp8 weights' uint8 param buffer moves 1 byte per element instead
  // of e (param_and_grad_buffer.py; memory.cpp fp8_param_gather_weight_count).
  const int64_t fp8_weights = layout.zero == 1 ? static_cast<int64_t>(fp8_param_gather_weight_count(
                                                     model, cluster, layout, options, stage))
                                               : 0;
  if (layout.zero <= 1 && options.framework == Framework::kMegatron) {
    return megatron_zero01_buckets(model, cluster, layout, options, stage, count, fp8_weights,
                                   grad_bucket);
  }
  switch (layout.zero) {
    case 0:
      out.step_grad = costed(cluster, layout, stage, CollectiveKind::kAllReduce,
                             bucket_sizes(grad_bytes, grad_bucket));
      break;
    case 1:
      out.step_grad = costed(cluster, layout, stage, kRS, bucket_sizes(grad_bytes, grad_bucket));
      out.step_param = costed(cluster, layout, stage, kAG,
                              bucket_sizes(count * e - fp8_weights * (e - 1), param_bucket));
      break;
    case 2: {
      // Megatron-FSDP (optim_grads) buckets by FSDP unit, a transformer layer: a unit's
      // parameters form one bucket and `suggested_bucket_size` splits only the parameters
      // outside units (megatron_fsdp/param_and_grad_buffer.py, _get_parameter_groups, Megatron-LM
      // d98e8a64); DeepSpeed's ZeRO-2 and the executor fill bucket_bytes buckets.
      const bool per_layer = options.framework == Framework::kMegatron;
      const auto sizes = [&](int64_t chunk_bytes, int64_t bytes_per_element, int64_t bucket) {
        return per_layer ? per_layer_sizes(model, layout, stage, chunk_bytes, bytes_per_element)
                         : bucket_sizes(chunk_bytes, bucket);
      };
      out.chunk_grad = costed(cluster, layout, stage, kRS, sizes(chunk_grad_bytes, g, grad_bucket));
      out.step_param =
          costed(cluster, layout, stage, kAG, sizes(chunk_param_bytes, e, param_bucket));
      for (DpBucket& run : out.step_param) {
        run.num_calls *= layout.vpp;
      }
      break;
    }
    default: {
      // Under hybrid sharding over the shard group, each gradient shard then all-reduced over
      // the replicas (add_replica_all_reduce below).
      const CommGroup group = zero_comm_group(layout);
      // Under fsdp with precision fp8, torchao's float8 all-gather moves the linear weights in
      // 1 byte (memory.cpp fsdp_float8_gather_saving_bytes): each layer's gather is that much
      // smaller, in whole dp blocks.
      const int64_t block_bytes = zero_shard_group_size(layout) * e;
      const int64_t fp8_saving =
          static_cast<int64_t>(fsdp_float8_gather_saving_bytes(model, cluster, layout, options)) /
          block_bytes * block_bytes *
          std::max<int64_t>(1, max_chunk_layer_count(model, layout, stage));
      // PyTorch FSDP's root unit (DpBuckets::chunk_root_param): the chunk share's parameters
      // outside the layers, in whole dp blocks (at most the share), leave the layers' units.
      const int64_t root_elements =
          options.framework == Framework::kFsdp
              ? std::min(fsdp_root_unit_elements(model, layout, options, stage),
                         chunk_grad_bytes / g)
              : 0;
      out.chunk_root_param =
          costed(cluster, layout, stage, kAG, non_empty({{root_elements * e, 1}}), group);
      out.chunk_root_grad =
          costed(cluster, layout, stage, kRS, non_empty({{root_elements * g, 1}}), group);
      const std::vector<SizeRun> per_layer = per_layer_sizes(
          model, layout, stage, chunk_param_bytes - root_elements * e - fp8_saving, e);
      const bool deepspeed = options.framework == Framework::kDeepSpeed;
      if (deepspeed) {
        // Module by module (deepspeed_gathered_module_elements), an MoE stage's modules those
        // of its MoE layers. The embedding and LM head stay spread over the layers' calls, and
        // the persistent norms and biases in them (a few elements per h^2). Before each
        // backward, the modules its coordinator gathers again (deepspeed_zero3_trace: the
        // recompute's and those released since their forward), as often as it does.
        const bool moe_layers =
            model.is_moe() && chunk_layers(model, layout, stage, 0).num_moe(model) > 0;
        const std::vector<int64_t> modules =
            deepspeed_gathered_module_elements(model, layout.tp, moe_layers);
        const int64_t block_bytes = zero_shard_group_size(layout) * e;
        const DeepSpeedZero3Trace trace = deepspeed_zero3_trace(model, layout, stage, options);
        out.chunk_param = costed(cluster, layout, stage, kAG,
                                 per_module_sizes(per_layer, modules, block_bytes), group);
        out.chunk_param_backward = costed(
            cluster, layout, stage, kAG,
            per_module_sizes(per_layer, modules, block_bytes, &trace.backward_module_gathers),
            group);
      } else {
        out.chunk_param = costed(cluster, layout, stage, kAG, per_layer, group);
        if (!zero3_gathers_once_per_step(layout, options)) {
          out.chunk_param_backward = out.chunk_param;
        }
      }
      // FSDP reduce-scatters in fp32 under bf16 training by default (default_grad_reduce_dtype):
      // torchtitan's `mixed_precision_reduce` defaults to "float32" (torchtitan/config/
      // job_config.py). Composer 0.16.3 (llm-foundry) DEFAULT and PURE reduce in bf16 instead
      // (reduce_dtype None, which FSDP1's _flat_param.py resolves to the param dtype; 0.16.4's
      // DEFAULT sets fp32): those runs state grad_reduce_dtype bf16, which g then follows.
      // DeepSpeed's ZeRO-3 fills reduce_bucket_size buckets across modules and layers
      // (stage3.py __add_grad_to_ipg_bucket: the bucket is reduce-scattered once the next
      // gradient would overflow it), every micro-batch.
      out.chunk_grad = costed(cluster, layout, stage, kRS,
                              deepspeed ? bucket_sizes(chunk_grad_bytes, grad_bucket)
                                        : per_layer_sizes(model, layout, stage,
                                                          chunk_grad_bytes - root_elements * g, g),
                              group);
      if (hybrid_sharded(layout)) {
        add_replica_all_reduce(cluster, layout, stage, out.chunk_grad);
        add_replica_all_reduce(cluster, layout, stage, out.chunk_root_grad);
      }
      break;
    }
  }
  return out;
}

DpBuckets expert_dp_buckets(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, int64_t stage) {
  DpBuckets out;
  const int64_t expert_count = stage_expert_parameter_count(model, layout, stage, options);
  if (expert_count == 0 || expert_data_parallel(layout) <= 1) {
    return out;
  }
  const auto call = [&](CollectiveKind kind, int64_t bytes_per_element) {
    const int64_t bytes = expert_count * bytes_per_element;
    return DpBucket{
        bytes, kind, CommGroup::kExpertDp,
        stage_collective_seconds(cluster, layout, kind, CommGroup::kExpertDp, stage, bytes), 1};
  };
  const int64_t g = grad_reduce_element_bytes(cluster, layout, options);
  if (layout.zero == 0) {
    out.step_grad.push_back(call(CollectiveKind::kAllReduce, g));
    return out;
  }
  out.step_grad.push_back(call(zero_grad_all_reduce(layout, options)
                                   ? CollectiveKind::kAllReduce
                                   : CollectiveKind::kReduceScatter,
                               g));
  out.step_param.push_back(call(CollectiveKind::kAllGather, element_bytes(cluster)));
  return out;
}

std::vector<SizeRun> gradient_buckets_in_order(const DpBuckets& buckets, const Layout& layout) {
  const bool per_chunk = zero_shards_gradients(layout);
  std::vector<SizeRun> order;
  for (int64_t share = 0; share < (per_chunk ? layout.vpp : 1); ++share) {
    for (const DpBucket& bucket : per_chunk ? buckets.chunk_grad : buckets.step_grad) {
      order.push_back({bucket.bytes, bucket.num_calls});
    }
    if (per_chunk) {
      for (const DpBucket& bucket : buckets.chunk_root_grad) {
        order.push_back({bucket.bytes, bucket.num_calls});
      }
    }
  }
  return order;
}

double total_seconds(const std::vector<DpBucket>& buckets) {
  double seconds = 0;
  for (const DpBucket& bucket : buckets) {
    seconds += bucket.seconds * static_cast<double>(bucket.num_calls);
  }
  return seconds;
}

int64_t total_bytes(const std::vector<DpBucket>& buckets) {
  int64_t bytes = 0;
  for (const DpBucket& bucket : buckets) {
    bytes += bucket.bytes * bucket.num_calls;
  }
  return bytes;
}

int64_t total_calls(const std::vector<DpBucket>& buckets) {
  int64_t calls = 0;
  for (const DpBucket& bucket : buckets) {
    calls += bucket.num_calls;
  }
  return calls;
}

}  // namespace meshplan::planner
