#pragma once
// Field readers the Hugging Face config.json loaders share (hf_config.cpp, hf_moe.cpp,
// hf_gemma.cpp): an absent key takes the transformers class default, a bad one is a one-line
// InputError naming the config's own key. Each is documented at its definition in
// hf_fields.cpp. Private to models/.

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshplan/errors.h"
#include "meshplan/json_io.h"
#include "meshplan/models.h"

namespace meshplan::models::hf {

bool is_set(const nlohmann::json& json, const char* field);
int64_t require_size(const nlohmann::json& json, const char* field, const std::string& source);
void reject_null(const nlohmann::json& json, const char* field, const std::string& source);
int64_t optional_size(const nlohmann::json& json, const char* field, int64_t hf_default,
                      const std::string& source);
int64_t optional_size_or_none(const nlohmann::json& json, const char* field, int64_t none_value,
                              const std::string& source);
bool optional_bool(const nlohmann::json& json, const char* field, bool hf_default,
                   const std::string& source);
bool any_dropout(const nlohmann::json& json,
                 std::initializer_list<std::pair<const char*, double>> fields,
                 const std::string& source);
void require_unmodelled(const nlohmann::json& json, const char* field,
                        const nlohmann::json& expected, const char* why, const std::string& source);

// Attention windows.
std::vector<int> read_layer_types(const nlohmann::json& json, int64_t num_layers,
                                  const std::string& source);
void read_sliding_window(const nlohmann::json& json, std::string_view model_type,
                         const std::string& source, TransformerConfig& model);
void read_alternating_windows(const nlohmann::json& json, int64_t pattern,
                              const std::string& source, TransformerConfig& model);

// Activation names of transformers' ACT2FN that meshplan's two MLPs compute. SwiGLU (Shazeer
// 2020) gates with SiLU, which ACT2FN also calls "swish". The GELU MLP is Hendrycks and Gimpel
// 2016's GELU, exact ("gelu") or its tanh approximation ("gelu_new", "gelu_pytorch_tanh",
// "gelu_fast"); the executor computes the tanh form. Anything else (relu, quick_gelu, a gated
// GELU in a Llama MLP) is another model and is rejected.
constexpr std::array<std::string_view, 2> kSiluActivations = {"silu", "swish"};
constexpr std::array<std::string_view, 4> kGeluActivations = {"gelu", "gelu_new",
                                                              "gelu_pytorch_tanh", "gelu_fast"};

// Throws InputError "<source>: <field>: unsupported activation (<name>); supported: ..." unless
// the config's activation (or the class default when absent) is one of `supported`.
template <size_t N>
void check_activation(const nlohmann::json& json, const char* field, std::string_view hf_default,
                      const std::array<std::string_view, N>& supported, const std::string& source) {
  reject_null(json, field, source);
  const std::string name =
      is_set(json, field) ? require_string(json, field, source) : std::string(hf_default);
  for (const std::string_view known : supported) {
    if (name == known) {
      return;
    }
  }
  throw InputError(fmt::format("{}: {}: unsupported activation ({}); supported: {}", source, field,
                               name, fmt::join(supported, ", ")));
}

}  // namespace meshplan::models::hf
