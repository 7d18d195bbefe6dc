#include "checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "collective_agreement.h"
#include "crc32c.h"
#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "mpi_check.h"
#include "parameters.h"
#include "watchdog.h"

namespace meshplan::executor {

namespace {

namespace fs = std::filesystem;

constexpr const char* kCheckpointFormat = "meshplan checkpoint";
constexpr int kCheckpointVersion = 2;  // 2: run id, kept checkpoints, per-shard CRC-32C

std::string step_directory(int64_t step) {
  return fmt::format("step_{:08d}", step);
}
std::string shard_name(int rank) {
  return fmt::format("rank_{:05d}.bin", rank);
}
std::string hex32(uint32_t value) {
  return fmt::format("{:08x}", value);
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

// A fresh id for this run's checkpoints (rank 0 draws it, everyone gets it).
std::string new_run_id() {
  std::random_device device;
  const uint64_t bits = (static_cast<uint64_t>(device()) << 32) ^ device() ^
                        static_cast<uint64_t>(::getpid()) ^
                        static_cast<uint64_t>(std::time(nullptr)) << 20;
  return fmt::format("{:016x}", bits);
}

std::string read_file_bytes(const std::string& path, int rank) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError(fmt::format("{}: cannot read checkpoint shard (rank {})", path, rank));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Rank 0's view of one shard entry of the manifest, checked against the bytes read.
void verify_shard(const std::string& path, const std::string& bytes, const nlohmann::json& entry) {
  const int64_t size = entry.at("bytes").get<int64_t>();
  if (static_cast<int64_t>(bytes.size()) != size) {
    throw InputError(fmt::format("{}: corrupt checkpoint shard: {} bytes, the manifest says {}",
                                 path, bytes.size(), size));
  }
  const std::string crc = hex32(crc32c(bytes));
  if (crc != entry.at("crc32c").get<std::string>()) {
    throw InputError(fmt::format("{}: corrupt checkpoint shard: CRC-32C {}, the manifest says {}",
                                 path, crc, entry.at("crc32c").get<std::string>()));
  }
}

}  // namespace

Checkpoints::Checkpoints(const planner::Plan& plan, const ExecuteOptions& options, MPI_Comm world)
    : plan_(plan), options_(options), world_(world) {
  MPI_CHECK(MPI_Comm_rank(world, &rank_));
  std::string error;
  if (rank_ == 0) {
    error = check_directory_();
    if (error.empty() && !options_.resume) {
      error = check_planned_steps_(0, nlohmann::json::array());
    }
    run_id_ = new_run_id();
  }
  agree_on_input_errors(world_, error, options_.collective_timeout_seconds);
  run_id_ = broadcast_string_(run_id_);
}

std::string Checkpoints::check_directory_() const {
  const fs::path root(options_.checkpoint_dir);
  std::error_code code;
  // --resume reads a checkpoint that must be there: a directory made here would be left behind.
  if (options_.resume && !fs::is_regular_file(root / "manifest.json", code)) {
    return fmt::format("{}: --resume: no checkpoint to resume from (no manifest.json{})",
                       options_.checkpoint_dir,
                       fs::is_directory(root, code) ? "" : ", no directory");
  }
  fs::create_directories(root, code);
  if (code || !fs::is_directory(root)) {
    return fmt::format("{}: --checkpoint-dir: cannot create the directory ({})",
                       options_.checkpoint_dir, code ? code.message() : "not a directory");
  }
  // Probe with a file of our own: permission bits say nothing to root or on read-only mounts.
  const std::string probe = (root / fmt::format(".meshplan_probe.{}", ::getpid())).string();
  std::FILE* file = std::fopen(probe.c_str(), "wb");
  if (file == nullptr) {
    return fmt::format("{}: --checkpoint-dir: cannot write in the directory ({})",
                       options_.checkpoint_dir, std::strerror(errno));
  }
  std::fclose(file);
  std::remove(probe.c_str());
  return "";
}

std::string Checkpoints::check_planned_steps_(int64_t steps_done, const nlohmann::json& own) const {
  if (options_.overwrite_checkpoints) {
    return "";
  }
  const fs::path root(options_.checkpoint_dir);
  if (!options_.resume && fs::exists(root / "manifest.json")) {
    return fmt::format(
        "{}: --checkpoint-dir: holds another run's checkpoint (manifest.json); --resume "
        "continues it, --overwrite-checkpoints replaces it",
        options_.checkpoint_dir);
  }
  // The directory's entries, not every planned step: a run of 10^9 steps spent 38 s here
  // before its first step. An entry is in the way when it is the directory of a step this run
  // will checkpoint (a multiple of --checkpoint-every in (steps_done, steps_done + steps]).
  std::error_code error;
  if (options_.checkpoint_every <= 0 || !fs::is_directory(root, error)) {
    return "";
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(root, error)) {
    const std::string name = entry.path().filename().string();
    int64_t step = 0;
    const char* digits = name.c_str() + std::min<size_t>(name.size(), 5);
    const auto [end, parse_error] = std::from_chars(digits, name.c_str() + name.size(), step);
    if (!name.starts_with("step_") || parse_error != std::errc() || *end != '\0' ||
        step_directory(step) != name) {
      continue;
    }
    const bool planned = step > steps_done && step - steps_done <= options_.steps &&
                         step % options_.checkpoint_every == 0;
    const bool ours = std::any_of(own.begin(), own.end(), [&name](const nlohmann::json& c) {
      return c.at("directory") == name;
    });
    if (planned && !ours) {
      return fmt::format(
          "{}: --checkpoint-dir: {} exists and is not this run's; --overwrite-checkpoints "
          "replaces it",
          options_.checkpoint_dir, name);
    }
  }
  return "";
}

nlohmann::json Checkpoints::read_manifest_() const {
  const std::string path = (fs::path(options_.checkpoint_dir) / "manifest.json").string();
  const nlohmann::json manifest = read_json_file(path);
  if (require_string(manifest, "format", path) != kCheckpointFormat ||
      require_int(manifest, "version", path) != kCheckpointVersion) {
    throw InputError(fmt::format("{}: format: not a meshplan checkpoint manifest (version {})",
                                 path, kCheckpointVersion));
  }
  require_string(manifest, "run_id", path);
  const nlohmann::json expected = identity(plan_, options_);
  for (const auto& [field, value] : expected.items()) {
    if (!manifest.contains("identity") ||
        manifest["identity"].value(field, nlohmann::json()) != value) {
      throw InputError(
          fmt::format("{}: identity.{}: the checkpoint was written by another run ({} here)", path,
                      field, value.dump()));
    }
  }
  const auto checkpoints = manifest.find("checkpoints");
  if (checkpoints == manifest.end() || !checkpoints->is_array() || checkpoints->empty()) {
    throw InputError(fmt::format("{}: checkpoints: missing or empty", path));
  }
  for (const nlohmann::json& c : *checkpoints) {
    if (!c.is_object() || !c.contains("step") || !c["step"].is_number_integer() ||
        !c.contains("directory") || !c["directory"].is_string() || !c.contains("shards") ||
        !c["shards"].is_array() || c["shards"].size() != static_cast<size_t>(plan_.num_gpus)) {
      throw InputError(fmt::format("{}: checkpoints: malformed entry ({})", path, c.dump()));
    }
    for (const nlohmann::json& shard : c["shards"]) {
      if (!shard.is_object() || !shard.contains("bytes") || !shard["bytes"].is_number_integer() ||
          !shard.contains("crc32c") || !shard["crc32c"].is_string()) {
        throw InputError(fmt::format("{}: checkpoints: malformed shard ({})", path, shard.dump()));
      }
    }
  }
  return manifest;
}

std::string Checkpoints::resume(Trainer& trainer) {
  std::string error;
  std::string manifest_text;
  if (rank_ == 0) {
    try {
      const nlohmann::json manifest = read_manifest_();
      error = check_planned_steps_(manifest["checkpoints"].back()["step"].get<int64_t>(),
                                   manifest["checkpoints"]);
      manifest_text = manifest.dump();
    } catch (const InputError& e) {
      error = e.what();
    }
  }
  agree_on_input_errors(world_, error, options_.collective_timeout_seconds);
  const nlohmann::json manifest = nlohmann::json::parse(broadcast_string_(manifest_text));
  run_id_ = manifest["run_id"].get<std::string>();
  kept_ = manifest["checkpoints"];
  verify_and_load_(kept_.back(), trainer);
  return (fs::path(options_.checkpoint_dir) / kept_.back()["directory"].get<std::string>())
      .string();
}

void Checkpoints::verify_and_load_(const nlohmann::json& checkpoint, Trainer& trainer) const {
  const std::string path = (fs::path(options_.checkpoint_dir) /
                            checkpoint["directory"].get<std::string>() / shard_name(rank_))
                               .string();
  std::string error;
  try {
    const std::string bytes = read_file_bytes(path, rank_);
    verify_shard(path, bytes, checkpoint["shards"][static_cast<size_t>(rank_)]);
    trainer.load_shard_bytes(bytes, path);
    const int64_t step = checkpoint["step"].get<int64_t>();
    if (trainer.steps_done() != step) {
      throw InputError(fmt::format("{}: step: shard is from step {}, the manifest says {}", path,
                                   trainer.steps_done(), step));
    }
  } catch (const InputError& e) {
    error = e.what();
  }
  agree_on_input_errors(world_, error, options_.collective_timeout_seconds);
}

void Checkpoints::wait_(MPI_Request* request, const char* what) const {
  Watchdog(options_.collective_timeout_seconds).wait(request, [this, what] {
    return fmt::format("{} ({})", what, world_ranks_of(world_));
  });
}

std::string Checkpoints::broadcast_string_(const std::string& text) const {
  return broadcast_string(world_, text, options_.collective_timeout_seconds);
}

nlohmann::json Checkpoints::gather_shards_(const std::string& bytes) const {
  int size = 0;
  MPI_CHECK(MPI_Comm_size(world_, &size));
  const long long mine[2] = {static_cast<long long>(bytes.size()),
                             static_cast<long long>(crc32c(bytes))};
  std::vector<long long> all(rank_ == 0 ? 2 * static_cast<size_t>(size) : 0);
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Igather(mine, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, 0, world_, &request));
  wait_(&request, "the checkpoint shards' sizes and CRCs");
  nlohmann::json shards = nlohmann::json::array();
  for (size_t r = 0; r < all.size() / 2; r++) {
    shards.push_back({{"file", shard_name(static_cast<int>(r))},
                      {"bytes", all[2 * r]},
                      {"crc32c", hex32(static_cast<uint32_t>(all[2 * r + 1]))}});
  }
  return shards;
}

std::string Checkpoints::write(Trainer& trainer) {
  const fs::path root(options_.checkpoint_dir);
  const std::string step_dir = step_directory(trainer.steps_done());
  std::string error;
  if (rank_ == 0) {
    std::error_code code;
    fs::create_directories(root / step_dir, code);
    if (code) {
      error = fmt::format("rank 0: {}: cannot create checkpoint directory: {}",
                          (root / step_dir).string(), code.message());
    }
  }
  // Everyone waits for the directory, then writes its shard; the first failure stops all.
  const std::string shared = broadcast_string_(error);
  if (!shared.empty()) {
    throw RuntimeError(shared);
  }
  const std::string bytes = trainer.shard_bytes();
  try {
    write_file_atomic((root / step_dir / shard_name(rank_)).string(), bytes);
  } catch (const RuntimeError& e) {
    error = fmt::format("rank {}: {}", rank_, e.what());
  }
  int failed = error.empty() ? 0 : 1;
  int any = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Iallreduce(&failed, &any, 1, MPI_INT, MPI_MAX, world_, &request));
  wait_(&request, "the checkpoint shards' write status");
  if (any != 0) {
    throw RuntimeError(error.empty() ? fmt::format("rank {}: another rank could not write its "
                                                   "checkpoint shard",
                                                   rank_)
                                     : error);
  }
  nlohmann::json shards = gather_shards_(bytes);
  if (rank_ == 0) {
    update_manifest_(trainer.steps_done(), step_dir, std::move(shards));
  }
  MPI_CHECK(MPI_Ibarrier(world_, &request));
  wait_(&request, "the checkpoint's closing barrier");
  return (root / step_dir).string();
}

void Checkpoints::update_manifest_(int64_t step, const std::string& directory,
                                   nlohmann::json shards) {
  const fs::path root(options_.checkpoint_dir);
  nlohmann::json kept = nlohmann::json::array();
  for (const nlohmann::json& c : kept_) {
    if (c["directory"] != directory) {  // a rewritten step replaces its older entry
      kept.push_back(c);
    }
  }
  kept.push_back({{"step", step}, {"directory", directory}, {"shards", std::move(shards)}});
  nlohmann::json removed = nlohmann::json::array();
  while (static_cast<int64_t>(kept.size()) > options_.keep_checkpoints) {
    removed.push_back(kept.front());
    kept.erase(kept.begin());
  }
  const nlohmann::json manifest = {
      {"format", kCheckpointFormat}, {"version", kCheckpointVersion},
      {"run_id", run_id_},           {"step", step},
      {"directory", directory},      {"identity", identity(plan_, options_)},
      {"checkpoints", kept}};
  write_file_atomic((root / "manifest.json").string(), manifest.dump(2) + "\n");
  kept_ = std::move(kept);
  // Only what this run wrote: its shards, then their directory if nothing else is in it.
  for (const nlohmann::json& c : removed) {
    const fs::path dir = root / c["directory"].get<std::string>();
    std::error_code ignored;
    for (const nlohmann::json& shard : c["shards"]) {
      fs::remove(dir / shard["file"].get<std::string>(), ignored);
    }
    fs::remove(dir, ignored);  // fails, harmlessly, on a directory that is not empty
  }
}

}  // namespace meshplan::executor
