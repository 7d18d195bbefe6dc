#!/usr/bin/env python3
"""Chooses a GPU type's GEMM efficiency pair (e_max, x_half) as README "Validation against
published runs" describes: the pair with the lowest mean |error| over that type's chosen-on runs
(used_for_parameters true) of validation/public_runs.json, on a grid. Held-out runs are never
read: they are dropped from the copy of the runs file before anything is predicted.

How: for each grid point the cluster preset (models/presets/clusters/<preset>.json) is copied
with efficiency.gemm_peak_efficiency and gemm_half_efficiency_dim replaced, the chosen-on runs'
hardware.cluster is pointed at that file (validate loads a cluster by preset name or by path,
models/preset_source.cpp resolve_preset_or_file), and `meshplan validate --json` predicts them.

Grids (README): H100 e_max 0.50-0.75 by 0.01 x x_half 128-1024 by 32; A100 e_max 0.72-0.82 by
0.02 x x_half 256-512 by 64, then by 0.005 and 16 within one coarse step of the best. Ties go
to the first pair in grid order (e_max ascending, then x_half). Python 3 standard library only.

Usage: bench/choose_gemm_efficiency.py [--gpu h100|a100|both] [--meshplan build/cli/meshplan]
       [--runs validation/public_runs.json]
"""

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRESETS = {"h100": "dgx-h100", "a100": "dgx-a100-80gb"}


def frange(start, stop, step):
    """start, start + step, ..., stop (inclusive), rounded to 4 decimals."""
    count = int(round((stop - start) / step))
    return [round(start + i * step, 4) for i in range(count + 1)]


def chosen_on_runs(runs_path, preset):
    """The runs file with only the chosen-on runs on `preset`; exits if there are none."""
    with open(runs_path, encoding="utf-8") as f:
        runs = json.load(f)
    kept = [r for r in runs["runs"]
            if r.get("used_for_parameters") is True and r["hardware"]["cluster"] == preset]
    if not kept:
        sys.exit(f"{runs_path}: no chosen-on runs on cluster {preset}")
    runs["runs"] = kept
    return runs


def mean_abs_error(meshplan, runs, preset_json, e_max, x_half, workdir):
    """Mean |error| (%) of `runs` predicted with the pair; exits if a run is not predicted."""
    cluster = copy.deepcopy(preset_json)
    cluster["efficiency"]["gemm_peak_efficiency"] = e_max
    cluster["efficiency"]["gemm_half_efficiency_dim"] = x_half
    cluster_path = os.path.join(workdir, "cluster.json")
    with open(cluster_path, "w", encoding="utf-8") as f:
        json.dump(cluster, f)
    pointed = copy.deepcopy(runs)
    for run in pointed["runs"]:
        run["hardware"]["cluster"] = cluster_path
    runs_path = os.path.join(workdir, "runs.json")
    out_path = os.path.join(workdir, "out.json")
    with open(runs_path, "w", encoding="utf-8") as f:
        json.dump(pointed, f)
    done = subprocess.run([meshplan, "validate", runs_path, "--json", out_path],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 2:
        sys.exit(f"meshplan validate: {done.stderr.strip()}")
    with open(out_path, encoding="utf-8") as f:
        result = json.load(f)
    if result["num_not_predicted"] != 0:
        sys.exit(f"e_max {e_max} x_half {x_half}: {result['num_not_predicted']} runs not predicted")
    return sum(abs(r["error_pct"]) for r in result["runs"]) / len(result["runs"])


def best_on_grid(meshplan, runs, preset_json, e_values, x_values, workdir):
    """(mean |error|, e_max, x_half) of the best pair; the first in grid order on ties."""
    best = None
    for e_max in e_values:
        for x_half in x_values:
            mean = mean_abs_error(meshplan, runs, preset_json, e_max, x_half, workdir)
            if best is None or mean < best[0]:
                best = (mean, e_max, x_half)
    return best


def choose(gpu, meshplan, runs_path):
    preset = PRESETS[gpu]
    with open(os.path.join(REPO, "models", "presets", "clusters", preset + ".json"),
              encoding="utf-8") as f:
        preset_json = json.load(f)
    runs = chosen_on_runs(runs_path, preset)
    with tempfile.TemporaryDirectory() as workdir:
        if gpu == "h100":
            best = best_on_grid(meshplan, runs, preset_json, frange(0.50, 0.75, 0.01),
                                list(range(128, 2049, 32)), workdir)
        else:
            coarse = best_on_grid(meshplan, runs, preset_json, frange(0.72, 0.82, 0.02),
                                  list(range(256, 513, 64)), workdir)
            best = best_on_grid(meshplan, runs, preset_json,
                                frange(coarse[1] - 0.02, coarse[1] + 0.02, 0.005),
                                list(range(coarse[2] - 64, coarse[2] + 65, 16)), workdir)
        current = mean_abs_error(meshplan, runs, preset_json,
                                 preset_json["efficiency"]["gemm_peak_efficiency"],
                                 preset_json["efficiency"]["gemm_half_efficiency_dim"], workdir)
    print(f"{gpu}: {len(runs['runs'])} chosen-on runs on {preset}: best e_max {best[1]:.3f} "
          f"x_half {best[2]}: mean |error| {best[0]:.2f}%; preset's pair "
          f"{preset_json['efficiency']['gemm_peak_efficiency']}/"
          f"{preset_json['efficiency']['gemm_half_efficiency_dim']}: {current:.2f}%")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", choices=["h100", "a100", "both"], default="both")
    parser.add_argument("--meshplan", default=os.path.join(REPO, "build", "cli", "meshplan"))
    parser.add_argument("--runs", default=os.path.join(REPO, "validation", "public_runs.json"))
    args = parser.parse_args()
    for gpu in (["h100", "a100"] if args.gpu == "both" else [args.gpu]):
        choose(gpu, args.meshplan, args.runs)


if __name__ == "__main__":
    main()
