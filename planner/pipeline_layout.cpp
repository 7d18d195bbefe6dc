// Megatron-Core's --pipeline-model-parallel-layout string, read into a Layout's split and
// written back (pipeline_parallel_layer_layout.py at d98e8a64).

#include "meshplan/pipeline_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <regex>

#include "meshplan/cost_model.h"
#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

// A layout string longer than this once unrolled is refused: the longest real one is a few
// hundred characters (one per layer and stage), and "t*999999999" must not allocate a gigabyte.
constexpr size_t kMaxUnrolledChars = 1'000'000;
constexpr size_t kMaxLayoutChars = 10'000;

// The string as an error message quotes it: cut after 80 characters, so that the message stays
// a readable line.
std::string quoted(const std::string& text) {
  constexpr size_t kShown = 80;
  return text.size() <= kShown
             ? fmt::format("\"{}\"", text)
             : fmt::format("\"{}...\" ({} characters)", text.substr(0, kShown), text.size());
}

// One pass of Python's re.sub(pattern, lambda x: x.group(1) * int(x.group(2)), text): every
// non-overlapping match, left to right, replaced by its first group repeated.
std::string unroll(const std::string& text, const std::regex& pattern, const std::string& field) {
  std::string out;
  auto tail = text.cbegin();
  for (std::sregex_iterator it(text.begin(), text.end(), pattern), end; it != end; ++it) {
    const std::smatch& match = *it;
    out.append(tail, match[0].first);
    const std::string digits = match[2].str();
    const size_t repeats = digits.size() > 9 ? kMaxUnrolledChars + 1 : std::stoul(digits);
    const std::string unit = match[1].str();
    if (unit.size() * repeats + out.size() > kMaxUnrolledChars) {
      throw InputError(fmt::format("{}: unrolls to more than {} characters ({})", field,
                                   kMaxUnrolledChars, quoted(match[0].str())));
    }
    for (size_t i = 0; i < repeats; ++i) {
      out += unit;
    }
    tail = match[0].second;
  }
  out.append(tail, text.cend());
  return out;
}

// The unrolled string split at '|' (Python's str.split: n separators give n + 1 stages, empty
// ones included), each stage's characters as given.
std::vector<std::string> virtual_stage_texts(const std::string& text, const std::string& field) {
  if (text.size() > kMaxLayoutChars) {
    throw InputError(
        fmt::format("{}: longer than {} characters ({})", field, kMaxLayoutChars, text.size()));
  }
  std::string plain;
  std::copy_if(text.begin(), text.end(), std::back_inserter(plain),
               [](char c) { return c != ','; });  // "purely cosmetic commas"
  static const std::regex kGroup(R"(\(([^)]+)\)\*(\d+))");
  static const std::regex kSingle(R"((.)\*(\d+))");
  const std::string unrolled = unroll(unroll(plain, kGroup, field), kSingle, field);
  std::vector<std::string> stages(1);
  for (char c : unrolled) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  return stages;
}

}  // namespace

std::vector<int64_t> parse_pipeline_layout(const models::TransformerConfig& model, int64_t pp,
                                           const std::string& text, const std::string& field) {
  const std::vector<std::string> stages = virtual_stage_texts(text, field);
  const auto count = static_cast<int64_t>(stages.size());
  if (pp < 1 || count % pp != 0) {
    throw InputError(
        fmt::format("{}: {} virtual stages, not a multiple of the pipeline parallel size {} ({})",
                    field, count, pp, quoted(text)));
  }
  std::vector<int64_t> decoder_layers;
  int64_t embeddings = 0, losses = 0, mtp_depths = 0;
  bool decoder_after_mtp = false;
  for (int64_t v = 0; v < count; ++v) {
    int64_t layers = 0;
    for (char c : stages[static_cast<size_t>(v)]) {
      const bool first_stage = v == 0, last_stage = v == count - 1;
      switch (c) {
        case 'E':
          // Megatron-Core: the first layer must be the embedding, exactly once.
          if (!first_stage || layers > 0 || embeddings > 0) {
            throw InputError(
                fmt::format("{}: 'E' (the embedding) must open virtual stage 0, once ({})", field,
                            quoted(text)));
          }
          ++embeddings;
          break;
        case 't':
          decoder_after_mtp = decoder_after_mtp || mtp_depths > 0;
          ++layers;
          break;
        case 'm':
          if (!last_stage) {
            throw InputError(fmt::format(
                "{}: 'm' in virtual stage {}: meshplan places the MTP depths in the last virtual "
                "stage, with the loss (Megatron-Core's standalone MTP is not modelled) ({})",
                field, v, quoted(text)));
          }
          ++mtp_depths;
          break;
        case 'L':
          ++losses;
          break;
        default:
          throw InputError(fmt::format(
              "{}: invalid layer character '{}' in virtual stage {}, known: E (embedding), t "
              "(decoder layer), m (MTP depth), L (loss) ({})",
              field, c, v, quoted(text)));
      }
    }
    decoder_layers.push_back(layers);
  }
  const std::string& last = stages.back();
  if (embeddings == 0) {
    throw InputError(fmt::format("{}: 'E' (the embedding) must open virtual stage 0, once ({})",
                                 field, quoted(text)));
  }
  if (losses != 1 || last.empty() || last.back() != 'L') {
    throw InputError(fmt::format("{}: 'L' (the loss) must close the last virtual stage, once ({})",
                                 field, quoted(text)));
  }
  const int64_t total = std::accumulate(decoder_layers.begin(), decoder_layers.end(), int64_t{0});
  if (total != model.num_layers) {
    throw InputError(fmt::format("{}: {} decoder layers 't', the model has num_layers {} ({})",
                                 field, total, model.num_layers, quoted(text)));
  }
  if (mtp_depths != model.mtp_num_layers) {
    throw InputError(fmt::format("{}: {} MTP depths 'm', the model has mtp_num_layers {} ({})",
                                 field, mtp_depths, model.mtp_num_layers, quoted(text)));
  }
  if (decoder_after_mtp) {
    throw InputError(fmt::format("{}: decoder layers 't' must come before the MTP depths 'm' ({})",
                                 field, quoted(text)));
  }
  const std::vector<int64_t> stage_sums = stage_sums_of_virtual_stages(pp, decoder_layers);
  for (int64_t stage = 0; stage < pp; ++stage) {
    if (stage_sums[static_cast<size_t>(stage)] == 0) {
      throw InputError(fmt::format(
          "{}: pipeline stage {} holds no decoder layer; meshplan needs at least one per stage "
          "({})",
          field, stage, quoted(text)));
    }
  }
  return decoder_layers;
}

PipelineLayoutSplit pipeline_layout_split(const models::TransformerConfig& model, int64_t pp,
                                          const std::string& text, const std::string& field) {
  const std::vector<int64_t> layers = parse_pipeline_layout(model, pp, text, field);
  Layout layout;
  layout.pp = pp;
  layout.vpp = static_cast<int64_t>(layers.size()) / pp;
  layout.stage_layers = canonical_stage_layers(stage_sums_of_virtual_stages(pp, layers));
  // The chunks the per-stage sums give without a virtual list (the even split only where
  // pp * vpp divides the layers), against the string's.
  bool same = !layout.stage_layers.empty() || model.num_layers % (pp * layout.vpp) == 0;
  for (size_t v = 0; same && v < layers.size(); ++v) {
    const int64_t stage = static_cast<int64_t>(v) % pp;
    const int64_t chunk = static_cast<int64_t>(v) / pp;
    same = stage_layer_range(model, layout, stage, chunk).count() == layers[v];
  }
  PipelineLayoutSplit split;
  split.vpp = layout.vpp;
  split.stage_layers = layout.stage_layers;
  if (!same) {
    split.virtual_stage_layers = layers;
  }
  return split;
}

std::string format_pipeline_layout(const models::TransformerConfig& model, const Layout& layout) {
  const int64_t stages = layout.pp * layout.vpp;
  // Each virtual stage with the '|' that follows it; "E" opens the first, "m"s and "L" close
  // the last.
  std::vector<std::string> texts;
  for (int64_t v = 0; v < stages; ++v) {
    const int64_t count = stage_layer_range(model, layout, v % layout.pp, v / layout.pp).count();
    std::string text = v == 0 ? "E" : "";
    text += count > 1 ? fmt::format("t*{}", count) : count == 1 ? "t" : "";
    if (v == stages - 1) {
      const int64_t mtp = model.mtp_num_layers;
      text += mtp > 1 ? fmt::format("m*{}L", mtp) : mtp == 1 ? "mL" : "L";
    } else {
      text += "|";
    }
    texts.push_back(std::move(text));
  }
  // Runs of equal stages as "(t*2|)*29", Megatron-Core's own shorthand (its example
  // "Ettt|(tt|)*29,m|L"), where that is shorter.
  std::string out;
  for (size_t v = 0; v < texts.size();) {
    size_t run = 1;
    while (v + run < texts.size() && texts[v + run] == texts[v]) {
      ++run;
    }
    const std::string grouped = fmt::format("({})*{}", texts[v], run);
    if (run > 1 && grouped.size() < texts[v].size() * run) {
      out += grouped;
    } else {
      for (size_t i = 0; i < run; ++i) {
        out += texts[v];
      }
    }
    v += run;
  }
  return out;
}

void fix_pipeline_layout(const models::TransformerConfig& model, const std::string& text,
                         const PipelineLayoutFieldNames& names, SearchSpace& space) {
  if (!space.pp) {
    throw InputError(fmt::format("{}: needs {} (the layout lists pp x vpp virtual stages)",
                                 names.layout, names.pp));
  }
  const PipelineLayoutSplit split = pipeline_layout_split(model, *space.pp, text, names.layout);
  if (space.vpp && *space.vpp != split.vpp) {
    throw InputError(fmt::format("{}: {} virtual stages per rank, {} says {}", names.layout,
                                 split.vpp, names.vpp, *space.vpp));
  }
  if (split.vpp > 1 && space.schedule && *space.schedule != ScheduleKind::kInterleaved) {
    throw InputError(
        fmt::format("{}: {} virtual stages per rank need the interleaved schedule "
                    "({} {})",
                    names.layout, split.vpp, names.schedule, to_string(*space.schedule)));
  }
  if (split.vpp == 1 && space.schedule == ScheduleKind::kInterleaved) {
    throw InputError(fmt::format(
        "{}: 1 virtual stage per rank; the interleaved schedule needs at least 2", names.layout));
  }
  if (split.vpp > 1) {
    space.schedule = ScheduleKind::kInterleaved;
  }
  space.vpp = split.vpp;
  space.stage_layers = split.stage_layers;
  space.virtual_stage_layers = split.virtual_stage_layers;
}

}  // namespace meshplan::planner
