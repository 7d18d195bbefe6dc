#!/usr/bin/env python3
"""How well validate predicts runs that do not state their software.

Runs-file version 1 (the format published runs arrive in, ../shared/validation/README.md) has no
`framework` or `options`: validate guesses them from the run's source text and stated layout
(planner/software_guess.cpp). This strips `framework`, `options` and `used_for_parameters` from
every run of the project set (validation/public_runs.json, whose software is known and stated),
predicts both files and prints each run's error with its software stated and guessed, and the
summary of each. Nothing is fitted; the figures are in README "Validation", runs without software.

usage: bench/validate_without_software.py [MESHPLAN] [RUNS.json]
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
meshplan = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "cli", "meshplan")
runs_path = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "validation", "public_runs.json")


def validate(path, out_dir, name):
    out = os.path.join(out_dir, name + ".json")
    # Exit 1 only says some run was not predicted or over the memory estimate; the JSON is
    # written either way.
    subprocess.run([meshplan, "validate", path, "--json", out], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    with open(out) as f:
        return json.load(f)


def summary(report):
    errors = [abs(r["error_pct"]) for r in report["runs"] if r["error_pct"] is not None]
    mean = sum(errors) / len(errors) if errors else float("nan")
    misses = sum(1 for r in report["runs"] if r.get("memory_miss"))
    return (f"{len(errors)} of {len(report['runs'])} predicted ({misses} over meshplan's memory "
            f"estimate), mean |error| {mean:.1f}%, max |error| {max(errors, default=float('nan')):.1f}%")


with open(runs_path) as f:
    runs = json.load(f)
stripped = json.loads(json.dumps(runs))
for run in stripped["runs"]:
    for key in ("framework", "options", "used_for_parameters"):
        run.pop(key, None)

with tempfile.TemporaryDirectory() as tmp:
    stripped_path = os.path.join(tmp, "stripped.json")
    with open(stripped_path, "w") as f:
        json.dump(stripped, f)
    stated = validate(runs_path, tmp, "stated")
    guessed = validate(stripped_path, tmp, "guessed")

print(f"# {'run':<44} {'stated':>8} {'guessed':>8}  software guessed")
guessed_by_id = {r["id"]: r for r in guessed["runs"]}
for run in stated["runs"]:
    other = guessed_by_id[run["id"]]
    def cell(r):
        return f"{r['error_pct']:+.1f}" if r["error_pct"] is not None else "-"
    what = other.get("software_guess") or ""
    if other["error_pct"] is None:
        what = "not predicted: " + other["error"][:70]
    elif other.get("memory_miss"):
        what = "memory miss (" + other["memory_miss"].split(",")[0] + "); " + what
    print(f"  {run['id']:<44} {cell(run):>8} {cell(other):>8}  {what}")
print(f"# software stated: {summary(stated)}")
print(f"# software guessed: {summary(guessed)}")
