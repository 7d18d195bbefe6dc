#!/usr/bin/env bash
# One training step of GPT-2 124M on one GPU: meshplan execute against a PyTorch eager reference
# of the identical model (and torch.compile's), in the same run on the same GPU (issue 13, Sec. 4).
#
# usage: bench/gpu_step_bench.sh MESHPLAN [--precision bf16|fp32] [--steps N] [--warmup N]
#                               [--out DIR] [--no-compile]
#   MESHPLAN   the meshplan binary built with the GPU path (configure printed "GPU kernels")
#   --precision  bf16 (default): the dgx-h200 preset, bf16 mixed, the reference in bf16
#              autocast; fp32: the same preset with precision fp32 (written to --out), the
#              reference in fp32 with TF32 off
#   --steps    timed steps of each run (default 20), after --warmup untimed ones (default 5)
#   --out      where the plan, the three JSON reports and bench_summary.json go (default: a
#              temporary directory, printed)
#   MPIRUN     environment: the launcher (default mpirun); run with -np 1 --allow-run-as-root
#   PYTHON     environment: python3 with torch (default python3)
# Layout: tp = pp = dp = 1, micro-batch 8 = global batch 8, sequence 1024, ZeRO 0, no recompute,
# flash attention on, the precision of --precision. Prints the three
# step tables and then one side-by-side table (bench/gpu_step_bench_report.py). Exit 77 where no
# GPU is visible (as the ctest label `gpu`), 2 for bad arguments, 1 when a run fails.
set -euo pipefail

die() { echo "gpu_step_bench.sh: $1" >&2; exit "${2:-1}"; }
usage() { sed -n '5,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

[ $# -ge 1 ] || usage
meshplan=$1
shift
steps=20
warmup=5
out=""
compile=1
precision=bf16
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=${2:?--steps needs a value}; shift 2 ;;
    --warmup) warmup=${2:?--warmup needs a value}; shift 2 ;;
    --out) out=${2:?--out needs a value}; shift 2 ;;
    --no-compile) compile=0; shift ;;
    --precision) precision=${2:?--precision needs a value}; shift 2 ;;
    *) echo "gpu_step_bench.sh: unknown option ($1)" >&2; usage ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps: expected a positive integer ($steps)" 2
[[ $warmup =~ ^[0-9]+$ ]] || die "--warmup: expected an integer >= 0 ($warmup)" 2
[[ $precision =~ ^(bf16|fp32)$ ]] || die "--precision: expected bf16 or fp32 ($precision)" 2
[ -x "$meshplan" ] || die "MESHPLAN: not an executable ($meshplan)" 2

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_step_bench.sh: no GPU visible (nvidia-smi -L lists none): skipped"
  exit 77
fi

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
mpirun=${MPIRUN:-mpirun}
if [ -z "$out" ]; then
  out=$(mktemp -d /tmp/gpu_step_bench.XXXXXX)
fi
mkdir -p "$out"
echo "# gpu_step_bench: outputs in $out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm \
  --format=csv,noheader | sed 's/^/# gpu: /'

# 1. the plan: every choice fixed, so the executor and the reference run the same step.
cluster=dgx-h200
if [ "$precision" = fp32 ]; then
  cluster=$out/h200-fp32.json
  sed 's/"precision": "bf16"/"precision": "fp32"/' \
    "$here/../models/presets/clusters/dgx-h200.json" >"$cluster"
  grep -q '"precision": "fp32"' "$cluster" || die "dgx-h200.json: no precision field to rewrite"
fi
"$meshplan" plan --model gpt2-124m --cluster "$cluster" --gpus 1 --global-batch 8 --micro-batch 8 \
  --tp 1 --pp 1 --dp 1 --zero 0 --recompute none --flash-attention on \
  --make-vocab-size-divisible-by 1 \
  --save-plan "$out/plan.json" --json "$out/plan_report.json" --top 1 >"$out/plan.txt" ||
  die "meshplan plan failed (see $out/plan.txt)"
figures=$("$python" -c 'import json, sys
plan = json.load(open(sys.argv[1]))["plans"][0]
cluster = json.load(open(sys.argv[2]))["cluster"]
print(plan["model_flops_per_step"], cluster["gpu"]["peak_%s_flops_per_second" % cluster["precision"]])' \
  "$out/plan_report.json" "$out/plan.json") || die "cannot read the plan's FLOPs and peak ($out)"
read -r model_flops peak_flops <<<"$figures"

# 2. meshplan execute: warm-up steps are the first ones of the same run (the report drops them).
#    A failed run (e.g. a precision the GPU executor refuses) still lets the references run, so
#    one device session records their figures; the bench then exits 1 naming the failure.
echo "# meshplan execute: $((warmup + steps)) steps, the first $warmup not timed"
executed=1
$mpirun --allow-run-as-root -np 1 "$meshplan" execute "$out/plan.json" \
  --steps $((warmup + steps)) --json "$out/meshplan.json" 2>&1 | tee "$out/meshplan.txt" ||
  executed=0

# 3. the PyTorch reference, eager then compiled, with the planner's model FLOPs for MFU.
reference=("$python" "$here/pytorch_gpt2_reference.py" --device cuda --micro-batch 8
  --precision "$precision"
  --steps "$steps" --warmup "$warmup" --model-flops-per-step "$model_flops"
  --peak-flops-per-second "$peak_flops")
PYTHONUNBUFFERED=1 "${reference[@]}" --json "$out/pytorch_eager.json" |
  tee "$out/pytorch_eager.txt" || die "the PyTorch eager reference failed"
compiled=()
if [ "$compile" = 1 ]; then
  PYTHONUNBUFFERED=1 "${reference[@]}" --compile --json "$out/pytorch_compile.json" |
    tee "$out/pytorch_compile.txt" || die "the PyTorch torch.compile reference failed"
  compiled=(--compile-json "$out/pytorch_compile.json")
fi

# 4. side by side.
[ "$executed" = 1 ] ||
  die "meshplan execute failed ($out/meshplan.txt): $(grep -m 1 'error' "$out/meshplan.txt" || tail -n 1 "$out/meshplan.txt")"
"$python" "$here/gpu_step_bench_report.py" --plan "$out/plan_report.json" \
  --plan-file "$out/plan.json" --meshplan "$out/meshplan.json" --warmup "$warmup" \
  --eager "$out/pytorch_eager.json" "${compiled[@]}" --json "$out/bench_summary.json" |
  tee "$out/bench_summary.txt"
