#!/usr/bin/env bash
# Device kit, step (a), run HERE (this Debian 12 host with CUDA 13 and NCCL under /usr/local/cuda):
# builds meshplan and the GPU test binaries for sm_80 + sm_90, and packs them with everything
# they need that the device machine lacks into KIT_DIR/kit.tar.xz (default: <repo>/.device-kit,
# ignored by git; name it in the device tool's `carry`). The device (one H200, CUDA 13,
# PyTorch's python3, no MPI, no Debian packages) then runs scripts/device/run_on_device.sh.
#
# What goes in (measured sizes in the README's "GPU bench and device kit"):
#   bin/   meshplan and every executable of tests/gpu (gpu_kernels_tests, nccl_groups_tests,
#          gpu_trainer_tests where that target exists);
#   root/  the Debian packages (apt-get download of the installed version, then dpkg -x) that
#          hold every shared library those binaries and Open MPI's runtime (orterun, orted, its
#          MCA components) load, found with ldd and dpkg -S: Open MPI 4.1, PMIx, hwloc, libevent,
#          fmt, ...; relocated with OPAL_PREFIX at run time (scripts/device/kit_env.sh);
#   fallback/  this host's libstdc++ and libgcc_s, used there only if the device's are older.
# Not packed: glibc (the device's, 2.39 on Ubuntu 24.04, runs binaries linked against 2.36) and
# the CUDA libraries (libcuda from the driver; cudart, cuBLAS and NCCL from the device's
# /usr/local/cuda or PyTorch's nvidia-* wheels, found there by run_on_device.sh).
#
# usage: [MESHPLAN_BUILD_DIR=build] scripts/device/pack.sh [KIT_DIR]
#        exit 1 with one line when a step fails
set -euo pipefail

die() { echo "pack.sh: $*" >&2; exit 1; }

repo=$(cd "$(dirname "$0")/../.." && pwd)
kit_dir=${1:-$repo/.device-kit}
build=${MESHPLAN_BUILD_DIR:-$repo/build-device}  # any GPU-enabled build directory will do
max_bytes=$((60 * 1024 * 1024))  # the device tool carries 64 MiB in all, the tree included

command -v apt-get >/dev/null && command -v dpkg >/dev/null || die "needs apt-get and dpkg (Debian)"

# 1. Build (Release; ccache when present). Configure must have found CUDA and NCCL.
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
mkdir -p "$build"
cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DMESHPLAN_GPU=ON "${launcher[@]}" \
  >"$build/pack-configure.log" 2>&1 || die "configure failed (see $build/pack-configure.log)"
build_targets=$(cmake --build "$build" --target help)  # Makefiles: "... t", Ninja: "t: phony"
grep -Eq "^(\.\.\. )?meshplan_executor_gpu(:|\$)" <<<"$build_targets" ||
  die "configure found no CUDA toolkit with NCCL: the kit needs the GPU build ($build/pack-configure.log)"
targets=(meshplan)
for candidate in gpu_kernels_tests nccl_groups_tests gpu_trainer_tests; do
  if grep -Eq "^(\.\.\. )?$candidate(:|\$)" <<<"$build_targets"; then
    targets+=("$candidate")
  fi
done
echo "pack.sh: building ${targets[*]} in $build"
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$build/pack-build.log" 2>&1 ||
  die "build failed (see $build/pack-build.log)"

# 2. Stage the binaries.
stage=$(mktemp -d /tmp/meshplan-kit.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/kit/bin" "$stage/kit/root" "$stage/kit/fallback" "$stage/debs"
for target in "${targets[@]}"; do
  binary=$(find "$build" -type f -name "$target" -perm -u+x | head -n 1)
  [ -n "$binary" ] || die "built target $target not found under $build"
  cp "$binary" "$stage/kit/bin/"
done

# 3. Every shared library loaded by the binaries and by Open MPI's runtime, found with ldd.
# Debian's Open MPI 4.1 layout (ompi_info --path all): components in pkglibdir, PMIx's own.
objects=("$stage"/kit/bin/* /usr/bin/orterun /usr/bin/orted)
objects+=(/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so)
objects+=(/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix/*.so)
# glibc: the device's own; CUDA: the driver's and the device toolkit's or wheels'.
device_has='^(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux-x86-64)\.so|^lib(cuda|cudart|cublas|cublasLt|nccl|nvrtc|nvJitLink|curand|nvidia-ml)\.so'
libs=$(for object in "${objects[@]}"; do ldd "$object"; done | awk '/=>/ {print $1, $3}' | sort -u)
missing=$(echo "$libs" | awk '$2 == "not" {print $1}' | grep -Ev "$device_has" || true)
[ -z "$missing" ] || die "ldd finds no $(echo $missing) here: install it first"
packages="openmpi-bin openmpi-common libopenmpi3 libpmix2"  # runtime, help files, components
for path in $(echo "$libs" | awk '$2 != "not" {print $2}'); do
  name=$(basename "$path")
  if [[ $name =~ $device_has ]]; then
    continue
  elif [[ $name =~ ^lib(stdc\+\+|gcc_s)\.so ]]; then
    cp -L "$path" "$stage/kit/fallback/$name"
    continue
  fi
  owner=$(dpkg -S "$(readlink -f "$path")" 2>/dev/null || dpkg -S "$path" 2>/dev/null) ||
    die "$path belongs to no Debian package: cannot pack it"
  packages+=" ${owner%%:*}"
done
packages=$(echo "$packages" | tr ' ' '\n' | grep -v '^libc6$' | sort -u)

# 4. Download the installed version of each package and unpack it into root/.
for package in $packages; do
  version=$(dpkg-query -W -f='${Version}' "$package")
  (cd "$stage/debs" && apt-get download -q "$package=$version" >/dev/null 2>&1) ||
    die "apt-get download $package=$version failed"
done
for deb in "$stage"/debs/*.deb; do
  dpkg -x "$deb" "$stage/kit/root"
done
# Debian's mpirun and mpiexec are update-alternatives links made at install, not in the package.
ln -s ../root/usr/bin/orterun "$stage/kit/bin/mpirun"
ln -s ../root/usr/bin/orterun "$stage/kit/bin/mpiexec"
rm -rf "$stage/kit/root/usr/share/doc" "$stage/kit/root/usr/share/man" \
  "$stage/kit/root/usr/share/lintian"

# 5. What the device needs to know: where the tests' sources were, what went in, and the
#    newest glibc symbol version any packed program or library asks for.
glibc=$(find "$stage/kit/bin" "$stage/kit/root" -type f \( -perm -u+x -o -name '*.so*' \) \
  -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -n 1 || true)
[ -n "$glibc" ] || die "objdump -T found no glibc symbol versions in the kit"
{
  echo "glibc_needed=${glibc#GLIBC_}"
  echo "source_dir=$repo"
  echo "commit=$(git -C "$repo" rev-parse HEAD)$(git -C "$repo" diff --quiet || echo ' (modified)')"
  echo "built=$(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "binaries=${targets[*]}"
  echo "packages=$(echo "$packages" | tr '\n' ' ')"
} >"$stage/kit/MANIFEST"
cp "$repo/scripts/device/kit_env.sh" "$stage/kit/"

mkdir -p "$kit_dir"
tar -C "$stage" -cJf "$kit_dir/kit.tar.xz.new" kit
# Smoke test: the packed Open MPI starts two ranks from a fresh unpack (here the host's own Open
# MPI could stand in for a missing file; the README's isolated test hides it).
mkdir -p "$stage/check"
tar -C "$stage/check" -xJf "$kit_dir/kit.tar.xz.new"
(KIT=$stage/check/kit && . "$KIT/kit_env.sh" && [ "$(command -v mpirun)" = "$KIT/bin/mpirun" ] &&
  mpirun --oversubscribe -np 2 hostname >/dev/null) ||
  die "the packed mpirun did not start 2 ranks from a fresh unpack"
bytes=$(stat -c %s "$kit_dir/kit.tar.xz.new")
[ "$bytes" -le "$max_bytes" ] || die "kit is $bytes bytes, over the $max_bytes the carry allows"
mv "$kit_dir/kit.tar.xz.new" "$kit_dir/kit.tar.xz"
unpacked=$(du -sb "$stage/kit" | cut -f1)
echo "pack.sh: $kit_dir/kit.tar.xz: $bytes bytes ($((bytes / 1048576)) MiB; $((unpacked / 1048576)) MiB unpacked), $(echo "$packages" | wc -l) packages"
