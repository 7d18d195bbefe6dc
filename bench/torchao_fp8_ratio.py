#!/usr/bin/env python3
"""Re-derives kTorchaoFp8GemmEfficiencyRatio (planner/fp8_cast_cost.h): the fraction of the FP8
e_max at which torchao's Float8Linear GEMMs are costed under --framework fsdp.

Source: torchao/float8/README.md at eab345c (the torchao of torchtitan's Dec 2024 H100
benchmark), section Performance: a compiled Float8Linear forward plus backward, dynamic scaling,
on H100 against the bf16 linear:
  example 1: M, K, N = 1024, 2048, 1024   -> 0.80x
  example 2: M, K, N = 4096, 8192, 16384  -> 1.39x
The ratio is chosen on example 2 alone, before and apart from any validation run.

meshplan's costing of one linear (planner/compute_cost.cpp gemm_seconds; fp8_cast_cost.cpp
torchao_float8_cast_bytes): three GEMMs (output M x N over K, input gradient M x K over N, weight
gradient K x N over M), each 2 m n k / (peak e_max / (1 + x_half (1/k + 0.2 (1/m + 1/n)))), and
torchao's casts per its own roofline (torchao/float8/roofline_utils.py at eab345c, dynamic
scaling, model_torch_compile_limitations): 5 bytes per input and output-gradient element and,
outside FSDP's float8 all-gather as in the microbenchmark, 7 per weight element, at the HBM
bandwidth times hbm_efficiency. The cluster is grand-teton-h100 (Meta's H100, whose 2.4 TB/s
roofline_utils.py names). Example 1 is printed as a check only: at 47 us of bf16 GEMM time its
kernel launches (amax, cast and GEMM kernels, which meshplan does not cost) are a large part.

Usage: bench/torchao_fp8_ratio.py [--cluster models/presets/clusters/grand-teton-h100.json]
Python 3 standard library only.
"""

import argparse
import json
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTER_DIMENSION_WEIGHT = 0.2  # compute_cost.cpp kOuterDimensionWeight
EXAMPLES = [((4096, 8192, 16384), 1.39), ((1024, 2048, 1024), 0.80)]


def gemm_seconds(m, n, k, peak, e_max, x_half):
    inverse_size = 1.0 / k + OUTER_DIMENSION_WEIGHT * (1.0 / m + 1.0 / n)
    return 2.0 * m * n * k / (peak * e_max / (1.0 + x_half * inverse_size))


def linear_seconds(shape, peak, e_max, x_half):
    m, k, n = shape
    return (gemm_seconds(m, n, k, peak, e_max, x_half) + gemm_seconds(m, k, n, peak, e_max, x_half)
            + gemm_seconds(k, n, m, peak, e_max, x_half))


def speedup(shape, cluster, ratio):
    gpu, eff = cluster["gpu"], cluster["efficiency"]
    x_half = eff["gemm_half_efficiency_dim"]
    m, k, n = shape
    bf16 = linear_seconds(shape, gpu["peak_bf16_flops_per_second"], eff["gemm_peak_efficiency"],
                          x_half)
    fp8 = linear_seconds(shape, gpu["peak_fp8_flops_per_second"],
                         eff["fp8_gemm_peak_efficiency"] * ratio, x_half)
    cast_bytes = 5 * m * k + 7 * k * n + 5 * m * n
    casts = cast_bytes / (gpu["hbm_bytes_per_second"] * eff["hbm_efficiency"])
    return bf16 / (fp8 + casts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cluster", default=os.path.join(
        REPO, "models", "presets", "clusters", "grand-teton-h100.json"))
    args = parser.parse_args()
    with open(args.cluster) as f:
        cluster = json.load(f)
    shape, measured = EXAMPLES[0]
    low, high = 0.1, 2.0
    for _ in range(200):  # the speed-up rises with the ratio: bisect
        middle = (low + high) / 2
        if speedup(shape, cluster, middle) < measured:
            low = middle
        else:
            high = middle
    ratio = round(middle, 3)
    print(f"# cluster {cluster['name']}: FP8 e_max {cluster['efficiency']['fp8_gemm_peak_efficiency']}")
    print(f"ratio reproducing {measured}x at M, K, N = {shape}: {middle:.4f} (kept: {ratio})")
    for example_shape, example_measured in EXAMPLES:
        print(f"M, K, N = {example_shape}: measured {example_measured:.2f}x, "
              f"meshplan at ratio 1 {speedup(example_shape, cluster, 1.0):.3f}x, "
              f"at {ratio} {speedup(example_shape, cluster, ratio):.3f}x")


if __name__ == "__main__":
    main()
