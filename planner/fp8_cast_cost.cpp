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

}  // namespace

Fp8CastBytes fp8_cast_bytes(const LinearGemms& gemms, bool sequence_parallel, double norm_tokens) {
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

}  // namespace meshplan::planner
