#pragma once
// The model format's keys for where rotary positions and the query/key norm apply and for chunked
// attention (Llama 4): no_rope_freq, qk_l2_norm, attention_chunk_size. Private to models/.

#include <nlohmann/json.hpp>
#include <string>

#include "meshplan/models.h"

namespace meshplan::models {

/// Reads the three keys when present: no_rope_freq as an integer N >= 2 dividing num_layers
/// (every N-th layer NoPE, Megatron-Core's expansion) or a list of 0 and 1, one per layer.
/// Throws InputError naming the key for a malformed value.
void read_position_variant_fields(const nlohmann::json& json, const std::string& source,
                                  TransformerConfig& model);

/// Their consistency with the rest of the model: rotary positions and standard attention for
/// each, one list entry per layer and not every layer NoPE, qk_l2_norm without qk_norm, a chunk
/// of 0 or more.
void validate_position_variants(const TransformerConfig& model, const std::string& source);

/// One form per meaning: a no_rope_freq list of all 0 is no list.
void normalize_no_rope_freq(TransformerConfig& model);

/// Writes the keys that differ from their defaults.
void write_position_variant_fields(const TransformerConfig& model, nlohmann::json& json);

}  // namespace meshplan::models
