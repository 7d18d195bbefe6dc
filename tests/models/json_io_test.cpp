// models/json_io.cpp: input files are read to a bound and parsed to a nesting bound, each
// refusal one line naming the file; an atomic write goes through a device or pipe instead of
// replacing it.

#include "meshplan/json_io.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>

#include "input_error.h"
#include "meshplan/errors.h"
#include "meshplan/temporary_files.h"

namespace meshplan {
namespace {

namespace fs = std::filesystem;

std::string temp_file(const std::string& name) {
  return (fs::temp_directory_path() /
          ("meshplan_json_io_" + name + "_" + std::to_string(::getpid())))
      .string();
}

TEST_CASE("parse_json_text: 64 levels parse, 65 are refused before anything recurses") {
  const std::string at_limit = std::string(64, '[') + std::string(64, ']');
  CHECK(parse_json_text(at_limit, "ok.json").is_array());
  // 100,000 levels: dumping or destroying such a value recursively would overflow the stack.
  for (const int depth : {65, 100000}) {
    CHECK(test::input_error([&] {
            parse_json_text(std::string(depth, '[') + std::string(depth, ']'), "deep.json");
          }) == "deep.json: malformed JSON: nested deeper than 64 levels");
  }
  const std::string objects = [] {
    std::string text;
    for (int i = 0; i < 1000; ++i) {
      text += "{\"a\":";
    }
    return text + "1" + std::string(1000, '}');
  }();
  CHECK(test::input_error([&] { parse_json_text(objects, "deep.json"); }) ==
        "deep.json: malformed JSON: nested deeper than 64 levels");
  CHECK(test::input_error([&] { parse_json_text("{\"a\": 1e400}", "big.json"); }) ==
        "big.json: malformed JSON: number overflow parsing '1e400'");
}

TEST_CASE("parse_json_text: a key given twice in one object is refused, in any object") {
  CHECK(test::input_error([] { parse_json_text("{\"tp\": 1, \"tp\": 8}", "p.json"); }) ==
        "p.json: malformed JSON: key \"tp\" given twice in one object");
  CHECK(test::input_error([] {
          parse_json_text("{\"layout\": {\"tp\": 1, \"pp\": 2, \"tp\": 8}}", "p.json");
        }) == "p.json: malformed JSON: key \"tp\" given twice in one object");
  // The same key in sibling or nested objects is fine.
  const nlohmann::json json = parse_json_text(
      "{\"a\": {\"tp\": 1}, \"b\": [{\"tp\": 2}, {\"tp\": 3}], \"tp\": 4}", "ok.json");
  CHECK(json.at("b").at(1).at("tp") == 3);
}

TEST_CASE("read_input_file: a device without end stops at 256 MiB; a directory is named") {
  CHECK(test::input_error([] { read_input_file("/dev/zero"); }) ==
        "/dev/zero: larger than 256 MiB, not a meshplan input");
  CHECK(test::input_error([] { read_input_file("/"); }) == "/: cannot read file (a directory)");
  CHECK(read_input_file("/dev/null").empty());
}

TEST_CASE("write_file_atomic: a regular file is replaced whole, a device written through") {
  const std::string path = temp_file("atomic");
  std::ofstream(path) << "old\n";
  write_file_atomic(path, "new\n");
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  CHECK(line == "new");
  fs::remove(path);
  write_file_atomic("/dev/null", "discarded\n");
  CHECK(fs::is_character_file("/dev/null"));
  CHECK_THROWS_WITH_AS(write_file_atomic("/dev/full", "x\n"), "/dev/full: cannot write file",
                       RuntimeError);
  CHECK(fs::is_character_file("/dev/full"));
  CHECK(is_special_file("/dev/null"));
  CHECK_FALSE(is_special_file("/"));
  CHECK_FALSE(is_special_file(path));  // removed: does not exist
}

TEST_CASE("a registered temporary is removed when SIGTERM stops the process") {
  const std::string kept = temp_file("kept");
  const std::string temporary = temp_file("partial") + ".tmp.1";
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // as a killed `simulate --trace` mid-write: one temporary on disk
    remove_temporaries_on_signals();
    std::ofstream(temporary) << "partial";
    std::ofstream(kept) << "kept";
    register_temporary(temporary);
    std::raise(SIGTERM);
    ::_exit(0);  // not reached: the default action ends the process
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  CHECK_FALSE(fs::exists(temporary));
  CHECK(fs::exists(kept));  // only what was registered is removed
  fs::remove(kept);
}

}  // namespace
}  // namespace meshplan
