// OutputSet (reports/output_set.cpp): a command's outputs are written all or none, and one file
// cannot be two outputs.

#include "meshplan/output_set.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

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

}  // namespace meshplan::reports
