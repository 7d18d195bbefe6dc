// OutputSet (reports/output_set.cpp): a command's outputs are written all or none, and one file
// cannot be two outputs.

#include "meshplan/output_set.h"

#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "input_error.h"
#include "meshplan/errors.h"

namespace meshplan::reports {
namespace {

namespace fs = std::filesystem;

// A fresh directory for one test case, removed at its end.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("meshplan_output_set_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  size_t num_entries() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(path), {}));
  }
};

std::string contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("OutputSet: every output written") {
  const TempDir dir("all");
  OutputSet outputs;
  outputs.add("--json", dir.file("a.json"));
  outputs.add("--svg", dir.file("b.svg"));
  outputs.add("--trace", "");  // not given
  CHECK(outputs.wants("--json"));
  CHECK_FALSE(outputs.wants("--trace"));
  outputs.set("--json", "{}\n");
  outputs.set("--svg", "<svg/>\n");
  outputs.commit();
  CHECK(contents(dir.file("a.json")) == "{}\n");
  CHECK(contents(dir.file("b.svg")) == "<svg/>\n");
  CHECK(dir.num_entries() == 2);  // no temporary file left
}

TEST_CASE("OutputSet: a second output that cannot be written leaves the first file untouched") {
  const TempDir dir("clobber");
  std::ofstream(dir.file("keep.json")) << "keep me\n";
  OutputSet outputs;
  outputs.add("--json", dir.file("keep.json"));
  const std::string unwritable = dir.file("no_such_dir/plan.json");
  outputs.add("--save-plan", unwritable);
  outputs.set("--json", "new\n");
  outputs.set("--save-plan", "plan\n");
  CHECK_THROWS_WITH_AS(outputs.commit(), (unwritable + ": cannot write file").c_str(),
                       RuntimeError);
  CHECK(contents(dir.file("keep.json")) == "keep me\n");
  CHECK(dir.num_entries() == 1);  // keep.json only: the first temporary was removed
}

TEST_CASE("OutputSet: a directory is not an output file") {
  const TempDir dir("directory");
  std::ofstream(dir.file("keep.json")) << "keep me\n";
  fs::create_directory(dir.file("out"));
  OutputSet outputs;
  outputs.add("--json", dir.file("keep.json"));
  outputs.add("--svg", dir.file("out"));
  outputs.set("--json", "new\n");
  outputs.set("--svg", "<svg/>\n");
  CHECK_THROWS_WITH_AS(outputs.commit(), (dir.file("out") + ": cannot write file").c_str(),
                       RuntimeError);
  CHECK(contents(dir.file("keep.json")) == "keep me\n");
  CHECK(dir.num_entries() == 2);
}

TEST_CASE("OutputSet: one file given to two outputs is an error naming both flags") {
  OutputSet outputs;
  outputs.add("--json", "report.json");
  CHECK(meshplan::test::input_error([&] { outputs.add("--save-plan", "report.json"); }) ==
        "--json and --save-plan: the same output file (report.json)");
  // The same file spelled another way.
  CHECK(meshplan::test::input_error([&] { outputs.add("--svg", "./x/../report.json"); }) ==
        "--json and --svg: the same output file (./x/../report.json)");
  outputs.add("--trace", "trace.json");  // a different file is fine
  CHECK(outputs.wants("--trace"));
}

TEST_CASE("OutputSet: an output on an input file is refused, before or after it is registered") {
  const TempDir dir("input");
  std::ofstream(dir.file("model.json")) << "{}\n";
  OutputSet outputs;
  outputs.add_input("--model", dir.file("model.json"));
  outputs.add_input("--cluster", "dgx-h100");  // a preset name, no file: nothing to protect
  CHECK(meshplan::test::input_error([&] { outputs.add("--save-plan", dir.file("model.json")); }) ==
        "--save-plan: the same file as --model (" + dir.file("model.json") + ")");
  outputs.add("--json", "dgx-h100");
  OutputSet later;
  later.add("--json", dir.file("./model.json"));
  CHECK(meshplan::test::input_error([&] {
          later.add_input("the plan file", dir.file("model.json"));
        }) == "--json: the same file as the plan file (" + dir.file("model.json") + ")");
  CHECK(contents(dir.file("model.json")) == "{}\n");
}

TEST_CASE("OutputSet: a device or pipe is written through, never replaced by a file") {
  const TempDir dir("device");
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = contents(fifo); });
  OutputSet outputs;
  outputs.add("--json", fifo);
  outputs.add("--svg", "/dev/null");
  outputs.add("--trace", "/dev/null");  // the same device twice is harmless
  outputs.set("--json", "{\"a\": 1}\n");
  outputs.set("--svg", "<svg/>\n");
  outputs.set("--trace", "[]\n");
  outputs.commit();
  reader.join();
  CHECK(received == "{\"a\": 1}\n");
  CHECK(fs::is_fifo(fifo));
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(dir.num_entries() == 1);  // no temporary beside the pipe
  // A full device fails as an unwritable file does.
  OutputSet full;
  full.add("--json", "/dev/full");
  full.set("--json", "x\n");
  CHECK_THROWS_WITH_AS(full.commit(), "/dev/full: cannot write file", RuntimeError);
  CHECK(fs::is_character_file("/dev/full"));
}

}  // namespace meshplan::reports
