#!/usr/bin/env bash
# The GPU bench's scripts on a host without a GPU or torch (see CMakeLists.txt beside this).
# usage: gpu_bench_scripts_test.sh MESHPLAN SOURCE_DIR
set -euo pipefail
meshplan=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. The reference compiles, and --help needs no torch.
export PYTHONDONTWRITEBYTECODE=1  # nothing written into the source tree
for script in pytorch_gpt2_reference gpu_step_bench_report gpu_ceilings; do
  python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' \
    "$src/bench/$script.py" "$work/$script.pyc"
done
python3 "$src/bench/pytorch_gpt2_reference.py" --help | grep -q -- "--compile" ||
  fail "pytorch_gpt2_reference.py --help does not list --compile"
python3 "$src/bench/pytorch_gpt2_reference.py" --steps 0 2>"$work/err" && fail "--steps 0 accepted"
grep -q -- "--steps: must be at least 1 (0)" "$work/err" || fail "--steps 0: $(cat "$work/err")"

# 2. Its FLOPs formula (Narayanan et al. 2021, eq. 3 in closed form) equals the planner's
#    model_flops_per_step (a sum over every matmul of the layer) for the bench's plan:
#    GPT-2 124M, 8 x 1024 tokens.
"$meshplan" plan --model gpt2-124m --cluster dgx-h200 --gpus 1 --global-batch 8 --micro-batch 8 \
  --tp 1 --pp 1 --dp 1 --zero 0 --recompute none --flash-attention on \
  --save-plan "$work/plan.json" --json "$work/plan_report.json" --top 1 >/dev/null
python3 - "$src/bench" "$work/plan_report.json" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[1])
import pytorch_gpt2_reference as ref
planner = json.load(open(sys.argv[2]))["plans"][0]["model_flops_per_step"]
ours = ref.model_flops_per_step(12, 768, 50257, 1024, 8 * 1024)
# 72 * 8192 * 12 * 768^2 * (1 + 1024 / 4608) + 6 * 8192 * 768 * 50257
#   = 5,102,421,147,648 + 1,897,138,225,152 = 6,999,559,372,800
assert ours == 6_999_559_372_800, ours
assert abs(ours - planner) <= 1e-9 * planner, (ours, planner)
print(f"model FLOPs per step: reference {ours:.6e}, planner {planner:.6e}")
EOF

# 3. The side-by-side report on hand-made inputs. meshplan: steps 1-2 are the warm-up (1 s each,
#    dropped), then 30, 32, 31 ms: median 31 ms; eager 25 ms. Expected: 31 / 25 = 1.240x (bar
#    1.3 met, goal 1.0 not); tokens/s 8192 / 0.031 = 264,258; MFU 7e12 / (0.031 x 1e15) = 22.6%
#    (bf16 peak); tensors (10 - 11) / 11 = -9.1%, device (13 - 14) / 14 = -7.1% (both within 10%).
cat >"$work/report.json" <<'EOF'
{"plans": [{"step_time_s": 0.04, "tokens_per_s": 204800, "model_flops_per_step": 7e12,
            "peak_memory_bytes": 10737418240}]}
EOF
echo '{"cluster": {"precision": "bf16", "gpu": {"peak_bf16_flops_per_second": 1e15,
  "peak_fp32_flops_per_second": 5e14}}}' >"$work/planfile.json"
cat >"$work/meshplan.json" <<'EOF'
{"steps": [{"step": 1, "step_time_s": 1.0}, {"step": 2, "step_time_s": 1.0},
           {"step": 3, "step_time_s": 0.030}, {"step": 4, "step_time_s": 0.032},
           {"step": 5, "step_time_s": 0.031}],
 "peak_memory_bytes": [{"stage": 0, "measured": 11811160064, "predicted_tensor_bytes": 10737418240,
                        "predicted": 13958643712, "device_used_bytes": 15032385536}]}
EOF
echo '{"step_time_s": 0.025, "micro_batch": 8, "seq_length": 1024, "peak_memory_bytes": 8589934592,
  "device_used_bytes": 9663676416}' \
  >"$work/eager.json"
python3 "$src/bench/gpu_step_bench_report.py" --plan "$work/report.json" \
  --plan-file "$work/planfile.json" --meshplan "$work/meshplan.json" --warmup 2 \
  --eager "$work/eager.json" --json "$work/summary.json" >"$work/table.txt"
cat "$work/table.txt"
grep -q '^#                run      step  vs eager   tokens/s    MFU   tensors    device$' "$work/table.txt" ||
  fail "header"
grep -q '^#                         (ms)       (x)    (tok/s)    (%)     (GiB)     (GiB)$' "$work/table.txt" ||
  fail "units line"
grep -q '^  planner prediction    40.000     1.600     204800   17.5     10.00     13.00$' "$work/table.txt" ||
  fail "planner row"
grep -q '^    meshplan execute    31.000     1.240     264258   22.6     11.00     14.00$' "$work/table.txt" ||
  fail "meshplan row"
grep -q '^       pytorch eager    25.000     1.000     327680   28.0      8.00      9.00$' "$work/table.txt" ||
  fail "eager row (8192 / 0.025 = 327,680 tokens/s; 7e12 / 0.025e15 = 28.0%)"
grep -q '^# meshplan / eager 1.240x: bar <= 1.3x OK, goal <= 1.0x FAILED$' "$work/table.txt" ||
  fail "speed footer"
grep -q '^# memory, tensors: predicted - measured = -9.1% of measured: bar within 10% OK$' \
  "$work/table.txt" || fail "memory footer, tensors"
grep -q '^# memory, device in use: predicted - measured = -7.1% of measured: bar within 10% OK$' \
  "$work/table.txt" || fail "memory footer, device"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]; assert v["speed_bar_met"] and not v["speed_goal_met"], v' \
  "$work/summary.json"

# An fp32 plan takes the fp32 peak: MFU 7e12 / (0.031 x 5e14) = 45.2%.
sed -i 's/"precision": "bf16"/"precision": "fp32"/' "$work/planfile.json"
python3 "$src/bench/gpu_step_bench_report.py" --plan "$work/report.json" \
  --plan-file "$work/planfile.json" --meshplan "$work/meshplan.json" --warmup 2 \
  --eager "$work/eager.json" >"$work/table_fp32.txt"
grep -q '^    meshplan execute    31.000     1.240     264258   45.2 ' "$work/table_fp32.txt" ||
  fail "fp32 plan: MFU against the fp32 peak"

# 4. The bench skips without a GPU; the device scripts parse.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  set +e
  bash "$src/bench/gpu_step_bench.sh" "$meshplan" --steps 2 >"$work/skip.txt" 2>&1
  rc=$?
  set -e
  [ "$rc" = 77 ] || fail "gpu_step_bench.sh without a GPU: exit $rc, not 77"
  grep -q "no GPU visible" "$work/skip.txt" || fail "skip message: $(cat "$work/skip.txt")"
fi
bash "$src/bench/gpu_step_bench.sh" "$meshplan" --steps x >/dev/null 2>&1 && fail "--steps x accepted"
for script in "$src"/scripts/device/*.sh "$src/bench/gpu_step_bench.sh"; do
  bash -n "$script" || fail "$script does not parse"
done
echo "bench_gpu_scripts: OK"
