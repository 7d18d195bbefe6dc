#pragma once
// Helpers shared by the planner tests: layouts in one line, temporary files, fixture paths and
// the exact text of a thrown InputError.

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "input_error.h"
#include "meshplan/cost_model.h"
#include "meshplan/errors.h"
#include "meshplan/layout.h"
#include "meshplan/models.h"

namespace meshplan::planner::test {

/// 32 layers of h 4096, 32 heads of 128 (no GQA), f 16384 GELU with LayerNorm and rope, 2048
/// tokens per sequence and a 64-token vocabulary (so the embedding and LM head add almost
/// nothing to their stages): the planner suites' square model, named `name`.
inline models::TransformerConfig square_model(const std::string& name) {
  models::TransformerConfig model;
  model.name = name;
  model.num_layers = 32;
  model.hidden_size = 4096;
  model.num_attention_heads = 32;
  model.num_kv_heads = 32;
  model.head_dim = 128;
  model.ffn_hidden_size = 16384;
  model.vocab_size = 64;
  model.seq_length = 2048;
  model.max_position_embeddings = 2048;
  model.activation = models::Activation::kGelu;
  model.norm = models::Norm::kLayerNorm;
  model.positions = models::Positions::kRope;
  model.tied_embeddings = false;
  return model;
}

/// A Llama-style model of `num_layers` small layers: h 64, 4 heads of 16 (2 kv), SwiGLU ffn 128,
/// vocab 256, seq 32, RMSNorm, rope, untied, no biases (the uneven-stage suites' model).
inline models::TransformerConfig tiny_llama(int64_t num_layers) {
  models::TransformerConfig model;
  model.name = "tiny-llama";
  model.num_layers = num_layers;
  model.hidden_size = 64;
  model.num_attention_heads = 4;
  model.num_kv_heads = 2;
  model.head_dim = 16;
  model.ffn_hidden_size = 128;
  model.vocab_size = 256;
  model.seq_length = 32;
  model.max_position_embeddings = 32;
  model.activation = models::Activation::kSwiglu;
  model.norm = models::Norm::kRmsNorm;
  model.positions = models::Positions::kRope;
  model.tied_embeddings = false;
  return model;
}

/// Stage 0's memory of megatron-7.5b (seq 2048, vocab 51,200) on DGX-H100 under fsdp at ZeRO 3,
/// dp 64, pp 1, micro-batch 1, no recompute, with `options` (framework set to fsdp): the loss
/// memory tests' plan (compile_test, xentropy_loss_test).
inline MemoryBreakdown fsdp_loss_test_memory(PlanOptions options) {
  options.framework = Framework::kFsdp;
  Layout layout;
  layout.dp = 64;
  layout.global_batch = 64;
  layout.zero = 3;
  return estimate_plan(models::load_model("megatron-7.5b"), models::load_cluster("dgx-h100"),
                       layout, options)
      .stages[0]
      .memory;
}

/// A layout from its sizes; the other fields keep Layout's defaults (no recompute, no sequence
/// parallelism, ZeRO 0, 1F1B, tp-dp-pp placement).
/// Default options under `framework` (designated initializers trip -Wmissing-field-initializers).
inline PlanOptions options_for(Framework framework) {
  PlanOptions options;
  options.framework = framework;
  return options;
}

/// Default options with the vocabulary padded to a multiple of tp only (divisor 1).
inline PlanOptions unpadded_vocab_options() {
  PlanOptions options;
  options.make_vocab_size_divisible_by = 1;
  return options;
}

inline Layout make_layout(int64_t tp, int64_t pp, int64_t dp, int64_t micro_batch,
                          int64_t global_batch) {
  Layout layout;
  layout.tp = tp;
  layout.pp = pp;
  layout.dp = dp;
  layout.micro_batch = micro_batch;
  layout.global_batch = global_batch;
  return layout;
}

/// The tiny-moe preset and the local-cpu cluster, loaded once (the MoE suites' fixtures).
/// The collective of an inventory named `what`, or nullptr.
inline const CollectiveTraffic* find_traffic(const std::vector<CollectiveTraffic>& list,
                                             const char* what) {
  for (const CollectiveTraffic& traffic : list) {
    if (traffic.what == what) {
      return &traffic;
    }
  }
  return nullptr;
}

inline const models::TransformerConfig& tiny_moe() {
  static const models::TransformerConfig model = models::load_model("tiny-moe");
  return model;
}
inline const models::ClusterConfig& local_cpu() {
  static const models::ClusterConfig cluster = models::load_cluster("local-cpu");
  return cluster;
}

/// tests/data/planner/<file>, from the source tree.
inline std::string planner_fixture(const std::string& file) {
  return std::string(MESHPLAN_SOURCE_DIR) + "/tests/data/planner/" + file;
}

/// A per-process directory under the temp directory, removed when the test binary exits.
struct TempDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("meshplan_planner_test_" + std::to_string(::getpid()));
  TempDir() { std::filesystem::create_directories(path); }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

/// A path under the per-process temp directory (the file is not created).
inline std::string temp_path(const std::string& name) {
  static const TempDir dir;
  return (dir.path / name).string();
}

/// Writes `content` to a fresh file under the temp directory and returns its path.
inline std::string write_temp_file(const std::string& name, const std::string& content) {
  const std::string path = temp_path(name);
  std::ofstream(path) << content;
  return path;
}

using meshplan::test::input_error;

}  // namespace meshplan::planner::test
