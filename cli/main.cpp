// meshplan: plan, simulate and run distributed training of transformers.
// The only place that catches errors: one line to stderr, exit 2 for bad input, 1 at run time.

#include <fmt/format.h>
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>

#include "commands.h"
#include "decimal_number.h"
#include "error_line.h"
#include "meshplan/errors.h"
#include "meshplan/temporary_files.h"

namespace {

// Whether this process is a rank other than 0 of a job mpirun or srun started: a command-line
// error, which every rank meets alike, is then printed by rank 0 alone.
bool launched_as_other_rank() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr) {
      return std::string(value) != "0";
    }
  }
  return false;
}

// A CLI11 check function: "" for a value meshplan::cli::parse_decimal<Number> reads whole, else
// "<out_of_range> (value)" or "<malformed> (value)".
template <typename Number>
std::function<std::string(std::string&)> decimal_validator(const char* out_of_range,
                                                           const char* malformed) {
  return [out_of_range, malformed](const std::string& value) {
    switch (meshplan::cli::parse_decimal<Number>(value).error) {
      case meshplan::cli::DecimalError::kOutOfRange:
        return fmt::format("{} ({})", out_of_range, value);
      case meshplan::cli::DecimalError::kMalformed:
        return fmt::format("{} ({})", malformed, value);
      case meshplan::cli::DecimalError::kNone:
        break;
    }
    return std::string();
  };
}

// CLI11's "Could not convert: --zero = 2147483648" as "--zero: out of range (2147483648)".
std::string conversion_error_line(const std::string& message) {
  const std::string prefix = "Could not convert: ";
  const size_t separator = message.find(" = ");
  if (!message.starts_with(prefix) || separator == std::string::npos) {
    return message;
  }
  const std::string name = message.substr(prefix.size(), separator - prefix.size());
  return name + ": out of range for this option (" + message.substr(separator + 3) + ")";
}

}  // namespace

int main(int argc, char** argv) {
  meshplan::remove_temporaries_on_signals();
  // The search builds and frees pipeline schedules of up to tens of MB per layout (memory.cpp
  // peak_in_flight, one op per micro-batch and chunk); above glibc's 32 MiB mmap ceiling each
  // was a fresh mmap whose pages faulted in again, most of a large-batch search's time. Kept in
  // the heap, freed memory is reused.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"meshplan: plan, simulate and run distributed training of large transformers"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "meshplan " MESHPLAN_VERSION);
  meshplan::cli::register_info_commands(app);
  meshplan::cli::register_plan_commands(app);
  meshplan::cli::register_execute_command(app);
  meshplan::cli::register_simulate_command(app);
  meshplan::cli::register_compare_command(app);
  meshplan::cli::register_calibrate_command(app);
  meshplan::cli::register_sweep_command(app);
  // An option given an empty value (--json "") would read as not given: refused by name.
  const CLI::Validator non_empty(
      [](const std::string& value) { return value.empty() ? std::string("empty value") : ""; }, "",
      "non-empty");
  // An integer is written in decimal and fits 64 bits: CLI11 would read 99999999999999999999 as
  // 2^63 - 1 and 0x8 as 8. A real number is one number, nothing after it: CLI11 reports "abc"
  // as "Could not convert"; inf and nan are left to each option's own range check.
  const CLI::Validator decimal_int64(
      decimal_validator<int64_t>("out of the 64-bit integer range", "expected a decimal integer"),
      "", "decimal-int64");
  const CLI::Validator decimal_number(
      decimal_validator<double>("out of the floating-point range", "expected a number"), "",
      "decimal-number");
  for (CLI::App* command : app.get_subcommands({})) {
    for (CLI::Option* option : command->get_options()) {
      if (option->get_type_size() > 0 && !option->get_positional()) {
        option->check(non_empty);
        if (option->get_type_name() == "INT") {
          option->check(decimal_int64);
        } else if (option->get_type_name() == "FLOAT") {
          option->check(decimal_number);
        }
      }
    }
  }
  try {
    if (argc > 1 && argv[1][0] != '-') {
      std::string names;
      bool known = false;
      for (const CLI::App* command : app.get_subcommands({})) {
        known = known || command->check_name(argv[1]);
        names += (names.empty() ? "" : ", ") + command->get_name();
      }
      if (!known) {
        throw meshplan::InputError(
            fmt::format("unknown command '{}' (expected one of: {})", argv[1], names));
      }
    }
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ConversionError& e) {
    // The validators above let through only well-formed numbers, so what CLI11 cannot convert
    // is out of the option's own type (--zero 2147483648 for a 32-bit field).
    if (!launched_as_other_rank()) {
      meshplan::cli::print_error("error", conversion_error_line(e.what()));
    }
    return 2;
  } catch (const CLI::ParseError& e) {
    // Command-line syntax errors are bad input: one line, exit 2.
    if (!launched_as_other_rank()) {
      meshplan::cli::print_error("error", e.what());
    }
    return 2;
  } catch (const meshplan::InputError& e) {
    meshplan::cli::print_error("error", e.what());
    return 2;
  } catch (const meshplan::RuntimeError& e) {
    meshplan::cli::print_error("error", e.what());
    return 1;
  } catch (const std::exception& e) {
    meshplan::cli::print_error("internal error", e.what());
    return 1;
  }
  // What went to stdout must have arrived: `plan --emit megatron > launch.sh` on a full disk
  // would otherwise leave an empty script and exit 0.
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    meshplan::cli::print_error("error", "stdout: cannot write (a full disk or a closed reader)");
    return 1;
  }
  return 0;
}
