#!/usr/bin/env bash
# execute picks the executor from the plan's cluster (issue 13): a GPU cluster's plan with no GPU
# visible (CUDA_VISIBLE_DEVICES empty) fails with one line naming it and exit 1, never a crash;
# a bf16 plan is refused by name (exit 2); a local-cpu plan still trains on CPUs. A build
# without CUDA says so instead (exit 2). Runs without a GPU (CI).
#
# usage: gpu_execute_cli_test.sh MESHPLAN_BINARY SOURCE_DIR HAVE_GPU(ON|OFF)
set -u
meshplan=$1
source_dir=$2
have_gpu=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
fail() { echo "FAILED   $*"; exit 1; }

# The H200 preset with precision fp32: the GPU executor's mode.
sed 's/"precision": "bf16"/"precision": "fp32"/' \
  "$source_dir/models/presets/clusters/dgx-h200.json" >h200-fp32.json
grep -q '"precision": "fp32"' h200-fp32.json || fail "no precision field to rewrite"
"$meshplan" plan --model tiny --cluster h200-fp32.json --gpus 1 --zero 0 \
  --save-plan gpu.json >/dev/null 2>&1 || fail "plan on h200-fp32.json"
"$meshplan" plan --model tiny --cluster dgx-h200 --gpus 1 --zero 0 \
  --save-plan gpu_bf16.json >/dev/null 2>&1 || fail "plan on dgx-h200"
"$meshplan" plan --model tiny --cluster local-cpu --gpus 1 --zero 0 \
  --save-plan cpu.json >/dev/null 2>&1 || fail "plan on local-cpu"

# expect_error NAME CODE TEXT -- ARGS: exit CODE, stderr's meshplan line contains TEXT.
expect_error() {
  local name=$1 code=$2 text=$3
  shift 4
  CUDA_VISIBLE_DEVICES= "$meshplan" "$@" >out.txt 2>err.txt
  local rc=$?
  [ "$rc" -eq "$code" ] || fail "$name: exit $rc, expected $code: $(cat err.txt)"
  [ "$(grep -c '^meshplan: error: ' err.txt)" -eq 1 ] || fail "$name: not one error line"
  grep '^meshplan: error: ' err.txt | grep -qF "$text" || fail "$name: $(cat err.txt)"
  echo "ok       $name"
}

if [ "$have_gpu" = ON ]; then
  expect_error "gpu plan, no GPU visible" 1 "rank 0: no GPU visible (cudaGetDeviceCount: " \
    -- execute gpu.json --steps 1
  expect_error "bf16 plan refused" 2 \
    "gpu_bf16.json: cluster.precision: the GPU executor runs fp32 only" \
    -- execute gpu_bf16.json --steps 1
  expect_error "checkpoints refused" 2 "ck: --checkpoint-dir: the GPU executor writes no " \
    -- execute gpu.json --steps 1 --checkpoint-dir ck --checkpoint-every 1
else
  expect_error "gpu plan, built without CUDA" 2 \
    "gpu.json: cluster: dgx-h200 runs on GPUs, but this meshplan was built without CUDA" \
    -- execute gpu.json --steps 1
fi

# local-cpu: the CPU executor, unchanged (two loss rows).
CUDA_VISIBLE_DEVICES= "$meshplan" execute cpu.json --steps 2 >cpu_out.txt 2>&1 ||
  fail "local-cpu plan: $(tail -3 cpu_out.txt)"
[ "$(grep -cE '^ +[12] ' cpu_out.txt)" -ge 2 ] || fail "local-cpu plan: no step rows"
echo "ok       local-cpu plan trains on CPUs"
