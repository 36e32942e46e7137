#!/usr/bin/env bash
# Install what building and testing rerail needs on Debian 12 (run as root).
# CUDA and NCCL are optional: only the GPU end-to-end driver needs them.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root (it uses apt-get)" >&2
  exit 1
fi
pkgs=(build-essential cmake pkg-config libcmocka-dev libnuma-dev libibverbs-dev
      iproute2 nftables iputils-ping procps python3 prometheus-node-exporter prometheus curl
      # clang and libFuzzer: test/fuzz/
      clang-14 libclang-rt-14-dev
      # Soft-RoCE lab (test/lab/rxe): QEMU, a static busybox, kmod's depmod, rdma-core's tools
      qemu-system-x86 busybox-static kmod cpio xz-utils rdma-core ibverbs-utils ibverbs-providers
      perftest
      # bench/verbs_cost_lab.sh: system calls on the uverbs device per message, in the lab's guest
      strace)
pkgs+=(spin)  # the tuner's agreement model check (test/tuner/spin_check.sh)
# libsodium: peer authentication. package_image (image and .deb checks): podman
# (runc where cgroup v1 and v2 are mixed), debootstrap, lintian.
pkgs+=(libsodium-dev podman runc debootstrap lintian)
missing=()
pkgs+=(libsodium-dev) # connection-setup HMAC (linked statically into the plugin)
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The packaged node_exporter starts a service on install; tests start their own.
systemctl disable --now prometheus-node-exporter >/dev/null 2>&1 || true
systemctl disable --now prometheus >/dev/null 2>&1 || true
