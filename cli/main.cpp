// meshplan: plan, simulate and run distributed training of transformers.
// The only place that catches errors: one line to stderr, exit 2 for bad input, 1 at run time.

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "commands.h"
#include "meshplan/errors.h"

int main(int argc, char** argv) {
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // Command-line syntax errors are bad input: one line, exit 2.
    std::fprintf(stderr, "meshplan: error: %s\n", e.what());
    return 2;
  } catch (const meshplan::InputError& e) {
    std::fprintf(stderr, "meshplan: error: %s\n", e.what());
    return 2;
  } catch (const meshplan::RuntimeError& e) {
    std::fprintf(stderr, "meshplan: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshplan: internal error: %s\n", e.what());
    return 1;
  }
  return 0;
}
