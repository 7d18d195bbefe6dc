#pragma once
// The MLP's activation as the model says, behind one call (as norm.h does for the norms): GELU
// on (N, F), or a gated one, SwiGLU, GeGLU or quick GeGLU, on rows [gate (F) | up (F)] of
// (N, 2F), with the model's offset on up and clamp on both inputs (gpt-oss; ops/gated_unit.h).
// The backward adds (+=) into dinp.
//
// Shape letters: N rows, F ffn channels on this rank.

#include <stdexcept>

#include "meshplan/models.h"
#include "ops/gated_unit.h"
#include "ops/geglu.h"
#include "ops/gelu.h"
#include "ops/quick_geglu.h"
#include "ops/swiglu.h"

namespace meshplan::executor {

/// The gated unit's variants the model asks for (glu_linear_offset, activation_clamp_value).
inline GatedUnitOptions gated_unit_options(const models::TransformerConfig& model) {
  return {model.glu_linear_offset, model.activation_clamp_value};
}

/// out (N, F); inp (N, F) for GELU, (N, 2F) for a gated activation.
inline void mlp_activation_forward(const models::TransformerConfig& model, float* out,
                                   const float* inp, int N, int F) {
  const GatedUnitOptions options = gated_unit_options(model);
  switch (model.activation) {
    case models::Activation::kGelu:
      gelu_forward(out, inp, N * F);
      return;
    case models::Activation::kSwiglu:
      swiglu_forward(out, inp, N, F, options);
      return;
    case models::Activation::kGeglu:
      geglu_forward(out, inp, N, F, options);
      return;
    case models::Activation::kQuickGeglu:
      quick_geglu_forward(out, inp, N, F, options);
      return;
  }
  throw std::logic_error("mlp_activation_forward: activation not built in the CPU executor");
}

/// dinp (N, F) or (N, 2F) +=; inp as the forward's, dout (N, F).
inline void mlp_activation_backward(const models::TransformerConfig& model, float* dinp,
                                    const float* inp, const float* dout, int N, int F) {
  const GatedUnitOptions options = gated_unit_options(model);
  switch (model.activation) {
    case models::Activation::kGelu:
      gelu_backward(dinp, inp, dout, N * F);
      return;
    case models::Activation::kSwiglu:
      swiglu_backward(dinp, inp, dout, N, F, options);
      return;
    case models::Activation::kGeglu:
      geglu_backward(dinp, inp, dout, N, F, options);
      return;
    case models::Activation::kQuickGeglu:
      quick_geglu_backward(dinp, inp, dout, N, F, options);
      return;
  }
  throw std::logic_error("mlp_activation_backward: activation not built in the CPU executor");
}

}  // namespace meshplan::executor
