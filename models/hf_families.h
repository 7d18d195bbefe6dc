#pragma once
// The Hugging Face config readers of the mixture-of-experts families (hf_moe.cpp) and the Gemma
// family (hf_gemma.cpp), which model_from_hf_config (hf_config.cpp) calls after reading the
// shared layout. Each fills `model` from `json` and is documented at its definition. Private to
// models/.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "meshplan/models.h"

namespace meshplan::models::hf {

/// Throws the InputError for a mixture-of-experts key in a dense family's config.
[[noreturn]] void reject_moe_field(const std::string& field, const nlohmann::json& value,
                                   const std::string& source);

// Mixture-of-experts families (hf_moe.cpp).
void mixtral(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void qwen_moe(const nlohmann::json& json, std::string_view model_type, const std::string& source,
              TransformerConfig& model);
void deepseek_v3(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void glm4_moe(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void gpt_oss(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void llama4_text(const nlohmann::json& json, const std::string& source, TransformerConfig& model);

// Gemma family (hf_gemma.cpp).
void gemma(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void gemma2(const nlohmann::json& json, const std::string& source, TransformerConfig& model);
void gemma3_text(const nlohmann::json& json, const std::string& source, TransformerConfig& model);

}  // namespace meshplan::models::hf
