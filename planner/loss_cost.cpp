// Bytes the training loss moves per logit: Megatron-Core's vocab-parallel cross entropy eager
// or fused, Transformer Engine's, FlashAttention's xentropy kernel, or compiled by torch.compile.

#include "loss_cost.h"

#include <fmt/format.h>

#include <string>

#include "meshplan/errors.h"

namespace meshplan::planner {

namespace {

// Megatron-Core megatron/core/fusions/fused_cross_entropy.py at 358e5f07 (unchanged in its
// logic since 38722c39, 2024-06-27), each step a jit_fuser function (megatron/core/jit.py:
// torch.compile from PyTorch 2.2), one kernel each with its reductions fused. Forward:
// calculate_logits_max returns the .float() logits and their max (read e, write 4; on fp32
// logits .float() is the input itself: read 4); calculate_predicted_logits subtracts the max
// and exponentiates in place, summing (read 4, write 4); calculate_cross_entropy_loss divides
// in place into the saved softmax (read 4, write 4). The two all-reduces stay between them.
// Backward: calculate_gradients scatters the target (one element per token), multiplies the
// softmax in place by grad_output (the mutated saved tensor is written back: read 4, write 4)
// and returns grad_input.to(torch.bfloat16) (write 2, whatever the logits' dtype).
PassBytes fused_cross_entropy_bytes_per_logit(double logits_element_bytes) {
  const double e = logits_element_bytes;
  const double logits_max = e < 4.0 ? e + 4.0 : 4.0;
  return {logits_max + 8.0 + 8.0, 8.0 + 2.0};
}

// Transformer Engine transformer_engine/pytorch/triton/cross_entropy.py and
// common/triton/cross_entropy.py at 6e3f7588 (2025-11-14), called by Megatron-Core's
// compute_language_model_loss with impl te. Forward: online_softmax_kernel reads the logits
// once for the row max and sum (read e); after the all-gather of the rows' (m, d, X_y),
// cross_entropy_kernel reads them again and writes the gradient in place, in the logits' dtype
// (read e, write e). Backward: element_mul_kernel scales it by grad_output in place (read e,
// write e; skipped only when grad_output is the scalar 1, never for Megatron's per-token loss).
PassBytes te_cross_entropy_bytes_per_logit(double logits_element_bytes) {
  const double e = logits_element_bytes;
  return {e + 2.0 * e, 2.0 * e};
}

// FlashAttention's CrossEntropyLoss (flash_attn/losses/cross_entropy.py, v1.0.9 as llm-foundry
// v0.3.0 setup.py pins it) on the apex xentropy kernel (csrc/xentropy/xentropy_kernel.cu),
// llm-foundry's `loss_fn: fused_crossentropy`. Forward: cunn_SoftMaxXEntropyForward, one block
// per row, reads the logits twice (the max and sum, then the sum of exponentials) and writes
// one loss and one log-sum-exp per row (read 2e). Backward: cunn_SoftMaxXEntropyBackward reads
// them once more and writes the gradient in their dtype (at::empty_like; read e, write e).
PassBytes xentropy_bytes_per_logit(double logits_element_bytes) {
  const double e = logits_element_bytes;
  return {2.0 * e, 2.0 * e};
}

}  // namespace

std::string to_string(CrossEntropyFusion fusion) {
  switch (fusion) {
    case CrossEntropyFusion::kOff:
      return "off";
    case CrossEntropyFusion::kNative:
      return "native";
    case CrossEntropyFusion::kTe:
      return "te";
    case CrossEntropyFusion::kXentropy:
      return "xentropy";
  }
  return "off";
}

CrossEntropyFusion parse_cross_entropy_fusion(const std::string& text, const std::string& field) {
  for (CrossEntropyFusion value : {CrossEntropyFusion::kOff, CrossEntropyFusion::kNative,
                                   CrossEntropyFusion::kTe, CrossEntropyFusion::kXentropy}) {
    if (text == to_string(value)) {
      return value;
    }
  }
  throw InputError(fmt::format(
      "{}: unknown cross_entropy_loss_fusion, expected off, native, te or xentropy ({})", field,
      text));
}

PassBytes cross_entropy_bytes_per_logit(double logits_element_bytes, CrossEntropyFusion fusion) {
  if (fusion == CrossEntropyFusion::kNative) {
    return fused_cross_entropy_bytes_per_logit(logits_element_bytes);
  }
  if (fusion == CrossEntropyFusion::kTe) {
    return te_cross_entropy_bytes_per_logit(logits_element_bytes);
  }
  if (fusion == CrossEntropyFusion::kXentropy) {
    return xentropy_bytes_per_logit(logits_element_bytes);
  }
  // Megatron-Core tensor_parallel/cross_entropy.py at baf94af3 (core_r0.8.0), without
  // --cross-entropy-loss-fusion (added in 7b4a6d76, 2024-06-14, off by default). Forward:
  // calculate_logits_max's .float() (read e, write 4; none on fp32 logits) and max (read 4);
  // in-place subtraction of the max, in-place exp and the sum (read 4, write 4; read 4, write 4;
  // read 4); exp_logits.div_ into the softmax saved for the backward (read 4, write 4). Backward:
  // calculate_gradients' grad_input.mul_ (read 4, write 4) after a one-element-per-token target
  // scatter, then autograd casts the fp32 gradient to the logits' dtype (PyTorch
  // autograd/engine.cpp validate_outputs: read 4, write e).
  const double e = logits_element_bytes;
  const double cast = e < 4.0 ? e + 4.0 : 0.0;
  return {cast + 4.0 + 8.0 + 8.0 + 4.0 + 8.0, 8.0 + cast};
}

// The loss's bytes per logit, eager (cross_entropy_bytes_per_logit) or compiled
// (loss_compiled(options): torchtitan bbb1b616e+ components/loss.py build_cross_entropy_loss wraps
// cross_entropy(pred.float()) in torch.compile). Inductor fuses the cast, max, exp-sum and log
// into one reduction kernel per row (torch/_inductor/scheduler.py fuses a reduction with its
// pointwise producers), so the forward reads the bf16 logits once (e); the backward, the
// partitioner having saved the logits (memory.cpp loss_bytes_per_token_vocab), reads them again
// and writes the one gradient in their dtype (e + e). The blocks: layer_time.
PassBytes loss_bytes_per_logit(double logits_element_bytes, const PlanOptions& options) {
  if (!loss_compiled(options)) {
    return cross_entropy_bytes_per_logit(logits_element_bytes, options.cross_entropy_loss_fusion);
  }
  return {logits_element_bytes, 2.0 * logits_element_bytes};
}

PassBytes softcap_bytes_per_element(double element_bytes, bool fused) {
  const double e = element_bytes;
  if (fused) {
    // One pointwise kernel (Inductor fuses the division, tanh and product): read x, write
    // c tanh(x / c). Backward, d/dx c tanh(x / c) = 1 - tanh^2(x / c): read the output gradient
    // and the saved tanh, write the input gradient.
    return {2.0 * e, 3.0 * e};
  }
  // transformers modeling_gemma2.py Gemma2ForCausalLM.forward (and eager_attention_forward on
  // the scores): `logits / c`, `torch.tanh`, `* c`, three kernels each reading and writing x
  // (6e). Backward: the product's (read, write), tanh's (read the gradient and its saved output,
  // write) and the division's (read, write): 7e.
  return {6.0 * e, 7.0 * e};
}

}  // namespace meshplan::planner
