// Cluster presets against their datasheets, round trip, and validation messages.

#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "meshplan/models.h"
#include "model_test_util.h"

using meshplan::models::cluster_from_json;
using meshplan::models::cluster_preset_names;
using meshplan::models::cluster_to_json;
using meshplan::models::ClusterConfig;
using meshplan::models::compute_element_bytes;
using meshplan::models::load_cluster;
using meshplan::models::Precision;
using meshplan::models::validate_cluster;
using meshplan::models::test::input_error;
using meshplan::models::test::write_temp_file;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

void check_same(const ClusterConfig& a, const ClusterConfig& b) {
  CHECK(a.name == b.name);
  CHECK(a.gpu.name == b.gpu.name);
  CHECK(a.gpu.peak_bf16_flops_per_second == b.gpu.peak_bf16_flops_per_second);
  CHECK(a.gpu.peak_fp32_flops_per_second == b.gpu.peak_fp32_flops_per_second);
  CHECK(a.gpu.hbm_bytes == b.gpu.hbm_bytes);
  CHECK(a.gpu.hbm_bytes_per_second == b.gpu.hbm_bytes_per_second);
  CHECK(a.gpus_per_node == b.gpus_per_node);
  CHECK(a.intra_node_bytes_per_second == b.intra_node_bytes_per_second);
  CHECK(a.intra_node_latency_seconds == b.intra_node_latency_seconds);
  CHECK(a.inter_node_bytes_per_second_per_gpu == b.inter_node_bytes_per_second_per_gpu);
  CHECK(a.inter_node_latency_seconds == b.inter_node_latency_seconds);
  CHECK(a.reserved_bytes_per_gpu == b.reserved_bytes_per_gpu);
  CHECK(a.price_per_gpu_hour == b.price_per_gpu_hour);
  CHECK(a.precision == b.precision);
  CHECK(a.efficiency.gemm_peak_efficiency == b.efficiency.gemm_peak_efficiency);
  CHECK(a.efficiency.gemm_half_efficiency_dim == b.efficiency.gemm_half_efficiency_dim);
  CHECK(a.efficiency.attention_efficiency == b.efficiency.attention_efficiency);
  CHECK(a.efficiency.hbm_efficiency == b.efficiency.hbm_efficiency);
  CHECK(a.efficiency.collective_efficiency == b.efficiency.collective_efficiency);
  CHECK(a.source == b.source);
}

std::string cluster_error_for(const nlohmann::json& json) {
  return input_error([&] { cluster_from_json(json, "mycluster.json"); });
}

}  // namespace

TEST_CASE("cluster presets: the list, sorted, and every one loads and cites a source") {
  const std::vector<std::string> expected = {"dgx-a100-40gb", "dgx-a100-80gb",    "dgx-h100",
                                             "dgx-h200",      "grand-teton-h100", "h800-2048",
                                             "local-cpu"};
  CHECK(cluster_preset_names() == expected);
  for (const auto& name : expected) {
    CAPTURE(name);
    const ClusterConfig cluster = load_cluster(name);
    CHECK(cluster.name == name);
    CHECK(cluster.source.size() > 20);  // a real citation
    validate_cluster(cluster, name);
  }
}

TEST_CASE("dgx-a100-80gb: A100 SXM4 80GB and DGX A100 datasheet figures") {
  const ClusterConfig c = load_cluster("dgx-a100-80gb");
  CHECK(c.gpu.peak_bf16_flops_per_second == 312e12);  // 312 TFLOPS dense BF16
  CHECK(c.gpu.peak_fp32_flops_per_second == 19.5e12);
  CHECK(c.gpu.hbm_bytes == 80 * kGiB);  // nvidia-smi: 81920 MiB = 80 GiB
  CHECK(c.gpu.hbm_bytes == 81920LL * (1 << 20));
  CHECK(c.gpu.hbm_bytes_per_second == 2.039e12);  // 2,039 GB/s
  CHECK(c.gpus_per_node == 8);
  CHECK(c.intra_node_bytes_per_second == 600e9 / 2);          // NVLink 3: 600 GB/s bidirectional
  CHECK(c.inter_node_bytes_per_second_per_gpu == 200e9 / 8);  // HDR 200 Gb/s per GPU
  CHECK(c.intra_node_latency_seconds == 2e-6);
  CHECK(c.inter_node_latency_seconds == 5e-6);
  CHECK(c.reserved_bytes_per_gpu == 3 * kGiB);
  CHECK(c.price_per_gpu_hour == 40.96 / 8);  // p4de.24xlarge on-demand / 8 GPUs
  CHECK(c.precision == Precision::kBf16Mixed);
  // Efficiencies are model parameters, not datasheet figures (the preset's source says how
  // they were chosen); what they mean: the asymptote of bf16 GEMMs at 0.795 x 312 = 248.04
  // TFLOP/s, inside the 200-280 TFLOP/s cuBLAS reaches on A100; NCCL bus bandwidth at 0.75 x
  // 300 = 225 GB/s.
  CHECK(c.efficiency.gemm_peak_efficiency * c.gpu.peak_bf16_flops_per_second / 1e12 ==
        doctest::Approx(248.04).scale(0));  // exact up to the product's rounding
  CHECK(c.efficiency.collective_efficiency * c.intra_node_bytes_per_second / 1e9 ==
        doctest::Approx(225.0).scale(0));  // exact up to the product's rounding
  CHECK(c.efficiency.hbm_efficiency == 0.80);
}

TEST_CASE("dgx-h100 and dgx-h200: H100/H200 SXM and DGX H100 datasheet figures") {
  const ClusterConfig h100 = load_cluster("dgx-h100");
  // H100 whitepaper (2022), SXM5 BF16 tensor: 989.4 TFLOPS dense, 1,978.9 with sparsity; the
  // datasheet prints the latter rounded, 1,979: 2 * peak must round to it.
  CHECK(h100.gpu.peak_bf16_flops_per_second == 989.4e12);
  CHECK(std::abs(2 * h100.gpu.peak_bf16_flops_per_second - 1979e12) <= 0.5e12);
  CHECK(h100.gpu.peak_fp32_flops_per_second == 66.9e12);
  CHECK(h100.gpu.hbm_bytes == 81559LL * (1 << 20));  // nvidia-smi: 81559 MiB, not 80 GiB
  CHECK(h100.gpu.hbm_bytes_per_second == 3.35e12);
  CHECK(h100.intra_node_bytes_per_second == 900e9 / 2);          // NVLink 4 bidirectional / 2
  CHECK(h100.inter_node_bytes_per_second_per_gpu == 400e9 / 8);  // NDR 400 Gb/s
  CHECK(h100.price_per_gpu_hour == 98.32 / 8);                   // p5.48xlarge / 8 GPUs
  // The asymptote of training GEMMs at 0.61 x 989.4 = 603.5 TFLOP/s, below cuBLAS's ~700
  // TFLOP/s peak on large square GEMMs; flash attention at 0.40 x 989.4 = 396 TFLOP/s, above
  // FlashAttention-2's 335 TFLOP/s (Dao 2023) as cuDNN's fused attention is.
  CHECK(h100.efficiency.gemm_peak_efficiency * h100.gpu.peak_bf16_flops_per_second / 1e12 ==
        doctest::Approx(603.534).scale(0));  // 0.61 * 989.4
  CHECK(h100.efficiency.attention_efficiency * h100.gpu.peak_bf16_flops_per_second / 1e12 ==
        doctest::Approx(395.76).scale(0));  // 0.40 * 989.4
  // A tile's fixed prologue and epilogue weigh more against an SM with 3x A100's math rate.
  CHECK(h100.efficiency.gemm_half_efficiency_dim >
        load_cluster("dgx-a100-80gb").efficiency.gemm_half_efficiency_dim);

  const ClusterConfig h200 = load_cluster("dgx-h200");
  CHECK(h200.gpu.hbm_bytes == 143771LL * (1 << 20));  // nvidia-smi: 143771 MiB ("141 GB")
  CHECK(h200.gpu.hbm_bytes_per_second == 4.8e12);
  CHECK(h200.gpu.peak_bf16_flops_per_second == h100.gpu.peak_bf16_flops_per_second);
  CHECK(h200.intra_node_bytes_per_second == h100.intra_node_bytes_per_second);
  CHECK(h200.inter_node_bytes_per_second_per_gpu == h100.inter_node_bytes_per_second_per_gpu);
  CHECK(h200.efficiency.gemm_peak_efficiency == h100.efficiency.gemm_peak_efficiency);
}

TEST_CASE("h800-2048: the DeepSeek-V3 report's cluster") {
  const ClusterConfig c = load_cluster("h800-2048");
  CHECK(c.gpus_per_node == 8);                           // report Sec. 3.1
  CHECK(c.inter_node_bytes_per_second_per_gpu == 50e9);  // Sec. 3.2.2: IB 50 GB/s
  CHECK(c.intra_node_bytes_per_second * 0.8 ==
        doctest::Approx(160e9).scale(0));  // 160 GB/s achieved
  CHECK(c.gpu.peak_bf16_flops_per_second ==
        load_cluster("dgx-h100").gpu.peak_bf16_flops_per_second);
  CHECK(c.price_per_gpu_hour == 2.0);  // Sec. 1: $2 per H800 GPU-hour
}

TEST_CASE("grand-teton-h100: torchtitan's lower-TDP HBM2e H100, the unknown peak at mid-interval") {
  const ClusterConfig c = load_cluster("grand-teton-h100");
  // torchtitan benchmarks/llama3_h100_202412_torchtitan.md: 8 H100 per host over NVLink, 2.4
  // TB/s HBM2e, 400 Gb/s RDMA per GPU.
  CHECK(c.gpus_per_node == 8);
  CHECK(c.gpu.hbm_bytes_per_second == 2.4e12);
  CHECK(c.inter_node_bytes_per_second_per_gpu == 400e9 / 8);
  // docs/performance.md footnote 1: peak "between SXM and NVL", value unknown -> the midpoint
  // of the NVL datasheet's 1,671 sparse / 2 = 835.5 and the SXM's 989.4 dense BF16 TFLOP/s.
  CHECK(c.gpu.peak_bf16_flops_per_second == doctest::Approx((1671e12 / 2 + 989.4e12) / 2).scale(0));
  CHECK(c.gpu.peak_bf16_flops_per_second > 1671e12 / 2);
  CHECK(c.gpu.peak_bf16_flops_per_second < load_cluster("dgx-h100").gpu.peak_bf16_flops_per_second);
  CHECK(c.gpu.peak_fp32_flops_per_second == doctest::Approx((60e12 + 66.9e12) / 2).scale(0));
  CHECK(c.gpu.peak_fp8_flops_per_second ==
        doctest::Approx((3341e12 / 2 + 3957.8e12 / 2) / 2).scale(0));
  CHECK(c.gpu.hbm_bytes == 94'000'000'000);  // the smallest of torchtitan's 94, 95, 96 GB
  // The same GH100 silicon and NVLink 4 as dgx-h100: the efficiency set is not refitted.
  const ClusterConfig h100 = load_cluster("dgx-h100");
  CHECK(c.intra_node_bytes_per_second == h100.intra_node_bytes_per_second);
  CHECK(c.efficiency.gemm_peak_efficiency == h100.efficiency.gemm_peak_efficiency);
  CHECK(c.efficiency.gemm_half_efficiency_dim == h100.efficiency.gemm_half_efficiency_dim);
}

TEST_CASE("local-cpu: fp32 CPU ranks with stated assumptions") {
  const ClusterConfig c = load_cluster("local-cpu");
  CHECK(c.precision == Precision::kFp32);
  CHECK(compute_element_bytes(c.precision) == 4);  // IEEE single
  CHECK(compute_element_bytes(Precision::kBf16Mixed) == 2);
  CHECK(c.gpus_per_node == 8);
  CHECK(c.gpu.peak_fp32_flops_per_second == 5e10);
  CHECK(c.gpu.peak_bf16_flops_per_second == c.gpu.peak_fp32_flops_per_second);
  CHECK(c.gpu.hbm_bytes == 3 * kGiB);
  CHECK(c.reserved_bytes_per_gpu == kGiB / 10);   // 0.1 GiB rounded down to whole bytes
  CHECK_FALSE(c.price_per_gpu_hour.has_value());  // owned hardware: no list price
  CHECK(c.efficiency.gemm_half_efficiency_dim == 32);
  CHECK(meshplan::models::to_string(c.precision) == "fp32");
  CHECK(meshplan::models::to_string(Precision::kBf16Mixed) == "bf16");
}

TEST_CASE("round trip: cluster_to_json -> cluster_from_json gives the same cluster") {
  for (const auto& name : cluster_preset_names()) {
    CAPTURE(name);
    const ClusterConfig cluster = load_cluster(name);
    check_same(cluster_from_json(cluster_to_json(cluster), "round-trip"), cluster);
  }
  // A cluster without a list price is written as null and read back as none.
  CHECK(cluster_to_json(load_cluster("grand-teton-h100"))["price_per_gpu_hour"].is_null());
  CHECK_FALSE(load_cluster("grand-teton-h100").price_per_gpu_hour.has_value());
}

TEST_CASE("load_cluster reads a file by path; unknown names list the presets") {
  nlohmann::json json = cluster_to_json(load_cluster("dgx-h100"));
  json["name"] = "my-h100";
  json["gpus_per_node"] = 4;
  const ClusterConfig cluster = load_cluster(write_temp_file("my-h100.json", json.dump()));
  CHECK(cluster.name == "my-h100");
  CHECK(cluster.gpus_per_node == 4);

  CHECK(input_error([] { load_cluster("dgx-b200"); }) ==
        "unknown cluster preset 'dgx-b200' (not a file either); presets: dgx-a100-40gb, "
        "dgx-a100-80gb, dgx-h100, dgx-h200, grand-teton-h100, h800-2048, local-cpu");

  const std::string broken = write_temp_file("broken-cluster.json", "{\"name\": }");
  const std::string message = input_error([&] { load_cluster(broken); });
  // nlohmann's parser stops at the '}' in column 10 of line 1, where a value was expected.
  CHECK(message.rfind(broken + ": malformed JSON: parse error at line 1, column 10: ", 0) == 0);
}

// Unit mistakes: bounds three orders of magnitude around every device we know (an H200's
// 9.89e14 FLOP/s and 4.8e12 B/s, a CPU core's 5e10 FLOP/s, InfiniBand's 1e-6 s; see
// cluster_config.cpp). A bandwidth of 1e-300 B/s used to give a step of 2.9e296 s.
TEST_CASE("cluster errors: absurd sizes and numbers JSON cannot hold") {
  const nlohmann::json good = cluster_to_json(load_cluster("dgx-h100"));
  nlohmann::json json = good;
  json["intra_node_bytes_per_second"] = 1e-300;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: intra_node_bytes_per_second: absurdly small, less than 1000000 "
        "(1e-300)");
  json = good;
  json["inter_node_bytes_per_second_per_gpu"] = 4e17;  // 400 GB/s typed as bits times 1e6
  CHECK(cluster_error_for(json) ==
        "mycluster.json: inter_node_bytes_per_second_per_gpu: absurdly large, more than 1e+16 "
        "(4e+17)");
  json = good;
  json["gpu"]["peak_bf16_flops_per_second"] = 989.0;  // TFLOP/s where FLOP/s belong
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.peak_bf16_flops_per_second: absurdly small, less than 1000000 "
        "(989)");
  json = good;
  json["gpu"]["peak_fp32_flops_per_second"] = 1e19;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.peak_fp32_flops_per_second: absurdly large, more than 1e+18 (1e+19)");
  json = good;
  json["gpu"]["hbm_bytes_per_second"] = 1e17;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.hbm_bytes_per_second: absurdly large, more than 1e+16 (1e+17)");
  json = good;
  json["intra_node_latency_seconds"] = 2.5;  // microseconds typed as seconds
  CHECK(cluster_error_for(json) ==
        "mycluster.json: intra_node_latency_seconds: absurdly large, more than 1 (2.5)");
  json = good;
  json["gpu"]["hbm_bytes"] = int64_t{1} << 51;  // 2 PiB
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.hbm_bytes: must be between 1 and 1125899906842624 "
        "(2251799813685248)");
  json = good;
  json["gpus_per_node"] = 9'000'000'000'000'000'000;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpus_per_node: absurdly large, more than 10000000 (9000000000000000000)");
  json = good;
  json["gpus_per_node"] = std::numeric_limits<uint64_t>::max();  // would wrap to -1
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpus_per_node: out of range, more than 2^63 - 1 "
        "(18446744073709551615)");

  // A number beyond double: one line, as malformed JSON (it was an internal error, exit 1).
  const std::string path =
      write_temp_file("overflow-cluster.json", R"({"name": "x", "price_per_gpu_hour": 1e400})");
  CHECK(input_error([&] { load_cluster(path); }) ==
        path + ": malformed JSON: number overflow parsing '1e400'");
}

TEST_CASE("cluster errors name the field path and the value") {
  const nlohmann::json good = cluster_to_json(load_cluster("dgx-a100-80gb"));

  nlohmann::json json = good;
  json["efficiency"]["gemm_peak_efficiency"] = 1.5;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: efficiency.gemm_peak_efficiency: must be in [0.001, 1] "
        "(1.5)");

  json = good;
  json["efficiency"]["collective_efficiency"] = 0;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: efficiency.collective_efficiency: must be in [0.001, 1] (0)");

  // Absurd but finite values that made infinite step times and costs (sweep --html then never
  // ended): an efficiency of 1e-300, x_half 1e300, a 1e300 USD GPU-hour.
  json = good;
  json["efficiency"]["hbm_efficiency"] = 1e-300;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: efficiency.hbm_efficiency: must be in [0.001, 1] (1e-300)");
  json = good;
  json["efficiency"]["gemm_half_efficiency_dim"] = 1e300;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: efficiency.gemm_half_efficiency_dim: absurdly large, more than 1000000 "
        "(1e+300)");
  json = good;
  json["price_per_gpu_hour"] = 1e300;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: price_per_gpu_hour: must be between 0 and 1e6 USD, or null for no price "
        "(1e+300)");

  // No price is stated as null; a forgotten one is named.
  json = good;
  json.erase("price_per_gpu_hour");
  CHECK(cluster_error_for(json) ==
        "mycluster.json: price_per_gpu_hour: missing (a number of USD, or null)");
  json = good;
  json["price_per_gpu_hour"] = "cheap";
  CHECK(cluster_error_for(json) ==
        "mycluster.json: price_per_gpu_hour: expected a number (\"cheap\")");

  json = good;
  json["gpu"].erase("hbm_bytes");
  CHECK(cluster_error_for(json) == "mycluster.json: gpu.hbm_bytes: missing");

  json = good;
  json["gpu"]["peak_bf16_flops_per_second"] = "312e12";
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.peak_bf16_flops_per_second: expected a number (\"312e12\")");

  json = good;
  json["gpu"]["peak_fp32_flops_per_second"] = -1;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: gpu.peak_fp32_flops_per_second: must be positive and finite (-1)");

  json = good;
  json.erase("gpu");
  CHECK(cluster_error_for(json) == "mycluster.json: gpu: missing");

  json = good;
  json["gpu"] = "A100";
  CHECK(cluster_error_for(json) == "mycluster.json: gpu: expected an object (\"A100\")");

  json = good;
  json["gpus_per_node"] = "8";
  CHECK(cluster_error_for(json) == "mycluster.json: gpus_per_node: expected an integer (\"8\")");

  json = good;
  json["gpus_per_node"] = 0;
  CHECK(cluster_error_for(json) == "mycluster.json: gpus_per_node: must be at least 1 (0)");

  json = good;
  json["intra_node_bytes_per_second"] = 0;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: intra_node_bytes_per_second: must be positive and finite (0)");

  json = good;
  json["inter_node_latency_seconds"] = -5e-6;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: inter_node_latency_seconds: must be positive and finite (-5e-06)");

  json = good;
  json["reserved_bytes_per_gpu"] = 80 * kGiB;  // all of HBM
  CHECK(cluster_error_for(json) ==
        "mycluster.json: reserved_bytes_per_gpu: must be in [0, gpu.hbm_bytes) "
        "(85899345920)");

  json = good;
  json["price_per_gpu_hour"] = -1;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: price_per_gpu_hour: must be between 0 and 1e6 USD, or null for no price "
        "(-1)");

  json = good;
  json["precision"] = "fp16";
  CHECK(cluster_error_for(json) ==
        "mycluster.json: precision: unsupported precision (fp16); supported: bf16, fp32");

  json = good;
  json["nics_per_node"] = 8;
  CHECK(cluster_error_for(json) == "mycluster.json: nics_per_node: unknown field (8)");

  json = good;
  json["efficiency"]["matmul_efficiency"] = 0.5;
  CHECK(cluster_error_for(json) ==
        "mycluster.json: efficiency.matmul_efficiency: unknown field (0.5)");

  json = good;
  json["gpu"]["name"] = "";
  CHECK(cluster_error_for(json) == "mycluster.json: gpu.name: must not be empty (\"\")");

  ClusterConfig cluster = load_cluster("dgx-h100");
  cluster.gpu.hbm_bytes_per_second = INFINITY;  // JSON cannot spell it (1e400 is malformed)
  CHECK(input_error([&] { validate_cluster(cluster, "h100"); }) ==
        "h100: gpu.hbm_bytes_per_second: must be positive and finite (inf)");
}
