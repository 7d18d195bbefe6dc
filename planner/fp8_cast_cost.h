#pragma once
// Private: the FP8 casts around the linear GEMMs (--precision fp8): Transformer Engine's, and
// torchao's Float8Linear under --framework fsdp.

#include "linear_gemms.h"
#include "meshplan/cost_model.h"

namespace meshplan::planner {

/// HBM bytes (read plus written) of one layer's FP8 casts and transposes for one micro-batch on
/// one rank, forward and backward, around its linear GEMMs (layer_linear_gemms); norm_tokens:
/// the rows a norm writes (T / t under sequence parallelism, else T).
struct Fp8CastBytes {
  double forward = 0;
  double backward = 0;
};
/// `recipe`: delayed (TE 1.x, the model below) or tensorwise current scaling (TE 2.x: an amax
/// read before each cast, the norm output cast apart).
Fp8CastBytes fp8_cast_bytes(const LinearGemms& gemms, bool sequence_parallel, double norm_tokens,
                            Fp8Recipe recipe);

/// Tensorwise current scaling's one-float amax all-reduces over the tp group, per layer and
/// micro-batch: under sequence parallelism TE gathers FP8 bytes that share one scale, so each
/// gathered cast (a norm-fed input forward, a row-parallel output gradient backward) first
/// all-reduces its amax (quantizer.cpp Float8CurrentScalingQuantizer with_amax_reduction).
/// None under delayed scaling or without sequence parallelism.
struct Fp8AmaxReductions {
  double forward = 0;
  double backward = 0;
};
Fp8AmaxReductions fp8_amax_reductions(const LinearGemms& gemms, bool sequence_parallel,
                                      Fp8Recipe recipe);

/// The same for torchao's Float8Linear with dynamic tensorwise scaling under torch.compile and
/// FSDP2's float8 all-gather (--framework fsdp --precision fp8).
Fp8CastBytes torchao_float8_cast_bytes(const LinearGemms& gemms);

/// FP8 GEMM throughput of torchao's Float8Linear as a fraction of the FP8 e_max
/// (fp8_gemm_peak_efficiency) Transformer Engine's GEMMs are costed at. torchao's README at
/// eab345c (torchao/float8/README.md, Performance, example 2) measured a compiled Float8Linear
/// forward plus backward with dynamic scaling at M, K, N = 4096, 8192, 16384 at 1.39x the bf16
/// linear on H100. meshplan's costing of that linear (its three GEMMs on the efficiency curve of
/// Meta's H100, grand-teton-h100: bf16 e_max 0.61, x_half 768; the casts of
/// torchao_float8_cast_bytes with the weight cast each call, 7 bytes per element, at
/// hbm_efficiency 0.8) gives 1.62x at the FP8 e_max of 0.60 and 1.39x at 0.500: 0.834 of it
/// (0.836 with the H100 pair 0.65/1024 before 2026-11-25).
/// Chosen on that one microbenchmark, not on any validation run (bench/torchao_fp8_ratio.py
/// re-derives it). torchao runs both backward GEMMs without fast accumulation
/// (Float8LinearConfig: use_fast_accum on the output GEMM only), where the FP8 e_max comes from
/// FBGEMM's fast-accumulating kernels (pytorch/FBGEMM#2546).
inline constexpr double kTorchaoFp8GemmEfficiencyRatio = 0.834;

}  // namespace meshplan::planner
