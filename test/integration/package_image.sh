#!/usr/bin/env bash
# rerail as clusters take it: the container image and the .deb, built for real
# and run over the network lab.
#
#  1. A Debian 12 base image made here (debootstrap --variant=minbase from the
#     apt mirror this machine uses; no registry is reachable in CI), imported
#     into podman. The rootfs tarball is cached in RERAIL_TEST_CACHE (default
#     /var/cache/rerail-test) so that later runs skip debootstrap.
#  2. tools/package/Containerfile built with podman on that base (build stage
#     and runtime stage). Checks: the image adds < 5 MB to the base; its
#     configuration is the base's plus NCCL_NET_PLUGIN and NCCL_TUNER_PLUGIN;
#     its files differ from the base's only by rerail's and libnuma's; the
#     plugins need nothing but libc and libnuma (readelf, and ldd inside the
#     image) and hold no path of the build machine (strings).
#  3. The .deb from the same build stage: lintian without errors, Depends
#     (libnuma1, libc6) and Recommends (libibverbs1), the plugins in the
#     multiarch directory, changelog and copyright; rerail.pc compiles a reader
#     of the health-table header.
#  4. Inside the image, and in a clean root (the same minbase) with the .deb
#     installed by apt: the NCCL-faithful harness as two lab hosts, both
#     plugins chosen by environment variable as NCCL chooses them (the tuner
#     through tuner_probe), checksummed traffic, host 0's rail0 NIC down
#     (traffic must move to rail1), back up (traffic must fail back to rail0),
#     every byte checked, zero errors.
#
# usage: package_image.sh HARNESS TUNER_PROBE
#   HARNESS      the rerail-harness executable (bind-mounted into the containers)
#   TUNER_PROBE  the tuner_probe executable (test/integration/tuner_probe.c)
# Needs root, podman, debootstrap, lintian (tools/install-deps.sh) and the
# apt mirror. KEEP_LOGS=1 keeps the work directory.
# shellcheck disable=SC2034,SC1091  # PLUGIN_DIR, PAIR_DIR, CPID, SPID: read by the sourced libraries
set -u
HARNESS=${1:?usage: $0 HARNESS TUNER_PROBE}
PROBE=${2:?usage: $0 HARNESS TUNER_PROBE}
TOP="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE=${RERAIL_TEST_CACHE:-/var/cache/rerail-test}
MAX_ADDED=5000000   # bytes the image may add to its base
t_start=$SECONDS

if [ "$(id -u)" -ne 0 ]; then
  echo "FAIL package_image: needs root (podman, debootstrap, the network lab)" >&2
  exit 1
fi
for tool in podman debootstrap lintian readelf dpkg-deb pkg-config cc; do
  command -v "$tool" >/dev/null || { echo "FAIL package_image: $tool is not installed (tools/install-deps.sh)" >&2; exit 1; }
done

# The lab, the harness pair's helpers and PASS/FAIL bookkeeping ($WORK).
# harness_lib.sh wants a plugin directory; the harness never uses it here
# (each container finds the plugin itself), so it names the probe's.
PLUGIN_DIR=$(mktemp -d /tmp/rerail-pkg-plugin.XXXXXX)
: >"$PLUGIN_DIR/libnccl-net-rerail.so"
. "$TOP/test/integration/resilience_lib.sh"
rm -rf "$PLUGIN_DIR"
LABNAME=rrp$$

# podman with storage of its own under $WORK: nothing of the machine's images
# is touched, and everything goes with the work directory.
PODMAN=(podman --root "$WORK/storage" --runroot "$WORK/run" --tmpdir "$WORK/run/libpod")
# crun refuses hosts with cgroup v1 controllers beside v2 ("hybrid"); runc does not.
[ ! -e /sys/fs/cgroup/cgroup.controllers ] && command -v runc >/dev/null && PODMAN+=(--runtime runc)
# podman's default rlimits (nofile 1048576, nproc 4194304) exceed what a root
# without CAP_SYS_RESOURCE (a container or VM sandbox, as CI's) may set: stay
# within this shell's hard limits.
RUN_OPTS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit nproc=4096:4096)
cleanup() {
  lab_cleanup
  [ -d "$WORK/storage" ] || return 0
  "${PODMAN[@]}" rm -af -t 0 >/dev/null 2>&1
  "${PODMAN[@]}" rmi -af >/dev/null 2>&1
  grep -o " $WORK/[^ ]*" /proc/mounts | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  # Kept logs stay small: images and roots go.
  rm -rf "$WORK/storage" "$WORK/run" "$WORK/debroot" "$WORK/debx"
}
# harness_lib.sh's finish, after the images and roots are gone
done_all() {
  cleanup
  finish
}
trap 'cleanup' EXIT
trap 'cleanup; exit 143' TERM
trap 'cleanup; exit 130' INT
stamp() { echo "[$((SECONDS - t_start))s] $*"; }

# ---- 1. the base ------------------------------------------------------------------
# The first Debian mirror apt is configured with (deb822 or one-line sources).
mirror=${RERAIL_TEST_MIRROR:-$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list.d/*.sources 2>/dev/null | grep -v '^[[:space:]]*#' |
  grep -oE 'https?://[^ ]+/debian/?( |$)' | head -1 | tr -d ' ')}
mirror=${mirror:-http://deb.debian.org/debian}
base_tar="$CACHE/bookworm-minbase.tar"
if [ ! -s "$base_tar" ]; then
  stamp "debootstrap --variant=minbase bookworm from $mirror (cached afterwards in $CACHE)"
  mkdir -p "$CACHE"
  if ! debootstrap --variant=minbase bookworm "$WORK/rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1; then
    tail -20 "$WORK/debootstrap.log"
    echo "FAIL package_image: debootstrap failed" >&2
    exit 1
  fi
  # As Debian's published images are: no downloaded packages or lists.
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  tar -C "$WORK/rootfs" --numeric-owner -cf "$base_tar.tmp.$$" . && mv "$base_tar.tmp.$$" "$base_tar"
  rm -rf "$WORK/rootfs"
fi
BASE=localhost/rerail-test-base:bookworm
IMAGE=localhost/rerail-test:bookworm
# The configuration Debian's published image has.
"${PODMAN[@]}" import -q --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' "$base_tar" "$BASE" >/dev/null || { echo "FAIL package_image: podman import" >&2; exit 1; }
stamp "base image $BASE imported"

# ---- 2. the image -----------------------------------------------------------------
# --network=host: the build's apt-get reaches the mirror as this machine does.
if ! "${PODMAN[@]}" build --network=host -f "$TOP/tools/package/Containerfile" \
    --build-arg BASE_IMAGE="$BASE" --build-arg BUILD_IMAGE="$BASE" -t "$IMAGE" "$TOP" \
    >"$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log"
  echo "FAIL package_image: podman build" >&2
  exit 1
fi
stamp "image built"
"${PODMAN[@]}" build --network=host -f "$TOP/tools/package/Containerfile" --target build \
  --build-arg BASE_IMAGE="$BASE" --build-arg BUILD_IMAGE="$BASE" -t localhost/rerail-test-build:bookworm "$TOP" >>"$WORK/build.log" 2>&1

size() { "${PODMAN[@]}" image inspect --format '{{.Size}}' "$1"; }
added=$(($(size "$IMAGE") - $(size "$BASE")))
if [ "$added" -lt "$MAX_ADDED" ]; then pass image_size "the image adds $added bytes to its base (limit $MAX_ADDED)"
else fail image_size "the image adds $added bytes to its base (limit $MAX_ADDED)"; fi

# Configuration: the base's, plus the two variables.
conf() { "${PODMAN[@]}" image inspect --format "$1" "$2"; }
want_env=$( (conf '{{range .Config.Env}}{{println .}}{{end}}' "$BASE"; printf 'NCCL_NET_PLUGIN=rerail\nNCCL_TUNER_PLUGIN=rerail\n') | grep . | sort)
got_env=$(conf '{{range .Config.Env}}{{println .}}{{end}}' "$IMAGE" | grep . | sort)
rest='{{.Config.Entrypoint}} {{.Config.Cmd}} {{.Config.User}} {{.Config.WorkingDir}} {{.Config.Volumes}} {{.Config.ExposedPorts}}'
if [ "$want_env" = "$got_env" ] && [ "$(conf "$rest" "$BASE")" = "$(conf "$rest" "$IMAGE")" ]; then
  pass image_config "the base's configuration plus NCCL_NET_PLUGIN=rerail, NCCL_TUNER_PLUGIN=rerail"
else
  fail image_config "environment: $(echo "$got_env" | tr '\n' ' '); entry point, user, ...: $(conf "$rest" "$IMAGE")"
fi

# Files: rerail's, and libnuma1's package (the base lacks it) with dpkg's and
# apt's bookkeeping; each changed directory is one of their parents.
"${PODMAN[@]}" image diff "$IMAGE" "$BASE" >"$WORK/image.diff" 2>&1
allowed='^(A|C) /usr/lib/x86_64-linux-gnu/libnccl-(net|tuner)-rerail\.so$|^(A|C) /usr/bin/rerail$|^(A|C) /usr/share/doc/rerail(/copyright)?$'
allowed+='|^A /usr/lib/x86_64-linux-gnu/libnuma\.so\.1[.0-9]*$|^A /usr/share/doc/libnuma1(/.*)?$'
allowed+='|^[ACD] /var/lib/(dpkg|apt)(/.*)?$|^[AC] /var/cache(/apt(/.*)?)?$|^[AC] /var/log(/(apt(/.*)?|dpkg\.log|alternatives\.log))?$|^C /etc/ld\.so\.cache$|^[AC] /var/cache/ldconfig(/aux-cache)?$'
allowed+='|^C /(usr|usr/lib|usr/lib/x86_64-linux-gnu|usr/bin|usr/share|usr/share/doc|etc|var|var/lib)$'
unexpected=$(grep -vE "$allowed" "$WORK/image.diff")
if [ -s "$WORK/image.diff" ] && [ -z "$unexpected" ]; then
  pass image_files "$(wc -l <"$WORK/image.diff") paths differ from the base: rerail's files and libnuma1's package"
else
  fail image_files "paths changed beyond rerail and libnuma: $(echo "$unexpected" | head -5 | tr '\n' ' ')"
fi

# The libraries as shipped: hard dependencies and build paths.
mkdir -p "$WORK/shipped"
cid=$("${PODMAN[@]}" create "$IMAGE" /bin/true)
for f in libnccl-net-rerail.so libnccl-tuner-rerail.so; do
  "${PODMAN[@]}" cp "$cid:/usr/lib/x86_64-linux-gnu/$f" "$WORK/shipped/$f"
done
"${PODMAN[@]}" cp "$cid:/usr/bin/rerail" "$WORK/shipped/rerail"
"${PODMAN[@]}" rm "$cid" >/dev/null
needed=$(readelf -d "$WORK/shipped/"* 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u | tr '\n' ' ')
# glibc's dynamic loader comes with libc (package libc6): thread-local storage in a
# shared object (__tls_get_addr) makes it NEEDED, which adds no dependency.
extra=$(echo "$needed" | tr ' ' '\n' | grep -vxE 'libc\.so\.6|libnuma\.so\.1|ld-linux-x86-64\.so\.2|')
lddout=$("${PODMAN[@]}" run "${RUN_OPTS[@]}" --rm "$IMAGE" sh -c 'cd /usr/lib/x86_64-linux-gnu && ldd libnccl-net-rerail.so libnccl-tuner-rerail.so /usr/bin/rerail' 2>&1)
ldd_rc=$?
if [ -z "$extra" ] && [[ "$needed" == *libnuma.so.1* ]] && [ $ldd_rc -eq 0 ] &&
  grep -q 'libnuma.so.1 => /' <<<"$lddout" && ! grep -q 'not found' <<<"$lddout"; then
  pass image_deps "NEEDED: $needed; ldd in the image resolves them all"
else
  fail image_deps "NEEDED: $needed (only glibc and libnuma allowed); ldd in the image (exit $ldd_rc): $(grep -vE '=> /|linux-vdso|ld-linux' <<<"$lddout" | head -3 | tr '\n' ' ')"
fi
# The build stage builds in /src and /build; this machine's tree is $TOP.
paths=$(strings -a "$WORK/shipped/"* | grep -E "(^|[^A-Za-z0-9_.-])(/src/|/build/|$TOP/)|^/[^ ]*\.[ch]$" | sort -u | head -5)
if [ -z "$paths" ]; then pass no_build_paths "no build directory or source path in the libraries or the tool"
else fail no_build_paths "$(echo "$paths" | tr '\n' ' ')"; fi

# ---- 3. the .deb ------------------------------------------------------------------
# The build stage's /pkg: the .deb and the tree it was made from.
cid=$("${PODMAN[@]}" create localhost/rerail-test-build:bookworm /bin/true)
"${PODMAN[@]}" cp "$cid:/pkg" "$WORK/deb"
"${PODMAN[@]}" rm "$cid" >/dev/null
debs=("$WORK"/deb/rerail_*.deb)
DEB=${debs[0]}
if [ ! -f "$DEB" ]; then
  fail deb "the build stage made no .deb"
  done_all
fi
# --fail-on error: warnings are reported, errors fail.
if lintian --fail-on error "$DEB" >"$WORK/lintian.log" 2>&1; then
  pass deb_lintian "no errors ($(grep -c '^W:' "$WORK/lintian.log") warnings)"
else
  fail deb_lintian "$(grep '^E:' "$WORK/lintian.log" | head -5 | tr '\n' ' ')"
fi
ctl() { dpkg-deb -f "$DEB" "$1"; }
files=$(dpkg-deb -c "$DEB" | awk '{print $6}')
missing=""
for f in ./usr/lib/x86_64-linux-gnu/libnccl-net-rerail.so ./usr/lib/x86_64-linux-gnu/libnccl-tuner-rerail.so \
  ./usr/share/doc/rerail/copyright ./usr/share/doc/rerail/changelog.Debian.gz \
  ./usr/lib/x86_64-linux-gnu/pkgconfig/rerail.pc ./usr/include/rerail/health_table.h ./usr/bin/rerail; do
  grep -qxF "$f" <<<"$files" || missing+=" $f"
done
if [ -n "$missing" ]; then fail deb_contents "missing:$missing"
elif [[ "$(ctl Depends)" != *libnuma1* || "$(ctl Depends)" != *libc6* || "$(ctl Recommends)" != *libibverbs1* ]]; then
  fail deb_contents "Depends: $(ctl Depends); Recommends: $(ctl Recommends)"
elif grep -qE 'rerail-harness|bench' <<<"$files"; then fail deb_contents "test or benchmark programs in the package"
else pass deb_contents "Depends: $(ctl Depends); Recommends: $(ctl Recommends); plugins in /usr/lib/x86_64-linux-gnu"; fi

# rerail.pc, as a dashboard's build would use it, against the unpacked package.
dpkg-deb -x "$DEB" "$WORK/debx"
cat >"$WORK/reader.c" <<'EOF'
#include <stdio.h>
#include <rerail/health_table.h>
int main(void) { printf("%u\n", (unsigned)RR_HT_VERSION); return 0; }
EOF
# Variables as installed (no sysroot: pkgconf would prefix it to them); flags
# into the unpacked tree.
pc() { PKG_CONFIG_LIBDIR="$WORK/debx/usr/lib/x86_64-linux-gnu/pkgconfig" pkg-config "$@" rerail; }
cflags=$(PKG_CONFIG_SYSROOT_DIR="$WORK/debx" pc --cflags)
# pkg-config may drop -I/usr/include (the compiler's own): point it into the tree.
[[ "$cflags" == *-I* ]] || cflags="-I$WORK/debx/usr/include"
# shellcheck disable=SC2086  # flags: one word each
if cc $cflags -o "$WORK/reader" "$WORK/reader.c" 2>"$WORK/reader.log" &&
  [ "$("$WORK/reader")" = "$(pc --variable=health_table_version)" ] &&
  [ "$(pc --variable=health_path)" = /dev/shm/rerail-health ]; then
  pass deb_pkgconfig "rerail.pc $(pc --modversion): a reader of rerail/health_table.h compiles, layout version $("$WORK/reader")"
else
  fail deb_pkgconfig "$(head -3 "$WORK/reader.log" | tr '\n' ' ') version $(pc --variable=health_table_version)"
fi
stamp "package checked"

# ---- 4. the harness with both plugins, in the image and in a clean root ---------
# A clean root: the same minbase, the .deb installed as an operator would (apt
# resolves its Depends).
mkdir -p "$WORK/debroot"
tar -C "$WORK/debroot" -xf "$base_tar"
cp "$DEB" "$WORK/debroot/tmp/rerail.deb"
if ! "${PODMAN[@]}" run "${RUN_OPTS[@]}" --rm --network=host --rootfs "$WORK/debroot" /bin/sh -c \
    'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/rerail.deb && rm /tmp/rerail.deb &&
     ldconfig -p | grep -q libnccl-net-rerail.so' >"$WORK/debroot.log" 2>&1; then
  tail -20 "$WORK/debroot.log"
  fail deb_install "apt-get install ./rerail.deb in a clean root (or the ldconfig trigger) failed"
  done_all
fi
pass deb_install "apt-get install in a clean Debian 12 root pulled $(grep -c '^Setting up' "$WORK/debroot.log") package(s); the loader's cache lists the plugin"
stamp "clean root ready"

# run_in WHERE HOST ROLE: the harness on lab host HOST, inside WHERE ("image"
# or "debroot"); stdout: the JSON summary, stderr: the log.
TRAFFIC=(--conns 4 --max-size 4M --stall-report --json)
run_in() {
  local where=$1 h=$2 role=$3 from=(--rootfs "$WORK/debroot") env=()
  # The image sets the variables itself; an operator sets them for the .deb.
  if [ "$where" = image ]; then from=("$IMAGE"); else env=(-e NCCL_NET_PLUGIN=rerail -e NCCL_TUNER_PLUGIN=rerail); fi
  "${PODMAN[@]}" run "${RUN_OPTS[@]}" --rm --network "ns:/run/netns/$(ns "$h")" "${env[@]}" \
    -e RERAIL_SOCKET_IFNAME=rail -e RERAIL_LOG_LEVEL=warn -e HNET_LOG_TIME=1 \
    -v "$HARNESS:/opt/rerail-test/rerail-harness:ro" -v "$PAIR_DIR:$PAIR_DIR" \
    "${from[@]}" /opt/rerail-test/rerail-harness --role "$role" --rendezvous "$PAIR_DIR/rdv" \
    "${TRAFFIC[@]}" --duration 11 --timeout 60
}

# lab_case WHERE: traffic, rail0 of host 0 down, up again; every byte checked.
lab_case() {
  local where=$1 name="lab_$1" pre moved fbs back probe
  PAIR_DIR="$WORK/$name"
  mkdir -p "$PAIR_DIR/rdv"
  # The tuner as NCCL opens it: NCCL_TUNER_PLUGIN from the image, or set by hand.
  local from=("$IMAGE")
  [ "$where" = image ] || from=(-e NCCL_TUNER_PLUGIN=rerail --rootfs "$WORK/debroot")
  if probe=$("${PODMAN[@]}" run "${RUN_OPTS[@]}" --rm -v "$PROBE:/opt/rerail-test/tuner_probe:ro" "${from[@]}" \
      /opt/rerail-test/tuner_probe 2>"$PAIR_DIR/tuner.log"); then
    pass "${name}_tuner" "$probe"
  else
    fail "${name}_tuner" "$(tail -3 "$PAIR_DIR/tuner.log" | tr '\n' ' ')"
  fi

  lab_start "$LABNAME" 2 2
  run_in "$where" 1 server >"$PAIR_DIR/server.json" 2>"$PAIR_DIR/server.log" &
  SPID=$!
  run_in "$where" 0 client >"$PAIR_DIR/client.json" 2>"$PAIR_DIR/client.log" &
  CPID=$!
  if ! pair_wait_traffic 60; then
    pair_wait 30
    fail "$name" "traffic never started (server exit $SRC, client exit $CRC)"
    lab_cleanup
    return
  fi
  nap 1
  pre=$(txbytes 0 1)
  link 0 0 down
  nap 2
  moved=$(($(txbytes 0 1) - pre))
  link 0 0 up
  nap 3   # the fail-back hold (500 ms) and more
  pre=$(txbytes 0 0)
  nap 1
  back=$(($(txbytes 0 0) - pre))
  pair_wait 90
  fbs=$(jget "$PAIR_DIR/client.json" 'd["counters"]["failbacks_total"]')   # two rails: every one is rail1 -> rail0
  lab_cleanup
  if ! ok_pair; then fail "$name" "server exit $SRC, client exit $CRC, errors $(jget "$PAIR_DIR/server.json" 'd["errors"]')/$(jget "$PAIR_DIR/client.json" 'd["errors"]')"
  elif [ "$moved" -lt 1000000 ]; then fail "$name" "rail1 carried no traffic after rail0 went down"
  elif [ "$back" -lt 1000000 ] || [ "$fbs" -lt 1 ]; then fail "$name" "no fail-back to rail0 ($fbs fail-backs counted, $back bytes on rail0 in the last second)"
  else pass "$name" "rail0 down: rail1 carried $((moved / 1000000)) MB in 2 s; up: $fbs connection(s) failed back, rail0 carried $((back / 1000000)) MB in 1 s; $(what_moved), zero errors"; fi
}

lab_case image
stamp "image run over"
lab_case debroot
stamp "clean-root run over"
done_all
