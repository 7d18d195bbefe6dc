// search_layouts (planner/search.cpp): the size of the space counted by hand, exhaustiveness
// against an independent enumeration, ranking by time and by memory, ties, fixed fields, errors.
//
// The space, as search.h documents it: every (tp, pp, dp) with tp pp dp = GPUs; every
// micro-batch dividing global_batch / dp; the schedule 1F1B alone when pp = 1, otherwise GPipe,
// 1F1B and ZB-H1 at vpp 1 and interleaved at each vpp >= 2 dividing l / pp; recompute none and
// full, and selective too without flash attention (with it, selective stores and recomputes what
// none does: search.cpp skips the duplicate); sequence parallel off, and on when tp > 1; ZeRO 0-3
// when dp > 1, 0 otherwise.
// Invalid layouts are costed too (and rejected with their reason): nothing is pruned.

#include "meshplan/search.h"

#include <doctest/doctest.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"
#include "planner_test_util.h"

namespace meshplan::planner {
namespace {

// tiny: 4 layers, 4 heads, 2 kv heads, seq 32; 8 GPUs, 16 sequences per step.
SearchSpace tiny_space() {
  SearchSpace space;
  space.num_gpus = 8;
  space.global_batch = 16;
  return space;
}

SearchResult search_tiny(const SearchSpace& space, Objective objective, int64_t top_k,
                         bool flash_attention = true) {
  PlanOptions options;
  options.flash_attention = flash_attention;
  // meshplan's executor runs every schedule; its one refusal is counted in the tests below.
  options.framework = Framework::kMeshplan;
  return search_layouts(models::load_model("tiny"), models::load_cluster("dgx-a100-80gb"), space,
                        options, objective, top_k);
}

// The space above, enumerated here independently of the search (tiny: l = 4, GPUs 8, B 16).
std::vector<Layout> enumerate_tiny_space(bool flash_attention) {
  std::vector<Layout> layouts;
  for (int64_t tp : {1, 2, 4, 8}) {
    for (int64_t pp : {1, 2, 4, 8}) {
      if (8 % (tp * pp) != 0) {
        continue;
      }
      const int64_t dp = 8 / (tp * pp);
      for (int64_t micro_batch = 1; micro_batch <= 16 / dp; ++micro_batch) {
        if ((16 / dp) % micro_batch != 0) {
          continue;
        }
        std::vector<std::pair<ScheduleKind, int64_t>> schedules;
        if (pp == 1) {
          schedules = {{ScheduleKind::kOneFOneB, 1}};
        } else {
          schedules = {
              {ScheduleKind::kGpipe, 1}, {ScheduleKind::kOneFOneB, 1}, {ScheduleKind::kZbH1, 1}};
          for (int64_t vpp = 2; 4 % pp == 0 && vpp <= 4 / pp; ++vpp) {
            if ((4 / pp) % vpp == 0) {
              schedules.emplace_back(ScheduleKind::kInterleaved, vpp);
            }
          }
        }
        for (const auto& [schedule, vpp] : schedules) {
          for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
            if (flash_attention && recompute == Recompute::kSelective) {
              continue;
            }
            for (bool sp : {false, true}) {
              if (sp && tp == 1) {
                continue;
              }
              for (int zero = 0; zero <= (dp > 1 ? 3 : 0); ++zero) {
                Layout layout = test::make_layout(tp, pp, dp, micro_batch, 16);
                layout.vpp = vpp;
                layout.schedule = schedule;
                layout.recompute = recompute;
                layout.sequence_parallel = sp;
                layout.zero = zero;
                layouts.push_back(layout);
              }
            }
          }
        }
      }
    }
  }
  return layouts;
}

TEST_CASE("exhaustive: tiny on 8 GPUs, global batch 16, counted by hand") {
  // Per (tp, pp, dp) and recompute choice: micro-batches (divisors of 16 / dp) x schedules x SP
  // x ZeRO.
  //   tp pp dp   mb  sched  sp zero
  //    1  1  8    2    1     1   4    =   8
  //    1  2  4    3    4     1   4    =  48   (gpipe, 1f1b, zb-h1, interleaved vpp 2)
  //    1  4  2    4    3     1   4    =  48   (l / pp = 1: no interleaving)
  //    1  8  1    5    3     1   1    =  15
  //    2  1  4    3    1     2   4    =  24
  //    2  2  2    4    4     2   4    = 128
  //    2  4  1    5    3     2   1    =  30
  //    4  1  2    4    1     2   4    =  32
  //    4  2  1    5    4     2   1    =  40
  //    8  1  1    5    1     2   1    =  10
  // Total 383 per recompute choice: 1,149 without flash attention (3 choices), 766 with (2).
  // Rejections per recompute choice: tp 8 splits 4 heads unevenly: 10; tp 4 splits 2 kv heads
  // unevenly: 32 + 40 = 72; pp 8 splits 4 layers unevenly (tp 1 only): 15; interleaved with a
  // single micro-batch (not divisible by pp 2): mb 4 at tp 1, dp 4 (4 ZeRO) and mb 8 at tp 2,
  // dp 2 (2 SP x 4 ZeRO): 12. 109 in all. The tiny model fits everywhere: no memory rejection.
  // Framework meshplan refuses ZeRO 3 with dp > 1 and vpp > 1 (checked first): interleaved
  // exists only at pp 2, vpp 2; ZeRO 3 there at tp 1, dp 4 (mb 1, 2, 4: 3) and tp 2, dp 2
  // (mb 1, 2, 4, 8 x 2 SP: 8) = 11, of which mb 4 at dp 4 and mb 8 at dp 2 (1 + 2 = 3) were
  // interleaved_micro_batches: 9 of those remain, and 11 - 3 = 8 feasible layouts go.
  for (const auto& flash_and_recomputes : {std::pair<bool, int64_t>{false, 3}, {true, 2}}) {
    const bool flash = flash_and_recomputes.first;  // not a binding: CAPTURE takes it
    const int64_t recomputes = flash_and_recomputes.second;
    CAPTURE(flash);
    const SearchResult result = search_tiny(tiny_space(), Objective::kTime, 10'000, flash);
    CHECK(result.num_evaluated == 383 * recomputes);
    CHECK(static_cast<int64_t>(enumerate_tiny_space(flash).size()) == 383 * recomputes);
    const std::map<std::string, int64_t> rejections = {
        {"tp_heads", 10 * recomputes},
        {"tp_kv_heads", 72 * recomputes},
        {"pp_layers", 15 * recomputes},
        {"interleaved_micro_batches", 9 * recomputes},
        {"framework", 11 * recomputes}};
    CHECK(result.rejections == rejections);
    CHECK(result.num_feasible == (383 - 109 - 8) * recomputes);  // 798 or 532
    // top_k above the feasible count: all of them come back.
    CHECK(static_cast<int64_t>(result.best.size()) == (383 - 109 - 8) * recomputes);
    for (const auto& [code, count] : result.rejections) {
      CHECK(result.example_reason.count(code) == 1);
    }
  }
}

TEST_CASE("exhaustive: the best plan is the fastest of an independent enumeration") {
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  for (bool flash : {false, true}) {
    CAPTURE(flash);
    PlanOptions options;
    options.flash_attention = flash;
    options.framework = Framework::kMeshplan;  // the software search_tiny plans for
    double fastest = 0;
    int64_t feasible = 0;
    for (const Layout& layout : enumerate_tiny_space(flash)) {
      const PlanEstimate estimate = estimate_plan(model, cluster, layout, options);
      // meshplan's executor refuses ZeRO 3 with dp > 1 and vpp > 1 (shard_dims.cpp).
      const bool runnable = !(layout.zero == 3 && layout.dp > 1 && layout.vpp > 1);
      if (estimate.feasible && runnable) {
        ++feasible;
        if (fastest == 0 || estimate.step_time_s < fastest) {
          fastest = estimate.step_time_s;
        }
      }
    }
    const SearchResult result = search_tiny(tiny_space(), Objective::kTime, 3, flash);
    CHECK(result.num_feasible == feasible);
    REQUIRE(result.best.size() == 3);
    CHECK(result.best.front().step_time_s == fastest);
    // The returned estimates carry their collective inventories (8 GPUs: some group has more
    // than one rank).
    CHECK_FALSE(result.best.front().collectives.empty());
  }
}

TEST_CASE("ranking: best first by time, ties by lower peak memory") {
  const SearchResult result = search_tiny(tiny_space(), Objective::kTime, 10'000);
  REQUIRE(result.best.size() > 1);
  for (size_t i = 0; i + 1 < result.best.size(); ++i) {
    const PlanEstimate& a = result.best[i];
    const PlanEstimate& b = result.best[i + 1];
    CAPTURE(describe(a.layout));
    CAPTURE(describe(b.layout));
    CHECK(a.feasible);
    CHECK((a.step_time_s < b.step_time_s ||
           (a.step_time_s == b.step_time_s && a.peak_memory_bytes <= b.peak_memory_bytes)));
  }
}

TEST_CASE("ranking: --objective memory, best first by peak memory, ties by time") {
  const SearchResult result = search_tiny(tiny_space(), Objective::kMemory, 10'000);
  REQUIRE(result.best.size() == 532);  // every feasible layout (the counting test above)
  for (size_t i = 0; i + 1 < result.best.size(); ++i) {
    const PlanEstimate& a = result.best[i];
    const PlanEstimate& b = result.best[i + 1];
    CAPTURE(describe(a.layout));
    CAPTURE(describe(b.layout));
    CHECK((a.peak_memory_bytes < b.peak_memory_bytes ||
           (a.peak_memory_bytes == b.peak_memory_bytes && a.step_time_s <= b.step_time_s)));
  }
}

TEST_CASE("ties on time are broken by memory: ZeRO 1 before ZeRO 2 on meshplan's executor") {
  // With one micro-batch per step ZeRO 1 and 2 communicate the same (one reduce-scatter of the
  // gradients, one all-gather of the parameters; ZeRO 2 reduce-scatters once per micro-batch)
  // and update the same shard, so their step times are equal. meshplan's executor keeps a
  // full-size gradient buffer under both and ZeRO 2 adds its N / dp accumulator
  // (executor/gradient_sync.h), so ZeRO 2 needs more memory and ranks after ZeRO 1. Everything
  // else fixed: global batch 8 on dp 8 with micro-batch 1 is m = 1.
  SearchSpace space = tiny_space();
  space.global_batch = 8;
  space.tp = 1;
  space.pp = 1;
  space.micro_batch = 1;
  space.recompute = Recompute::kNone;
  const SearchResult result = search_tiny(space, Objective::kTime, 10);
  CHECK(result.num_evaluated == 4);  // ZeRO 0-3, dp 8
  REQUIRE(result.best.size() == 4);
  size_t zero1 = 0, zero2 = 0;
  for (size_t i = 0; i < result.best.size(); ++i) {
    zero1 = result.best[i].layout.zero == 1 ? i : zero1;
    zero2 = result.best[i].layout.zero == 2 ? i : zero2;
  }
  REQUIRE(result.best[zero1].step_time_s == result.best[zero2].step_time_s);
  REQUIRE(result.best[zero1].peak_memory_bytes < result.best[zero2].peak_memory_bytes);
  CHECK(zero1 == zero2 - 1);
}

TEST_CASE("fixed fields are respected and shrink the space") {
  SearchSpace space = tiny_space();
  space.tp = 2;
  space.recompute = Recompute::kFull;
  space.zero = 1;
  const SearchResult result = search_tiny(space, Objective::kTime, 10'000);
  // tp 2 rows of the table above with one recompute and one ZeRO choice:
  // (pp 1, dp 4) 3 mb x 1 sched x 2 SP = 6; (pp 2, dp 2) 4 x 4 x 2 = 32; (pp 4, dp 1)
  // 5 x 3 x 2 = 30 (a fixed ZeRO stage is kept even at dp 1): 68.
  CHECK(result.num_evaluated == 68);
  REQUIRE_FALSE(result.best.empty());
  for (const PlanEstimate& estimate : result.best) {
    CHECK(estimate.layout.tp == 2);
    CHECK(estimate.layout.recompute == Recompute::kFull);
    CHECK(estimate.layout.zero == 1);
    CHECK(estimate.layout.global_batch == 16);
  }

  SearchSpace by_dp = tiny_space();
  by_dp.dp = 4;
  by_dp.schedule = ScheduleKind::kOneFOneB;
  // dp 4 leaves tp pp = 2: (tp 1, pp 2) 3 mb x 2 recompute (flash attention) x 4 ZeRO = 24
  // and (tp 2, pp 1) 3 x 2 x 2 SP x 4 = 48: 72.
  const SearchResult dp_result = search_tiny(by_dp, Objective::kTime, 10'000);
  CHECK(dp_result.num_evaluated == 72);
  for (const PlanEstimate& estimate : dp_result.best) {
    CHECK(estimate.layout.dp == 4);
    CHECK(estimate.layout.schedule == ScheduleKind::kOneFOneB);
  }
}

TEST_CASE("search errors: GPU count and global batch must be positive") {
  SearchSpace space = tiny_space();
  space.num_gpus = 0;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "num_gpus: must be positive (0)");
  space = tiny_space();
  space.global_batch = -3;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "global_batch: must be between 1 and 131072 (-3)");
  // Issue 11: 10^12 sequences used to search for hours in gigabytes; kMaxGlobalBatch is 2^17.
  space.global_batch = 1'000'000'000'000;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "global_batch: must be between 1 and 131072 (1000000000000)");
}

TEST_CASE("search limits: max_zero and search_selective_recompute narrow the searched fields") {
  // validate's era limits (software_guess.h SearchLimits) for fields a run leaves open.
  // Without flash attention, where selective recompute is searched at all.
  SearchSpace space = tiny_space();
  const SearchResult all = search_tiny(space, Objective::kTime, 10'000, false);
  space.max_zero = 1;
  space.search_selective_recompute = false;
  const SearchResult limited = search_tiny(space, Objective::kTime, 10'000, false);
  CHECK(limited.num_evaluated < all.num_evaluated);
  REQUIRE_FALSE(limited.best.empty());
  for (const PlanEstimate& estimate : limited.best) {
    CHECK(estimate.layout.zero <= 1);
    CHECK(estimate.layout.recompute != Recompute::kSelective);
  }
  // Both appear when not limited.
  CHECK(std::any_of(all.best.begin(), all.best.end(),
                    [](const PlanEstimate& e) { return e.layout.zero > 1; }));
  CHECK(std::any_of(all.best.begin(), all.best.end(), [](const PlanEstimate& e) {
    return e.layout.recompute == Recompute::kSelective;
  }));
  space.max_zero = 4;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "max_zero: must be 0 to 3 (4)");
}

TEST_CASE("search progress: called before the first layout and once at the end") {
  // The tiny space on 8 GPUs has fewer layouts than kProgressInterval, so exactly two calls:
  // (0, n) and (n, n), n the layouts costed.
  std::vector<std::pair<int64_t, int64_t>> calls;
  const SearchResult result =
      search_layouts(models::load_model("tiny"), models::load_cluster("dgx-a100-80gb"),
                     tiny_space(), PlanOptions{}, Objective::kTime, 1,
                     [&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
  REQUIRE(result.num_evaluated < kProgressInterval);
  const int64_t n = result.num_evaluated;
  CHECK(calls == std::vector<std::pair<int64_t, int64_t>>{{0, n}, {n, n}});
}

// Regression (bug found by this suite, fixed in 4c3d542): search.h promises an InputError on a
// space the fixed fields make empty; search_layouts used to return an empty result with no
// reason, so `meshplan plan --tp 3 --gpus 1024` ended with "no feasible layout ...: " alone.
TEST_CASE("search errors: fixed sizes that cannot fit the GPU count") {
  SearchSpace space = tiny_space();
  space.tp = 3;  // 8 = 3 * 2 + 2
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "tp: does not divide the GPU count (8 % 3)");
  space = tiny_space();
  space.tp = 2;
  space.pp = 2;
  space.dp = 4;  // 2 * 2 * 4 = 16 GPUs laid out, 8 given
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "tp*pp*dp: fixed sizes multiply to 16, which does not fit 8 GPUs");
  space.dp = std::nullopt;
  space.pp = 8;  // 2 * 8 = 16 does not divide 8
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "tp*pp*dp: fixed sizes multiply to 16, which does not fit 8 GPUs");
}

// Regression (found by fuzz_public_runs in session 52): a fixed micro-batch of 0 reached
// `global_batch / (dp * micro_batch)` and the process died of SIGFPE.
TEST_CASE("search errors: a fixed micro-batch or vpp below 1") {
  SearchSpace space = tiny_space();
  space.micro_batch = 0;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "micro_batch: must be at least 1 (0)");
  space = tiny_space();
  space.vpp = -2;
  CHECK(test::input_error([&] { search_tiny(space, Objective::kTime, 1); }) ==
        "vpp: must be at least 1 (-2)");
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("frameworks restrict the search; a fixed flag none can run is an input error") {
  SearchSpace space = tiny_space();
  PlanOptions options;
  options.framework = Framework::kDeepSpeed;
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const SearchResult result =
      search_layouts(model, cluster, space, options, Objective::kTime, 10'000);
  CHECK(result.rejections.at("framework") > 0);
  for (const PlanEstimate& e : result.best) {
    CAPTURE(describe(e.layout));
    // DeepSpeed 0.19.6 pipe/engine.py: no ZeRO-2/3 with pp > 1; TrainSchedule is 1F1B,
    // Megatron-DeepSpeed's --enable-zbh1-pipeline ZB-H1 without sequence parallelism.
    const bool schedule_runs =
        e.layout.schedule == ScheduleKind::kOneFOneB ||
        (e.layout.schedule == ScheduleKind::kZbH1 && !e.layout.sequence_parallel);
    CHECK((e.layout.pp == 1 || (e.layout.zero <= 1 && schedule_runs)));
  }
  space.pp = 2;
  space.zero = 3;
  CHECK_THROWS_WITH_AS(
      search_layouts(model, cluster, space, options, Objective::kTime, 10),
      doctest::Contains("--framework: deepspeed cannot run this layout: its pipeline engine "
                        "refuses ZeRO-2 and ZeRO-3 with pp > 1"),
      InputError);
  options.framework = Framework::kFsdp;
  space = tiny_space();
  space.tp = 2;
  space.sequence_parallel = false;
  CHECK_THROWS_WITH_AS(
      search_layouts(model, cluster, space, options, Objective::kTime, 10),
      doctest::Contains("fsdp cannot run this layout: torchtitan's tensor parallelism is always "
                        "sequence-parallel"),
      InputError);
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {
namespace {

TEST_CASE("megatron: interleaved pp 2 only with overlap_p2p_comm (Megatron-LM arguments.py)") {
  // Megatron-LM validate_args (d98e8a64 lines 1000-1009): with virtual pipeline stages and
  // overlap_p2p_comm off, pp must exceed 2.
  SearchSpace space = tiny_space();
  space.pp = 2;
  PlanOptions options;  // framework megatron, overlap_p2p_comm off (the library default)
  const models::TransformerConfig model = models::load_model("tiny");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const SearchResult result =
      search_layouts(model, cluster, space, options, Objective::kTime, 10'000);
  CHECK(result.rejections.at("framework") > 0);
  for (const PlanEstimate& e : result.best) {
    CAPTURE(describe(e.layout));
    CHECK((e.layout.vpp == 1 || e.layout.schedule != ScheduleKind::kInterleaved));
  }
  space.schedule = ScheduleKind::kInterleaved;
  space.vpp = 2;
  CHECK_THROWS_WITH_AS(
      search_layouts(model, cluster, space, options, Objective::kTime, 10),
      doctest::Contains("--framework: megatron cannot run this layout: Megatron-LM arguments.py "
                        "refuses the interleaved schedule at pp 2 without "
                        "--overlap-p2p-communication"),
      InputError);
  options.overlap_p2p_comm = true;  // allowed with it: the fixed layout is searched
  const SearchResult with_overlap =
      search_layouts(model, cluster, space, options, Objective::kTime, 10);
  REQUIRE_FALSE(with_overlap.best.empty());
  CHECK(with_overlap.best.front().layout.vpp == 2);
  CHECK(with_overlap.rejections.count("framework") == 0);
}

TEST_CASE("memory headroom: exactly the plans within hbm - headroom stay, the rest are counted") {
  // llama2-7b on 8 A100 80 GiB, 16 sequences: every feasible plan without headroom, then with
  // half the GPU kept free. Expected: the plans of the first search whose peak is at most
  // hbm / 2, counted here independently of the second search.
  const models::TransformerConfig model = models::load_model("llama2-7b");
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  SearchSpace space;
  space.num_gpus = 8;
  space.global_batch = 16;
  const SearchResult all = search_layouts(model, cluster, space, {}, Objective::kTime, 100'000);
  REQUIRE(static_cast<int64_t>(all.best.size()) == all.num_feasible);
  space.memory_headroom_bytes = cluster.gpu.hbm_bytes / 2;
  const int64_t limit_bytes = cluster.gpu.hbm_bytes - space.memory_headroom_bytes;
  int64_t within = 0;
  for (const PlanEstimate& e : all.best) {
    within += e.peak_memory_bytes <= limit_bytes ? 1 : 0;
  }
  REQUIRE(within > 0);
  REQUIRE(within < all.num_feasible);  // the headroom must bite for this test to mean anything
  const SearchResult kept = search_layouts(model, cluster, space, {}, Objective::kTime, 100'000);
  CHECK(kept.num_feasible == within);
  CHECK(kept.rejections.at("memory_headroom") == all.num_feasible - within);
  for (const PlanEstimate& e : kept.best) {
    CHECK(e.peak_memory_bytes <= limit_bytes);
  }
  space.memory_headroom_bytes = cluster.gpu.hbm_bytes;
  CHECK_THROWS_WITH_AS(
      search_layouts(model, cluster, space, {}, Objective::kTime, 1),
      "memory_headroom_bytes: must be at least 0 and less than the GPU's 85899345920 bytes "
      "(85899345920)",
      InputError);
}

}  // namespace
}  // namespace meshplan::planner

namespace meshplan::planner {

TEST_CASE("smallest_microbatch_group: the least N Megatron-Core accepts") {
  // schedules.py forward_backward_pipelining_with_interleaving: pp <= N <= m and m % N either 0
  // or >= pp. pp dividing m: the default (0 = pp). m 10, pp 4: N 5 (10 % 5 = 0). m 19, pp 4:
  // 5 leaves 4 >= pp. m 17, pp 8: 9 leaves 8 >= pp. m 3 < pp 4: none.
  CHECK(smallest_microbatch_group(4, 8) == 0);
  CHECK(smallest_microbatch_group(4, 10) == 5);
  CHECK(smallest_microbatch_group(4, 19) == 5);
  CHECK(smallest_microbatch_group(8, 17) == 9);
  CHECK(smallest_microbatch_group(4, 7) == 7);  // 5 leaves 2, 6 leaves 1, 7 leaves 0
  CHECK(smallest_microbatch_group(4, 3) == 0);
}

}  // namespace meshplan::planner
