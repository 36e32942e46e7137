#!/bin/sh
# A package build of rerail: Release, prefix /usr (so the libraries go into
# the multiarch directory NCCL's loader searches), no tests or benchmarks, no
# path of this machine inside the binaries, stripped. Leaves the .deb in
# OUT_DIR and the installed tree in OUT_DIR/root.
#
# usage: build-deb.sh BUILD_DIR OUT_DIR
# POSIX sh: it also runs in the Containerfile's build stage.
set -eu
build=${1:?usage: build-deb.sh BUILD_DIR OUT_DIR}
out=${2:?usage: build-deb.sh BUILD_DIR OUT_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$build" "$out"
build=$(cd "$build" && pwd)
out=$(cd "$out" && pwd)
# __FILE__ in log lines and any debug info name paths relative to the source
# and build trees, not this machine's directories.
maps="-ffile-prefix-map=$src/= -ffile-prefix-map=$build/="
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DRERAIL_BUILD_TESTS=OFF -DRERAIL_BUILD_BENCH=OFF -DCMAKE_C_FLAGS="$maps" >/dev/null
cmake --build "$build" -j"$(nproc)"
rm -rf "$out/root"
DESTDIR="$out/root" cmake --install "$build" --strip >/dev/null
(cd "$build" && cpack -B "$out" >/dev/null)
rm -rf "$out/_CPack_Packages"
ls "$out"/rerail_*.deb
