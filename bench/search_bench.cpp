// Prints the speed of the exhaustive layout search: layouts evaluated, layouts per second and
// wall time, for the searches the planner is held to (GPT-3 175B on 1,024 A100s; the 1T model
// of Narayanan et al. 2021 on 3,072 A100s; Llama 3 405B on 16,384 H100s, and at 128K context with
// context parallelism searched, `plan --cp auto`; DeepSeek-V3 on 2,048 H800s). Target: each
// under 1 s on one core.

#include <fmt/format.h>

#include <chrono>

#include "meshplan/models.h"
#include "meshplan/search.h"

namespace {

// `seq_length` 0 keeps the model's; `search_cp` searches context parallelism as --cp auto.
void bench(const char* model_name, const char* cluster_name, int64_t gpus, int64_t global_batch,
           int64_t seq_length = 0, bool search_cp = false) {
  using namespace meshplan;
  models::TransformerConfig model = models::load_model(model_name);
  if (seq_length > 0) {
    model.seq_length = seq_length;
  }
  const models::ClusterConfig cluster = models::load_cluster(cluster_name);
  planner::SearchSpace space;
  space.num_gpus = gpus;
  space.global_batch = global_batch;
  space.search_cp = search_cp;
  double best_seconds = 1e30;
  double cold_seconds = 0;
  planner::SearchResult result;
  for (int repeat = 0; repeat < 3; ++repeat) {  // the first run also generates the schedules
    const auto start = std::chrono::steady_clock::now();
    result = planner::search_layouts(model, cluster, space, planner::PlanOptions{},
                                     planner::Objective::kTime, 10);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best_seconds = std::min(best_seconds, seconds);
    if (repeat == 0) {
      cold_seconds = seconds;
    }
  }
  fmt::print(
      " {:>12} {:>14} {:>6} {:>6} {:>7} {:>3} {:>10} {:>9} {:>12.0f} {:>9.3f} {:>9.3f} "
      "{:>9.2f}\n",
      model_name, cluster_name, gpus, global_batch, model.seq_length, search_cp ? "yes" : "no",
      result.num_evaluated, result.num_feasible,
      static_cast<double>(result.num_evaluated) / best_seconds, cold_seconds, best_seconds,
      1e6 * best_seconds / static_cast<double>(result.num_evaluated));
}

}  // namespace

int main() {
  fmt::print(
      "# meshplan layout search, single thread: first run in the process (cold) and best of 3\n");
  fmt::print("#{:>12} {:>14} {:>6} {:>6} {:>7} {:>3} {:>10} {:>9} {:>12} {:>9} {:>9} {:>9}\n",
             "model", "cluster", "gpus", "batch", "seq", "cp", "layouts", "feasible", "layouts/s",
             "cold", "warm", "per");
  fmt::print("#{:>12} {:>14} {:>6} {:>6} {:>7} {:>3} {:>10} {:>9} {:>12} {:>9} {:>9} {:>9}\n", "",
             "", "", "(seq)", "(tok)", "", "", "", "(warm)", "(s)", "(s)", "(us)");
  bench("gpt3-175b", "dgx-a100-80gb", 1024, 1536);
  bench("megatron-1t", "dgx-a100-80gb", 3072, 3072);
  bench("llama3-405b", "dgx-h100", 16384, 2048);
  bench("llama3-405b", "dgx-h100", 16384, 128, 131072, true);
  // DeepSeek-V3 on its own cluster (technical report Sec. 3.1: 2,048 H800; Sec. 4.2: batch
  // ramped to 15,360 sequences of 4K), and Mixtral 8x7B on 256 H100 (ep searched).
  bench("deepseek-v3", "h800-2048", 2048, 15360);
  bench("mixtral-8x7b", "dgx-h100", 256, 1024);
  return 0;
}
