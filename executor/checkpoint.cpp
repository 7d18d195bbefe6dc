#include "checkpoint.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "collective_agreement.h"
#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "mpi_check.h"
#include "parameters.h"

namespace meshplan::executor {

namespace {

constexpr const char* kCheckpointFormat = "meshplan checkpoint";
constexpr int kCheckpointVersion = 1;

std::string step_directory(int64_t step) {
  return fmt::format("step_{:08d}", step);
}
std::string shard_name(int rank) {
  return fmt::format("rank_{:05d}.bin", rank);
}

// What a checkpoint must agree on to be resumed by this run.
nlohmann::json identity(const planner::Plan& plan, const ExecuteOptions& options) {
  return {{"model", models::model_to_json(plan.model)},
          {"layout", planner::layout_to_json(plan.layout)},
          {"num_ranks", plan.num_gpus},
          {"data", options.data},
          {"learning_rate", options.learning_rate},
          {"init_seed", kInitSeed}};
}

}  // namespace

void write_checkpoint(const std::string& dir, Trainer& trainer, const planner::Plan& plan,
                      const ExecuteOptions& options, MPI_Comm world) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  const std::filesystem::path root(dir);
  const std::string step_dir = step_directory(trainer.steps_done());
  std::string error;
  if (rank == 0) {
    std::error_code code;
    std::filesystem::create_directories(root / step_dir, code);
    if (code) {
      error = fmt::format("rank 0: {}: cannot create checkpoint directory: {}",
                          (root / step_dir).string(), code.message());
    }
  }
  // Everyone waits for the directory, then writes its shard; the first failure stops all.
  std::string shared = broadcast_string(world, error);
  if (!shared.empty()) {
    throw RuntimeError(shared);
  }
  try {
    write_file_atomic((root / step_dir / shard_name(rank)).string(), trainer.shard_bytes());
  } catch (const RuntimeError& e) {
    error = fmt::format("rank {}: {}", rank, e.what());
  }
  int failed = error.empty() ? 0 : 1;
  int any = 0;
  MPI_CHECK(MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, world));
  if (any != 0) {
    throw RuntimeError(error.empty() ? fmt::format("rank {}: another rank could not write its "
                                                   "checkpoint shard",
                                                   rank)
                                     : error);
  }
  if (rank == 0) {
    nlohmann::json manifest = {{"format", kCheckpointFormat},
                               {"version", kCheckpointVersion},
                               {"step", trainer.steps_done()},
                               {"directory", step_dir},
                               {"identity", identity(plan, options)}};
    write_file_atomic((root / "manifest.json").string(), manifest.dump(2) + "\n");
    // Older steps are no longer named by the manifest.
    for (const auto& entry : std::filesystem::directory_iterator(root)) {
      const std::string name = entry.path().filename().string();
      if (entry.is_directory() && name.rfind("step_", 0) == 0 && name != step_dir) {
        std::error_code ignored;
        std::filesystem::remove_all(entry.path(), ignored);
      }
    }
  }
  MPI_CHECK(MPI_Barrier(world));
}

void read_checkpoint(const std::string& dir, Trainer& trainer, const planner::Plan& plan,
                     const ExecuteOptions& options, MPI_Comm world) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  const std::filesystem::path root(dir);
  const std::string manifest_path = (root / "manifest.json").string();
  std::string error;
  std::string manifest_text;
  if (rank == 0) {
    try {
      const nlohmann::json manifest = read_json_file(manifest_path);
      if (require_string(manifest, "format", manifest_path) != kCheckpointFormat ||
          require_int(manifest, "version", manifest_path) != kCheckpointVersion) {
        throw InputError(fmt::format("{}: format: not a meshplan checkpoint manifest (version {})",
                                     manifest_path, kCheckpointVersion));
      }
      require_int(manifest, "step", manifest_path);
      require_string(manifest, "directory", manifest_path);
      const nlohmann::json expected = identity(plan, options);
      for (const auto& [field, value] : expected.items()) {
        if (!manifest.contains("identity") ||
            manifest["identity"].value(field, nlohmann::json()) != value) {
          throw InputError(
              fmt::format("{}: identity.{}: the checkpoint was written by another "
                          "run ({} here)",
                          manifest_path, field, value.dump()));
        }
      }
      manifest_text = manifest.dump();
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  agree_on_input_errors(world, error);
  const nlohmann::json manifest = nlohmann::json::parse(broadcast_string(world, manifest_text));
  const int64_t step = manifest["step"].get<int64_t>();
  const std::string shard_path =
      (root / manifest["directory"].get<std::string>() / shard_name(rank)).string();
  try {
    std::ifstream in(shard_path, std::ios::binary);
    if (!in) {
      throw InputError(fmt::format("{}: cannot read checkpoint shard (rank {})", shard_path, rank));
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    trainer.load_shard_bytes(buffer.str(), shard_path);
    if (trainer.steps_done() != step) {
      throw InputError(fmt::format("{}: step: shard is from step {}, the manifest says {}",
                                   shard_path, trainer.steps_done(), step));
    }
  } catch (const InputError& e) {
    error = e.what();
  }
  agree_on_input_errors(world, error);
}

}  // namespace meshplan::executor
