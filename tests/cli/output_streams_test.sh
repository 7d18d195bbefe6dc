#!/usr/bin/env bash
# Outputs and input streams that are not plain files (session 36's hostile-input audit):
#   - an output path that is a symbolic link is written through to its target, the link kept;
#   - a failed write to stdout (/dev/full) is an error, exit 1, not a silent exit 0;
#   - a named pipe with no writer given as an input is refused at once, not waited on forever;
#   - under mpirun a command-line error is printed once, by rank 0.
# usage: output_streams_test.sh MESHPLAN_BINARY MPIRUN [MPIRUN_FLAGS...]
set -u
meshplan=$1
shift
mpirun=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
failed=0
fail() {
  echo "FAILED   $*"
  failed=1
}
ok() { echo "ok       $*"; }

echo 'the link target before the run' >target.json
ln -s target.json link.json
if "$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --json link.json >/dev/null 2>err.txt &&
  [ -L link.json ] && grep -q '"plans"' target.json; then
  ok "--json on a symbolic link: written through, the link kept"
else
  fail "--json on a symbolic link: $(cat err.txt); $(ls -l link.json)"
fi

"$meshplan" models >/dev/full 2>err.txt
rc=$?
if [ "$rc" -eq 1 ] && [ "$(cat err.txt)" = \
  "meshplan: error: stdout: cannot write (a full disk or a closed reader)" ]; then
  ok "stdout on /dev/full: exit 1, one line"
else
  fail "stdout on /dev/full: exit $rc, $(cat err.txt)"
fi

mkfifo pipe.json
timeout 20 "$meshplan" plan --model pipe.json --cluster local-cpu --gpus 2 >/dev/null 2>err.txt
rc=$?
if [ "$rc" -eq 2 ] && grep -q '^meshplan: error: pipe.json: ' err.txt; then
  ok "a named pipe without a writer as --model: refused at once ($(cat err.txt))"
else
  fail "a named pipe without a writer as --model: exit $rc, $(cat err.txt)"
fi

if [ ${#mpirun[@]} -gt 0 ] && command -v "${mpirun[0]}" >/dev/null; then
  "$meshplan" plan --model tiny --cluster local-cpu --gpus 2 --tp 2 --zero 0 --save-plan p.json \
    >/dev/null 2>&1
  timeout 60 "${mpirun[@]}" -np 2 "$meshplan" execute p.json --steps 1 --bogus >/dev/null \
    2>err.txt
  lines=$(grep -c '^meshplan: error: ' err.txt)
  if [ "$lines" -eq 1 ]; then
    ok "mpirun -np 2 with an unknown flag: one error line"
  else
    fail "mpirun -np 2 with an unknown flag: $lines error lines"
  fi
fi
[ "$failed" -eq 0 ] && echo "# output streams: OK"
exit "$failed"
