#!/bin/busybox sh
# shellcheck shell=dash
# /init of the rxe lab's initramfs (built by rxelab.sh prepare): load the modules, mount the
# host's root (9p, read-only) under a RAM overlay, and hand over to the job's guest_lab.sh,
# which runs with the host's own bash, iproute2 and rdma-core.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec </dev/console >/dev/console 2>&1
fail() { echo "rxelab-init: $*"; echo b >/proc/sysrq-trigger; sleep 5; }
while read -r m; do
  insmod "/mods/$m" || echo "rxelab-init: insmod $m failed"
done </mods/order
# cache=loose: the lower layer is read-only for the guest's whole (short) life.
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro host /lower ||
  fail "cannot mount the host root over 9p"
mount -t tmpfs -o size=70% tmpfs /rw
mkdir -p /rw/upper /rw/wd
mount -t overlay -o lowerdir=/lower,upperdir=/rw/upper,workdir=/rw/wd,index=off,xino=off,redirect_dir=off,metacopy=off \
  overlay /newroot || fail "cannot mount the overlay root"
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t devtmpfs devtmpfs /newroot/dev
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t tmpfs tmpfs /newroot/run
mkdir -p /newroot/run/rxelab
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 job /newroot/run/rxelab ||
  fail "cannot mount the job directory"
exec chroot /newroot /bin/bash /run/rxelab/guest_lab.sh
