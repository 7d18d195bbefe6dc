// The sequence length a model is trained at when the command line gives none.

#include <fmt/format.h>

#include <algorithm>

#include "hf_config.h"
#include "meshplan/models.h"
#include "preset_source.h"
#include "presets.h"

namespace meshplan::models {

TransformerConfig load_training_model(const std::string& name_or_path,
                                      const std::optional<int64_t>& seq_len, std::string* note) {
  TransformerConfig model = load_model(name_or_path);
  note->clear();
  if (seq_len) {
    model.seq_length = *seq_len;
    validate_model(model, "--seq-len");
    validate_training_length(model, "--seq-len");
    return model;
  }
  const ResolvedJson resolved =
      resolve_preset_or_file(name_or_path, "model", embedded_model_presets());
  const bool states_length =
      resolved.json.contains("seq_length") && !resolved.json["seq_length"].is_null();
  if (is_hf_config(resolved.json) && !states_length) {
    model.seq_length = std::min(model.max_position_embeddings, kHfDefaultSeqLength);
    *note = fmt::format(
        "{}: no --seq-len: training sequences of {} tokens = min(max_position_embeddings {}, "
        "{}); a Hugging Face config states no training length (--seq-len to choose)",
        resolved.source, model.seq_length, model.max_position_embeddings, kHfDefaultSeqLength);
  }
  // Again at the length planned.
  validate_model(model, resolved.source);
  validate_training_length(model, resolved.source);
  return model;
}

}  // namespace meshplan::models
