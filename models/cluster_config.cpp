// Cluster descriptions (models/presets/clusters/*.json), their validation and load_cluster.

#include <fmt/format.h>

#include <array>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string_view>

#include "meshplan/input_kind.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"
#include "preset_source.h"

namespace meshplan::models {

namespace {

constexpr std::array<std::string_view, 12> kClusterFields = {"name",
                                                             "gpu",
                                                             "gpus_per_node",
                                                             "intra_node_bytes_per_second",
                                                             "intra_node_latency_seconds",
                                                             "inter_node_bytes_per_second_per_gpu",
                                                             "inter_node_latency_seconds",
                                                             "reserved_bytes_per_gpu",
                                                             "price_per_gpu_hour",
                                                             "precision",
                                                             "efficiency",
                                                             "source"};
constexpr std::array<std::string_view, 6> kGpuFields = {
    "name",      "peak_bf16_flops_per_second", "peak_fp32_flops_per_second",
    "hbm_bytes", "hbm_bytes_per_second",       "peak_fp8_flops_per_second"};
constexpr std::array<std::string_view, 6> kEfficiencyFields = {
    "gemm_peak_efficiency", "gemm_half_efficiency_dim", "attention_efficiency",
    "hbm_efficiency",       "collective_efficiency",    "fp8_gemm_peak_efficiency"};

// A nested object such as "gpu", checked for type and unknown keys. Its fields are read through
// flatten() so that json_io's errors name the full path ("gpu.hbm_bytes: missing").
const nlohmann::json& require_object(const nlohmann::json& json, const std::string& field,
                                     const std::string& source) {
  if (!json.contains(field) || json[field].is_null()) {
    throw InputError(fmt::format("{}: {}: missing", source, field));
  }
  if (!json[field].is_object()) {
    throw InputError(
        fmt::format("{}: {}: expected an object ({})", source, field, json[field].dump()));
  }
  return json[field];
}

nlohmann::json flatten(const nlohmann::json& object, const std::string& prefix) {
  nlohmann::json flat = nlohmann::json::object();
  for (const auto& [key, value] : object.items()) {
    flat[prefix + key] = value;
  }
  return flat;
}

// Bounds that catch unit mistakes (GB/s written where bytes/s belong, a typo'd exponent) while
// leaving three orders of magnitude around every device we know: an H200 does 9.89e14 dense bf16
// FLOP/s with 4.8e12 B/s of HBM (NVIDIA H200 datasheet, 2024), NVLink 4 moves 4.5e11 B/s per
// direction, a CPU core about 5e10 FLOP/s (local-cpu); InfiniBand's latency is about 1e-6 s.
constexpr double kMinFlopsPerSecond = 1e6;
constexpr double kMaxFlopsPerSecond = 1e18;
constexpr double kMinBytesPerSecond = 1e6;
constexpr double kMaxBytesPerSecond = 1e16;
constexpr double kMaxLatencySeconds = 1;
constexpr int64_t kMaxHbmBytes = int64_t{1} << 50;  // 1 PiB, 7,000 times an H200's 141 GB
constexpr int64_t kMaxGpusPerNode = 10'000'000;     // what `plan --gpus` accepts in all

void check_positive(double value, const char* field, const std::string& source) {
  if (!std::isfinite(value) || value <= 0) {
    throw InputError(fmt::format("{}: {}: must be positive and finite ({})", source, field, value));
  }
}

// Positive, finite and within [min, max]; the error says which bound was crossed.
void check_in_range(double value, double min, double max, const char* field,
                    const std::string& source) {
  check_positive(value, field, source);
  if (value < min) {
    throw InputError(
        fmt::format("{}: {}: absurdly small, less than {} ({})", source, field, min, value));
  }
  if (value > max) {
    throw InputError(
        fmt::format("{}: {}: absurdly large, more than {} ({})", source, field, max, value));
  }
}

// An efficiency: a fraction of a datasheet peak, at least kMinEfficiency (below it every time
// would be over a thousand times the datasheet's: a typo, and a path to infinite costs).
constexpr double kMinEfficiency = 1e-3;
void check_fraction(double value, const char* field, const std::string& source) {
  if (!std::isfinite(value) || value < kMinEfficiency || value > 1) {
    throw InputError(fmt::format("{}: {}: must be in [0.001, 1] ({})", source, field, value));
  }
}

}  // namespace

std::string to_string(Precision precision) {
  return precision == Precision::kBf16Mixed ? "bf16" : "fp32";
}

int64_t compute_element_bytes(Precision precision) {
  return precision == Precision::kBf16Mixed ? 2 : 4;  // bfloat16 is 16 bits, IEEE fp32 32 bits
}

bool price_in_range(double usd_per_gpu_hour) {
  constexpr double kMaxPricePerGpuHour = 1e6;
  return std::isfinite(usd_per_gpu_hour) && usd_per_gpu_hour >= 0 &&
         usd_per_gpu_hour <= kMaxPricePerGpuHour;
}

void validate_cluster(const ClusterConfig& cluster, const std::string& source) {
  require_name(cluster.name, "name", source);
  require_name(cluster.gpu.name, "gpu.name", source);
  const GpuSpec& gpu = cluster.gpu;
  check_in_range(gpu.peak_bf16_flops_per_second, kMinFlopsPerSecond, kMaxFlopsPerSecond,
                 "gpu.peak_bf16_flops_per_second", source);
  check_in_range(gpu.peak_fp32_flops_per_second, kMinFlopsPerSecond, kMaxFlopsPerSecond,
                 "gpu.peak_fp32_flops_per_second", source);
  if (gpu.hbm_bytes <= 0 || gpu.hbm_bytes > kMaxHbmBytes) {
    throw InputError(fmt::format("{}: gpu.hbm_bytes: must be between 1 and {} ({})", source,
                                 kMaxHbmBytes, gpu.hbm_bytes));
  }
  check_in_range(gpu.hbm_bytes_per_second, kMinBytesPerSecond, kMaxBytesPerSecond,
                 "gpu.hbm_bytes_per_second", source);
  if (cluster.gpus_per_node < 1) {
    throw InputError(
        fmt::format("{}: gpus_per_node: must be at least 1 ({})", source, cluster.gpus_per_node));
  }
  if (cluster.gpus_per_node > kMaxGpusPerNode) {
    throw InputError(fmt::format("{}: gpus_per_node: absurdly large, more than {} ({})", source,
                                 kMaxGpusPerNode, cluster.gpus_per_node));
  }
  check_in_range(cluster.intra_node_bytes_per_second, kMinBytesPerSecond, kMaxBytesPerSecond,
                 "intra_node_bytes_per_second", source);
  check_in_range(cluster.intra_node_latency_seconds, 0, kMaxLatencySeconds,
                 "intra_node_latency_seconds", source);
  check_in_range(cluster.inter_node_bytes_per_second_per_gpu, kMinBytesPerSecond,
                 kMaxBytesPerSecond, "inter_node_bytes_per_second_per_gpu", source);
  check_in_range(cluster.inter_node_latency_seconds, 0, kMaxLatencySeconds,
                 "inter_node_latency_seconds", source);
  if (cluster.reserved_bytes_per_gpu < 0 || cluster.reserved_bytes_per_gpu >= gpu.hbm_bytes) {
    throw InputError(fmt::format("{}: reserved_bytes_per_gpu: must be in [0, gpu.hbm_bytes) ({})",
                                 source, cluster.reserved_bytes_per_gpu));
  }
  // The bound sweep's --price has: a GPU-hour above a million USD is a typo.
  if (cluster.price_per_gpu_hour && !price_in_range(*cluster.price_per_gpu_hour)) {
    throw InputError(fmt::format(
        "{}: price_per_gpu_hour: must be between 0 and 1e6 USD, or null for no price ({})", source,
        *cluster.price_per_gpu_hour));
  }
  const ComputeEfficiency& e = cluster.efficiency;
  check_fraction(e.gemm_peak_efficiency, "efficiency.gemm_peak_efficiency", source);
  // x_half: the GEMM dimension at which half of e_max is reached; real ones are 32-2048.
  check_in_range(e.gemm_half_efficiency_dim, 1e-3, 1e6, "efficiency.gemm_half_efficiency_dim",
                 source);
  check_fraction(e.attention_efficiency, "efficiency.attention_efficiency", source);
  check_fraction(e.hbm_efficiency, "efficiency.hbm_efficiency", source);
  check_fraction(e.collective_efficiency, "efficiency.collective_efficiency", source);
  // FP8 is optional (A100 has none); a GPU that has it needs both its peak and its GEMM
  // efficiency.
  if ((gpu.peak_fp8_flops_per_second != 0) != (e.fp8_gemm_peak_efficiency != 0)) {
    throw InputError(fmt::format(
        "{}: gpu.peak_fp8_flops_per_second and efficiency.fp8_gemm_peak_efficiency: give both "
        "or neither ({}, {})",
        source, gpu.peak_fp8_flops_per_second, e.fp8_gemm_peak_efficiency));
  }
  if (gpu.peak_fp8_flops_per_second != 0) {
    check_in_range(gpu.peak_fp8_flops_per_second, kMinFlopsPerSecond, kMaxFlopsPerSecond,
                   "gpu.peak_fp8_flops_per_second", source);
    check_fraction(e.fp8_gemm_peak_efficiency, "efficiency.fp8_gemm_peak_efficiency", source);
  }
}

ClusterConfig cluster_from_json(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object ({})", source, json.dump()));
  }
  reject_other_input_kind(json, InputKind::kCluster, source);
  reject_unknown_fields(json, kClusterFields, source);
  ClusterConfig cluster;
  cluster.name = require_string(json, "name", source);

  const nlohmann::json& gpu_object = require_object(json, "gpu", source);
  reject_unknown_fields(gpu_object, kGpuFields, source, "gpu.");
  const nlohmann::json gpu = flatten(gpu_object, "gpu.");
  cluster.gpu.name = require_string(gpu, "gpu.name", source);
  cluster.gpu.peak_bf16_flops_per_second =
      require_number(gpu, "gpu.peak_bf16_flops_per_second", source);
  cluster.gpu.peak_fp32_flops_per_second =
      require_number(gpu, "gpu.peak_fp32_flops_per_second", source);
  cluster.gpu.hbm_bytes = require_int(gpu, "gpu.hbm_bytes", source);
  if (gpu.contains("gpu.peak_fp8_flops_per_second")) {
    cluster.gpu.peak_fp8_flops_per_second =
        require_number(gpu, "gpu.peak_fp8_flops_per_second", source);
  }
  cluster.gpu.hbm_bytes_per_second = require_number(gpu, "gpu.hbm_bytes_per_second", source);

  cluster.gpus_per_node = require_int(json, "gpus_per_node", source);
  cluster.intra_node_bytes_per_second = require_number(json, "intra_node_bytes_per_second", source);
  cluster.intra_node_latency_seconds = require_number(json, "intra_node_latency_seconds", source);
  cluster.inter_node_bytes_per_second_per_gpu =
      require_number(json, "inter_node_bytes_per_second_per_gpu", source);
  cluster.inter_node_latency_seconds = require_number(json, "inter_node_latency_seconds", source);
  cluster.reserved_bytes_per_gpu = require_int(json, "reserved_bytes_per_gpu", source);
  // Required, so a forgotten price is named; null states that the cluster has none.
  if (!json.contains("price_per_gpu_hour")) {
    throw InputError(
        fmt::format("{}: price_per_gpu_hour: missing (a number of USD, or null)", source));
  }
  if (!json["price_per_gpu_hour"].is_null()) {
    cluster.price_per_gpu_hour = require_number(json, "price_per_gpu_hour", source);
  }

  const std::string precision = require_string(json, "precision", source);
  if (precision == "bf16") {
    cluster.precision = Precision::kBf16Mixed;
  } else if (precision == "fp32") {
    cluster.precision = Precision::kFp32;
  } else {
    throw InputError(fmt::format("{}: precision: unsupported precision ({}); supported: bf16, fp32",
                                 source, precision));
  }

  const nlohmann::json& efficiency_object = require_object(json, "efficiency", source);
  reject_unknown_fields(efficiency_object, kEfficiencyFields, source, "efficiency.");
  const nlohmann::json efficiency = flatten(efficiency_object, "efficiency.");
  ComputeEfficiency& e = cluster.efficiency;
  e.gemm_peak_efficiency = require_number(efficiency, "efficiency.gemm_peak_efficiency", source);
  e.gemm_half_efficiency_dim =
      require_number(efficiency, "efficiency.gemm_half_efficiency_dim", source);
  e.attention_efficiency = require_number(efficiency, "efficiency.attention_efficiency", source);
  e.hbm_efficiency = require_number(efficiency, "efficiency.hbm_efficiency", source);
  e.collective_efficiency = require_number(efficiency, "efficiency.collective_efficiency", source);
  if (efficiency.contains("efficiency.fp8_gemm_peak_efficiency")) {
    e.fp8_gemm_peak_efficiency =
        require_number(efficiency, "efficiency.fp8_gemm_peak_efficiency", source);
  }

  if (json.contains("source")) {
    cluster.source = require_string(json, "source", source);
  }
  validate_cluster(cluster, source);
  return cluster;
}

nlohmann::json cluster_to_json(const ClusterConfig& cluster) {
  const GpuSpec& gpu = cluster.gpu;
  const ComputeEfficiency& e = cluster.efficiency;
  nlohmann::json json{
      {"name", cluster.name},
      {"gpu",
       {{"name", gpu.name},
        {"peak_bf16_flops_per_second", gpu.peak_bf16_flops_per_second},
        {"peak_fp32_flops_per_second", gpu.peak_fp32_flops_per_second},
        {"hbm_bytes", gpu.hbm_bytes},
        {"hbm_bytes_per_second", gpu.hbm_bytes_per_second}}},
      {"gpus_per_node", cluster.gpus_per_node},
      {"intra_node_bytes_per_second", cluster.intra_node_bytes_per_second},
      {"intra_node_latency_seconds", cluster.intra_node_latency_seconds},
      {"inter_node_bytes_per_second_per_gpu", cluster.inter_node_bytes_per_second_per_gpu},
      {"inter_node_latency_seconds", cluster.inter_node_latency_seconds},
      {"reserved_bytes_per_gpu", cluster.reserved_bytes_per_gpu},
      {"price_per_gpu_hour", cluster.price_per_gpu_hour
                                 ? nlohmann::json(*cluster.price_per_gpu_hour)
                                 : nlohmann::json(nullptr)},
      {"precision", to_string(cluster.precision)},
      {"efficiency",
       {{"gemm_peak_efficiency", e.gemm_peak_efficiency},
        {"gemm_half_efficiency_dim", e.gemm_half_efficiency_dim},
        {"attention_efficiency", e.attention_efficiency},
        {"hbm_efficiency", e.hbm_efficiency},
        {"collective_efficiency", e.collective_efficiency}}},
      {"source", cluster.source},
  };
  if (gpu.peak_fp8_flops_per_second > 0) {  // written only for GPUs with FP8
    json["gpu"]["peak_fp8_flops_per_second"] = gpu.peak_fp8_flops_per_second;
    json["efficiency"]["fp8_gemm_peak_efficiency"] = e.fp8_gemm_peak_efficiency;
  }
  return json;
}

bool is_cpu_cluster(const ClusterConfig& cluster) {
  return cluster.gpu.name == "cpu-core";  // local-cpu's device name, kept by calibrate
}

ClusterConfig load_cluster(const std::string& name_or_path) {
  const ResolvedJson resolved =
      resolve_preset_or_file(name_or_path, "cluster", embedded_cluster_presets());
  return cluster_from_json(resolved.json, resolved.source);
}

std::vector<std::string> cluster_preset_names() {
  return preset_names(embedded_cluster_presets());
}

}  // namespace meshplan::models
