#!/usr/bin/env bash
# meshplan simulate run as a user runs it: a plan from `meshplan plan`, every output written and
# the same bytes on a second run; bad input exits 2 with one line on stderr naming the field and
# leaves no output file (and an existing one untouched).
#
# usage: simulate_cli_test.sh MESHPLAN_BINARY
set -u
meshplan=$1
if [ ! -x "$meshplan" ]; then
  echo "usage: $0 MESHPLAN_BINARY ('$meshplan')" >&2
  exit 1
fi
meshplan="$(cd "$(dirname "$meshplan")" && pwd)/$(basename "$meshplan")"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1

num_checks=0
num_failed=0
check() {  # check NAME COMMAND...
  local name=$1
  shift
  num_checks=$((num_checks + 1))
  if "$@"; then
    echo "ok       $name"
  else
    echo "FAILED   $name"
    num_failed=$((num_failed + 1))
  fi
}
run() {
  "$meshplan" "$@" >stdout.txt 2>stderr.txt
  rc=$?
}
one_line_error() {  # one_line_error EXPECTED_SUBSTRING
  [ "$rc" -eq 2 ] && [ "$(wc -l <stderr.txt)" -eq 1 ] && grep -qF -- "$1" stderr.txt
}
no_outputs() { [ ! -e trace.json ] && [ ! -e pipeline.svg ] && [ ! -e report.json ]; }

# GPT-3 13B on 64 A100s, tp 8 x pp 2 x dp 4, 1F1B, ZeRO-1.
"$meshplan" plan --model gpt3-13b --cluster dgx-a100-80gb --gpus 64 --global-batch 128 --tp 8 \
  --pp 2 --schedule 1f1b --zero 1 --save-plan plan.json >/dev/null 2>&1
check "plan file written" test -s plan.json

run simulate plan.json --trace trace.json --svg pipeline.svg --json report.json
check "simulate exits 0" [ "$rc" -eq 0 ]
check "table: names line" grep -qE '^# stage +ranks +compute +exposed comm +bubble +idle' stdout.txt
check "table: units line" grep -qE '^# +\(s\) +\(%\) +\(s\) +\(%\)' stdout.txt
check "table: one data row per stage" [ "$(grep -cE '^ +[0-9]+ +1 ' stdout.txt)" -eq 2 ]
check "table: every other line starts with #" \
  [ "$(grep -vcE '^#|^ +[0-9]+ +1 ' stdout.txt)" -eq 0 ]
check "footer: simulated and analytic step time" grep -q '^# step time (analytic)' stdout.txt
# Megatron's 1F1B (the plan's default framework) pairs each send with the opposite receive.
check "header: how pipeline transfers are replayed" \
  grep -q '^# pipeline transfers: paired calls' stdout.txt
check "json: how pipeline transfers are replayed" grep -q '"pipeline_transfers": "paired calls' report.json
check "json: step times" grep -q '"analytic_step_time_s"' report.json
check "trace: events" grep -q '"traceEvents"' trace.json
check "svg: an svg" grep -q '^<svg xmlns="http://www.w3.org/2000/svg"' pipeline.svg
mkdir first && cp trace.json pipeline.svg report.json stdout.txt first/
run simulate plan.json --trace trace.json --svg pipeline.svg --json report.json
check "same bytes: trace" cmp -s trace.json first/trace.json
check "same bytes: svg" cmp -s pipeline.svg first/pipeline.svg
check "same bytes: json" cmp -s report.json first/report.json
check "same bytes: table" cmp -s stdout.txt first/stdout.txt

run simulate plan.json --all-ranks
check "all ranks: 64 ranks simulated" grep -q '^# simulated ranks: 64 ' stdout.txt
check "all ranks: the same step time" \
  [ "$(grep '^# step time (simulated)' stdout.txt)" = "$(grep '^# step time (simulated)' first/stdout.txt)" ]
run simulate plan.json --zero-communication
check "zero communication: 1F1B equals the closed form" \
  grep -q '(simulated - analytic: [+-]0.00%)' stdout.txt

rm -f trace.json pipeline.svg report.json
run simulate plan.json --bucket-mb 0 --trace trace.json --svg pipeline.svg --json report.json
check "--bucket-mb 0: one line naming the flag" one_line_error "--bucket-mb: must be positive (0)"
check "--bucket-mb 0: no output" no_outputs

head -c 200 plan.json >truncated.json
run simulate truncated.json --trace trace.json --svg pipeline.svg --json report.json
check "truncated plan: one line naming the file" one_line_error "truncated.json: malformed JSON"
check "truncated plan: no output" no_outputs

sed '0,/"schedule": "1f1b"/s//"schedule": "pipedream"/' plan.json >schedule.json
run simulate schedule.json --json report.json
check "unknown schedule: one line naming it" one_line_error "pipedream"
check "unknown schedule: no output" no_outputs

sed 's/"num_gpus": 64/"num_gpus": 48/' plan.json >gpus.json
run simulate gpus.json --json report.json
check "tp*pp*dp != num_gpus: one line naming it" one_line_error "num_gpus"
check "tp*pp*dp != num_gpus: no output" no_outputs

sed 's/"version": 1/"version": 99/' plan.json >version.json
echo "keep me" >report.json
run simulate version.json --json report.json
check "newer version: one line naming it" one_line_error "version"
check "newer version: existing output untouched" grep -qx "keep me" report.json

# Outputs are written all or none: a second output that cannot be written leaves the first
# output's existing file as it was (runtime error, exit 1), with no temporary file beside it.
echo "keep me" >pipeline.svg
run simulate plan.json --svg pipeline.svg --json no_such_dir/report.json
check "unwritable second output: exit 1 naming it" \
  eval '[ "$rc" -eq 1 ] && grep -qF "no_such_dir/report.json: cannot write file" stderr.txt'
check "unwritable second output: the first file untouched" grep -qx "keep me" pipeline.svg
check "unwritable second output: no temporary file left" eval '! ls ./*.tmp.* >/dev/null 2>&1'
rm -f trace.json pipeline.svg report.json
run simulate plan.json --svg report.json --json report.json
check "the same file for --svg and --json: one line naming both" \
  one_line_error "--svg and --json: the same output file (report.json)"
check "the same file twice: no output" no_outputs

# The plan on GPUs shrunk to 8 GiB (it needs more): refused, naming the file, the peak and the
# capacity, unless --allow-infeasible.
sed 's/^      "hbm_bytes": [0-9]*,$/      "hbm_bytes": 8589934592,/' plan.json >small_gpu.json
run simulate small_gpu.json --json report.json
check "plan that does not fit: one line naming the file and capacity" \
  one_line_error "small_gpu.json: does not fit: peak memory "
check "plan that does not fit: the capacity" grep -qF "exceeds the 8.0 GiB of each A100-SXM4-80GB" stderr.txt
check "plan that does not fit: no output" no_outputs
run simulate small_gpu.json --allow-infeasible --json report.json
check "--allow-infeasible: simulated, with the planner's reason" \
  eval '[ "$rc" -eq 0 ] && grep -q "^# note: the planner rejects this plan: peak memory" stdout.txt'
rm -f report.json

echo "# $num_checks checks, $num_failed failed"
[ "$num_failed" -eq 0 ]
