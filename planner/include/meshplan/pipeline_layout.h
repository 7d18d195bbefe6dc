#pragma once
// Megatron-Core's --pipeline-model-parallel-layout: which layers each virtual pipeline stage
// holds, as a string ("Et|(tt|)*30mL"), read into a Layout's split and written back.

#include <cstdint>
#include <string>
#include <vector>

#include "meshplan/layout.h"
#include "meshplan/models.h"
#include "meshplan/search.h"

namespace meshplan::planner {

/// A layout string's split, in meshplan's Layout fields.
struct PipelineLayoutSplit {
  int64_t vpp = 1;                            // virtual stages / pp
  std::vector<int64_t> stage_layers;          // per-stage sums; {} when even (canonical)
  std::vector<int64_t> virtual_stage_layers;  // [pp * vpp]; {} when stage_layers says it all
};

/// Decoder layers of each virtual stage of a layout string, in virtual-stage order, after
/// Megatron-Core's grammar (pipeline_parallel_layer_layout.py parse_str_to_list at d98e8a64):
/// commas are cosmetic, "(...)*n" then "x*n" are unrolled, '|' separates virtual stages, and
/// 'E' is the embedding, 't' a decoder layer, 'm' an MTP depth, 'L' the loss. Checks what
/// validate_layer_layout asserts (the stage count a multiple of pp; 'E' first and 'L' last,
/// once each; num_layers 't'; mtp_num_layers 'm', after every 't') and what meshplan models:
/// the embedding in virtual stage 0, the loss and every MTP depth in the last one (Megatron-
/// Core's default placement; its "standalone" MTP on an earlier rank is not costed), and at
/// least one decoder layer per pipeline stage. Throws InputError "<field>: ..." naming what is
/// wrong.
std::vector<int64_t> parse_pipeline_layout(const models::TransformerConfig& model, int64_t pp,
                                           const std::string& text, const std::string& field);

/// The Layout fields of a layout string (parse_pipeline_layout), canonical: virtual_stage_layers
/// is {} when stage_layer_range's own rule for the per-stage sums gives the same chunks, so a
/// string that --stage-layers or --vpp could state gives the same plan as those flags.
PipelineLayoutSplit pipeline_layout_split(const models::TransformerConfig& model, int64_t pp,
                                          const std::string& text, const std::string& field);

/// How the caller names what a layout string fixes, for its errors: flags ("--pipeline-layout",
/// "--pp", "--vpp", "--schedule") or a runs file's keys.
struct PipelineLayoutFieldNames {
  std::string layout;
  std::string pp;
  std::string vpp;
  std::string schedule;
};

/// Fixes a search space's split, vpp and, with vpp > 1, the interleaved schedule from a layout
/// string (pipeline_layout_split), as Megatron-LM's --pipeline-model-parallel-layout does. Needs
/// pp fixed (the string lists pp x vpp virtual stages); a fixed vpp or schedule that disagrees
/// with the string is an InputError naming both. The caller refuses a stage list beside it.
void fix_pipeline_layout(const models::TransformerConfig& model, const std::string& text,
                         const PipelineLayoutFieldNames& names, SearchSpace& space);

/// A layout's split as Megatron-Core's layout string: virtual stages in order, "E" on the
/// first, "m" times mtp_num_layers and "L" on the last, "t*n" for n decoder layers
/// (e.g. "Et|t*2|...|t*2|mL"). Precondition: check_layout passed.
std::string format_pipeline_layout(const models::TransformerConfig& model, const Layout& layout);

}  // namespace meshplan::planner
