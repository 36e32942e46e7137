#!/usr/bin/env bash
# `rerail devices --json` over InfiniBand HCAs that exist only in a fake
# libibverbs.so.1 (test/unit/fake_ibverbs.c, found first through
# LD_LIBRARY_PATH): the RDMA ports with their LIDs and GIDs and no address,
# a DOWN port and RERAIL_IB_HCA's exclusions left out with their reasons,
# loopback left out for the RDMA ports and chosen as the out-of-band
# interface, RERAIL_TRANSPORT=tcp, and the RLIMIT_MEMLOCK verdict (a low
# limit without CAP_IPC_LOCK, an unlimited one). Asserts on the JSON fields.
#
# usage: rerail_devices.sh RERAIL FAKE_IBVERBS_DIR
set -u
RERAIL=${1:?usage: $0 RERAIL FAKE_IBVERBS_DIR}
FAKE=${2:?usage: $0 RERAIL FAKE_IBVERBS_DIR}
WORK=$(mktemp -d /tmp/rr-devices-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset RERAIL_TRANSPORT RERAIL_IB_HCA NCCL_IB_HCA RERAIL_SOCKET_IFNAME RERAIL_TEST_HOST_AS_GPU
PORTS="mlx5_0:ib:lid=0x11;mlx5_1:ib:lid=0x42;mlx5_2:ib:state=down"

# devices LABEL PYTHON-CHECKS [env ...]: run the tool under env, then the
# checks with `j` the parsed output; each check is `assert EXPR, "what"`.
devices() {
  local label=$1 checks=$2
  shift 2
  env LD_LIBRARY_PATH="$FAKE" "$@" "$RERAIL" devices --json >"$WORK/out" 2>"$WORK/err"
  local rc=$?
  [ $rc -eq 0 ] || { fail "$label: exit $rc: $(cat "$WORK/err")"; return; }
  python3 - "$WORK/out" <<PY || fail "$label"
import json, sys
j = json.load(open(sys.argv[1]))
dev = j["devices"]
left = {l["name"]: l for l in j["left_out"]}
try:
$(sed 's/^/    /' <<<"$checks")
except AssertionError as e:
    print("  %s\n  %s" % (e, json.dumps(j)))
    sys.exit(1)
PY
}

devices "InfiniBand ports, no IP" '
assert [d["name"] for d in dev] == ["mlx5_0:1", "mlx5_1:1"], "the two ACTIVE ports are devices 0 and 1"
assert all(d["transport"] == "verbs" and d["link_layer"] == "InfiniBand" for d in dev), "verbs, InfiniBand"
assert [d["lid"] for d in dev] == [0x11, 0x42], "their LIDs"
assert all(d["gid_index"] == 0 and d["gid"].startswith("fe80::") for d in dev), "port GID 0"
assert all(d["netdev"] == "" and d["address"] == "" for d in dev), "no netdev, no address"
assert all(d["state"] == "ACTIVE" and d["port"] == 1 and d["speed_mbps"] == 200000 for d in dev), "state, port, speed"
assert dev[0]["guid"] != dev[1]["guid"], "one GUID per adapter"
assert all(d["ptr_support"] == 1 and not d["gpudirect"]["cuda"] for d in dev), "no GPUDirect without nvidia-peermem"
assert left["mlx5_2:1"]["reason"] == "not_active", "the DOWN port is left out"
assert left["lo"]["reason"] == "rdma_preferred", "lo does not run TCP beside RDMA ports"
assert j["oob"] == {"needed": True, "name": "lo", "address": "127.0.0.1"}, "lo is the out-of-band interface"
' RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo

devices "RERAIL_IB_HCA excludes a port" '
assert [d["name"] for d in dev] == ["mlx5_0:1"], "only mlx5_0:1"
assert left["mlx5_1:1"]["reason"] == "not_selected", "mlx5_1:1 not selected"
' RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo RERAIL_IB_HCA=^=mlx5_1

devices "NCCL_IB_HCA when RERAIL_IB_HCA is unset" '
assert [d["name"] for d in dev] == ["mlx5_1:1"], "only mlx5_1:1"
assert left["mlx5_0:1"]["reason"] == "not_selected", "mlx5_0:1 not selected"
' RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo NCCL_IB_HCA==mlx5_1

devices "GPU-typed test knob" '
assert all(d["gpudirect"]["cuda"] and d["ptr_support"] & 2 for d in dev), "NCCL_PTR_CUDA on RDMA ports"
' RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo RERAIL_TEST_HOST_AS_GPU=1

devices "RERAIL_TRANSPORT=tcp" '
assert [(d["name"], d["transport"]) for d in dev] == [("lo", "tcp")], "lo over TCP"
assert dev[0]["address"] == "127.0.0.1" and "link_layer" not in dev[0], "an interface, not a port"
assert left["verbs"]["reason"] == "transport", "verbs not looked for"
assert j["oob"]["needed"] is False, "TCP sets up over its own address"
' RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo RERAIL_TRANSPORT=tcp

devices "no RDMA port" '
assert [(d["name"], d["transport"]) for d in dev] == [("lo", "tcp")], "lo over TCP"
assert j["left_out"] == [], "nothing left out"
' RR_FAKE_IBV_PORTS= RERAIL_SOCKET_IFNAME=lo

# RLIMIT_MEMLOCK: unlimited is fine; 64 KiB is not, unless CAP_IPC_LOCK
# lets the process pin past it (root drops it for the check).
if [ "$(ulimit -H -l)" = unlimited ]; then
  devices "memlock unlimited" '
assert j["memlock"]["limit_bytes"] == -1 and j["memlock"]["ok"], "unlimited"
' bash -c 'ulimit -l unlimited && exec "$0" "$@"'
fi
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
  devices "memlock 64 KiB without CAP_IPC_LOCK" '
assert j["memlock"] == {"limit_bytes": 65536, "cap_ipc_lock": False, "ok": False}, "too low"
' RR_FAKE_IBV_PORTS="$PORTS" bash -c 'ulimit -l 64 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock "$0" "$@"'
  devices "memlock 64 KiB with CAP_IPC_LOCK" '
assert j["memlock"]["limit_bytes"] == 65536 and j["memlock"]["cap_ipc_lock"] and j["memlock"]["ok"], "the capability lifts it"
' RR_FAKE_IBV_PORTS="$PORTS" bash -c 'ulimit -l 64 && exec "$0" "$@"'
else
  devices "memlock 64 KiB" '
assert j["memlock"]["limit_bytes"] == 65536 and j["memlock"]["ok"] == j["memlock"]["cap_ipc_lock"], "too low without the capability"
' RR_FAKE_IBV_PORTS="$PORTS" bash -c 'ulimit -l 64 && exec "$0" "$@"'
fi

# The text form runs on the same data and exits 0.
LD_LIBRARY_PATH="$FAKE" RR_FAKE_IBV_PORTS="$PORTS" RERAIL_SOCKET_IFNAME=lo "$RERAIL" devices >"$WORK/out" 2>&1 ||
  fail "text form: exit $?"
"$RERAIL" devices --bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown argument is a usage error"

[ "$fails" -eq 0 ] && echo "rerail devices: all checks passed"
exit $((fails > 0))
