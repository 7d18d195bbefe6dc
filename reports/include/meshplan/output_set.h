#pragma once
// The output files of one command, written all or none.

#include <string>
#include <vector>

namespace meshplan::reports {

/// Each output is registered with the flag that names it before the work starts (so a path
/// given twice fails before anything runs), then given its content; commit() writes every one
/// to a temporary file beside its path and renames them over their paths only once all were
/// written, so a failed output leaves every existing file as it was.
class OutputSet {
 public:
  /// Registers `path` for `flag`; an empty path (the flag was not given) is skipped. Throws
  /// InputError "<flag> and <flag>: the same output file (<path>)" when another registered flag
  /// names the same file.
  void add(const std::string& flag, const std::string& path);
  /// Registers an input file (`what` names it in errors: "--model", "the plan file"), which no
  /// output may overwrite: an output registered before or after on the same file throws
  /// InputError "<flag>: the same file as <what> (<path>)". A path that does not exist (a
  /// preset name) or names a device or pipe is skipped.
  void add_input(const std::string& what, const std::string& path);
  /// Whether `flag` was registered with a path.
  bool wants(const std::string& flag) const;
  /// The content of `flag`'s file. Precondition: wants(flag).
  void set(const std::string& flag, std::string content);
  /// Writes the outputs (each must have its content). Throws RuntimeError "<path>: cannot write
  /// file" for the first that cannot be written; then no output has been replaced and no
  /// temporary file is left.
  void commit();

 private:
  struct Output {
    std::string flag;
    std::string path;
    std::string content;
    bool has_content = false;
  };
  struct Input {
    std::string what;
    std::string path;
  };
  std::vector<Output> outputs_;
  std::vector<Input> inputs_;
};

}  // namespace meshplan::reports
