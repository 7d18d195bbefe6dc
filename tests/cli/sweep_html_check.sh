#!/usr/bin/env bash
# meshplan sweep --html rendered in headless Chromium (issue 14, Sec. 1): the page loads from a
# file with the network unreachable, its DOM has the three charts (inline <svg> with ids
# chart-time, chart-cost, chart-memory) and the points table, it references nothing outside
# itself, and Chromium logs no console message. Exits 77 (ctest SKIP_RETURN_CODE) when no
# chromium is installed (scripts/setup.sh --ci installs it).
#
# usage: sweep_html_check.sh MESHPLAN_BINARY [SCREENSHOT.png]
set -u
meshplan=$1
screenshot=${2:-}
chromium=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chromium" ]; then
  echo "SKIP: no chromium on PATH (Debian package 'chromium'; scripts/setup.sh --ci installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
if ! "$meshplan" sweep --model llama3-70b --cluster dgx-a100-80gb,dgx-h100,dgx-h200 \
  --gpus 64..32768 --html sweep.html >sweep.txt 2>sweep_err.txt; then
  echo "FAILED   meshplan sweep: $(cat sweep_err.txt)"
  exit 1
fi
# --dump-dom prints the DOM after load; --enable-logging=stderr --v=0 prints console messages as
# lines containing "CONSOLE". A fresh profile dir keeps runs independent.
flags=(--headless --no-sandbox --disable-gpu --no-first-run --user-data-dir="$work/profile"
       --enable-logging=stderr --v=0)
timeout 60 "$chromium" "${flags[@]}" --dump-dom "file://$work/sweep.html" >dom.html 2>chrome.txt
ok=0
for id in chart-time chart-cost chart-memory points; do
  grep -q "id=\"$id\"" dom.html || { echo "FAILED   the rendered DOM lacks id=\"$id\""; ok=1; }
done
svgs=$(grep -o '<svg' dom.html | wc -l)
[ "$svgs" -eq 3 ] || { echo "FAILED   $svgs <svg> elements in the rendered DOM, expected 3"; ok=1; }
# 3 clusters x 9 feasible counts: 27 bars of 5 parts each in the memory chart.
rects=$(sed -n '/id="chart-memory"/,/<\/svg>/p' dom.html | grep -c '<rect x=.*<title>')
[ "$rects" -eq 135 ] || { echo "FAILED   $rects memory bar parts, expected 27 x 5 = 135"; ok=1; }
if grep -v 'xmlns="http://www.w3.org/2000/svg"' sweep.html | grep -qE '(src|href)=|https?:'; then
  echo "FAILED   the page references something outside itself"
  ok=1
fi
if grep -q 'CONSOLE' chrome.txt; then
  echo "FAILED   console messages:"
  grep 'CONSOLE' chrome.txt | head -n 5
  ok=1
fi
if [ -n "$screenshot" ]; then
  timeout 60 "$chromium" "${flags[@]}" --window-size=900,1800 --screenshot="$screenshot" \
    "file://$work/sweep.html" >/dev/null 2>&1
fi
[ "$ok" -eq 0 ] && echo "ok       sweep --html renders in $chromium: 3 charts, 135 bar parts, no console message"
exit $ok
