#!/usr/bin/env bash
# Side by side with Calculon (calculon-ai/calculon; no Calculon code is in this repository):
#   1. Calculon's own validation (`calculon llm-validation`), whose last table is Korthikanti et
#      al. 2022 Table 5 (8 runs), next to `meshplan validate` on the same 8 runs;
#   2. one search, timed: GPT-3 13B on N A100 80GB with a global batch of B, Calculon's
#      `llm-optimal-execution` (one process, stopped after CALCULON_TIMEOUT seconds, default
#      900) against `meshplan plan`. Calculon's gpt3-13B has hidden 5140, meshplan's 5120.
# Usage: bench/calculon_compare.sh CALCULON_CHECKOUT [MESHPLAN_BINARY] [N] [B]
# Needs Debian's python3-numpy, python3-psutil and python3-pandas (apt, /usr/bin/python3).
set -euo pipefail
calculon=${1:?usage: $0 CALCULON_CHECKOUT [MESHPLAN_BINARY] [N] [B]}
meshplan=${2:-build/cli/meshplan}
gpus=${3:-8}
batch=${4:-16}
limit=${CALCULON_TIMEOUT:-900}
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "# Calculon: llm-validation (Korthikanti et al. 2022 Table 5 is its last table)"
(cd "$calculon" && PYTHONPATH=. /usr/bin/python3 bin/calculon llm-validation) | tail -9

echo "# meshplan: validate, the same 8 runs (korthikanti-t5-*)"
python3 - "$repo/validation/public_runs.json" "$work/t5.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))
runs["runs"] = [r for r in runs["runs"] if r["id"].startswith("korthikanti-t5-")]
json.dump(runs, open(sys.argv[2], "w"))
PY
"$meshplan" validate "$work/t5.json" | grep -v "^#  "

echo "# search: gpt3-13b, $gpus A100 80GB, global batch $batch"
start=$(date +%s.%N)
status=0
(cd "$calculon" && PYTHONPATH=. timeout "$limit" /usr/bin/python3 bin/calculon \
  llm-optimal-execution models/gpt3-13B.json "$gpus" "$batch" float16 systems/a100_80g.json \
  "$work/calculon.json" -c 1 -n) >/dev/null || status=$?
end=$(date +%s.%N)
if [ "$status" -eq 124 ]; then
  echo "calculon llm-optimal-execution: not finished after $limit s (one process)"
else
  echo "calculon llm-optimal-execution: $(echo "$end - $start" | bc) s (one process, exit $status)"
fi
start=$(date +%s.%N)
"$meshplan" plan --model gpt3-13b --cluster dgx-a100-80gb --gpus "$gpus" --global-batch "$batch" \
  --top 1 | tail -1
end=$(date +%s.%N)
echo "meshplan plan: $(echo "$end - $start" | bc) s (one thread)"
