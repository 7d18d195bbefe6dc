#pragma once
// The MLP's activation as the model says, behind one call (as norm.h does for the norms): GELU
// on (N, F), or a gated one, SwiGLU or GeGLU, on rows [gate (F) | up (F)] of (N, 2F). The
// backward adds (+=) into dinp.
//
// Shape letters: N rows, F ffn channels on this rank.

#include <stdexcept>

#include "meshplan/models.h"
#include "ops/geglu.h"
#include "ops/gelu.h"
#include "ops/swiglu.h"

namespace meshplan::executor {

/// out (N, F); inp (N, F) for GELU, (N, 2F) for a gated activation.
inline void mlp_activation_forward(models::Activation activation, float* out, const float* inp,
                                   int N, int F) {
  switch (activation) {
    case models::Activation::kGelu:
      gelu_forward(out, inp, N * F);
      return;
    case models::Activation::kSwiglu:
      swiglu_forward(out, inp, N, F);
      return;
    case models::Activation::kGeglu:
      geglu_forward(out, inp, N, F);
      return;
    case models::Activation::kQuickGeglu:
      break;  // refused by validate_plan_for_executor (shard_dims.cpp)
  }
  throw std::logic_error("mlp_activation_forward: activation not built in the CPU executor");
}

/// dinp (N, F) or (N, 2F) +=; inp as the forward's, dout (N, F).
inline void mlp_activation_backward(models::Activation activation, float* dinp, const float* inp,
                                    const float* dout, int N, int F) {
  switch (activation) {
    case models::Activation::kGelu:
      gelu_backward(dinp, inp, dout, N * F);
      return;
    case models::Activation::kSwiglu:
      swiglu_backward(dinp, inp, dout, N, F);
      return;
    case models::Activation::kGeglu:
      geglu_backward(dinp, inp, dout, N, F);
      return;
    case models::Activation::kQuickGeglu:
      break;  // refused by validate_plan_for_executor (shard_dims.cpp)
  }
  throw std::logic_error("mlp_activation_backward: activation not built in the CPU executor");
}

}  // namespace meshplan::executor
