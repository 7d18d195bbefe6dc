#!/usr/bin/env bash
# Device kit, step (b), run THERE, in the repository root of the device machine (one GPU, CUDA 13,
# PyTorch's python3, no MPI): unpacks the kit that scripts/device/pack.sh made here, points the
# binaries at the device's CUDA libraries (NCCL from PyTorch's nvidia-nccl wheel), runs every GPU
# test binary of the kit and the GPT-2 124M bench, and writes what it measured under $OUT:
#   $OUT/summary.txt             the test verdicts and the bench's side-by-side table
#   $OUT/device_results.tar.gz   every log and JSON (environment, tests, plan, three step reports)
# The one call (device tool): command `bash scripts/device/run_on_device.sh`, carry
# [".device-kit"], timeout_s 600. Stages have their own time limits, cut to what is left of a
# 570 s budget (a stage with under 30 s left is not run, and says so), so that a hang leaves the
# rest and the files; $OUT/summary.txt is rewritten after every stage. Exit 1 if a stage failed.
#
# usage: scripts/device/run_on_device.sh [KIT_TARBALL]   (default .device-kit/kit.tar.xz)
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
tarball=${1:-$repo/.device-kit/kit.tar.xz}
out=${OUT:-/tmp/meshplan-device-out}
work=/tmp/meshplan-device
mkdir -p "$out" "$work/logs"
summary=$work/logs/summary.txt
: >"$summary"
failed=0
budget_seconds=570  # the device tool stops a command at 600 s
note() { echo "$*" | tee -a "$summary"; cp "$summary" "$out/summary.txt"; }
finish() {
  cp "$summary" "$out/summary.txt"
  tar -C "$work" -czf "$out/device_results.tar.gz" logs
  exit "$failed"
}
[ -f "$tarball" ] || { note "run_on_device.sh: no kit at $tarball (run scripts/device/pack.sh here and carry .device-kit)"; failed=1; finish; }

# 1. The machine, as found.
{
  date -u
  nvidia-smi
  nvcc --version 2>&1 | tail -n 2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.get_device_name())'
  ldd --version | head -n 1
  head -n 2 /etc/os-release
} >"$work/logs/environment.txt" 2>&1
note "# device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -n 1)"

# 2. The kit: unpack, relocate Open MPI, then the libraries the device must provide.
rm -rf "$work/kit" && tar -C "$work" -xJf "$tarball" || { note "kit: unpack failed"; failed=1; finish; }
export KIT=$work/kit
# shellcheck source=scripts/device/kit_env.sh
. "$KIT/kit_env.sh"
note "# kit: $(grep -E '^(commit|built)=' "$KIT/MANIFEST" | tr '\n' ' ')"
glibc_needed=$(sed -n 's/^glibc_needed=//p' "$KIT/MANIFEST")
glibc_here=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
if [ "$(printf '%s\n' "$glibc_needed" "$glibc_here" | sort -V | head -n 1)" != "$glibc_needed" ]; then
  note "kit: the kit needs glibc $glibc_needed, the device has $glibc_here (pack on a host with an older glibc)"
  failed=1
  finish
fi
system_libstdcxx=$(ls /usr/lib/x86_64-linux-gnu/libstdc++.so.6 /lib/x86_64-linux-gnu/libstdc++.so.6 \
  /usr/lib64/libstdc++.so.6 2>/dev/null | head -n 1)
for version in $(grep -aoh 'GLIBCXX_3\.4\.[0-9]*' "$KIT"/bin/* | sort -u); do
  if [ -z "$system_libstdcxx" ] || ! grep -aq "$version" "$system_libstdcxx"; then
    export LD_LIBRARY_PATH=$KIT/fallback:$LD_LIBRARY_PATH
    note "# kit: the device's libstdc++ lacks $version: using the kit's"
    break
  fi
done
# CUDA libraries: the toolkit's first, then PyTorch's nvidia-* wheels (NCCL is only there).
wheel_dirs=$(python3 -c 'import nvidia, os; print(" ".join(os.path.realpath(p) for p in nvidia.__path__))' 2>/dev/null)
for lib in $(ldd "$KIT"/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u); do
  found=$(find /usr/local/cuda/lib64/ /usr/local/cuda/targets/x86_64-linux/lib/ $wheel_dirs \
    -name "$lib" 2>/dev/null | head -n 1)
  [ -n "$found" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$found")
done
still=$(ldd "$KIT"/bin/* 2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
[ -z "$still" ] || { note "kit: libraries not found on the device: $still"; failed=1; finish; }
note "# NCCL: $(ldd "$KIT"/bin/* 2>/dev/null | awk '/libnccl/ {print $3; exit}')"
ldd "$KIT"/bin/* >"$work/logs/ldd.txt" 2>&1
# Tests that name files by the source path they were built in find them through a link.
source_dir=$(sed -n 's/^source_dir=//p' "$KIT/MANIFEST")
if [ "$source_dir" != "$repo" ] && [ ! -e "$source_dir" ]; then
  mkdir -p "$(dirname "$source_dir")" && ln -s "$repo" "$source_dir"
fi
# Python (PyTorch) runs without the kit's libraries on its path.
printf '#!/bin/sh\nexec env -u LD_LIBRARY_PATH python3 "$@"\n' >"$work/python3-clean"
chmod +x "$work/python3-clean"
export PYTHON=$work/python3-clean PYTHONUNBUFFERED=1

# 3. The GPU tests: exit 0 passed, 77 skipped (ctest label `gpu`), anything else failed.
run_stage() {  # name seconds command...
  local name=$1 seconds=$2 rc left=$((budget_seconds - SECONDS))
  shift 2
  if [ "$left" -lt 30 ]; then
    note "$name: not run (${left} s of the ${budget_seconds} s budget left)"
    failed=1
    return
  fi
  [ "$seconds" -le "$left" ] || seconds=$left
  (cd "$repo" && timeout "$seconds" "$@") >"$work/logs/$name.txt" 2>&1
  rc=$?
  case $rc in
    0) note "$name: passed" ;;
    77) note "$name: skipped ($(grep -i 'skip' "$work/logs/$name.txt" | tail -n 1))" ;;
    124) note "$name: FAILED (over its $seconds s limit)"; failed=1 ;;
    *) note "$name: FAILED (exit $rc; last line: $(tail -n 1 "$work/logs/$name.txt"))"; failed=1 ;;
  esac
}
mpi=(mpirun --allow-run-as-root --oversubscribe)
[ -x "$KIT/bin/gpu_kernels_tests" ] && run_stage gpu_kernels_tests 120 "$KIT/bin/gpu_kernels_tests"
[ -x "$KIT/bin/gpu_trainer_tests" ] && run_stage gpu_trainer_tests 150 "$KIT/bin/gpu_trainer_tests"
[ -x "$KIT/bin/nccl_groups_tests" ] && run_stage nccl_groups_tests 45 "${mpi[@]}" -np 2 "$KIT/bin/nccl_groups_tests"
[ -x "$KIT/bin/gpu_trainer_tests" ] || note "gpu_trainer_tests: not in the kit (the target did not exist when it was packed)"

# 4. The GPU's ceilings (bf16 matmul, copy bandwidth), then the bench: meshplan execute against
#    PyTorch on this GPU, fp32 (the reference with TF32 off,
#    no torch.compile), then bf16 (eager and torch.compile).
run_stage gpu_ceilings 60 "$PYTHON" "$repo/bench/gpu_ceilings.py"
grep '^# ceiling' "$work/logs/gpu_ceilings.txt" | while read -r line; do note "$line"; done
for precision in fp32 bf16; do
  compile=()
  [ "$precision" = bf16 ] || compile=(--no-compile)
  MPIRUN="mpirun --oversubscribe" run_stage "gpu_step_bench_$precision" 240 \
    bash "$repo/bench/gpu_step_bench.sh" "$KIT/bin/meshplan" --precision "$precision" \
    "${compile[@]}" --out "$work/logs/bench_$precision"
  table=$(sed -n '/^# gpu_step_bench: one training step/,$p' "$work/logs/gpu_step_bench_$precision.txt" 2>/dev/null)
  # Without the table (meshplan failed), the references' own footers.
  [ -n "$table" ] || table=$(grep -E '^# (pytorch_gpt2_reference:|median step|peak memory)' \
    "$work/logs/gpu_step_bench_$precision.txt" 2>/dev/null)
  [ -z "$table" ] || note "$table"
done
finish
