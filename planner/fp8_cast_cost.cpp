// Transformer Engine's FP8 casts: memory-bound work that --precision fp8 adds around each FP8
// GEMM (TE 1.x, the versions of NeMo 24.07 and Megatron-Core 0.8: transformer_engine/pytorch/
// module/linear.py and layernorm_linear.py _Linear/_LayerNormLinear forward and backward,
// base.py grad_output_preprocess; read at tag v1.8). Megatron-Core builds the MLP from
// TELayerNormColumnParallelLinear and TERowParallelLinear with its own activation between, not
// TE's LayerNormMLP (core_r0.8.0 gpt_layer_specs.py), so no activation-and-cast fusion: the
// activation writes 16 bits (compute_cost.cpp) and fc2 casts its input. Hopper's FP8 GEMMs take
// both operands K-major ("TN"), so every tensor used by two GEMMs is kept as an FP8 copy and an FP8
// transpose:
//  - a plain Linear's input (attention output projection, MLP output, the experts' and shared
//    experts' inputs, every MLA projection) is cast and transposed in one kernel
//    (fp8_cast_transpose_fused: read 2 bytes, write 1 + 1) in the forward; under sequence
//    parallelism TE casts only (read 2, write 1) and transposes in the backward (read 1,
//    write 1);
//  - a LayerNormLinear's input (QKV, dense MLP input) comes out of the norm already in FP8
//    (layernorm_fwd_fp8: 1 byte written instead of 2 per element of the norm's output) and is
//    transposed in the backward for the weight gradient (fp8_transpose: read 1, write 1 over
//    the gathered tokens);
//  - every linear's output gradient is cast and transposed in the backward
//    (fp8_cast_transpose_bgrad_fused: read 2, write 1 + 1), over the gathered tokens; except,
//    under sequence parallelism, a row-parallel linear's (attention output, MLP output), whose
//    gradient arrives sequence-sharded: TE casts the rank's T / t rows (cast_to_fp8: read 2,
//    write 1), all-gathers them in FP8 and transposes the gathered T rows (fp8_transpose: read
//    1, write 1) (TE v1.8 module/base.py grad_output_preprocess, "FP8 case with gather").
// The weights are cast once per step, not per micro-batch (TE's is_first_microbatch caching,
// which Megatron-Core's forward_step sets on the first micro-batch, core_r0.8.0 schedules.py), and
// are left out; so are the scale and amax updates (a few floats per tensor). MLA's projections
// are all costed as plain Linears (a small overcount for those Megatron-Core fuses with a
// norm); the grouped expert GEMMs as plain Linears outside sequence parallelism.

#include "fp8_cast_cost.h"

namespace meshplan::planner {
namespace {

constexpr double kCastTransposeBytes = 4.0;   // read 2 (bf16), write 1 + 1 (fp8 and transpose)
constexpr double kCastBytes = 3.0;            // read 2, write 1
constexpr double kTransposeBytes = 2.0;       // read 1, write 1
constexpr double kNormFp8SavingBytes = -1.0;  // the norm writes 1 byte instead of 2
constexpr double kAmaxBytes = 2.0;            // current scaling's amax pass: read 2

// Tensorwise current scaling (Transformer Engine 2.x: quantizer.cpp
// Float8CurrentScalingQuantizer::quantize_impl, the same from v2.7 to v2.18): every cast first
// reads its 16-bit input for the amax (nvte_compute_amax), then runs the delayed recipe's cast or
// cast-transpose kernel, 2 bytes more per element. normalization.cpp fuses the norm with the FP8
// cast only under delayed scaling: here the norm writes 16 bits and computes the amax in the same
// kernel, and the cast follows (under sequence parallelism on the rank's rows, gathered in FP8,
// transposed in the backward; without it cast and transposed at once). TE 2.x casts and
// transposes a row-parallel linear's input in the forward under sequence parallelism too
// (linear.py), so nothing of it is left to the backward. Output gradients as the delayed recipe,
// each cast after its amax pass.
Fp8CastBytes tensorwise_cast_bytes(const LinearGemms& gemms, bool sequence_parallel,
                                   double norm_tokens) {
  Fp8CastBytes bytes;
  for (const LinearGemm& gemm : gemms) {
    const double inputs = gemm.multiplier * gemm.tokens * gemm.k;
    if (gemm.norm_input && sequence_parallel) {
      bytes.forward += kCastBytes * norm_tokens * gemm.k;
      bytes.backward += kTransposeBytes * inputs;
    } else if (gemm.norm_input) {
      bytes.forward += kCastTransposeBytes * inputs;
    } else if (sequence_parallel && !gemm.expert && !gemm.row_parallel) {
      bytes.forward += (kAmaxBytes + kCastBytes) * inputs;
      bytes.backward += kTransposeBytes * inputs;
    } else {
      bytes.forward += (kAmaxBytes + kCastTransposeBytes) * inputs;
    }
    if (sequence_parallel && gemm.row_parallel) {
      bytes.backward +=
          ((kAmaxBytes + kCastBytes) * norm_tokens + kTransposeBytes * gemm.tokens) * gemm.n;
    } else {
      bytes.backward += (kAmaxBytes + kCastTransposeBytes) * gemm.multiplier * gemm.tokens * gemm.n;
    }
  }
  return bytes;
}

}  // namespace

Fp8CastBytes fp8_cast_bytes(const LinearGemms& gemms, bool sequence_parallel, double norm_tokens,
                            Fp8Recipe recipe) {
  if (recipe == Fp8Recipe::kTensorwise) {
    return tensorwise_cast_bytes(gemms, sequence_parallel, norm_tokens);
  }
  Fp8CastBytes bytes;
  for (const LinearGemm& gemm : gemms) {
    const double inputs = gemm.multiplier * gemm.tokens * gemm.k;
    if (gemm.norm_input) {
      bytes.forward += kNormFp8SavingBytes * norm_tokens * gemm.k;
      bytes.backward += kTransposeBytes * inputs;
    } else if (sequence_parallel && !gemm.expert) {
      bytes.forward += kCastBytes * inputs;
      bytes.backward += kTransposeBytes * inputs;
    } else {
      bytes.forward += kCastTransposeBytes * inputs;
    }
    if (sequence_parallel && gemm.row_parallel) {
      bytes.backward += (kCastBytes * norm_tokens + kTransposeBytes * gemm.tokens) * gemm.n;
    } else {
      bytes.backward += kCastTransposeBytes * gemm.multiplier * gemm.tokens * gemm.n;
    }
  }
  return bytes;
}

Fp8AmaxReductions fp8_amax_reductions(const LinearGemms& gemms, bool sequence_parallel,
                                      Fp8Recipe recipe) {
  Fp8AmaxReductions reductions;
  if (recipe != Fp8Recipe::kTensorwise || !sequence_parallel) {
    return reductions;
  }
  for (const LinearGemm& gemm : gemms) {
    reductions.forward += gemm.norm_input ? 1.0 : 0.0;
    reductions.backward += gemm.row_parallel ? 1.0 : 0.0;
  }
  return reductions;
}

// torchao's Float8Linear (torchao eab345c, the Dec 2024 torchtitan benchmark's version;
// float8_linear.py matmul_with_hp_or_float8_args), dynamic tensorwise scaling, compiled. torchao's
// own roofline (torchao/float8/roofline_utils.py at eab345c, get_tensor_memory_traffic_bytes
// and get_float8_mem_sympy with model_torch_compile_limitations) counts, per element:
//  - the input and the output gradient, whose max(abs) fuses into the op before them: read 2
//    and write 1 + 1 (a row-major and a column-major FP8 copy), plus 1 more read of the FP8
//    data that Inductor's cast kernel makes (pytorch#130015): 5 bytes, the input in the forward
//    and the output gradient in the backward;
//  - the weight: 7 bytes per call in that roofline (amax 2, cast 2 + 1 + 1, the extra read 1).
//    Under FSDP2's float8 all-gather (torchao fsdp_utils.py WeightWithDynamicFloat8CastTensor,
//    which torchtitan's float8 settings enable) the shard is cast before the gather at the
//    precomputed scale and the gathered FP8 weight is used as it is by the forward GEMM
//    (K-major already); the input-gradient GEMM needs its transpose, one FP8 copy (read 1,
//    write 1): 2 bytes per weight element in the backward. The shard's cast (3 bytes over a
//    1/dp shard) is left out.
// Under sequence parallelism torchao casts the rank's T / t rows before gathering them in FP8
// (float8_tensor_parallel.py PrepareFloat8ModuleInput, Float8RowwiseParallel's
// NoopFwToFloat8BwDynamic) and writes the column-major copy of the gathered rows; both are
// counted here over the gathered rows (a small overcount of the casts). An MoE model's grouped
// experts are not nn.Linear (torchao's convert_to_float8_training swaps nn.Linear only): no casts.
Fp8CastBytes torchao_float8_cast_bytes(const LinearGemms& gemms) {
  constexpr double kDynamicCastBytes = 5.0;      // read 2, write 1 + 1, re-read 1 (pytorch#130015)
  constexpr double kWeightTransposeBytes = 2.0;  // read 1, write 1
  Fp8CastBytes bytes;
  for (const LinearGemm& gemm : gemms) {
    if (gemm.expert) {
      continue;  // grouped experts are not nn.Linear: torchao leaves them bf16
    }
    bytes.forward += kDynamicCastBytes * gemm.multiplier * gemm.tokens * gemm.k;
    bytes.backward += kDynamicCastBytes * gemm.multiplier * gemm.tokens * gemm.n +
                      kWeightTransposeBytes * gemm.multiplier * gemm.k * gemm.n;
  }
  return bytes;
}

}  // namespace meshplan::planner
