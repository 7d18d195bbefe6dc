// meshplan models | meshplan clusters: one row per preset (nccl-tests layout: names line, units
// line, '#' before every line that is not data).

#include <fmt/format.h>

#include "meshplan/models.h"
#include "meshplan/plan_report.h"
#include "meshplan/units.h"

namespace meshplan::reports {

std::string format_model_presets() {
  std::string out =
      fmt::format("#{:>15} {:>6} {:>7} {:>6} {:>4} {:>7} {:>8} {:>6} {:>8}\n", "model", "layers",
                  "hidden", "heads", "kv", "ffn", "vocab", "seq", "params");
  out += fmt::format("#{:>15} {:>6} {:>7} {:>6} {:>4} {:>7} {:>8} {:>6} {:>8}\n", "", "", "", "",
                     "", "", "", "", "(B)");
  for (const std::string& name : models::model_preset_names()) {
    const models::TransformerConfig m = models::load_model(name);
    out += fmt::format(" {:>15} {:>6} {:>7} {:>6} {:>4} {:>7} {:>8} {:>6} {:>8.3f}\n", name,
                       m.num_layers, m.hidden_size, m.num_attention_heads, m.num_kv_heads,
                       m.ffn_hidden_size, m.vocab_size, m.seq_length,
                       static_cast<double>(models::count_parameters(m).total) / 1e9);
  }
  return out;
}

std::string format_cluster_presets() {
  std::string out = fmt::format("#{:>14} {:>16} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8}\n", "cluster",
                                "gpu", "peak", "memory", "hbm", "intra", "inter", "price");
  out += fmt::format("#{:>14} {:>16} {:>9} {:>7} {:>9} {:>9} {:>9} {:>8}\n", "", "", "(TFLOP/s)",
                     "(GiB)", "(GB/s)", "(GB/s)", "(GB/s)", "($/h)");
  for (const std::string& name : models::cluster_preset_names()) {
    const models::ClusterConfig c = models::load_cluster(name);
    const double peak = c.precision == models::Precision::kFp32 ? c.gpu.peak_fp32_flops_per_second
                                                                : c.gpu.peak_bf16_flops_per_second;
    const std::string price =
        c.price_per_gpu_hour ? fmt::format("{:.2f}", *c.price_per_gpu_hour) : "-";
    out += fmt::format(" {:>14} {:>16} {:>9.1f} {:>7.1f} {:>9.0f} {:>9.0f} {:>9.1f} {:>8}\n", name,
                       c.gpu.name, peak / 1e12,
                       static_cast<double>(c.gpu.hbm_bytes) / static_cast<double>(kBytesPerGiB),
                       c.gpu.hbm_bytes_per_second / 1e9, c.intra_node_bytes_per_second / 1e9,
                       c.inter_node_bytes_per_second_per_gpu / 1e9, price);
  }
  return out;
}

}  // namespace meshplan::reports
