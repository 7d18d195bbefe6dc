#!/usr/bin/env bash
# Installs meshplan's dependencies (Debian 12 packages) and builds it into build/.
# Idempotent: packages already present are not installed again; the build is incremental.
# --ci (used by .ci/run): also installs clang and its sanitizer/libFuzzer runtime for the second
# CI build and chromium for the HTML render test, and builds with -Werror (MESHPLAN_WERROR);
# without it warnings stay warnings.
set -euo pipefail
cd "$(dirname "$0")/.."

ci=OFF
if [ "${1:-}" = "--ci" ]; then
  ci=ON
elif [ "$#" -gt 0 ]; then
  echo "usage: $0 [--ci]" >&2
  exit 2
fi

packages=(g++ make cmake git clang-format libboost-graph-dev libeigen3-dev libcli11-dev nlohmann-json3-dev
          doctest-dev libfmt-dev libopenmpi-dev openmpi-bin)
# chromium: the headless render check of sweep --html (ctest cli_sweep_html_chromium; skipped
# without it).
[ "$ci" = ON ] && packages+=(clang libclang-rt-14-dev chromium)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

jobs=$(nproc 2>/dev/null || echo 2)
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# Unity build (CMake batches of 8 files per compilation): the headers and the fmt/json template
# instantiations are compiled once per batch instead of once per file, about half the CPU time.
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DMESHPLAN_WERROR="$ci" \
  "${launcher[@]}" >/dev/null
cmake --build build -j"$jobs"
echo "setup: built build/cli/meshplan"
