// Rotary frequency scaling: the inverse frequencies and the model format's keys (models.h
// RopeScaling has the meaning and sources).

#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "rope_scaling_fields.h"

namespace meshplan::models {

double rope_inverse_frequency(double base, int64_t pair, int64_t rotated_channels,
                              const RopeScaling& scaling) {
  // Su et al. 2021, Eq. 15: theta_i = base^(-2(i-1)/d), i = pair + 1, d = rotated_channels.
  const double frequency =
      std::pow(base, -2.0 * static_cast<double>(pair) / static_cast<double>(rotated_channels));
  switch (scaling.type) {
    case RopeScalingType::kNone:
      return frequency;
    case RopeScalingType::kLinear:
      // Chen et al. 2023, Eq. 4: f'(x, m) = f(x, m L / L'), the frequency over the factor.
      return frequency / scaling.factor;
    case RopeScalingType::kLlama3: {
      // transformers _compute_llama3_parameters, Megatron-Core _apply_scaling (the same bands).
      const double original = static_cast<double>(scaling.original_max_positions);
      const double wavelength = 2.0 * std::numbers::pi / frequency;
      if (wavelength < original / scaling.high_freq_factor) {
        return frequency;
      }
      if (wavelength > original / scaling.low_freq_factor) {
        return frequency / scaling.factor;
      }
      const double smooth = (original / wavelength - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      return (1.0 - smooth) * frequency / scaling.factor + smooth * frequency;
    }
  }
  return frequency;
}

std::string to_string(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
  }
  return "unknown";
}

namespace {

constexpr const char* kTypeKey = "rope_scaling";
constexpr const char* kFactorKey = "rope_scaling_factor";
constexpr const char* kLowKey = "rope_scaling_low_freq_factor";
constexpr const char* kHighKey = "rope_scaling_high_freq_factor";
constexpr const char* kOriginalKey = "rope_scaling_original_max_positions";

RopeScalingType parse_type(const nlohmann::json& json, const std::string& source) {
  const std::string text = require_string(json, kTypeKey, source);
  for (RopeScalingType type :
       {RopeScalingType::kNone, RopeScalingType::kLinear, RopeScalingType::kLlama3}) {
    if (text == to_string(type)) {
      return type;
    }
  }
  throw InputError(fmt::format(
      "{}: {}: unsupported rope_scaling ({}); supported: none, linear, llama3 (YaRN and the "
      "dynamic types are not carried)",
      source, kTypeKey, text));
}

}  // namespace

void read_rope_scaling_fields(const nlohmann::json& json, const std::string& source,
                              TransformerConfig& model) {
  const RopeScalingType type =
      json.contains(kTypeKey) ? parse_type(json, source) : RopeScalingType::kNone;
  for (const char* key : {kFactorKey, kLowKey, kHighKey, kOriginalKey}) {
    if (json.contains(key) && type == RopeScalingType::kNone) {
      throw InputError(fmt::format(
          "{}: {}: given without rope_scaling (linear or llama3), so it would scale nothing ({})",
          source, key, json[key].dump()));
    }
  }
  for (const char* key : {kLowKey, kHighKey, kOriginalKey}) {
    if (json.contains(key) && type == RopeScalingType::kLinear) {
      throw InputError(fmt::format(
          "{}: {}: a llama3 frequency band; rope_scaling linear divides every frequency by the "
          "factor ({})",
          source, key, json[key].dump()));
    }
  }
  if (type == RopeScalingType::kNone) {
    return;
  }
  if (!json.contains(kFactorKey)) {
    throw InputError(
        fmt::format("{}: {}: required with rope_scaling {}", source, kFactorKey, to_string(type)));
  }
  RopeScaling scaling;
  scaling.type = type;
  scaling.factor = require_number(json, kFactorKey, source);
  if (type == RopeScalingType::kLlama3) {
    if (json.contains(kLowKey)) {
      scaling.low_freq_factor = require_number(json, kLowKey, source);
    }
    if (json.contains(kHighKey)) {
      scaling.high_freq_factor = require_number(json, kHighKey, source);
    }
    if (json.contains(kOriginalKey)) {
      scaling.original_max_positions = require_int(json, kOriginalKey, source);
    }
  }
  model.rope_scaling = scaling;
}

void validate_rope_scaling(const TransformerConfig& model, const std::string& source) {
  const RopeScaling& scaling = model.rope_scaling;
  if (scaling.type == RopeScalingType::kNone) {
    return;
  }
  if (model.positions != Positions::kRope) {
    throw InputError(
        fmt::format("{}: {}: scales rotary frequencies, but the model has positions {} ({})",
                    source, kTypeKey, to_string(model.positions), to_string(scaling.type)));
  }
  // A factor of 1 scales nothing; below 1 would shorten the context, which no type means.
  if (!(scaling.factor > 1.0 && scaling.factor <= kMaxRopeScalingFactor)) {
    throw InputError(
        fmt::format("{}: {}: must be in (1, {:g}], how many times the original context the scaled "
                    "frequencies cover ({})",
                    source, kFactorKey, kMaxRopeScalingFactor, scaling.factor));
  }
  if (scaling.type != RopeScalingType::kLlama3) {
    return;
  }
  if (!(scaling.low_freq_factor > 0.0 && scaling.low_freq_factor <= kMaxRopeScalingFactor)) {
    throw InputError(fmt::format("{}: {}: must be in (0, {:g}] ({})", source, kLowKey,
                                 kMaxRopeScalingFactor, scaling.low_freq_factor));
  }
  // transformers _validate_llama3_parameters: high_freq_factor > low_freq_factor (the band
  // between them is interpolated).
  if (!(scaling.high_freq_factor > scaling.low_freq_factor &&
        scaling.high_freq_factor <= kMaxRopeScalingFactor)) {
    throw InputError(fmt::format(
        "{}: {}: must be above rope_scaling_low_freq_factor {:g} and at most {:g} ({})", source,
        kHighKey, scaling.low_freq_factor, kMaxRopeScalingFactor, scaling.high_freq_factor));
  }
  if (scaling.original_max_positions <= 0 || scaling.original_max_positions > kMaxSequence) {
    throw InputError(
        fmt::format("{}: {}: must be in [1, {}], the context the model was pre-trained on ({})",
                    source, kOriginalKey, kMaxSequence, scaling.original_max_positions));
  }
}

void write_rope_scaling_fields(const TransformerConfig& model, nlohmann::json& json) {
  const RopeScaling& scaling = model.rope_scaling;
  if (scaling.type == RopeScalingType::kNone) {
    return;
  }
  json[kTypeKey] = to_string(scaling.type);
  json[kFactorKey] = scaling.factor;
  if (scaling.type == RopeScalingType::kLlama3) {
    json[kLowKey] = scaling.low_freq_factor;
    json[kHighKey] = scaling.high_freq_factor;
    json[kOriginalKey] = scaling.original_max_positions;
  }
}

}  // namespace meshplan::models
