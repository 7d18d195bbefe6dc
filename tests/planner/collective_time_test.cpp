// collective_seconds (planner/collective_time.cpp): the alpha-beta ring model, by hand.
//
// Ring algorithms (nccl-tests doc/PERFORMANCE.md; Patarasuk & Yuan 2009): on n ranks every rank
// sends 2(n-1)/n of the buffer for an all-reduce in 2(n-1) steps, (n-1)/n for an all-gather or
// reduce-scatter in n-1 steps. Time = volume / (link bandwidth * collective efficiency) +
// steps * latency. An all-reduce spanning nodes runs an intra-node tier on NVLink and an
// inter-node tier on the NICs (one per GPU, all in parallel) on 1/local of the buffer; an
// all-gather or reduce-scatter spanning nodes is one flat ring over all ranks.

#include <doctest/doctest.h>

#include "meshplan/cost_model.h"
#include "meshplan/models.h"

namespace meshplan::planner {
namespace {

// Round numbers, so each expected time is short arithmetic: NVLink 100 GB/s and 1 us, NIC
// 10 GB/s and 5 us per GPU, half of each achieved (efficiency 0.5): 50e9 and 5e9 B/s.
models::ClusterConfig round_cluster(double intra_latency = 1e-6, double inter_latency = 5e-6) {
  models::ClusterConfig cluster;
  cluster.name = "round-numbers";
  cluster.gpus_per_node = 8;
  cluster.intra_node_bytes_per_second = 100e9;
  cluster.intra_node_latency_seconds = intra_latency;
  cluster.inter_node_bytes_per_second_per_gpu = 10e9;
  cluster.inter_node_latency_seconds = inter_latency;
  cluster.efficiency.collective_efficiency = 0.5;
  return cluster;
}

constexpr int64_t kGigabyte = 1'000'000'000;  // 1e9 bytes

// Each expected time is a handful of products and quotients of decimal literals; the code
// evaluates the same formula in another order. 1e-12 relative covers double rounding only.
constexpr double kTimeRoundingTolerance = 1e-12;

TEST_CASE("ring all-reduce inside one node: 2(n-1)/n * bytes / bw + 2(n-1) latency") {
  const models::ClusterConfig cluster = round_cluster();
  // n 8, 1 GB: 2 * 7/8 * 1e9 / 50e9 = 0.035 s, plus 14 steps * 1 us = 0.035014 s.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 8, 1) ==
        doctest::Approx(0.035014).epsilon(kTimeRoundingTolerance).scale(0));
  // n 2: 2 * 1/2 * 1e9 / 50e9 = 0.02 s, plus 2 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 2, 1) ==
        doctest::Approx(0.020002).epsilon(kTimeRoundingTolerance).scale(0));
  // n 4 placed 2 apart (a dp group with tp 2) still fits in the 8-GPU node: 2 * 3/4 / 50 =
  // 0.03 s, plus 6 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 4, 2) ==
        doctest::Approx(0.030006).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("ring all-gather and reduce-scatter: (n-1)/n * bytes / bw + (n-1) latency") {
  const models::ClusterConfig cluster = round_cluster();
  // n 4, 1 GB: 3/4 * 1e9 / 50e9 = 0.015 s, plus 3 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, 4, 1) ==
        doctest::Approx(0.015003).epsilon(kTimeRoundingTolerance).scale(0));
  CHECK(collective_seconds(cluster, CollectiveKind::kReduceScatter, kGigabyte, 4, 1) ==
        doctest::Approx(0.015003).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("one rank per node: the ring runs on the NICs") {
  const models::ClusterConfig cluster = round_cluster();
  // n 4, stride 8 (one member per node): 2 * 3/4 * 1e9 / 5e9 = 0.3 s, plus 6 * 5 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 4, 8) ==
        doctest::Approx(0.30003).epsilon(kTimeRoundingTolerance).scale(0));
  // All-gather: 3/4 * 1e9 / 5e9 = 0.15 s, plus 3 * 5 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, 4, 16) ==
        doctest::Approx(0.150015).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("hierarchical all-reduce and all-gather across two nodes, by hand") {
  const models::ClusterConfig cluster = round_cluster();
  // 16 ranks, stride 1: 8 per node (local), 2 nodes. 1 GB.
  // All-reduce = intra reduce-scatter of 1 GB over 8: 7/8 / 50 = 0.0175 s + 7 us
  //            + inter all-reduce of 1/8 GB over 2 nodes: 2 * 1/2 * 0.125e9 / 5e9 = 0.025 s
  //              + 2 * 5 us
  //            + intra all-gather of 1 GB over 8: 0.0175 s + 7 us
  //            = 0.06 s + 24 us = 0.060024 s.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 16, 1) ==
        doctest::Approx(0.060024).epsilon(kTimeRoundingTolerance).scale(0));
  // All-gather (NCCL: ring only, NVIDIA/nccl#1473) = one flat ring over the 16 ranks. Bus
  // bandwidth min(NVLink 50e9, 8 NICs * 10e9 * 0.5 (nccl#1218's fraction of the node's NIC
  // line rate)) = 40e9: 15/16 * 1e9 / 40e9 = 0.0234375 s; latency as NCCL's tuning model
  // counts it: 16 - 2 NVLink steps * 1 us + 2 - 1 network steps * 5 us = 19 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, 16, 1) ==
        doctest::Approx(0.0234565).epsilon(kTimeRoundingTolerance).scale(0));
  // 8 ranks placed 2 apart: 4 per node, 2 nodes. All-reduce =
  //   intra reduce-scatter over 4: 3/4 / 50 = 0.015 s + 3 us
  //   inter all-reduce of 1/4 GB over 2: 2 * 1/2 * 0.25e9 / 5e9 = 0.05 s + 10 us
  //   intra all-gather over 4: 0.015 s + 3 us          = 0.080016 s.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 8, 2) ==
        doctest::Approx(0.080016).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("all-gather and reduce-scatter at scale: latency grows with every rank of the ring") {
  const models::ClusterConfig cluster = round_cluster();
  // 1024 ranks in 128 nodes of 8: 1023/1024 * 1e9 / 40e9 = 0.0249755859375 s, plus
  // (1024 - 128) * 1 us + 127 * 5 us = 0.001531 s of latency: 0.0265065859375 s.
  CHECK(collective_seconds(cluster, CollectiveKind::kReduceScatter, kGigabyte, 1024, 1) ==
        doctest::Approx(0.0265065859375).epsilon(kTimeRoundingTolerance).scale(0));
  // 8 ranks placed 2 apart, 4 per node on 2 nodes, sharing 4 NICs: min(50e9, 4 * 10e9 * 0.5)
  // = 20e9: 7/8 * 1e9 / 20e9 = 0.04375 s, plus 6 * 1 us + 1 * 5 us = 0.043761 s.
  CHECK(collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, 8, 2) ==
        doctest::Approx(0.043761).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("point-to-point: one message, one latency; NVLink only within a node") {
  const models::ClusterConfig cluster = round_cluster();
  // 1 GB to the neighbour 4 ranks away (same node): 1e9 / 50e9 = 0.02 s + 1 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kSendRecv, kGigabyte, 2, 4) ==
        doctest::Approx(0.020001).epsilon(kTimeRoundingTolerance).scale(0));
  // 8 ranks away (next node): 1e9 / 5e9 = 0.2 s + 5 us.
  CHECK(collective_seconds(cluster, CollectiveKind::kSendRecv, kGigabyte, 2, 8) ==
        doctest::Approx(0.200005).epsilon(kTimeRoundingTolerance).scale(0));
}

TEST_CASE("nothing to do: one rank or no bytes") {
  const models::ClusterConfig cluster = round_cluster();
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, 1, 1) == 0.0);
  CHECK(collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, 1, 1) == 0.0);
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, 0, 8, 1) == 0.0);
}

TEST_CASE("nccl-tests bus bandwidth: algbw * factor recovers the link's achieved rate") {
  // nccl-tests doc/PERFORMANCE.md: algbw = bytes / time; busbw = algbw * 2(n-1)/n (all-reduce)
  // or (n-1)/n (all-gather, reduce-scatter), and busbw is what one link carries. With zero
  // latency the ring model's busbw must be exactly the achieved NVLink rate, 50e9 B/s, for
  // every n.
  const models::ClusterConfig cluster = round_cluster(0.0, 0.0);
  for (int64_t n : {2, 4, 8}) {
    CAPTURE(n);
    const double bytes = 1e9;
    const double all_reduce =
        collective_seconds(cluster, CollectiveKind::kAllReduce, kGigabyte, n, 1);
    const double all_gather =
        collective_seconds(cluster, CollectiveKind::kAllGather, kGigabyte, n, 1);
    const double reduce_scatter =
        collective_seconds(cluster, CollectiveKind::kReduceScatter, kGigabyte, n, 1);
    const double factor = static_cast<double>(n - 1) / static_cast<double>(n);
    CHECK(bytes / all_reduce * 2.0 * factor ==
          doctest::Approx(50e9).epsilon(kTimeRoundingTolerance).scale(0));
    CHECK(bytes / all_gather * factor ==
          doctest::Approx(50e9).epsilon(kTimeRoundingTolerance).scale(0));
    CHECK(bytes / reduce_scatter * factor ==
          doctest::Approx(50e9).epsilon(kTimeRoundingTolerance).scale(0));
  }
}

TEST_CASE("dgx-a100-80gb preset: tp 8 all-reduce of one GPT-3 hidden tensor") {
  // The preset's figures: NVLink 300e9 B/s per direction, 2 us, collective efficiency 0.75.
  // One micro-batch's hidden states, s b h e = 2048 * 1 * 12288 * 2 = 50,331,648 bytes:
  // 2 * 7/8 * 50,331,648 / 225e9 = 391.468... us (= 88,080,384 / 225e9 s) plus 14 * 2 us.
  const models::ClusterConfig cluster = models::load_cluster("dgx-a100-80gb");
  const double expected = 88'080'384.0 / 225e9 + 14 * 2e-6;
  CHECK(collective_seconds(cluster, CollectiveKind::kAllReduce, 50'331'648, 8, 1) ==
        doctest::Approx(expected).epsilon(kTimeRoundingTolerance).scale(0));
}

}  // namespace
}  // namespace meshplan::planner
