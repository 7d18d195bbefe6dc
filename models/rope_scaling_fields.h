#pragma once
// The model format's rotary-scaling keys (models.h RopeScaling has their meaning and sources):
// rope_scaling, rope_scaling_factor, rope_scaling_low_freq_factor, rope_scaling_high_freq_factor,
// rope_scaling_original_max_positions, and YaRN's rope_scaling_beta_fast, _beta_slow, _mscale,
// _mscale_all_dim, _truncate. Private to models/.

#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "meshplan/models.h"

namespace meshplan::models {

inline constexpr std::array<std::string_view, 10> kRopeScalingModelFields = {
    "rope_scaling",
    "rope_scaling_factor",
    "rope_scaling_low_freq_factor",
    "rope_scaling_high_freq_factor",
    "rope_scaling_original_max_positions",
    "rope_scaling_beta_fast",
    "rope_scaling_beta_slow",
    "rope_scaling_mscale",
    "rope_scaling_mscale_all_dim",
    "rope_scaling_truncate"};

/// Reads the keys when present. Throws InputError naming the key: an unknown type, a factor
/// missing with a type (and the original context with yarn), a key given without a type that
/// reads it (any key with "none", the llama3 bands with another type, YaRN's keys with another,
/// the original context with linear).
void read_rope_scaling_fields(const nlohmann::json& json, const std::string& source,
                              TransformerConfig& model);

/// The ranges, for a model from any source: a factor in (1, kMaxRopeScalingFactor], llama3 bands
/// 0 < low < high <= kMaxRopeScalingFactor, YaRN's 0 < beta_slow < beta_fast <= that and mscales
/// in [0, that], an original length in [1, kMaxSequence], rotary positions.
void validate_rope_scaling(const TransformerConfig& model, const std::string& source);

/// Writes the keys when the model scales: the type and factor, and the keys its type reads.
void write_rope_scaling_fields(const TransformerConfig& model, nlohmann::json& json);

}  // namespace meshplan::models
