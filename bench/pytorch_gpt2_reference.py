#!/usr/bin/env python3
"""PyTorch eager reference for meshplan's GPU bench: one GPT-2 124M training step.

The model is the one meshplan trains for the preset gpt2-124m (models/presets/models/gpt2-124m.json):
token embedding + learned positions, 12 pre-LayerNorm blocks (eps 1e-5) of causal multi-head
attention (QKV and output projections with biases) and a GELU MLP (tanh approximation, as
executor/ops/gelu.cpp), a final LayerNorm, an LM head tied to the token embedding, mean
cross-entropy; no dropout (meshplan's executors implement none). Initialisation as
executor/parameters.cpp: normal(0, 0.02), the residual projections scaled by 1/sqrt(2 l),
biases 0, norm gains 1. AdamW as executor/ops/adamw.h: lr 1e-3 constant, betas (0.9, 0.95),
eps 1e-8, decoupled weight decay 0.1 on every parameter.

Precision (--precision bf16, the default): torch.autocast to bfloat16 around forward and loss,
fp32 parameters, fp32 gradients and fp32 AdamW state: the way PyTorch users run bf16
(nanoGPT, llm.c's train_gpt2.py). meshplan's bf16 mode keeps bf16 weights beside fp32 master
weights and an fp32 main_grad (Megatron-LM); the matmuls run in bf16 in both, the memory
differs (autocast: 4 + 4 + 8 bytes per parameter plus the bf16 weight copies it casts each
step; Megatron-LM: 2 + 4 + 4 + 8). --precision fp32 runs everything in fp32 (TF32 off).

Attention is torch.nn.functional.scaled_dot_product_attention(is_causal=True), which picks a
fused flash kernel on Hopper, as the plan's flash_attention option asks of meshplan. AdamW is
PyTorch's fused CUDA implementation on a GPU (--adamw fused, the default there), its
multi-tensor one otherwise.

Timing: --warmup steps, then --steps steps, each between two CUDA events (on the CPU a
perf_counter around a step); the table gives every timed step, the footer the median.
MFU = model FLOPs per step / (median step time x --peak-flops-per-second), model FLOPs as the
planner counts them (planner/flops.cpp, model_flops_per_step: Narayanan et al. 2021, eq. 3 without
recompute, 72 B s l h^2 (1 + s/(6h)) + 6 B s h V for ffn = 4h), or the value passed with
--model-flops-per-step (bench/gpu_step_bench.sh passes meshplan's own).

Usage: pytorch_gpt2_reference.py [--device cuda|cpu] [--tiny] [--compile] [--steps N]
       [--warmup N] [--micro-batch B] [--precision bf16|fp32] [--json OUT.json]
torch is imported only when a step runs, so --help and the FLOPs function need no torch.
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time

# GPT-2 124M (Radford et al. 2019; openai-community/gpt2), as the preset gpt2-124m.
GPT2_124M = dict(num_layers=12, hidden_size=768, num_heads=12, vocab_size=50257, seq_length=1024)
# --tiny: a model small enough for a CPU test in seconds (same layout, GPT-2 style).
TINY = dict(num_layers=2, hidden_size=64, num_heads=4, vocab_size=256, seq_length=32)

# H200 SXM dense bf16 peak, the dgx-h200 cluster preset's peak_bf16_flops_per_second (H100
# architecture whitepaper 2022, the same GH100 compute; see models/presets/clusters/dgx-h200.json).
H200_PEAK_BF16_FLOPS_PER_SECOND = 989.4e12


def model_flops_per_step(num_layers, hidden_size, vocab_size, seq_length, tokens):
    """Model FLOPs of one step, as planner/flops.cpp's model_flops_per_step for a GPT layer
    (ffn 4h, kv heads = heads): 3 x forward, forward = l (24 T h^2 + 4 T s h) + 2 T h V.
    Narayanan et al. 2021 (SC21), eq. 3 without recompute: 72 B s l h^2 (1 + s/(6h)) + 6 B s h V,
    with T = B s tokens. The attention term counts the full s x s scores (no causal halving)."""
    h, s, l, V, T = hidden_size, seq_length, num_layers, vocab_size, tokens
    return 72.0 * T * l * h * h * (1.0 + s / (6.0 * h)) + 6.0 * T * h * V


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--tiny", action="store_true", help="the small CPU test model, not GPT-2 124M")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--steps", type=int, default=20, help="timed steps (after the warm-up)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--micro-batch", type=int, default=8, help="sequences per step")
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--adamw", choices=["fused", "foreach"], default=None,
                   help="AdamW implementation (default: fused on cuda, foreach on cpu)")
    p.add_argument("--peak-flops-per-second", type=float, default=None,
                   help="for MFU (default: H200 dense bf16 989.4e12 on cuda; none on cpu)")
    p.add_argument("--model-flops-per-step", type=float, default=None,
                   help="model FLOPs of one step (default: planner/flops.cpp's formula)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", default=None, help="write the figures here (atomically)")
    args = p.parse_args(argv)
    for name in ("steps", "micro_batch"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')}: must be at least 1 ({getattr(args, name)})")
    if args.warmup < 0:
        p.error(f"--warmup: must be at least 0 ({args.warmup})")
    if args.compile and args.warmup < 1:
        p.error("--compile: needs --warmup of at least 1 (the first step compiles)")
    if args.device == "cuda" and args.tiny:
        p.error("--tiny: the CPU test model; use --device cpu with it")
    if args.adamw == "fused" and args.device == "cpu":
        p.error("--adamw fused: PyTorch's fused AdamW needs --device cuda")
    return args


def build_model(torch, cfg):
    """GPT-2 as meshplan's executor builds it (see the module docstring)."""
    nn = torch.nn
    F = torch.nn.functional
    l, h, a, V, s = (cfg[k] for k in
                     ("num_layers", "hidden_size", "num_heads", "vocab_size", "seq_length"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(h, eps=1e-5)
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln_2 = nn.LayerNorm(h, eps=1e-5)
            self.fc1 = nn.Linear(h, 4 * h)
            self.fc2 = nn.Linear(4 * h, h)

        def forward(self, x):  # x (B, T, C)
            B, T, C = x.shape
            q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, a, C // a).transpose(1, 2) for t in (q, k, v))  # (B, a, T, d)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
            return x + self.fc2(F.gelu(self.fc1(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, h)
            self.wpe = nn.Embedding(s, h)
            self.blocks = nn.ModuleList(Block() for _ in range(l))
            self.ln_f = nn.LayerNorm(h, eps=1e-5)

        def forward(self, tokens, targets):  # tokens, targets (B, T)
            T = tokens.shape[1]
            x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
            for block in self.blocks:
                x = block(x)
            logits = torch.nn.functional.linear(self.ln_f(x), self.wte.weight)  # tied head
            # targets is a strided slice of the data tensor: reshape, not view.
            return F.cross_entropy(logits.float().reshape(-1, V), targets.reshape(-1))

    model = GPT()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln_" in name or name.startswith("ln_"):
                p.fill_(1.0)
            elif name.endswith(("proj.weight", "fc2.weight")):
                p.normal_(0.0, 0.02 / math.sqrt(2 * l))  # residual projections
            else:
                p.normal_(0.0, 0.02)
    return model


def write_json_atomically(path, record):
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".pytorch_gpt2_reference.")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def run(args):
    import torch  # imported here: --help and model_flops_per_step work without torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("pytorch_gpt2_reference.py: --device cuda: no CUDA device visible")
    torch.manual_seed(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    cfg = TINY if args.tiny else GPT2_124M
    device = torch.device(args.device)
    model = build_model(torch, cfg).to(device)
    num_parameters = sum(p.numel() for p in model.parameters())
    adamw = args.adamw or ("fused" if args.device == "cuda" else "foreach")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                  weight_decay=0.1, **{adamw: True})
    step_model = torch.compile(model) if args.compile else model
    B, s, V = args.micro_batch, cfg["seq_length"], cfg["vocab_size"]
    total_steps = args.warmup + args.steps
    data = torch.randint(0, V, (total_steps, B, s + 1), device=device,
                         generator=torch.Generator(device=device).manual_seed(args.seed))
    use_bf16 = args.precision == "bf16"

    def step(i):
        tokens, targets = data[i, :, :-1], data[i, :, 1:]
        with torch.autocast(device_type=args.device, dtype=torch.bfloat16, enabled=use_bf16):
            loss = step_model(tokens, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    records = []
    for i in range(total_steps):
        if args.device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step(i)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3  # elapsed_time is in ms
        else:
            t0 = time.perf_counter()
            loss = step(i)
            seconds = time.perf_counter() - t0
        if i >= args.warmup:
            records.append({"step": i - args.warmup + 1, "loss": float(loss.item()),
                            "step_time_s": seconds, "tokens_per_s": B * s / seconds})
    return summarise(torch, args, cfg, num_parameters, adamw, records)


def summarise(torch, args, cfg, num_parameters, adamw, records):
    """One record for the table and the JSON (nccl-tests: both from the same values)."""
    B, s = args.micro_batch, cfg["seq_length"]
    median_s = statistics.median(r["step_time_s"] for r in records)
    flops = args.model_flops_per_step or model_flops_per_step(
        cfg["num_layers"], cfg["hidden_size"], cfg["vocab_size"], s, B * s)
    peak = args.peak_flops_per_second
    if peak is None and args.device == "cuda":
        peak = H200_PEAK_BF16_FLOPS_PER_SECOND
    summary = {
        "framework": "pytorch " + torch.__version__ + (" compile" if args.compile else " eager"),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "model": "tiny" if args.tiny else "gpt2-124m", "num_parameters": num_parameters,
        "micro_batch": B, "seq_length": s, "precision": args.precision + (
            " autocast, fp32 weights/grads/AdamW" if args.precision == "bf16" else ""),
        "adamw": adamw, "warmup_steps": args.warmup, "steps": records,
        "step_time_s": median_s, "tokens_per_s": B * s / median_s,
        "model_flops_per_step": flops, "peak_flops_per_second": peak,
        "mfu": flops / (median_s * peak) if peak else None,
    }
    if args.device == "cuda":
        free_bytes, total_bytes = torch.cuda.mem_get_info()
        summary.update(peak_memory_bytes=torch.cuda.max_memory_allocated(),
                       peak_reserved_bytes=torch.cuda.max_memory_reserved(),
                       device_used_bytes=total_bytes - free_bytes)
    return summary


def print_table(summary):
    print(f"# pytorch_gpt2_reference: {summary['model']} ({summary['num_parameters']:,} "
          f"parameters), {summary['framework']}, {summary['device']}, micro-batch "
          f"{summary['micro_batch']} x seq {summary['seq_length']}, {summary['precision']}, "
          f"AdamW {summary['adamw']}, {summary['warmup_steps']} warm-up steps")
    print(f"#{'step':>5} {'loss':>10} {'time':>10} {'tokens/s':>12}")
    print(f"#{'':>5} {'':>10} {'(ms)':>10} {'(tok/s)':>12}")
    for r in summary["steps"]:
        print(f"{r['step']:>6} {r['loss']:>10.4f} {r['step_time_s'] * 1e3:>10.3f} "
              f"{r['tokens_per_s']:>12.0f}")
    mfu = f"{100 * summary['mfu']:.1f}%" if summary["mfu"] is not None else "- (no peak given)"
    print(f"# median step {summary['step_time_s'] * 1e3:.3f} ms, "
          f"{summary['tokens_per_s']:.0f} tokens/s, MFU {mfu} "
          f"({summary['model_flops_per_step']:.4g} model FLOPs per step)")
    if "peak_memory_bytes" in summary:
        print(f"# peak memory: allocated {summary['peak_memory_bytes'] / 2**30:.2f} GiB, "
              f"reserved {summary['peak_reserved_bytes'] / 2**30:.2f} GiB, device in use "
              f"(cudaMemGetInfo) {summary['device_used_bytes'] / 2**30:.2f} GiB")


def main(argv):
    args = parse_args(argv)
    if args.json:  # fail before the first step, not after the run
        directory = os.path.dirname(os.path.abspath(args.json))
        if not os.access(directory, os.W_OK):
            raise SystemExit(f"pytorch_gpt2_reference.py: --json: directory not writable "
                             f"({directory})")
    summary = run(args)
    print_table(summary)
    if args.json:
        write_json_atomically(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
