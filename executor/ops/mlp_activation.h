#pragma once
// The MLP's activation as the model says, behind one call (as norm.h does for the norms): GELU
// on (N, F), or a gated one, SwiGLU or GeGLU, on rows [gate (F) | up (F)] of (N, 2F). The
// backward adds (+=) into dinp.
//
// Shape letters: N rows, F ffn channels on this rank.

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
  }
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
  }
}

}  // namespace meshplan::executor
