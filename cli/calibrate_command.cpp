// meshplan calibrate [--out PROFILE.json]: measures this machine under mpirun and writes a
// cluster profile that plan --cluster accepts. MPI lives here, as in execute_command.cpp: input
// errors are the same on every rank (rank 0 prints the one line, all exit 2); a failure while
// measuring names its rank and aborts the job.

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "commands.h"
#include "meshplan/calibrate.h"
#include "meshplan/calibrate_report.h"
#include "meshplan/errors.h"
#include "meshplan/executor.h"
#include "meshplan/output_set.h"

namespace meshplan::cli {

namespace {

struct CalibrateArguments {
  std::string out_path, json_path;
  std::string base = "local-cpu";
  executor::CalibrationOptions options;
  std::optional<double> max_message_mib;  // default kDefaultMaxMib; --quick caps it at 1
};

constexpr double kDefaultMaxMib = 16;

void calibrate(const CalibrateArguments& args, int rank) {
  const double max_mib = args.max_message_mib.value_or(kDefaultMaxMib);
  // At least 4 KiB: the sizes are 1 KiB x 4^i, and the fit needs two of them to tell the
  // latency from the bandwidth.
  if (!(max_mib >= 1.0 / 256) || max_mib > 1024) {
    throw InputError(fmt::format(
        "--max-mib: must be between 1/256 (4 KiB: two message sizes) and 1024 ({})", max_mib));
  }
  // --quick measures messages up to 1 MiB: a larger --max-mib would be ignored.
  if (args.options.quick && args.max_message_mib && max_mib > 1) {
    throw InputError(fmt::format(
        "--max-mib: above --quick's 1 MiB; drop --quick or give at most 1 ({})", max_mib));
  }
  executor::CalibrationOptions options = args.options;
  options.max_message_bytes = static_cast<int64_t>(max_mib * (1 << 20));
  if (options.quick) {
    options.max_message_bytes = std::min<int64_t>(options.max_message_bytes, 1 << 20);
  }
  // Every rank registers the outputs: a clash (two outputs, or --out on --base) fails alike.
  reports::OutputSet outputs;
  outputs.add("--out", args.out_path);
  outputs.add("--json", args.json_path);
  outputs.add_input("--base", args.base);
  const models::ClusterConfig base = models::load_cluster(args.base);
  if (base.precision != models::Precision::kFp32) {
    executor::fit_cluster(base, args.base, {});  // throws its InputError, the same on every rank
  }
  for (const auto& [flag, path] : {std::pair{"--out", args.out_path}, {"--json", args.json_path}}) {
    if (!path.empty()) {
      executor::check_output_file(path, flag, MPI_COMM_WORLD);
    }
  }
  const executor::Measurements measurements = executor::measure_machine(options, MPI_COMM_WORLD);
  const executor::CalibrationFit fit = executor::fit_cluster(base, args.base, measurements);
  if (rank != 0) {
    return;
  }
  const reports::Report report = reports::calibrate_report(measurements, fit);
  if (outputs.wants("--out")) {
    outputs.set("--out", models::cluster_to_json(fit.cluster).dump(2) + "\n");
  }
  if (outputs.wants("--json")) {
    outputs.set("--json", report.json.dump(2) + "\n");
  }
  outputs.commit();
  std::fputs(report.table.c_str(), stdout);
  if (outputs.wants("--out")) {
    std::fprintf(stdout, "# profile written to %s (plan --cluster %s)\n", args.out_path.c_str(),
                 args.out_path.c_str());
  }
  std::fflush(stdout);
  if (!reports::calibration_outputs_correct(measurements)) {
    throw RuntimeError("rank 0: calibrate: a collective returned wrong values (#wrong above)");
  }
}

void run_calibrate(const CalibrateArguments& args) {
  run_as_mpi_rank([&](int rank) { calibrate(args, rank); });
}

}  // namespace

void register_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArguments>();
  CLI::App* calibrate = app.add_subcommand(
      "calibrate", "Measure GEMMs, memory bandwidth and MPI collectives; fit a cluster profile");
  calibrate->add_option("--out", args->out_path, "Write the fitted cluster profile (JSON)");
  calibrate->add_option("--json", args->json_path, "Write the measurements and fit as JSON");
  calibrate->add_option("--base", args->base, "Cluster the profile starts from (CPU, fp32)")
      ->capture_default_str();
  calibrate->add_flag("--quick", args->options.quick,
                      "Smaller grid, messages up to 1 MiB (about a second)");
  calibrate->add_option("--max-mib", args->max_message_mib,
                        "Largest collective message, MiB (default 16; --quick: at most 1)");
  calibrate->callback([args] { run_calibrate(*args); });
}

}  // namespace meshplan::cli
