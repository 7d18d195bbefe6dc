#!/usr/bin/env python3
"""The GPU's two ceilings, measured through PyTorch, for reading the bench's MFU: a dense bf16
matrix product (8192 x 8192 x 8192 on random normal data: 2 n^3 FLOPs) and a device-to-device
copy (bytes read plus bytes written). Each: 3 untimed repetitions, then the mean of 10 between
CUDA events. The method is the device notes' (METHOD.md: "measure the two ceilings once").
Prints one line each; exit 77 where no CUDA device is visible.
"""

import sys


def timed_mean_seconds(torch, fn, warmup=3, repeats=10):
    for _ in range(warmup):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats  # elapsed_time is in ms


def main():
    import torch

    if not torch.cuda.is_available():
        print("gpu_ceilings.py: no CUDA device visible: skipped")
        return 77
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    seconds = timed_mean_seconds(torch, lambda: a @ b)
    print(f"# ceiling: bf16 matmul {n}^3: {2 * n**3 / seconds / 1e12:.1f} TFLOP/s "
          f"({torch.cuda.get_device_name()})")
    copy_bytes = 2**32  # 4 GiB: many times the 60 MB L2
    src = torch.empty(copy_bytes, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    seconds = timed_mean_seconds(torch, lambda: dst.copy_(src))
    print(f"# ceiling: device-to-device copy of 4 GiB: {2 * copy_bytes / seconds / 1e12:.2f} TB/s "
          f"(read + written)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
