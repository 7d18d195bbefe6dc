// planner::dp_buckets (planner/dp_buckets.cpp): which calls each ZeRO stage issues, of how many
// bytes, worked out by hand, and their agreement with the collective inventory's volumes.
//
// The case: the tiny preset (4 layers, h 64, f 176 SwiGLU, V 256, RMSNorm, untied; see
// collective_inventory_test.cpp) unsharded on one stage: per layer 46,080 matrix + 2 * 64 norm
// = 46,208 parameters, 4 layers 184,832, embedding 256 * 64 = 16,384, final norm 64, LM head
// 16,384: 217,664 parameters, bf16 435,328 bytes. dp = 3: 217,664 = 3 * 72,554 + 2, so ZeRO
// pads to 3 * 72,555 = 217,665 parameters, 435,330 bytes. Global batch 6, micro-batch 1:
// m = 6 / 3 = 2 micro-batches. Buckets of 200,000 bytes.

#include "meshplan/dp_buckets.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <optional>

#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

using test::make_layout;

constexpr int64_t kBucketBytes = 200'000;
const PlanOptions kDeepSpeedOptions = test::options_for(Framework::kDeepSpeed);

// Every call's size, in order.
std::vector<int64_t> sizes_of(const std::vector<DpBucket>& buckets) {
  std::vector<int64_t> sizes;
  for (const DpBucket& bucket : buckets) {
    sizes.insert(sizes.end(), static_cast<size_t>(bucket.num_calls), bucket.bytes);
  }
  return sizes;
}

// (stage, kind) -> bytes, or calls
using Volumes = std::map<std::pair<int64_t, CollectiveKind>, int64_t>;

void add_volumes(Volumes& volumes, int64_t stage, const std::vector<DpBucket>& buckets,
                 int64_t rounds) {
  for (const DpBucket& bucket : buckets) {
    volumes[{stage, bucket.kind}] += rounds * bucket.num_calls * bucket.bytes;
  }
}

void add_calls(Volumes& calls, int64_t stage, const std::vector<DpBucket>& buckets,
               int64_t rounds) {
  for (const DpBucket& bucket : buckets) {
    calls[{stage, bucket.kind}] += rounds * bucket.num_calls;
  }
}

DpBuckets tiny_buckets(int zero, Framework framework = Framework::kMegatron,
                       std::optional<GradReduceDtype> dtype = std::nullopt,
                       std::optional<bool> head_in_root = std::nullopt) {
  Layout layout = make_layout(1, 1, 3, 1, 6);
  layout.zero = zero;
  PlanOptions options;
  options.bucket_bytes = kBucketBytes;
  options.framework = framework;
  options.grad_reduce_dtype = dtype;
  options.fsdp_head_in_root = head_in_root;
  return dp_buckets(models::load_model("tiny"), models::load_cluster("dgx-a100-80gb"), layout,
                    options, 0);
}

}  // namespace

TEST_CASE("dp_buckets: bucket_sizes fills buckets in order, the last holds the remainder") {
  using Runs = std::vector<SizeRun>;
  CHECK(bucket_sizes(10, 4) == Runs{{4, 2}, {2, 1}});  // 4, 4, 2
  CHECK(bucket_sizes(8, 4) == Runs{{4, 2}});
  CHECK(bucket_sizes(3, 4) == Runs{{3, 1}});
  CHECK(bucket_sizes(0, 4).empty());
}

TEST_CASE("dp_buckets: even_split gives the first total % parts one byte more") {
  using Runs = std::vector<SizeRun>;
  CHECK(even_split(10, 4) == Runs{{3, 2}, {2, 2}});  // 3, 3, 2, 2
  CHECK(even_split(8, 4) == Runs{{2, 4}});
  CHECK(even_split(2, 4) == Runs{{1, 2}});  // no empty calls
  CHECK(zero_padded_count(217'664, 3) == 217'665);
  CHECK(zero_padded_count(6, 3) == 6);
}

TEST_CASE("dp_buckets: ZeRO 0 all-reduces the unpadded gradients once a step") {
  // DDP all-reduces the whole buffer; nothing is sharded, so nothing is padded: 435,328 bytes
  // = 2 * 200,000 + 35,328 (reduced in bf16; fp32 below).
  const DpBuckets buckets = tiny_buckets(0, Framework::kMegatron, GradReduceDtype::kBf16);
  CHECK(sizes_of(buckets.step_grad) == std::vector<int64_t>{200'000, 200'000, 35'328});
  CHECK(total_calls(buckets.step_grad) == 3);
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  for (const DpBucket& bucket : buckets.step_grad) {
    CHECK(bucket.kind == CollectiveKind::kAllReduce);
    CHECK(bucket.group == CommGroup::kDp);
    // tp = 1: the dp group is ranks 0, 1, 2, one node, stride 1.
    CHECK(bucket.seconds == collective_seconds(cluster, bucket.kind, bucket.bytes, 3, 1, 0));
  }
  CHECK(buckets.step_param.empty());
  CHECK(buckets.chunk_grad.empty());
  CHECK(buckets.chunk_param.empty());
}

TEST_CASE("dp_buckets: ZeRO 1 and 2 shard the padded buffer in whole dp blocks") {
  // A dp block is 3 elements of 2 bytes = 6 bytes; a full bucket floor(200,000 / 6) = 33,333
  // blocks = 199,998 bytes. 435,330 padded bytes = 2 * 199,998 + 35,334.
  const std::vector<int64_t> padded{199'998, 199'998, 35'334};
  const DpBuckets one = tiny_buckets(1, Framework::kMegatron, GradReduceDtype::kBf16);
  CHECK(sizes_of(one.step_grad) == padded);
  CHECK(sizes_of(one.step_param) == padded);
  CHECK(one.step_grad.front().kind == CollectiveKind::kReduceScatter);
  CHECK(one.step_param.front().kind == CollectiveKind::kAllGather);
  CHECK(one.chunk_grad.empty());
  // ZeRO 2 reduces each backward's gradients (vpp = 1: the whole stage per op), in
  // bucket_bytes buckets under DeepSpeed (reduce_bucket_size; all-reduced, below) and the
  // executor.
  for (const Framework framework : {Framework::kDeepSpeed, Framework::kMeshplan}) {
    const DpBuckets two = tiny_buckets(2, framework);
    CHECK(two.step_grad.empty());
    CHECK(sizes_of(two.chunk_grad) == padded);
    CHECK(sizes_of(two.step_param) == padded);
    CHECK(two.chunk_param.empty());
  }
}

TEST_CASE("dp_buckets: DeepSpeed ZeRO 1-2 all-reduce the same buckets unless told otherwise") {
  // DeepSpeed's default since v0.12.4 (use_multi_rank_bucket_allreduce) and its ZeRO-1 from
  // v0.4.4: each bucket all-reduced, each rank keeping its slice; same buckets, same bytes per
  // call, twice a reduce-scatter's traffic: (n - 1) / n x 2 x bytes over the ring.
  const std::vector<int64_t> padded{199'998, 199'998, 35'334};
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  for (const int zero : {1, 2}) {
    CAPTURE(zero);
    const DpBuckets all_reduced = tiny_buckets(zero, Framework::kDeepSpeed);
    const std::vector<DpBucket>& grads = zero == 1 ? all_reduced.step_grad : all_reduced.chunk_grad;
    CHECK(sizes_of(grads) == padded);
    for (const DpBucket& bucket : grads) {
      CHECK(bucket.kind == CollectiveKind::kAllReduce);
      CHECK(bucket.seconds ==
            collective_seconds(cluster, CollectiveKind::kAllReduce, bucket.bytes, 3, 1, 0));
    }
    CHECK(all_reduced.step_param.front().kind == CollectiveKind::kAllGather);
    // Off: a reduce per rank's slice (DeeperSpeed's legacy ZeRO-1; ZeRO-2 before v0.12.4),
    // costed at the reduce-scatter's bytes.
    Layout layout = make_layout(1, 1, 3, 1, 6);
    layout.zero = zero;
    PlanOptions options;
    options.bucket_bytes = kBucketBytes;
    options.framework = Framework::kDeepSpeed;
    options.deepspeed_grad_all_reduce = false;
    const DpBuckets reduced = dp_buckets(models::load_model("tiny"), cluster, layout, options, 0);
    const std::vector<DpBucket>& scattered = zero == 1 ? reduced.step_grad : reduced.chunk_grad;
    CHECK(sizes_of(scattered) == padded);
    CHECK(scattered.front().kind == CollectiveKind::kReduceScatter);
    CHECK(zero_grad_all_reduce(layout, options) == false);
    options.deepspeed_grad_all_reduce = true;
    CHECK(zero_grad_all_reduce(layout, options));
  }
  // Megatron's distributed optimizer and the executor reduce-scatter whatever the option.
  CHECK(tiny_buckets(1, Framework::kMegatron).step_grad.front().kind ==
        CollectiveKind::kReduceScatter);
  CHECK(tiny_buckets(2, Framework::kMeshplan).chunk_grad.front().kind ==
        CollectiveKind::kReduceScatter);
  CHECK(tiny_buckets(0, Framework::kDeepSpeed).step_grad.front().kind ==
        CollectiveKind::kAllReduce);
  PlanOptions megatron;
  megatron.deepspeed_grad_all_reduce = false;
  CHECK_THROWS_WITH_AS(check_deepspeed_grad_all_reduce_options(megatron, "f"),
                       "f: false under framework megatron: only DeepSpeed's ZeRO 1-2 reduce "
                       "chooses between an all-reduce and per-rank reduces (framework deepspeed)",
                       InputError);
}

TEST_CASE("dp_buckets: Megatron reduces gradients in fp32 under bf16 unless told bf16") {
  // Megatron-LM --bf16 (zero 0-1): 4 bytes per gradient. ZeRO 0: the unpadded 217,664
  // gradients are 870,656 bytes = 4 * 200,000 + 70,656.
  CHECK(sizes_of(tiny_buckets(0).step_grad) ==
        std::vector<int64_t>{200'000, 200'000, 200'000, 200'000, 70'656});
  // ZeRO 1: a dp block is 3 fp32 elements = 12 bytes, a full bucket floor(200,000 / 12) =
  // 16,666 blocks = 199,992 bytes (49,998 elements); the 217,665 padded elements are 870,660
  // bytes = 4 * 199,992 + 70,692. The all-gather moves the same elements in bf16: buckets of
  // 99,996 bytes, 4 * 99,996 + 35,346 = 435,330.
  const DpBuckets one = tiny_buckets(1);
  CHECK(sizes_of(one.step_grad) ==
        std::vector<int64_t>{199'992, 199'992, 199'992, 199'992, 70'692});
  CHECK(sizes_of(one.step_param) == std::vector<int64_t>{99'996, 99'996, 99'996, 99'996, 35'346});
  CHECK(total_bytes(one.step_grad) == 4 * 217'665);
  CHECK(total_bytes(one.step_param) == 2 * 217'665);
  // Told bf16 (--grad-reduce-in-bf16): half the gradient bytes, the parameters unchanged.
  const DpBuckets half = tiny_buckets(1, Framework::kMegatron, GradReduceDtype::kBf16);
  CHECK(total_bytes(half.step_grad) == 2 * 217'665);
  CHECK(total_bytes(half.step_param) == 2 * 217'665);
  // Each fp32 bucket costs what collective_seconds gives for its bytes: dp 3 on one node.
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  CHECK(one.step_grad.front().seconds ==
        collective_seconds(cluster, CollectiveKind::kReduceScatter, 199'992, 3, 1, 0));
  // An fp32 cluster has nothing narrower: 4 bytes whatever the framework's default.
  Layout layout = make_layout(1, 1, 3, 1, 6);
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  CHECK(grad_reduce_element_bytes(models::load_cluster("local-cpu"), layout, options) == 4);
  CHECK(grad_reduce_element_bytes(cluster, layout, options) == 2);
}

TEST_CASE("dp_buckets: each framework's default gradient reduce dtype") {
  Layout layout = make_layout(1, 1, 3, 1, 6);
  for (int zero : {0, 1}) {
    layout.zero = zero;
    CHECK(default_grad_reduce_dtype(Framework::kMegatron, layout) == GradReduceDtype::kFp32);
  }
  layout.zero = 3;
  CHECK(default_grad_reduce_dtype(Framework::kMegatron, layout) == GradReduceDtype::kBf16);
  CHECK(default_grad_reduce_dtype(Framework::kFsdp, layout) == GradReduceDtype::kFp32);
  CHECK(default_grad_reduce_dtype(Framework::kDeepSpeed, layout) == GradReduceDtype::kBf16);
  CHECK(default_grad_reduce_dtype(Framework::kMeshplan, layout) == GradReduceDtype::kBf16);
}

TEST_CASE("dp_buckets: --fp8-param-gather all-gathers the linear weights in 1 byte") {
  // megatron-7.5b on H100, tp 2, pp 2, dp 16, zero 1: stage 0's 18 layers hold 12 h^2 / 2 =
  // 100,663,296 linear weights each on a rank; their all-gather moves 1 byte instead of 2,
  // the reduce-scatter of the gradients (fp32, Megatron's default) is unchanged.
  const models::TransformerConfig model = models::load_model("megatron-7.5b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-h100");
  Layout layout = make_layout(2, 2, 16, 1, 64);
  layout.zero = 1;
  PlanOptions options;
  options.gemm_precision = GemmPrecision::kFp8;
  const DpBuckets bf16 = dp_buckets(model, cluster, layout, options, 0);
  options.fp8_param_gather = true;
  const DpBuckets fp8 = dp_buckets(model, cluster, layout, options, 0);
  const auto total = [](const std::vector<DpBucket>& buckets) {
    int64_t bytes = 0;
    for (const DpBucket& b : buckets) {
      bytes += b.bytes * b.num_calls;
    }
    return bytes;
  };
  CHECK(total(bf16.step_param) - total(fp8.step_param) == 18LL * 12 * 4096 * 4096 / 2);
  CHECK(total(fp8.step_grad) == total(bf16.step_grad));
}

TEST_CASE("dp_buckets: Megatron-FSDP's ZeRO 2 reduces one FSDP unit (layer) per bucket") {
  // param_and_grad_buffer.py _get_parameter_groups: a unit's parameters are one bucket whatever
  // the bucket size. The padded 435,330 bytes over the 4 layers as ZeRO 3 splits them below:
  // three buckets of 18,139 dp blocks (108,834 bytes) and one of 18,138 (108,828 bytes).
  const std::vector<int64_t> layers{108'834, 108'834, 108'834, 108'828};
  const DpBuckets two = tiny_buckets(2, Framework::kMegatron);
  CHECK(two.step_grad.empty());
  CHECK(sizes_of(two.chunk_grad) == layers);
  CHECK(sizes_of(two.step_param) == layers);
  CHECK(two.chunk_param.empty());
}

TEST_CASE("dp_buckets: ZeRO 3 moves one layer per call") {
  // 435,330 bytes = 72,555 dp blocks of 6 bytes over 4 layers: 72,555 = 4 * 18,138 + 3, so
  // three calls of 18,139 blocks (108,834 bytes) and one of 18,138 (108,828 bytes).
  const std::vector<int64_t> layers{108'834, 108'834, 108'834, 108'828};
  const DpBuckets three = tiny_buckets(3);
  CHECK(sizes_of(three.chunk_grad) == layers);
  CHECK(sizes_of(three.chunk_param) == layers);
  CHECK(three.step_grad.empty());
  CHECK(three.step_param.empty());
}

TEST_CASE("dp_buckets: DeepSpeed ZeRO 3 gathers each module's partitioned parameters") {
  using Elements = std::vector<int64_t>;
  // GPT-3 175B (h 12288, 96 heads of 128, f 49152 GELU): query_key_value 3 h^2, dense h^2,
  // dense_h_to_4h and dense_4h_to_h 4 h^2 each, biases and norms persistent (<= 1e5).
  const models::TransformerConfig gpt3 = models::load_model("gpt3-175b");
  CHECK(deepspeed_gathered_module_elements(gpt3, 1, false) ==
        Elements{452'984'832, 150'994'944, 603'979'776, 603'979'776});
  CHECK(deepspeed_gathered_module_elements(gpt3, 8, false) ==
        Elements{56'623'104, 18'874'368, 75'497'472, 75'497'472});
  // Llama 3 70B (GQA 64/8 heads of 128, SwiGLU f 28672): QKV h (a + 2g) d, output h^2,
  // the fused gate and up 2 h f, down h f.
  CHECK(deepspeed_gathered_module_elements(models::load_model("llama3-70b"), 1, false) ==
        Elements{83'886'080, 67'108'864, 469'762'048, 234'881'024});
  // Mixtral's MoE layer: attention only, its router (4096 x 8 = 32,768) is persistent and its
  // experts reduce over the expert data-parallel group.
  CHECK(deepspeed_gathered_module_elements(models::load_model("mixtral-8x7b"), 1, true) ==
        Elements{25'165'824, 16'777'216});
  // DeepSeek-V3's MLA and MoE layer: q down 7168 x 1536, q up 1536 x 128 x 192, kv down
  // 7168 x 576, kv up 512 x 128 x 256, output 128 x 128 x 7168, router 256 x 7168, the shared
  // expert's 2 x 7168 x 2048 and 2048 x 7168.
  CHECK(deepspeed_gathered_module_elements(models::load_model("deepseek-v3"), 1, true) ==
        Elements{11'010'048, 37'748'736, 4'128'768, 16'777'216, 117'440'512, 1'835'008, 29'360'128,
                 14'680'064});
  // The tiny preset's modules are all persistent (h 64): one call per layer, as before.
  CHECK(deepspeed_gathered_module_elements(models::load_model("tiny"), 1, false) == Elements{1});
  CHECK(sizes_of(tiny_buckets(3, Framework::kDeepSpeed).chunk_param) ==
        sizes_of(tiny_buckets(3).chunk_param));
}

TEST_CASE("calls_in_order: runs in turn, a layer run's modules layer by layer") {
  const auto run = [](int64_t bytes, int64_t calls, int64_t layer_run, int64_t layers) {
    DpBucket bucket;
    bucket.bytes = bytes;
    bucket.num_calls = calls;
    bucket.layer_run = layer_run;
    bucket.layers = layers;
    return bucket;
  };
  const auto bytes_of = [](const std::vector<DpBucket>& calls) {
    std::vector<int64_t> bytes;
    for (const DpBucket& call : calls) {
      CHECK(call.num_calls == 1);
      bytes.push_back(call.bytes);
    }
    return bytes;
  };
  // Plain runs: their calls one after another.
  CHECK(bytes_of(calls_in_order({run(5, 2, -1, 0), run(3, 1, -1, 0)})) ==
        std::vector<int64_t>{5, 5, 3});
  // Three layers of modules 1 and 2 (one call each a layer), then a run of two layers of
  // module 7; a plain run after them.
  CHECK(bytes_of(calls_in_order(
            {run(1, 3, 0, 3), run(2, 3, 0, 3), run(7, 2, 1, 2), run(9, 1, -1, 0)})) ==
        std::vector<int64_t>{1, 2, 1, 2, 1, 2, 7, 7, 9});
  // Uneven counts over 3 layers: module 1 twice a layer (6 calls), module 2 in two of them: in
  // layer k, floor((k + 1) n / 3) - floor(k n / 3) calls: 2 then 0, 1, 1.
  CHECK(bytes_of(calls_in_order({run(1, 6, 0, 3), run(2, 2, 0, 3)})) ==
        std::vector<int64_t>{1, 1, 1, 1, 2, 1, 1, 2});
  // DeepSpeed's forward list: every call of each run, the first layer's modules first.
  const std::vector<DpBucket> forward = tiny_buckets(3, Framework::kDeepSpeed).chunk_param;
  CHECK(static_cast<int64_t>(calls_in_order(forward).size()) == total_calls(forward));
}

TEST_CASE("dp_buckets: DeepSpeed ZeRO 3 on Llama 3 70B over 512 A100: calls, bytes, latency") {
  // dp 512 over 64 nodes. Megatron-FSDP gathers a layer per call, DeepSpeed each of its four
  // modules: the same bytes in 4 x 80 calls instead of 80, each call a ring of 512 ranks paying
  // (512 - 64) NVLink and 63 network steps of latency (collective_time.cpp), the bytes' time
  // unchanged: DeepSpeed's gathers take 240 such latencies longer.
  const models::TransformerConfig model = models::load_model("llama3-70b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout layout = make_layout(1, 1, 512, 1, 512);
  layout.zero = 3;
  PlanOptions options;
  const DpBuckets megatron = dp_buckets(model, cluster, layout, options, 0);
  options.framework = Framework::kDeepSpeed;
  const DpBuckets deepspeed = dp_buckets(model, cluster, layout, options, 0);
  CHECK(total_calls(megatron.chunk_param) == 80);
  CHECK(total_calls(deepspeed.chunk_param) == 320);
  CHECK(total_bytes(deepspeed.chunk_param) == total_bytes(megatron.chunk_param));
  for (const DpBucket& call : deepspeed.chunk_param) {
    CHECK(call.bytes % (512 * 2) == 0);  // whole dp blocks of bf16
  }
  const double latency = (512.0 - 64.0) * cluster.intra_node_latency_seconds +
                         63.0 * cluster.inter_node_latency_seconds;
  CHECK(total_seconds(deepspeed.chunk_param) - total_seconds(megatron.chunk_param) ==
        doctest::Approx(240.0 * latency).epsilon(1e-6).scale(0));
  // Its gradients: the same padded bf16 buffer in 5e8-element buckets, whole dp blocks
  // (floor(1e9 / 1,024) = 976,562 blocks = 999,999,488 bytes), the last holding the rest.
  const int64_t bucket = 999'999'488;
  const int64_t buffer = total_bytes(megatron.chunk_grad);
  CHECK(total_bytes(deepspeed.chunk_grad) == buffer);
  CHECK(sizes_of(deepspeed.chunk_grad) == [&] {
    std::vector<int64_t> sizes(static_cast<size_t>(buffer / bucket), bucket);
    sizes.push_back(buffer % bucket);
    return sizes;
  }());
}

TEST_CASE("deepspeed_zero3_trace: GPT-3 175B at tp 1, replayed by hand") {
  // Modules per rank (tp 1, h = 12,288): E the tied embedding and LM head V' h = 50,304 h =
  // 618,135,552 (V = 50,257 padded to a multiple of 128, Megatron-DeepSpeed's
  // --make-vocab-size-divisible-by default); P the learned positions 2,048 h = 25,165,824; per
  // layer Q 3 h^2, D h^2, U and W 4 h^2 (h^2 = 150,994,944). Prefetch takes whole modules until
  // 5e7 elements are under way, so one module ahead here. Forward: at E, P and Q1 are
  // prefetched (E + P + Q1 = 1,096.3 M);
  // at D1 (with U1 already prefetched at Q1, 755 M live) W1 too: D1 + U1 + W1 = 9 h^2, the
  // peak; from layer 2 on each step holds at most U + W = 8 h^2. W96's next use is 2 E =
  // 1,236 M elements ahead (>= 1e9): released. E at the head is reused at once (its backward):
  // kept, the only gather the backward skips. Backward: at most 8 h^2 (U + W, or E + W96).
  const models::TransformerConfig gpt3 = models::load_model("gpt3-175b");
  Layout layout = make_layout(1, 1, 1536, 1, 1536);
  layout.zero = 3;
  const int64_t h2 = 150'994'944;
  const int64_t vocab = 618'135'552;
  const int64_t positions = 25'165'824;
  const int64_t forward = 2 * vocab + positions + 96 * 12 * h2;  // E twice: embedding, head
  const DeepSpeedZero3Trace plain = deepspeed_zero3_trace(gpt3, layout, 0, kDeepSpeedOptions);
  CHECK(plain.peak_gathered_elements == 9 * h2);
  CHECK(plain.largest_gradient_elements == vocab);  // the LM head's (E > 4 h^2)
  CHECK(plain.forward_gathered_elements == forward);
  CHECK(plain.backward_gathered_elements == forward - vocab);
  // Full recompute: each layer's forward runs again before its backward, and its modules are
  // gathered again. W's backward follows its recompute at once (kept); U is 2 x 4 h^2 > 1e9
  // elements from its backward, D and Q further: gathered a third time. So the backward and
  // recompute gather 96 x (12 + 8) h^2, plus P and E at the end (E kept at the head as before).
  layout.recompute = Recompute::kFull;
  const DeepSpeedZero3Trace recompute = deepspeed_zero3_trace(gpt3, layout, 0, kDeepSpeedOptions);
  CHECK(recompute.forward_gathered_elements == forward);
  CHECK(recompute.backward_gathered_elements == 96 * 20 * h2 + positions + vocab);
  CHECK(recompute.peak_gathered_elements == 9 * h2);
  // In groups of two layers (a, b; activation_checkpoint_interval 2) the backward of b runs the
  // forward of a and b again: b's modules fare as above (20 h^2), but a's W is now the whole of
  // b's recompute and backward (24 h^2 > 1e9 elements) from its own backward, so all four of
  // a's modules are gathered twice (24 h^2): 48 x 44 h^2 in all.
  layout.recompute_group_layers = 2;
  const DeepSpeedZero3Trace groups = deepspeed_zero3_trace(gpt3, layout, 0, kDeepSpeedOptions);
  CHECK(groups.forward_gathered_elements == forward);
  CHECK(groups.backward_gathered_elements == 48 * 44 * h2 + positions + vocab);
}

TEST_CASE("dp_buckets: DeepSpeed ZeRO 3 gathers before the backward what its coordinator does") {
  // GPT-3 175B, tp 1, dp 1536 (the trace above). Without recompute every layer module is
  // released after its forward (only the tied head, spread over the layers' calls here, is
  // kept): the backward's calls are the forward's. Under full recompute, per layer, Q, D and U
  // are gathered for the recompute and again for the backward, W once (kept from its
  // recompute): 3 x 192 + 96 = 672 calls of the forward's sizes, against 4 x 96 before the
  // forward.
  const models::TransformerConfig gpt3 = models::load_model("gpt3-175b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout layout = make_layout(1, 1, 1536, 1, 1536);
  layout.zero = 3;
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  const DpBuckets plain = dp_buckets(gpt3, cluster, layout, options, 0);
  CHECK(sizes_of(plain.chunk_param_backward) == sizes_of(plain.chunk_param));
  layout.recompute = Recompute::kFull;
  const DpBuckets recompute = dp_buckets(gpt3, cluster, layout, options, 0);
  CHECK(sizes_of(recompute.chunk_param) == sizes_of(plain.chunk_param));
  CHECK(total_calls(recompute.chunk_param) == 4 * 96);
  CHECK(total_calls(recompute.chunk_param_backward) == 3 * 192 + 96);
  std::map<int64_t, int64_t> forward_calls, backward_calls;
  for (const DpBucket& run : recompute.chunk_param) {
    forward_calls[run.bytes] += run.num_calls;
  }
  for (const DpBucket& run : recompute.chunk_param_backward) {
    backward_calls[run.bytes] += run.num_calls;
  }
  // The list's first two calls are Q and D (forward order): each twice as often before the
  // backward as before the forward.
  for (const size_t module : {size_t{0}, size_t{1}}) {
    const int64_t bytes = recompute.chunk_param[module].bytes;
    CHECK(backward_calls[bytes] == 2 * forward_calls[bytes]);
  }
  const int64_t forward_bytes = total_bytes(recompute.chunk_param);
  const int64_t backward_bytes = total_bytes(recompute.chunk_param_backward);
  // (3 + 1 + 4) x 2 + 4 = 20 of the forward's 12 twelfths.
  CHECK(static_cast<double>(backward_bytes) / static_cast<double>(forward_bytes) ==
        doctest::Approx(20.0 / 12.0).epsilon(1e-4).scale(0));
  // The estimate's collective inventory names the two lists apart.
  const PlanEstimate estimate = estimate_plan(gpt3, cluster, layout, options);
  const CollectiveTraffic* before_forward = test::find_traffic(
      estimate.collectives, "dp: parameter all-gather before each forward (ZeRO-3)");
  CHECK(before_forward != nullptr);
  int64_t inventory_backward_bytes = 0;
  for (const CollectiveTraffic& traffic : estimate.collectives) {
    if (traffic.what.find("before each recompute and backward") != std::string::npos) {
      inventory_backward_bytes += traffic.total_message_bytes();
    }
  }
  CHECK(inventory_backward_bytes == backward_bytes * layout.num_micro_batches());
  // GPT-2 124M stays gathered from forward to backward: no call before the backward.
  const models::TransformerConfig gpt2 = models::load_model("gpt2-124m");
  Layout small = make_layout(1, 1, 8, 1, 8);
  small.zero = 3;
  const DpBuckets kept = dp_buckets(gpt2, cluster, small, options, 0);
  CHECK(total_calls(kept.chunk_param) == 4 * 12);
  CHECK(kept.chunk_param_backward.empty());
}

TEST_CASE("deepspeed_zero3_trace: a model under stage3_max_reuse_distance stays gathered") {
  // GPT-2 124M at tp 1: E = 50,304 x 768 = 38,633,472 (V = 50,257 padded to a multiple of 128),
  // P = 1,024 x 768 = 786,432, 12 layers of 12 h^2 = 7,077,888: 124,354,560 gathered elements,
  // so every parameter's next use is within
  // 1e9 trace elements and none is released before its last use: the whole model is gathered
  // at the turn and the backward gathers nothing, with or without recompute.
  const models::TransformerConfig gpt2 = models::load_model("gpt2-124m");
  for (const Recompute recompute : {Recompute::kNone, Recompute::kFull}) {
    Layout layout = make_layout(1, 1, 8, 1, 8);
    layout.zero = 3;
    layout.recompute = recompute;
    const DeepSpeedZero3Trace trace = deepspeed_zero3_trace(gpt2, layout, 0, kDeepSpeedOptions);
    CHECK(trace.peak_gathered_elements == 124'354'560);
    CHECK(trace.forward_gathered_elements == 124'354'560);
    CHECK(trace.backward_gathered_elements == 0);
    CHECK(trace.largest_gradient_elements == 38'633'472);
  }
  // The tiny preset's parameters are all persistent (<= 1e5): nothing is gathered.
  Layout tiny_layout = make_layout(1, 1, 3, 1, 6);
  tiny_layout.zero = 3;
  const DeepSpeedZero3Trace tiny =
      deepspeed_zero3_trace(models::load_model("tiny"), tiny_layout, 0, kDeepSpeedOptions);
  CHECK(tiny.peak_gathered_elements == 0);
  CHECK(tiny.forward_gathered_elements + tiny.backward_gathered_elements == 0);
}

TEST_CASE("deepspeed_zero3_trace: small modules run the prefetch ahead to max_live_parameters") {
  // Megatron 7.5B at tp 1: Q 50.3 M, D 16.8 M, U and W 67.1 M elements. Each step prefetches
  // whole modules until 5e7 elements are under way, more than a step uses on average, so the
  // prefetch runs ahead until stage3_max_live_parameters (1e9) stops it: the peak lies between
  // 1e9 and 1e9 plus two of the largest module (the current one and the last prefetched).
  Layout layout = make_layout(1, 1, 64, 1, 64);
  layout.zero = 3;
  const DeepSpeedZero3Trace trace =
      deepspeed_zero3_trace(models::load_model("megatron-7.5b"), layout, 0, kDeepSpeedOptions);
  CHECK(trace.peak_gathered_elements >= kDeepSpeedMaxLiveParameters);
  CHECK(trace.peak_gathered_elements <= kDeepSpeedMaxLiveParameters + 2 * 209'715'200);
}

TEST_CASE("dp_buckets: FSDP reduce-scatters in fp32 by default, in bf16 when told") {
  // PyTorch FSDP's root unit, with the head in it (fsdp_head_in_root: Composer, torchtitan
  // before 83e694105), holds what is outside the layers: embedding 16,384 + final norm
  // 64 + LM head 16,384 = 32,832 elements, 10,944 dp blocks of 3 (no padding). The other
  // 72,555 - 10,944 = 61,611 blocks of the 217,665 padded elements go to the 4 layers:
  // 61,611 = 4 * 15,402 + 3. fp32 (torchtitan's mixed_precision_reduce default): blocks of 12
  // bytes, 3 * 184,836 + 184,824 and the root's 131,328. reduce_dtype bf16 (Composer
  // DEFAULT/PURE): blocks of 6 bytes, 3 * 92,418 + 92,412 and 65,664. The all-gathers move bf16
  // parameters either way.
  const DpBuckets fp32 = tiny_buckets(3, Framework::kFsdp, std::nullopt, true);
  const DpBuckets bf16 = tiny_buckets(3, Framework::kFsdp, GradReduceDtype::kBf16, true);
  CHECK(sizes_of(fp32.chunk_grad) == std::vector<int64_t>{184'836, 184'836, 184'836, 184'824});
  CHECK(sizes_of(fp32.chunk_root_grad) == std::vector<int64_t>{131'328});
  CHECK(sizes_of(bf16.chunk_grad) == std::vector<int64_t>{92'418, 92'418, 92'418, 92'412});
  CHECK(sizes_of(bf16.chunk_root_grad) == std::vector<int64_t>{65'664});
  CHECK(sizes_of(bf16.chunk_param) == sizes_of(fp32.chunk_param));
  CHECK(sizes_of(bf16.chunk_param) == sizes_of(bf16.chunk_grad));
  CHECK(sizes_of(fp32.chunk_root_param) == std::vector<int64_t>{65'664});
  // The reduce-scatters cover the padded buffer exactly, the root's last.
  Layout layout = make_layout(1, 1, 3, 1, 6);
  layout.zero = 3;
  const std::vector<SizeRun> order = gradient_buckets_in_order(fp32, layout);
  REQUIRE(order.size() == 3);
  CHECK(order.back().bytes == 131'328);
  // Every other framework spreads the root's elements over the layers' units (the case above).
  CHECK(tiny_buckets(3).chunk_root_param.empty());
  CHECK(tiny_buckets(3, Framework::kDeepSpeed).chunk_root_grad.empty());
}

TEST_CASE("dp_buckets: hybrid sharding shards over the shard group, all-reduces over replicas") {
  // tiny over dp 6 as 2 replicas of a shard group of 3 (dp_shard 3): the gathers and
  // reduce-scatters are the dp-3 case's above, the same sizes in blocks of 3, over the shard
  // group (kDpShard: 3 consecutive ranks); each reduce-scatter's output, a third of it, is then
  // all-reduced over the 2 replicas (kDpReplicate: ranks 3 apart), its time added to the
  // reduce-scatter's (FSDP2 _fsdp_collectives.py foreach_reduce: reduce-scatter, then
  // all-reduce of reduce_output on the all-reduce stream).
  Layout layout = make_layout(1, 1, 6, 1, 6);
  layout.zero = 3;
  set_dp_shard(layout, 3);
  CHECK(layout.dp_shard == 3);
  CHECK(dp_shard_size(layout) == 3);
  CHECK(dp_replicate_size(layout) == 2);
  CHECK(zero_shard_group_size(layout) == 3);
  CHECK(grad_group_size(layout) == 6);
  PlanOptions options;
  options.bucket_bytes = kBucketBytes;
  options.framework = Framework::kFsdp;
  options.grad_reduce_dtype = GradReduceDtype::kBf16;
  options.fsdp_head_in_root = true;
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const DpBuckets hybrid = dp_buckets(models::load_model("tiny"), cluster, layout, options, 0);
  CHECK(sizes_of(hybrid.chunk_grad) == std::vector<int64_t>{92'418, 92'418, 92'418, 92'412});
  CHECK(sizes_of(hybrid.chunk_root_grad) == std::vector<int64_t>{65'664});
  CHECK(sizes_of(hybrid.chunk_param) == sizes_of(hybrid.chunk_grad));
  for (const std::vector<DpBucket>* list :
       {&hybrid.chunk_param, &hybrid.chunk_param_backward, &hybrid.chunk_root_param}) {
    for (const DpBucket& gather : *list) {
      CHECK(gather.group == CommGroup::kDpShard);
      CHECK(gather.replicate_bytes == 0);
      CHECK(gather.seconds ==
            collective_seconds(cluster, CollectiveKind::kAllGather, gather.bytes, 3, 1));
    }
  }
  for (const std::vector<DpBucket>* list : {&hybrid.chunk_grad, &hybrid.chunk_root_grad}) {
    for (const DpBucket& reduce : *list) {
      CAPTURE(reduce.bytes);
      CHECK(reduce.group == CommGroup::kDpShard);
      CHECK(reduce.replicate_bytes * 3 == reduce.bytes);  // whole blocks of 3
      const double scatter =
          collective_seconds(cluster, CollectiveKind::kReduceScatter, reduce.bytes, 3, 1);
      const double replicas =
          collective_seconds(cluster, CollectiveKind::kAllReduce, reduce.replicate_bytes, 2, 3);
      CHECK(reduce.replicate_seconds == replicas);
      CHECK(reduce.seconds == doctest::Approx(scatter + replicas).epsilon(1e-15).scale(0));
    }
  }
  // The inventory lists the all-reduces apart: 2 replicas, a third of the reduce-scattered
  // bytes, as many calls (m = 1 micro-batch: every call once).
  const PlanEstimate estimate = estimate_plan(models::load_model("tiny"), cluster, layout, options);
  int64_t scattered = 0, all_reduced = 0, scatters = 0, all_reduces = 0;
  for (const CollectiveTraffic& c : estimate.collectives) {
    if (c.kind == CollectiveKind::kReduceScatter) {
      CHECK(c.group == CommGroup::kDpShard);
      CHECK(c.group_size == 3);
      scattered += c.total_message_bytes();
      scatters += c.calls_per_step;
    }
    if (c.group == CommGroup::kDpReplicate) {
      CHECK(c.kind == CollectiveKind::kAllReduce);
      CHECK(c.group_size == 2);
      all_reduced += c.total_message_bytes();
      all_reduces += c.calls_per_step;
    }
  }
  CHECK(scattered == 3 * 92'418 + 92'412 + 65'664);
  CHECK(all_reduced * 3 == scattered);
  CHECK(all_reduces == scatters);
}

TEST_CASE("dp_buckets: Megatron's distributed optimizer instances, shard group then instances") {
  // tiny on dp 6 at ZeRO 1 as 2 instances of 3 (--num-distributed-optimizer-instances 2): the
  // buffer is padded to whole blocks of 3 as at dp 3 (217,665 elements), reduce-scattered in
  // fp32 (Megatron's main_grad, 870,660 bytes, one bucket: only rank 0's first chunk is bucketed
  // and overlap_grad_reduce is off here) over the 3 ranks of an instance, then each third,
  // 290,220 bytes, all-reduced over the 2 instances (param_and_grad_buffer.py start_grad_sync);
  // the bf16 parameters, 435,330 bytes, gathered within the instance.
  Layout layout = make_layout(1, 1, 6, 1, 6);
  layout.zero = 1;
  set_dp_shard(layout, 3);
  PlanOptions options;
  options.overlap_grad_reduce = false;
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const DpBuckets instances = dp_buckets(models::load_model("tiny"), cluster, layout, options, 0);
  REQUIRE(instances.step_grad.size() == 1);
  const DpBucket& reduce = instances.step_grad[0];
  CHECK(reduce.kind == CollectiveKind::kReduceScatter);
  CHECK(reduce.group == CommGroup::kDpShard);
  CHECK(reduce.bytes == 870'660);
  CHECK(reduce.replicate_bytes == 290'220);
  CHECK(reduce.seconds ==
        doctest::Approx(collective_seconds(cluster, CollectiveKind::kReduceScatter, 870'660, 3, 1) +
                        collective_seconds(cluster, CollectiveKind::kAllReduce, 290'220, 2, 3))
            .epsilon(1e-15)
            .scale(0));
  REQUIRE(instances.step_param.size() == 1);
  CHECK(instances.step_param[0].group == CommGroup::kDpShard);
  CHECK(instances.step_param[0].bytes == 435'330);
  CHECK(instances.step_param[0].replicate_bytes == 0);
}

TEST_CASE("dp_buckets: FSDP2's default root unit holds the embedding only (torchtitan)") {
  // torchtitan since 83e694105 wraps [norm, output] as a unit of its own: the root holds the
  // embedding, 16,384 elements, padded to 16,386 (5,462 dp blocks of 3); the final norm and LM
  // head stay with the layers' units: 72,555 - 5,462 = 67,093 blocks = 4 * 16,773 + 1, bf16
  // blocks of 6 bytes: 100,644 and 3 * 100,638. FSDP1 (Composer) keeps the head in the root.
  const DpBuckets fsdp2 = tiny_buckets(3, Framework::kFsdp, GradReduceDtype::kBf16);
  CHECK(sizes_of(fsdp2.chunk_root_param) == std::vector<int64_t>{32'772});
  CHECK(sizes_of(fsdp2.chunk_root_grad) == std::vector<int64_t>{32'772});
  CHECK(sizes_of(fsdp2.chunk_param) == std::vector<int64_t>{100'644, 100'638, 100'638, 100'638});
  PlanOptions fsdp1;
  fsdp1.framework = Framework::kFsdp;
  fsdp1.fsdp_version = 1;
  CHECK(fsdp_head_in_root(fsdp1));
  CHECK_FALSE(fsdp_head_in_root(PlanOptions{}));
  fsdp1.fsdp_head_in_root = false;
  CHECK_FALSE(fsdp_head_in_root(fsdp1));
  // Stated under another framework it is an error naming the field.
  PlanOptions megatron;
  megatron.fsdp_head_in_root = true;
  CHECK_THROWS_WITH_AS(check_fsdp_head_in_root(megatron, "--fsdp-head-in-root"),
                       "--fsdp-head-in-root: needs framework fsdp (framework megatron): only "
                       "PyTorch FSDP's wrapping puts the LM head in a unit",
                       InputError);
}

TEST_CASE("dp_buckets: FSDP with fp8 gathers the linear weights in 1 byte (torchao float8)") {
  // tiny at tp 1: linear weights per layer h (a + 2 g) d + a d h + h 2f + f h = 64 x 8 x 16 +
  // 4 x 16 x 64 + 64 x 352 + 176 x 64 = 46,080, each gathered in 1 byte instead of 2: 46,080
  // bytes (7,680 dp blocks of 6) less per layer than the bf16 gathers' 100,644 / 100,638 (the
  // layers' units beside FSDP2's root unit, the embedding: next case). The root (no fp8
  // linears) and the reduce-scatters (gradients) do not change.
  Layout layout = make_layout(1, 1, 3, 1, 6);
  layout.zero = 3;
  PlanOptions options;
  options.framework = Framework::kFsdp;
  const models::TransformerConfig tiny = models::load_model("tiny");
  const models::ClusterConfig h100 = models::load_cluster("dgx-h100");
  const DpBuckets bf16 = dp_buckets(tiny, h100, layout, options, 0);
  options.gemm_precision = GemmPrecision::kFp8;
  const DpBuckets fp8 = dp_buckets(tiny, h100, layout, options, 0);
  CHECK(sizes_of(bf16.chunk_param) == std::vector<int64_t>{100'644, 100'638, 100'638, 100'638});
  CHECK(sizes_of(fp8.chunk_param) == std::vector<int64_t>{54'564, 54'558, 54'558, 54'558});
  CHECK(sizes_of(fp8.chunk_root_param) == sizes_of(bf16.chunk_root_param));
  CHECK(sizes_of(fp8.chunk_grad) == sizes_of(bf16.chunk_grad));
}

TEST_CASE("dp_buckets: the buffer and the full bucket") {
  Layout layout = make_layout(1, 1, 3, 1, 6);
  // ZeRO 0 and dp = 1 pad nothing; ZeRO 1 to a multiple of dp; ZeRO 2-3 to whole dp blocks in
  // each of vpp chunk shares: 217,664 -> 217,664, 217,665 (3 * 72,555), 217,668 (6 * 36,278).
  CHECK(dp_buffer_count(layout, 217'664) == 217'664);
  layout.zero = 1;
  CHECK(dp_buffer_count(layout, 217'664) == 217'665);
  layout.zero = 2;
  layout.vpp = 2;
  CHECK(dp_buffer_count(layout, 217'664) == 217'668);
  layout.dp = 1;
  CHECK(dp_buffer_count(layout, 217'664) == 217'664);
  // Full buckets: whole 2-byte elements (ZeRO 0), whole 3-element blocks (ZeRO 1-3), one block
  // at least.
  layout.dp = 3;
  CHECK(dp_full_bucket_bytes(layout, 2, 10'485) == 10'482);  // 1,747 blocks of 6 bytes
  CHECK(dp_full_bucket_bytes(layout, 2, 5) == 6);
  layout.zero = 0;
  CHECK(dp_full_bucket_bytes(layout, 2, 10'485) == 10'484);
}

TEST_CASE("dp_buckets: the gradient buckets in buffer order cover the buffer") {
  // ZeRO 2, vpp 2, dp 3, buckets of 50,000 bytes: 2 stages of the tiny model; each chunk list
  // runs once per chunk share, and the shares add up to the stage's padded buffer.
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout layout = make_layout(1, 2, 3, 1, 12);
  layout.zero = 2;
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  PlanOptions options;
  options.bucket_bytes = 50'000;
  options.framework = Framework::kDeepSpeed;  // bucket_bytes buckets (Megatron: one per layer)
  // Stage 0: 2 layers 92,416 + embedding 16,384 = 108,800 parameters, padded to a multiple of
  // 6: 108,804, bf16 217,608 bytes; a chunk share 108,804 bytes = 2 * 49,998 + 8,808.
  const DpBuckets buckets = dp_buckets(model, cluster, layout, options, 0);
  const std::vector<SizeRun> order = gradient_buckets_in_order(buckets, layout);
  CHECK(order == std::vector<SizeRun>{{49'998, 2}, {8'808, 1}, {49'998, 2}, {8'808, 1}});
  CHECK(total_calls(buckets.step_param) == 6);  // the same 6 buckets all-gathered
}

TEST_CASE("dp_buckets: per-step volumes and calls equal the collective inventory's, ZeRO 0-3") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  // zero 4 below: ZeRO 3 under framework fsdp (its root unit, DpBuckets::chunk_root_param).
  for (int zero = 0; zero <= 4; ++zero) {
    for (int64_t vpp : {1, 2}) {
      CAPTURE(zero);
      CAPTURE(vpp);
      Layout layout = make_layout(1, 2, 3, 1, 12);  // 2 stages, m = 4
      layout.zero = std::min(zero, 3);
      layout.vpp = vpp;
      layout.schedule = vpp > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
      PlanOptions options;
      options.bucket_bytes = kBucketBytes / 4;
      if (zero == 4) {
        options.framework = Framework::kFsdp;
        options.fsdp_head_in_root = true;  // a root on both stages: embedding, then the head
      }
      const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
      REQUIRE_MESSAGE(estimate.feasible, estimate.rejection_reason);
      Volumes inventory, inventory_calls;
      for (const CollectiveTraffic& traffic : estimate.collectives) {
        if (traffic.group == CommGroup::kDp) {
          inventory[{traffic.stage, traffic.kind}] += traffic.total_message_bytes();
          inventory_calls[{traffic.stage, traffic.kind}] += traffic.calls_per_step;
        }
      }
      Volumes from_buckets, calls_from_buckets;
      // 4 v per step; once per chunk (v) under fsdp with pp > 1 (zero3_gathers_once_per_step).
      const int64_t chunk_ops = zero == 4 ? vpp : layout.num_micro_batches() * layout.vpp;
      CHECK(chunk_list_rounds(layout, options) == chunk_ops);
      for (int64_t stage = 0; stage < layout.pp; ++stage) {
        const DpBuckets b = dp_buckets(model, cluster, layout, options, stage);
        // Per step: step lists once, chunk lists after each of the m v backward ops, ZeRO-3's
        // gathers before each forward and each backward op (under fsdp's pipelining once per
        // chunk, before its first forward: no backward gathers).
        CHECK(b.chunk_param_backward.size() == (zero == 3 ? b.chunk_param.size() : 0U));
        add_volumes(from_buckets, stage, b.step_grad, 1);
        add_volumes(from_buckets, stage, b.step_param, 1);
        add_volumes(from_buckets, stage, b.chunk_grad, chunk_ops);
        add_volumes(from_buckets, stage, b.chunk_param, chunk_ops);
        add_volumes(from_buckets, stage, b.chunk_param_backward, chunk_ops);
        add_volumes(from_buckets, stage, b.chunk_root_grad, chunk_ops);
        add_volumes(from_buckets, stage, b.chunk_root_param, chunk_ops);  // before forwards only
        add_calls(calls_from_buckets, stage, b.step_grad, 1);
        add_calls(calls_from_buckets, stage, b.step_param, 1);
        add_calls(calls_from_buckets, stage, b.chunk_grad, chunk_ops);
        add_calls(calls_from_buckets, stage, b.chunk_param, chunk_ops);
        add_calls(calls_from_buckets, stage, b.chunk_param_backward, chunk_ops);
        add_calls(calls_from_buckets, stage, b.chunk_root_grad, chunk_ops);
        add_calls(calls_from_buckets, stage, b.chunk_root_param, chunk_ops);
        CHECK(b.chunk_root_param.size() == (zero == 4 ? 1U : 0U));  // both stages hold some
        // The estimate's full DP duration is the same calls' seconds.
        const double seconds =
            total_seconds(b.step_grad) + total_seconds(b.step_param) +
            static_cast<double>(chunk_ops) *
                (total_seconds(b.chunk_grad) + total_seconds(b.chunk_param) +
                 total_seconds(b.chunk_param_backward) + total_seconds(b.chunk_root_grad) +
                 total_seconds(b.chunk_root_param));
        // 1e-12 relative: the same doubles summed in another order.
        CHECK(estimate.stages[static_cast<size_t>(stage)].dp_grad_sync_seconds ==
              doctest::Approx(seconds).epsilon(1e-12).scale(0));
      }
      CHECK(from_buckets == inventory);
      CHECK(calls_from_buckets == inventory_calls);
    }
  }
}

}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("dp_bucket_bytes: Megatron-Core's max(40M, 1M x dp x cp) parameters; a given size wins") {
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");  // bf16 mixed
  PlanOptions options;  // megatron, no bucket given: fp32 gradients under ZeRO 0/1
  Layout layout = make_layout(1, 1, 8, 1, 8);
  // dp 8: max(40,000,000, 8,000,000) = 40,000,000 parameters of 4 bytes.
  CHECK(dp_bucket_bytes(cluster, layout, options) == 160'000'000);
  layout = make_layout(1, 1, 64, 1, 128);
  layout.cp = 2;  // dp x cp = 128: 128,000,000 parameters
  CHECK(dp_bucket_bytes(cluster, layout, options) == 512'000'000);
  options.grad_reduce_dtype = GradReduceDtype::kBf16;  // --grad-reduce-in-bf16: 2 bytes each
  CHECK(dp_bucket_bytes(cluster, layout, options) == 256'000'000);
  options.framework = Framework::kFsdp;  // 25 MiB = 25 x 2^20
  CHECK(dp_bucket_bytes(cluster, layout, options) == 26'214'400);
  // DeepSpeed: reduce_bucket_size (and the engine's all-reduce buffer) 5e8 elements of the
  // reduce dtype, 2 bytes (bf16 asked above) or 4.
  options.framework = Framework::kDeepSpeed;
  CHECK(dp_bucket_bytes(cluster, layout, options) == 1'000'000'000);
  options.grad_reduce_dtype = GradReduceDtype::kFp32;
  CHECK(dp_bucket_bytes(cluster, layout, options) == 2'000'000'000);
  options.bucket_bytes = 1'234;
  CHECK(dp_bucket_bytes(cluster, layout, options) == 1'234);
  options.framework = Framework::kMegatron;
  CHECK(dp_bucket_bytes(cluster, layout, options) == 1'234);
}

TEST_CASE("dp_buckets: megatron buckets only pipeline rank 0's first chunk, one bucket per chunk") {
  // tiny, pp 2, vpp 2, dp 3, ZeRO 1, fp32 gradients (Megatron's default), buckets of 50,000
  // bytes: a full bucket is 4,166 blocks of 3 fp32 elements, 49,992 bytes. Four chunks of one
  // layer (46,208 parameters) each.
  // Stage 0 holds layers 0 and 2 plus the embedding: 108,800, padded to 108,801 (3 x 36,267).
  // Its chunk 1 (ready first) is one bucket of ceil(46,208 / 3) = 15,403 blocks, 46,209
  // elements, 184,836 bytes; chunk 0 the other 62,592 elements, 250,368 bytes = 5 x 49,992 +
  // 408. Stage 1 holds layers 1 and 3, the final norm (64) and the LM head (16,384): 108,864 =
  // 3 x 36,288; its last chunk takes layer 3 and the 16,448 head parameters, 62,656 ->
  // 20,886 blocks, 62,658 elements (250,632 bytes), chunk 0 the other 46,206 (184,824 bytes),
  // one bucket each (distributed_data_parallel.py: no bucketing on pp ranks > 0).
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  Layout layout = make_layout(1, 2, 3, 1, 12);
  layout.zero = 1;
  layout.vpp = 2;
  layout.schedule = ScheduleKind::kInterleaved;
  PlanOptions options;
  options.bucket_bytes = 50'000;
  const DpBuckets stage0 = dp_buckets(model, cluster, layout, options, 0);
  CHECK(sizes_of(stage0.step_grad) ==
        std::vector<int64_t>{184'836, 49'992, 49'992, 49'992, 49'992, 49'992, 408});
  const DpBuckets stage1 = dp_buckets(model, cluster, layout, options, 1);
  CHECK(sizes_of(stage1.step_grad) == std::vector<int64_t>{250'632, 184'824});
  // The distributed optimizer all-gathers the same elements in bf16: half the bytes.
  CHECK(sizes_of(stage1.step_param) == std::vector<int64_t>{125'316, 92'412});
  // Without overlap_grad_reduce bucket_size is None: one bucket per chunk on stage 0 too.
  options.overlap_grad_reduce = false;
  CHECK(sizes_of(dp_buckets(model, cluster, layout, options, 0).step_grad) ==
        std::vector<int64_t>{184'836, 250'368});
  // DeepSpeed fills the stage's buffer in bucket_bytes buckets of bf16 gradients: 217,602
  // bytes on stage 0 (108,801 x 2) = 4 x 49,998 (8,333 blocks of 6 bytes) + 17,610.
  options.framework = Framework::kDeepSpeed;
  options.overlap_grad_reduce = true;
  CHECK(sizes_of(dp_buckets(model, cluster, layout, options, 0).step_grad) ==
        std::vector<int64_t>{49'998, 49'998, 49'998, 49'998, 17'610});
}

}  // namespace
TEST_CASE(
    "dp_bucket_size_inert_reason: empty exactly where two bucket sizes give different calls") {
  // The rule against the calls themselves: for every framework, ZeRO stage and grad-reduce
  // overlap on the tiny model (stage 0, dp 3; and dp 1, no reduce), buckets of 60,000 and
  // 120,000 bytes (both below the 435,328-byte buffer) give different call lists exactly where
  // the size applies.
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const auto calls = [&](const Layout& layout, PlanOptions options, int64_t bucket) {
    options.bucket_bytes = bucket;
    const DpBuckets b = dp_buckets(model, cluster, layout, options, 0);
    return std::vector<std::vector<int64_t>>{sizes_of(b.step_grad), sizes_of(b.step_param),
                                             sizes_of(b.chunk_grad), sizes_of(b.chunk_param),
                                             sizes_of(b.chunk_param_backward)};
  };
  int applies_count = 0;
  for (Framework framework :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kFsdp, Framework::kMeshplan}) {
    for (int zero = 0; zero <= 3; ++zero) {
      for (bool overlap : {false, true}) {
        for (int64_t dp : {1, 3}) {
          CAPTURE(to_string(framework));
          CAPTURE(zero);
          CAPTURE(overlap);
          CAPTURE(dp);
          Layout layout = make_layout(1, 1, dp, 1, 6);
          layout.zero = zero;
          PlanOptions options;
          options.framework = framework;
          options.overlap_grad_reduce = overlap;
          const bool differs = calls(layout, options, 60'000) != calls(layout, options, 120'000);
          CHECK(dp_bucket_size_inert_reason(layout, options).empty() == differs);
          applies_count += differs ? 1 : 0;
        }
      }
    }
  }
  // megatron ZeRO 0/1 with overlap (2), deepspeed ZeRO 0-3 (8), fsdp and meshplan ZeRO 0-2
  // (6 each), all at dp 3.
  CHECK(applies_count == 22);
}

TEST_CASE("parameter_gather_overlapped: never DeepSpeed's ZeRO 1-2, which gather in the step") {
  Layout layout = make_layout(1, 1, 3, 1, 6);
  PlanOptions options;
  options.overlap_param_gather = true;
  for (Framework framework :
       {Framework::kMegatron, Framework::kDeepSpeed, Framework::kFsdp, Framework::kMeshplan}) {
    options.framework = framework;
    for (int zero = 0; zero <= 3; ++zero) {
      layout.zero = zero;
      CAPTURE(zero);
      const bool deepspeed_zero12 = framework == Framework::kDeepSpeed && (zero == 1 || zero == 2);
      CHECK(parameter_gather_overlapped(layout, options) == !deepspeed_zero12);
    }
  }
  options.overlap_param_gather = false;
  options.framework = Framework::kMegatron;
  layout.zero = 1;
  CHECK_FALSE(parameter_gather_overlapped(layout, options));
}

}  // namespace meshplan::planner
