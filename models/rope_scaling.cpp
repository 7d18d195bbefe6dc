// Rotary frequency scaling: the inverse frequencies and the model format's keys (models.h
// RopeScaling has the meaning and sources).

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <utility>

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
    case RopeScalingType::kYarn: {
      // Peng et al. 2023, Sec. 3.2 (NTK-by-parts), as transformers _compute_yarn_parameters and
      // Megatron-Core YarnRotaryEmbedding.get_emb compute it: the pair that turns r times over
      // the original context is R ln(L / (2 pi r)) / (2 ln base); the ramp runs from beta_fast's
      // pair (kept) to beta_slow's (divided by the factor).
      const double channels = static_cast<double>(rotated_channels);
      const double original = static_cast<double>(scaling.original_max_positions);
      const auto correction_pair = [&](double rotations) {
        return channels * std::log(original / (rotations * 2.0 * std::numbers::pi)) /
               (2.0 * std::log(base));
      };
      double low = correction_pair(scaling.beta_fast);
      double high = correction_pair(scaling.beta_slow);
      if (scaling.truncate) {
        low = std::floor(low);
        high = std::ceil(high);
      }
      low = std::max(low, 0.0);
      high = std::min(high, channels - 1.0);
      if (low == high) {
        high += 0.001;  // both codes' guard against a zero-width ramp
      }
      const double interpolated =
          std::clamp((static_cast<double>(pair) - low) / (high - low), 0.0, 1.0);
      return interpolated * frequency / scaling.factor + (1.0 - interpolated) * frequency;
    }
  }
  return frequency;
}

double yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

double rope_attention_factor(const RopeScaling& scaling) {
  if (scaling.type != RopeScalingType::kYarn) {
    return 1.0;
  }
  return yarn_mscale(scaling.factor, scaling.mscale) /
         yarn_mscale(scaling.factor, scaling.mscale_all_dim);
}

std::string to_string(RopeScalingType type) {
  switch (type) {
    case RopeScalingType::kNone:
      return "none";
    case RopeScalingType::kLinear:
      return "linear";
    case RopeScalingType::kLlama3:
      return "llama3";
    case RopeScalingType::kYarn:
      return "yarn";
  }
  return "unknown";
}

namespace {

constexpr const char* kTypeKey = "rope_scaling";
constexpr const char* kFactorKey = "rope_scaling_factor";
constexpr const char* kLowKey = "rope_scaling_low_freq_factor";
constexpr const char* kHighKey = "rope_scaling_high_freq_factor";
constexpr const char* kOriginalKey = "rope_scaling_original_max_positions";
constexpr const char* kBetaFastKey = "rope_scaling_beta_fast";
constexpr const char* kBetaSlowKey = "rope_scaling_beta_slow";
constexpr const char* kMscaleKey = "rope_scaling_mscale";
constexpr const char* kMscaleAllDimKey = "rope_scaling_mscale_all_dim";
constexpr const char* kTruncateKey = "rope_scaling_truncate";

constexpr std::array<RopeScalingType, 4> kTypes = {RopeScalingType::kNone, RopeScalingType::kLinear,
                                                   RopeScalingType::kLlama3,
                                                   RopeScalingType::kYarn};

RopeScalingType parse_type(const nlohmann::json& json, const std::string& source) {
  const std::string text = require_string(json, kTypeKey, source);
  for (RopeScalingType type : kTypes) {
    if (text == to_string(type)) {
      return type;
    }
  }
  throw InputError(fmt::format(
      "{}: {}: unsupported rope_scaling ({}); supported: none, linear, llama3, yarn (the dynamic "
      "types are not carried)",
      source, kTypeKey, text));
}

// The keys beyond the factor, with the types that read each (a key one type reads names it
// twice).
struct TypeKey {
  const char* key;
  std::array<RopeScalingType, 2> readers;
  const char* meaning;
};
constexpr RopeScalingType kLlama3 = RopeScalingType::kLlama3;
constexpr RopeScalingType kYarn = RopeScalingType::kYarn;
constexpr std::array<TypeKey, 8> kTypeKeys = {{
    {kLowKey, {kLlama3, kLlama3}, "a llama3 frequency band"},
    {kHighKey, {kLlama3, kLlama3}, "a llama3 frequency band"},
    {kBetaFastKey, {kYarn, kYarn}, "a YaRN ramp end"},
    {kBetaSlowKey, {kYarn, kYarn}, "a YaRN ramp end"},
    {kMscaleKey, {kYarn, kYarn}, "a YaRN attention temperature"},
    {kMscaleAllDimKey, {kYarn, kYarn}, "a YaRN attention temperature"},
    {kTruncateKey, {kYarn, kYarn}, "how YaRN rounds its ramp"},
    {kOriginalKey, {kLlama3, kYarn}, "the pre-training context of llama3 or yarn"},
}};

}  // namespace

void read_rope_scaling_fields(const nlohmann::json& json, const std::string& source,
                              TransformerConfig& model) {
  const RopeScalingType type =
      json.contains(kTypeKey) ? parse_type(json, source) : RopeScalingType::kNone;
  if (type == RopeScalingType::kNone) {
    for (std::string_view key : kRopeScalingModelFields) {
      if (key != kTypeKey && json.contains(key)) {
        throw InputError(fmt::format(
            "{}: {}: given without rope_scaling (linear, llama3 or yarn), so it would scale "
            "nothing ({})",
            source, key, json[std::string(key)].dump()));
      }
    }
    return;
  }
  for (const TypeKey& entry : kTypeKeys) {
    const bool read = entry.readers[0] == type || entry.readers[1] == type;
    if (json.contains(entry.key) && !read) {
      throw InputError(fmt::format("{}: {}: {}; rope_scaling {} does not read it ({})", source,
                                   entry.key, entry.meaning, to_string(type),
                                   json[entry.key].dump()));
    }
  }
  if (!json.contains(kFactorKey)) {
    throw InputError(
        fmt::format("{}: {}: required with rope_scaling {}", source, kFactorKey, to_string(type)));
  }
  // YaRN has no common default for the original context (transformers requires it, Megatron-Core
  // assumes 4096), so the model states it.
  if (type == RopeScalingType::kYarn && !json.contains(kOriginalKey)) {
    throw InputError(fmt::format("{}: {}: required with rope_scaling yarn", source, kOriginalKey));
  }
  RopeScaling scaling;
  scaling.type = type;
  scaling.factor = require_number(json, kFactorKey, source);
  const auto read_number = [&](const char* key, double& value) {
    if (json.contains(key)) {
      value = require_number(json, key, source);
    }
  };
  read_number(kLowKey, scaling.low_freq_factor);
  read_number(kHighKey, scaling.high_freq_factor);
  read_number(kBetaFastKey, scaling.beta_fast);
  read_number(kBetaSlowKey, scaling.beta_slow);
  read_number(kMscaleKey, scaling.mscale);
  read_number(kMscaleAllDimKey, scaling.mscale_all_dim);
  if (json.contains(kOriginalKey)) {
    scaling.original_max_positions = require_int(json, kOriginalKey, source);
  }
  if (json.contains(kTruncateKey)) {
    scaling.truncate = require_bool(json, kTruncateKey, source);
  }
  model.rope_scaling = scaling;
}

namespace {

void validate_llama3_bands(const RopeScaling& scaling, const std::string& source) {
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
}

void validate_yarn_ramp(const RopeScaling& scaling, const std::string& source) {
  // transformers _validate_yarn_parameters: beta_fast above beta_slow (the ramp runs from the
  // fast-turning pairs to the slow ones).
  if (!(scaling.beta_slow > 0.0 && scaling.beta_slow <= kMaxRopeScalingFactor)) {
    throw InputError(fmt::format("{}: {}: must be in (0, {:g}] ({})", source, kBetaSlowKey,
                                 kMaxRopeScalingFactor, scaling.beta_slow));
  }
  if (!(scaling.beta_fast > scaling.beta_slow && scaling.beta_fast <= kMaxRopeScalingFactor)) {
    throw InputError(fmt::format(
        "{}: {}: must be above rope_scaling_beta_slow {:g} and at most {:g} ({})", source,
        kBetaFastKey, scaling.beta_slow, kMaxRopeScalingFactor, scaling.beta_fast));
  }
  for (const auto& [key, value] : {std::pair{kMscaleKey, scaling.mscale},
                                   std::pair{kMscaleAllDimKey, scaling.mscale_all_dim}}) {
    if (!(value >= 0.0 && value <= kMaxRopeScalingFactor)) {
      throw InputError(fmt::format("{}: {}: must be in [0, {:g}] ({})", source, key,
                                   kMaxRopeScalingFactor, value));
    }
  }
}

}  // namespace

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
  if (scaling.type == RopeScalingType::kLinear) {
    return;
  }
  if (scaling.type == RopeScalingType::kLlama3) {
    validate_llama3_bands(scaling, source);
  } else {
    validate_yarn_ramp(scaling, source);
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
  }
  if (scaling.type == RopeScalingType::kYarn) {
    json[kBetaFastKey] = scaling.beta_fast;
    json[kBetaSlowKey] = scaling.beta_slow;
    json[kMscaleKey] = scaling.mscale;
    json[kMscaleAllDimKey] = scaling.mscale_all_dim;
    json[kTruncateKey] = scaling.truncate;
  }
  if (scaling.type != RopeScalingType::kLinear) {
    json[kOriginalKey] = scaling.original_max_positions;
  }
}

}  // namespace meshplan::models
