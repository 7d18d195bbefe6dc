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
  const int64_t group = grad_group_size(layout);
  return zero_padded_count(count, zero_shards_gradients(layout) ? group * layout.vpp : group);
}

int64_t dp_full_bucket_bytes(const Layout& layout, int64_t element_bytes, int64_t bucket_bytes) {
  const int64_t block_bytes =
      element_bytes * (zero_shards_optimizer(layout) ? grad_group_size(layout) : 1);
  return std::max<int64_t>(1, bucket_bytes / block_bytes) * block_bytes;
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

std::vector<DpBucket> costed(const models::ClusterConfig& cluster, const Layout& layout,
                             int64_t stage, CollectiveKind kind,
                             const std::vector<SizeRun>& sizes) {
  std::vector<DpBucket> buckets;
  for (const SizeRun& run : sizes) {
    buckets.push_back(
        DpBucket{run.bytes, kind, CommGroup::kDp,
                 stage_collective_seconds(cluster, layout, kind, CommGroup::kDp, stage, run.bytes),
                 run.count});
  }
  return buckets;
}

// One chunk share of `chunk_bytes` cut into one bucket per layer: an even split of its dp
// blocks over the chunk's layers (the most any chunk of the stage holds; at least one).
std::vector<SizeRun> per_layer_sizes(const models::TransformerConfig& model, const Layout& layout,
                                     int64_t stage, int64_t chunk_bytes, int64_t element_bytes) {
  const int64_t block_bytes = grad_group_size(layout) * element_bytes;
  const int64_t layers = std::max<int64_t>(1, max_chunk_layer_count(model, layout, stage));
  std::vector<SizeRun> per_layer = even_split(chunk_bytes / block_bytes, layers);
  for (SizeRun& run : per_layer) {
    run.bytes *= block_bytes;
  }
  return per_layer;
}

}  // namespace

DpBuckets dp_buckets(const models::TransformerConfig& model, const models::ClusterConfig& cluster,
                     const Layout& layout, const PlanOptions& options, int64_t stage) {
  if (options.bucket_bytes < 1) {
    throw InputError(fmt::format("bucket_bytes: must be positive ({})", options.bucket_bytes));
  }
  DpBuckets out;
  if (grad_group_size(layout) <= 1) {
    return out;
  }
  // Expert parameters reduce over the expert data parallel group instead (expert_dp_buckets).
  const int64_t parameters = stage_parameter_count(model, layout, stage) -
                             stage_expert_parameter_count(model, layout, stage);
  const int64_t e = element_bytes(cluster);
  // Gradients move in the reduce dtype (grad_reduce_element_bytes), parameters in e; a
  // parameter bucket holds the elements of its gradient bucket (Megatron-Core's buckets count
  // parameters, bucket_size, and gather the param buffer over the grad buffer's ranges).
  const int64_t g = grad_reduce_element_bytes(cluster, layout, options);
  const int64_t grad_bucket = dp_full_bucket_bytes(layout, g, options.bucket_bytes);
  const int64_t param_bucket = grad_bucket / g * e;
  const auto kRS = CollectiveKind::kReduceScatter;
  const auto kAG = CollectiveKind::kAllGather;
  const int64_t count = dp_buffer_count(layout, parameters);
  const int64_t grad_bytes = count * g;
  // ZeRO 2-3: one chunk's share of the stage, whole dp blocks (dp_buffer_count).
  const int64_t chunk_grad_bytes = grad_bytes / layout.vpp;
  const int64_t chunk_param_bytes = count * e / layout.vpp;
  switch (layout.zero) {
    case 0:
      out.step_grad = costed(cluster, layout, stage, CollectiveKind::kAllReduce,
                             bucket_sizes(grad_bytes, grad_bucket));
      break;
    case 1: {
      out.step_grad = costed(cluster, layout, stage, kRS, bucket_sizes(grad_bytes, grad_bucket));
      // --fp8-param-gather: the fp8 weights' uint8 param buffer moves 1 byte per element
      // instead of e (param_and_grad_buffer.py; memory.cpp fp8_param_gather_weight_count).
      const int64_t fp8_weights = static_cast<int64_t>(
          fp8_param_gather_weight_count(model, cluster, layout, options, stage));
      out.step_param = costed(cluster, layout, stage, kAG,
                              bucket_sizes(count * e - fp8_weights * (e - 1), param_bucket));
      break;
    }
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
      out.chunk_param = costed(cluster, layout, stage, kAG,
                               per_layer_sizes(model, layout, stage, chunk_param_bytes, e));
      // FSDP reduce-scatters in fp32 under bf16 training by default (default_grad_reduce_dtype):
      // torchtitan's `mixed_precision_reduce` defaults to "float32" (torchtitan/config/
      // job_config.py). Composer 0.16 (llm-foundry) DEFAULT and PURE reduce in bf16 instead
      // (reduce_dtype None, which FSDP1's _flat_param.py resolves to the param dtype): those
      // runs state grad_reduce_dtype bf16, which g then follows.
      out.chunk_grad = costed(cluster, layout, stage, kRS,
                              per_layer_sizes(model, layout, stage, chunk_grad_bytes, g));
      break;
    }
  }
  return out;
}

DpBuckets expert_dp_buckets(const models::TransformerConfig& model,
                            const models::ClusterConfig& cluster, const Layout& layout,
                            const PlanOptions& options, int64_t stage) {
  DpBuckets out;
  const int64_t expert_count = stage_expert_parameter_count(model, layout, stage);
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
  out.step_grad.push_back(call(CollectiveKind::kReduceScatter, g));
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
