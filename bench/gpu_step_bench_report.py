#!/usr/bin/env python3
"""Side-by-side table of bench/gpu_step_bench.sh: the planner's prediction, meshplan execute and
the PyTorch references (eager, torch.compile) for one training step of the same plan.

Inputs: --plan (meshplan plan --json; plans[0] is the plan executed), --plan-file (its
--save-plan file: the cluster's peak FLOP/s), --meshplan (meshplan execute --json; its first
--warmup steps are dropped), --eager and optionally --compile-json (pytorch_gpt2_reference.py
--json). Step time is the median of the timed steps; tokens/s = tokens per step / step time;
MFU = the planner's model FLOPs per step / (step time x peak), the planner's own definition
(planner/flops.cpp, Narayanan et al. 2021 eq. 3), peak = the plan's cluster's dense peak for its
precision. Memory, two columns: "tensors" is the peak of live tensors (meshplan's arena high-water
mark, PyTorch's max_memory_allocated; the planner's weights + gradients + optimizer +
activations), "device" the GPU memory in use (cudaMemGetInfo: context, cuBLAS and NCCL
workspaces included; the planner's total with its reserved bytes). Issue 13's memory bar (within
10%) is checked on both where measured. Bars (issue 13, Sec. 4): meshplan at most 1.3x eager's step time; goal 1.0x,
then torch.compile's. The table row and the JSON record come from the same values.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

GIB = 2.0**30  # memory columns are GiB = 2^30 bytes


def load(path, what):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"gpu_step_bench_report.py: {what}: cannot read {path} ({e})")


def field(record, key, source):
    if key not in record:
        raise SystemExit(f"gpu_step_bench_report.py: {source}: missing field {key}")
    return record[key]


def meshplan_rows(measured, warmup, tokens_per_step, flops, peak, source):
    """meshplan execute's report: the planner's row and the measured one (median of the steps
    after the warm-up; stage 0's memory, the only stage of the bench's plan)."""
    steps = field(measured, "steps", source)
    if len(steps) <= warmup:
        raise SystemExit(f"gpu_step_bench_report.py: {source}: steps: {len(steps)} steps, "
                         f"none left after --warmup {warmup}")
    step_s = statistics.median(field(s, "step_time_s", source) for s in steps[warmup:])
    memory = field(measured, "peak_memory_bytes", source)[0]
    predicted = {"tensor_bytes": field(memory, "predicted_tensor_bytes", source),
                 "device_bytes": field(memory, "predicted", source)}
    run = {"run": "meshplan execute", "step_time_s": step_s,
           "tokens_per_s": tokens_per_step / step_s, "mfu": flops / (step_s * peak),
           "tensor_bytes": field(memory, "measured", source),
           "device_bytes": memory.get("device_used_bytes") or None}
    return predicted, run


def pytorch_row(name, reference, flops, peak, source):
    step_s = field(reference, "step_time_s", source)
    return {"run": name, "step_time_s": step_s,
            "tokens_per_s": field(reference, "micro_batch", source) *
            field(reference, "seq_length", source) / step_s,
            "mfu": flops / (step_s * peak),
            "tensor_bytes": field(reference, "peak_memory_bytes", source),
            "device_bytes": reference.get("device_used_bytes")}


def build_rows(args):
    report = load(args.plan, "--plan")
    plan = field(report, "plans", args.plan)[0]
    plan_file = load(args.plan_file, "--plan-file")
    cluster = field(plan_file, "cluster", args.plan_file)
    precision = field(cluster, "precision", args.plan_file)
    peak = field(field(cluster, "gpu", args.plan_file), f"peak_{precision}_flops_per_second",
                 args.plan_file)
    flops = field(plan, "model_flops_per_step", args.plan)
    tokens_per_step = field(plan, "tokens_per_s", args.plan) * field(plan, "step_time_s", args.plan)
    predicted, run = meshplan_rows(load(args.meshplan, "--meshplan"), args.warmup,
                                   round(tokens_per_step), flops, peak, args.meshplan)
    rows = [dict(run="planner prediction", step_time_s=plan["step_time_s"],
                 tokens_per_s=plan["tokens_per_s"], mfu=flops / (plan["step_time_s"] * peak),
                 **predicted), run]
    rows.append(pytorch_row("pytorch eager", load(args.eager, "--eager"), flops, peak, args.eager))
    if args.compile_json:
        rows.append(pytorch_row("pytorch compile", load(args.compile_json, "--compile-json"),
                                flops, peak, args.compile_json))
    eager_s = rows[2]["step_time_s"]
    for row in rows:
        row["ratio_to_eager"] = row["step_time_s"] / eager_s
    return rows


def fmt(value, scale, digits):
    return "-" if value is None else f"{value * scale:.{digits}f}"


def print_table(rows):
    print("# gpu_step_bench: one training step, side by side")
    print(f"#{'run':>19} {'step':>9} {'vs eager':>9} {'tokens/s':>10} {'MFU':>6} "
          f"{'tensors':>9} {'device':>9}")
    print(f"#{'':>19} {'(ms)':>9} {'(x)':>9} {'(tok/s)':>10} {'(%)':>6} {'(GiB)':>9} {'(GiB)':>9}")
    for r in rows:
        print(f"{r['run']:>20} {fmt(r['step_time_s'], 1e3, 3):>9} "
              f"{fmt(r['ratio_to_eager'], 1, 3):>9} {fmt(r['tokens_per_s'], 1, 0):>10} "
              f"{fmt(r['mfu'], 100, 1):>6} {fmt(r['tensor_bytes'], 1 / GIB, 2):>9} "
              f"{fmt(r['device_bytes'], 1 / GIB, 2):>9}")


def verdict(rows):
    """The footer's figures: issue 13's speed bar and goal, and the memory bar."""
    planner, meshplan = rows[0], rows[1]
    result = {"meshplan_over_eager": meshplan["ratio_to_eager"],
              "speed_bar_met": meshplan["ratio_to_eager"] <= 1.3,
              "speed_goal_met": meshplan["ratio_to_eager"] <= 1.0}
    for kind in ("tensor", "device"):
        measured = meshplan[f"{kind}_bytes"]
        if measured:
            error = (planner[f"{kind}_bytes"] - measured) / measured
            result[f"{kind}_memory_error"] = error
            result[f"{kind}_memory_bar_met"] = abs(error) <= 0.10
    if len(rows) > 3:
        result["meshplan_over_compile"] = meshplan["step_time_s"] / rows[3]["step_time_s"]
    return result


def print_footer(v):
    ok = lambda met: "OK" if met else "FAILED"
    line = (f"# meshplan / eager {v['meshplan_over_eager']:.3f}x: bar <= 1.3x "
            f"{ok(v['speed_bar_met'])}, goal <= 1.0x {ok(v['speed_goal_met'])}")
    if "meshplan_over_compile" in v:
        line += f"; meshplan / compile {v['meshplan_over_compile']:.3f}x"
    print(line)
    for kind, what in (("tensor", "tensors"), ("device", "device in use")):
        if f"{kind}_memory_error" in v:
            print(f"# memory, {what}: predicted - measured = "
                  f"{100 * v[kind + '_memory_error']:+.1f}% of measured: bar within 10% "
                  f"{ok(v[kind + '_memory_bar_met'])}")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--plan", required=True)
    p.add_argument("--plan-file", required=True)
    p.add_argument("--meshplan", required=True)
    p.add_argument("--warmup", type=int, required=True)
    p.add_argument("--eager", required=True)
    p.add_argument("--compile-json", default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.warmup < 0:
        p.error(f"--warmup: must be at least 0 ({args.warmup})")
    rows = build_rows(args)
    v = verdict(rows)
    print_table(rows)
    print_footer(v)
    if args.json:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.json)))
        with os.fdopen(fd, "w") as f:
            json.dump({"rows": rows, "verdict": v}, f, indent=2)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
