#!/usr/bin/env bash
# rxelab.sh -- the Soft-RoCE lab: real verbs on a real kernel, on a machine with no RDMA NIC
# and no KVM (design.md section 8).
#
# Debian's own 6.1 kernel (unpacked from its .deb, never installed) boots under QEMU/TCG with a
# busybox initramfs that loads rdma_rxe and friends, mounts the host's root read-only over 9p and
# puts a RAM overlay on top of it, so the host's rdma-core (libibverbs + the rxe provider),
# perftest and the build tree run unchanged inside the guest. In the guest's single network
# namespace two "hosts" A and B are joined by two veth rails, each NIC carrying an rxe device:
#
#   rail 0:  vethA0 10.55.0.1 (rxe0)  <-- bridge br0 -->  vethB0 10.55.0.2 (rxe2)
#   rail 1:  vethA1 10.55.1.1 (rxe1)  <-- bridge br1 -->  vethB1 10.55.1.2 (rxe3)
#
# Usage:
#   rxelab.sh prepare            build the cached kernel + initramfs if absent (needs root)
#   rxelab.sh run [--mtu N] [--timeout S] [--mem MiB] [--smp N] [--livelock-retries N] -- CMD...
#                                boot the lab, run CMD (bash, in the caller's working directory,
#                                as root), print the guest console on stdout, exit with CMD's
#                                status (124: timed out, 125: the lab itself failed). --timeout
#                                covers every boot; a guest whose kernel locks up in Soft-RoCE is
#                                stopped and booted again up to --livelock-retries times (default 1)
#   rxelab.sh cache-dir          print the cache directory in use
#   rxelab.sh clean              remove the cache
#
# Faults, from inside CMD (README.md): `ip link set vethA0 down`, or `rxefault` (on CMD's PATH):
#   rxefault link RAIL down|up [A|B]     ip link set vethXR down|up (default side A)
#   rxefault cable RAIL down|up [A|B]    the switch port swXR: vethXR loses its carrier
#   rxefault drop RAIL on|off            nftables: silently drop RoCE (UDP 4791) on rail RAIL
#
# Environment: RXELAB_REPORT (a file: `run` writes "boots N" and "lockups N" there),
# RERAIL_RXE_CACHE (default /var/cache/rerail-rxe), RERAIL_RXE_KERNEL (a Debian
# package name such as linux-image-6.1.0-56-amd64; default: a ready cache's, else what
# linux-image-amd64 depends on).
set -Eeuo pipefail

SELF_DIR="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)"
CACHE_ROOT="${RERAIL_RXE_CACHE:-/var/cache/rerail-rxe}"

die() { echo "rxelab: error: $*" >&2; exit 125; }
note() { echo "rxelab: $*" >&2; }

# Modules the guest loads, leaves first; their dependencies are added in order by
# `modprobe --show-depends`. virtio/9p/overlay mount the root; the rest is the lab.
GUEST_MODULES=(virtio_pci 9pnet_virtio 9p overlay crc32_generic udp_tunnel ip6_udp_tunnel
               ib_core ib_uverbs rdma_rxe veth bridge nf_tables sch_tbf sch_netem)

KERNEL_PACKAGE=""
kernel_package() {
  if [[ -n "${RERAIL_RXE_KERNEL:-}" ]]; then echo "$RERAIL_RXE_KERNEL"; return; fi
  if [[ -n $KERNEL_PACKAGE ]]; then echo "$KERNEL_PACKAGE"; return; fi
  # A ready cache for this recipe is reused as is (asking apt costs ~1 s): `clean` picks up a
  # newer kernel.
  local p h
  h=$(recipe_hash)
  p=$(cat "$CACHE_ROOT"/*-"$h"/package 2>/dev/null | sort -V | tail -n1)
  if [[ -n $p && -f "$CACHE_ROOT/$(kernel_version "$p")-$h/ready" ]]; then echo "$p"; return; fi
  p=$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-6\.1\.[0-9.-]*-amd64$/ {print $2; exit}')
  [[ -n "$p" ]] || p=$(apt-cache search --names-only '^linux-image-6\.1\.[0-9.-]*-amd64$' |
                       awk '{print $1}' | sort -V | tail -n1)
  [[ -n "$p" ]] || die "no linux-image-6.1.*-amd64 package known to apt (run apt-get update)"
  echo "$p"
}

# The kernel version of the package (its /lib/modules directory name).
kernel_version() { echo "${1#linux-image-}"; }

# The cache is keyed by the kernel and by this recipe (module list, initramfs /init), so a
# change to either rebuilds it.
recipe_hash() {
  { echo "${GUEST_MODULES[*]}"; cat "$SELF_DIR/guest_init.sh"; } | sha256sum | cut -c1-12
}
cache_dir() { echo "$CACHE_ROOT/$(kernel_version "$(kernel_package)")-$(recipe_hash)"; }

# bzImage -> the ELF vmlinux inside it, so QEMU can boot it directly (PVH entry): it skips the
# in-guest decompression, which takes seconds under TCG.
extract_vmlinux() {
  local bz=$1 out=$2 off magic dec
  for magic in xz gzip zstd; do
    case $magic in
      xz)   off=$(grep -abo $'\xfd7zXZ\x00' "$bz" | head -n1 | cut -d: -f1); dec="xz -dc" ;;
      gzip) off=$(grep -abo $'\x1f\x8b\x08' "$bz" | head -n1 | cut -d: -f1); dec="gzip -dc" ;;
      zstd) off=$(grep -abo $'\x28\xb5\x2f\xfd' "$bz" | head -n1 | cut -d: -f1); dec="zstd -dcq" ;;
    esac
    [[ -n "$off" ]] || continue
    # The payload is followed by other data: the decompressor complains, the output is whole.
    tail -c +"$((off + 1))" "$bz" | $dec >"$out" 2>/dev/null || true
    if [[ "$(head -c 4 "$out" | od -An -c | tr -d ' ')" == '177ELF' ]]; then return 0; fi
  done
  return 1
}

prepare() {
  [[ $(id -u) -eq 0 ]] || die "prepare needs root (apt-get download, depmod, device nodes)"
  local pkg kver dir
  pkg=$(kernel_package); kver=$(kernel_version "$pkg"); dir="$CACHE_ROOT/$kver-$(recipe_hash)"
  KERNEL_PACKAGE=$pkg
  [[ -f "$dir/ready" ]] && return 0
  mkdir -p "$CACHE_ROOT"
  # One builder at a time; the lock's descriptor is closed again before QEMU starts, so a long
  # run does not hold it.
  exec 9>"$CACHE_ROOT/.lock"
  flock 9
  if [[ -f "$dir/ready" ]]; then exec 9>&-; return 0; fi
  for t in busybox modprobe depmod cpio qemu-system-x86_64; do
    command -v "$t" >/dev/null || die "$t is missing: run tools/install-deps.sh"
  done
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  note "preparing $pkg in $dir"
  chmod 755 "$tmp"   # apt's download sandbox user must be able to write here
  # A fresh machine may have stale package lists: one update, then one more try.
  (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null) ||
    { apt-get update -qq && (cd "$tmp" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >/dev/null); } ||
    die "apt-get download $pkg failed"
  dpkg -x "$tmp"/linux-image-*.deb "$tmp/root"
  extract_vmlinux "$tmp/root/boot/vmlinuz-$kver" "$tmp/vmlinux" ||
    die "could not find the kernel image inside vmlinuz-$kver"
  depmod -b "$tmp/root" "$kver"

  local ird="$tmp/initramfs" m line mod
  mkdir -p "$ird"/{bin,dev,proc,sys,lower,newroot,rw,mods}
  cp "$(command -v busybox)" "$ird/bin/busybox"
  ! readelf -l "$ird/bin/busybox" | grep -q INTERP ||
    die "busybox is not the static build: install busybox-static"
  : >"$ird/mods/order"
  for m in "${GUEST_MODULES[@]}"; do
    while read -r line; do
      [[ $line == insmod* ]] || continue
      mod=$(awk '{print $2}' <<<"$line")
      grep -qxF "$(basename "$mod")" "$ird/mods/order" && continue
      cp "$mod" "$ird/mods/"
      basename "$mod" >>"$ird/mods/order"
    done < <(modprobe -d "$tmp/root" -S "$kver" --show-depends "$m")
  done
  cp "$SELF_DIR/guest_init.sh" "$ird/init"
  chmod 755 "$ird/init"
  (cd "$ird" && find . | cpio -o -H newc --quiet | gzip -1) >"$tmp/initramfs.gz"

  mkdir -p "$tmp/out"
  mv "$tmp/vmlinux" "$tmp/initramfs.gz" "$tmp/out/"
  cp "$ird/mods/order" "$tmp/out/modules"
  echo "$pkg" >"$tmp/out/package"
  rm -rf "$dir"
  mv "$tmp/out" "$dir"
  touch "$dir/ready"
  rm -rf "$tmp"
  trap - EXIT
  exec 9>&-
  note "prepared in $((SECONDS - t0)) s: $(du -sh "$dir" | cut -f1)"
}

run_lab() {
  local mtu=1500 timeout=120 mem=1024 smp=2 retries=1 lockups=0
  while [[ $# -gt 0 ]]; do
    case $1 in
      --mtu) mtu=$2; shift 2 ;;
      --livelock-retries) retries=$2; shift 2 ;;
      --timeout) timeout=$2; shift 2 ;;
      --mem) mem=$2; shift 2 ;;
      --smp) smp=$2; shift 2 ;;
      --) shift; break ;;
      *) die "run: unknown option $1 (usage: run [--mtu N] [--timeout S] [--mem MiB] [--smp N]" \
              "[--livelock-retries N] -- CMD...)" ;;
    esac
  done
  [[ $# -gt 0 ]] || die "run: no command given"
  [[ $mtu =~ ^[0-9]+$ && $timeout =~ ^[0-9]+$ && $mem =~ ^[0-9]+$ && $smp =~ ^[0-9]+$ &&
     $retries =~ ^[0-9]+$ ]] || die "run: --mtu, --timeout, --mem, --smp and --livelock-retries take numbers"
  prepare
  local dir job rc
  dir=$(cache_dir)
  job=$(mktemp -d /tmp/rxelab-job.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$job'" EXIT
  # The command travels as a bash script with its working directory and the caller's
  # RERAIL_*/NCCL_*/RXELAB_* variables; the guest sees the host's tree at the same paths.
  {
    echo "cd $(printf '%q' "$PWD") || exit 125"
    export -p | grep -E '^declare -x (RERAIL_|NCCL_|RXELAB_|LD_LIBRARY_PATH=)' || true
    printf '%q ' "$@"; echo
  } >"$job/cmd.sh"
  cp "$SELF_DIR/guest_lab.sh" "$SELF_DIR/rxefault.sh" "$job/"
  echo "$mtu" >"$job/mtu"
  # PVH boot of the ELF vmlinux; a read-only 9p view of / as the overlay's lower layer and a
  # writable one of the job directory (the command's status comes back through it).
  # mitigations=off: a throwaway test guest; retpolines and RSB filling only slow TCG down.
  # loglevel=5: warnings reach the console, so a kernel fault in the guest (rdma_rxe's soft
  # lockup, README.md "Known problem") comes with its registers and call trace.
  # shellcheck disable=SC2054  # QEMU's option values are comma lists
  local qemu=(qemu-system-x86_64 -nodefaults -no-user-config -nographic -no-reboot
    -machine pc,accel=tcg -bios qboot.rom -cpu max -smp "$smp" -m "$mem"
    -kernel "$dir/vmlinux" -initrd "$dir/initramfs.gz"
    -append "console=ttyS0 quiet loglevel=5 panic=-1 mitigations=off rdinit=/init"
    -fsdev local,id=hostfs,path=/,security_model=none,readonly=on,multidevs=remap
    -device virtio-9p-pci,fsdev=hostfs,mount_tag=host
    -fsdev local,id=jobfs,path="$job",security_model=none
    -device virtio-9p-pci,fsdev=jobfs,mount_tag=job
    -serial stdio)
  # The guest kernel's Soft-RoCE now and then locks up for good (README.md, "Known problem"):
  # its console then says "BUG: soft lockup" and nothing in the guest runs again. That is the
  # emulator's failure, not the command's: the lab stops the guest at once and boots it again,
  # with what is left of --timeout, up to --livelock-retries times, and says so each time.
  local started=$SECONDS attempt=0 left qpid livelock
  while :; do
    attempt=$((attempt + 1))
    left=$((timeout - (SECONDS - started)))
    rm -f "$job/rc"
    : >"$job/console"
    rc=0
    livelock=0
    # QEMU runs in the background so that a signal to this script (ctest's timeout, ^C) reaches
    # it through `timeout` instead of leaving a guest behind. tee writes the console file
    # unbuffered; the watch below reads it.
    timeout -k 5 "$left" "${qemu[@]}" </dev/null > >(tee -a "$job/console" | tr -d '\r') &
    qpid=$!
    # shellcheck disable=SC2064
    trap "kill -TERM $qpid 2>/dev/null; wait $qpid; rm -rf '$job'; exit 143" INT TERM
    while kill -0 "$qpid" 2>/dev/null; do
      if grep -q 'BUG: soft lockup' "$job/console"; then
        livelock=1
        kill -TERM "$qpid" 2>/dev/null || true
        break
      fi
      sleep 1
    done
    wait "$qpid" || rc=$?
    trap - INT TERM
    if [[ $livelock -eq 0 ]]; then break; fi
    lockups=$((lockups + 1))
    if [[ $attempt -gt $retries ]]; then
      echo "rxelab: FAIL - the guest kernel locked up in Soft-RoCE (console: BUG: soft lockup) in" \
        "each of $attempt boots" >&2
      rc=125
      break
    fi
    if [[ $((timeout - (SECONDS - started))) -lt 30 ]]; then
      echo "rxelab: FAIL - the guest kernel locked up in Soft-RoCE (console: BUG: soft lockup)" \
        "with too little of --timeout $timeout s left to boot again" >&2
      rc=125
      break
    fi
    note "the guest kernel locked up in Soft-RoCE (console: BUG: soft lockup) $((SECONDS - started)) s" \
      "into boot $attempt: the emulator's failure, not the command's; booting again"
  done
  if [[ $livelock -eq 1 ]]; then
    :
  elif [[ -s "$job/rc" ]]; then
    rc=$(head -c 8 "$job/rc")
    [[ $rc =~ ^[0-9]+$ && $rc -le 255 ]] || { note "the guest reported a bad status"; rc=125; }
  elif [[ $rc -eq 124 || $rc -eq 137 ]]; then
    note "the lab ran past --timeout $timeout s"; rc=124
  else
    note "the guest ended without reporting a status (qemu status $rc)"; rc=125
  fi
  [[ $lockups -eq 0 ]] || note "guest kernel lock-ups in this run: $lockups (boots: $attempt)"
  # For tests of the lab itself: how many boots it took and how many locked up, as numbers.
  if [[ -n ${RXELAB_REPORT:-} ]]; then
    printf 'boots %d\nlockups %d\n' "$attempt" "$lockups" >"$RXELAB_REPORT" ||
      note "cannot write RXELAB_REPORT=$RXELAB_REPORT"
  fi
  rm -rf "$job"
  trap - EXIT
  return "$rc"
}

case "${1:-}" in
  prepare) prepare ;;
  run) shift; run_lab "$@" ;;
  cache-dir) cache_dir ;;
  clean) rm -rf "$CACHE_ROOT" ;;
  *) sed -n '2,/^set -E/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
