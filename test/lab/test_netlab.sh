#!/usr/bin/env bash
# shellcheck disable=SC2015,SC2016
# Self-test of the network lab (test/lab/netlab.sh). Needs root; exits 77 (ctest: skipped)
# without it. Brings up 2 hosts x 2 rails + mgmt and checks reachability per rail, NIC failure
# (host side and switch side), recovery, a silent black hole (drop 100), shaping, a second lab
# alongside (3 hosts, via `run`), and that `down` leaves nothing behind.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NETLAB="$HERE/netlab.sh"
PORT=7077

if [[ ${EUID:-$(id -u)} -ne 0 ]]; then
  echo "SKIP: test_netlab.sh needs root (network namespaces)"
  exit 77
fi
# The real interpreter, not a version-manager shim (each probe starts one).
PY=$(python3 -c 'import sys; print(sys.executable)') || { echo "FAIL: python3 not found"; exit 1; }

LAB="nlt$$"
LAB2="${LAB}b"
export RERAIL_LAB="$LAB"
TMP=$(mktemp -d)
SRV=""
T0=$SECONDS

cleanup() {
  local rc=$?
  [[ -n $SRV ]] && kill "$SRV" 2>/dev/null || true
  "$NETLAB" down --name "$LAB2" >/dev/null 2>&1 || true
  "$NETLAB" down --name "$LAB" >/dev/null 2>&1 || true
  rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT INT TERM

fail() { echo "FAIL: $*" >&2; echo "--- lab status:" >&2; "$NETLAB" status >&2 || true; exit 1; }
ok() { echo "ok - $*"; }

cat >"$TMP/labprobe.py" <<'EOF'
import socket, sys, threading, time

def serve(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(64)
    def handle(c):
        n = 0
        try:
            while True:
                b = c.recv(1 << 20)
                if not b:
                    break
                n += len(b)
            c.sendall(str(n).encode())
        except OSError:
            pass
        finally:
            c.close()
    while True:
        c, _ = s.accept()
        threading.Thread(target=handle, args=(c,), daemon=True).start()

def xfer(src, dst, port, nbytes, timeout):
    c = socket.socket()
    c.settimeout(timeout)
    c.bind((src, 0))  # bound to the rail's address, like the plugin's sockets
    t = time.monotonic()
    c.connect((dst, port))
    buf = b"x" * 65536
    left = nbytes
    while left > 0:
        left -= c.send(buf[:min(left, len(buf))])
    c.shutdown(socket.SHUT_WR)
    r = c.recv(64)
    dt = time.monotonic() - t
    if int(r) != nbytes:
        raise RuntimeError("peer got %s of %d bytes" % (r, nbytes))
    return dt

cmd = sys.argv[1]
if cmd == "srv":
    serve(int(sys.argv[2]))
elif cmd == "probe":   # probe SRC DST PORT TIMEOUT -> rc 0 iff a round trip works
    try:
        xfer(sys.argv[2], sys.argv[3], int(sys.argv[4]), 4, float(sys.argv[5]))
    except Exception as e:
        print("probe %s -> %s: %s" % (sys.argv[2], sys.argv[3], e or type(e).__name__))
        sys.exit(1)
elif cmd == "tput":    # tput SRC DST PORT NBYTES -> prints Mbit/s
    n = int(sys.argv[5])
    print("%.1f" % (n * 8 / xfer(sys.argv[2], sys.argv[3], int(sys.argv[4]), n, 10.0) / 1e6))
EOF

# probe HOST_FROM RAIL HOST_TO [LAB]: TCP round trip from a socket bound to the rail address.
probe() {
  local lab=${4:-$LAB} src dst
  src=$("$NETLAB" addr "$1" "$2") dst=$("$NETLAB" addr "$3" "$2")
  "$NETLAB" --name "$lab" exec "$1" "$PY" "$TMP/labprobe.py" probe "$src" "$dst" "$PORT" 1
}
expect_ok() { probe "$@" >/dev/null || fail "host $1 cannot reach host $3 over rail $2 (expected to work)"; }
expect_fail() {
  local out
  if out=$(probe "$@"); then fail "host $1 still reaches host $3 over rail $2 (expected to fail)"; fi
  echo "   ($out)"
}

# ---- refuses to run without root
if out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$NETLAB" status 2>&1); then
  fail "netlab.sh status succeeded without root"
fi
grep -q "needs root" <<<"$out" || fail "no clear message without root: $out"
ok "refuses to run without root"

# ---- up
"$NETLAB" up --hosts 2 --rails 2 --mgmt >/dev/null || fail "netlab.sh up failed"
for h in 0 1; do
  for dev in rail0 rail1 mgmt; do
    "$NETLAB" exec $h ip link show "$dev" >/dev/null 2>&1 || fail "host $h has no interface $dev"
  done
  a=$("$NETLAB" exec $h ip -br -4 addr show rail1 | awk '{print $3}')
  [[ $a == "10.77.1.$((h + 1))/24" ]] || fail "host $h rail1 address is '$a', expected 10.77.1.$((h + 1))/24"
  a=$("$NETLAB" exec $h ip -br -4 addr show mgmt | awk '{print $3}')
  [[ $a == "10.77.250.$((h + 1))/24" ]] || fail "host $h mgmt address is '$a'"
done
ok "up: 2 hosts x 2 rails + mgmt, addresses 10.77.R.(h+1)"

# "Up" is idempotent: a second up replaces the lab.
"$NETLAB" up --hosts 2 --rails 2 --mgmt >/dev/null 2>&1 || fail "second up (stale cleanup) failed"
n=$(ip netns list | awk '{print $1}' | grep -c "^$LAB-" || true)
[[ $n == 3 ]] || fail "expected 3 namespaces after re-up, found $n"
ok "up cleans stale state of the same name"

"$NETLAB" exec 1 "$PY" "$TMP/labprobe.py" srv "$PORT" &
SRV=$!
for _ in $(seq 60); do probe 0 0 1 >/dev/null 2>&1 && break; sleep 0.05; done

# ---- reachability per rail
expect_ok 0 0 1; expect_ok 0 1 1; expect_ok 0 mgmt 1
ok "h0 reaches h1 over rail0, rail1 and mgmt (sockets bound to the rail address)"
mac=$("$NETLAB" exec 0 ip neigh show 10.77.0.2 dev rail0 | awk '{print $3}')
[[ $mac == 02:77:00:00:00:02 ]] || fail "h0 learnt '$mac' for 10.77.0.2 on rail0, expected 02:77:00:00:00:02"
if grep -q '10\.77\.1\.' <<<"$("$NETLAB" exec 0 ip neigh show dev rail0)"; then fail "rail1 addresses resolved over rail0"; fi
ok "ARP per rail (10.77.0.2 -> 02:77:00:00:00:02 on rail0 only)"

# ---- NIC failure on the host side
"$NETLAB" link 0 0 down
grep -q DOWN <<<"$("$NETLAB" exec 0 ip -br link show rail0)" || fail "rail0 not DOWN after link 0 0 down"
expect_fail 0 0 1
expect_ok 0 1 1
ok "link 0 0 down: rail0 fails, rail1 still works"
"$NETLAB" link 0 0 up
for _ in $(seq 40); do probe 0 0 1 >/dev/null 2>&1 && break; sleep 0.05; done
expect_ok 0 0 1
ok "link 0 0 up: rail0 restored"

# ---- failure on the switch side (cable / switch port): NO-CARRIER on host 0, rail0
"$NETLAB" link 0 0 down --switch
grep -q NO-CARRIER <<<"$("$NETLAB" exec 0 ip link show rail0)" || fail "rail0 has carrier after link 0 0 down --switch"
expect_fail 0 0 1
expect_ok 0 1 1
"$NETLAB" link 0 0 up --switch
for _ in $(seq 40); do probe 0 0 1 >/dev/null 2>&1 && break; sleep 0.05; done
expect_ok 0 0 1
ok "link 0 0 down/up --switch: carrier loss fails rail0 only, recovery works"

# ---- silent black hole: drop 100 with the link up
"$NETLAB" drop 0 1 100
grep -q ' UP ' <<<"$("$NETLAB" exec 0 ip -br link show rail1)" || fail "rail1 not UP under drop 100"
expect_fail 0 1 1
expect_ok 0 0 1
grep -q 'numgen random mod 100 <= 99' <<<"$("$NETLAB" exec 0 nft list table inet rerail_lab)" ||
  fail "no 'numgen random mod 100 <= 99' rule in table inet rerail_lab"
grep -Eq 'counter packets [1-9]' <<<"$("$NETLAB" exec 0 nft list table inet rerail_lab)" ||
  fail "drop rule counters did not move"
ok "drop 0 1 100: rail1 black-holed with the link up, rail0 unaffected"
"$NETLAB" drop 0 1 30
grep -q 'oifname "rail1" numgen random mod 100 < 30' <<<"$("$NETLAB" exec 0 nft list table inet rerail_lab)" ||
  fail "drop 0 1 30 did not replace the rule"
"$NETLAB" drop 0 1 off
if "$NETLAB" exec 0 nft list table inet rerail_lab >/dev/null 2>&1; then fail "table rerail_lab left after drop off"; fi
expect_ok 0 1 1
ok "drop 0 1 30 replaces the rule; drop off removes it and restores rail1"

# ---- shaping
"$NETLAB" shape 0 0 40
grep -q 'tbf .*rate 40Mbit' <<<"$("$NETLAB" exec 0 tc qdisc show dev rail0)" || fail "no tbf 40Mbit qdisc on h0 rail0"
rate=$("$NETLAB" exec 0 "$PY" "$TMP/labprobe.py" tput 10.77.0.1 10.77.0.2 "$PORT" 2500000) ||
  fail "transfer over shaped rail0 failed"
awk -v r="$rate" 'BEGIN { exit !(r >= 20 && r <= 60) }' ||
  fail "single TCP stream over 'shape 0 0 40' got $rate Mbit/s (expected ~40)"
"$NETLAB" shape 0 0 off
if grep -q tbf <<<"$("$NETLAB" exec 0 tc qdisc show dev rail0)"; then fail "tbf left after shape off"; fi
ok "shape 0 0 40: tbf installed, one TCP stream gets $rate Mbit/s; shape off removes it"

# ---- a second lab alongside (3 hosts on one bridged rail), through `run`
rc=0
"$NETLAB" run --name "$LAB2" --hosts 3 --rails 1 -- bash -c '
  set -e
  [[ $RERAIL_LAB == '"$LAB2"' && $LAB_HOSTS == 3 && $LAB_RAILS == 1 ]]
  netlab exec 2 "$0" "$1" srv '"$PORT"' &
  for i in $(seq 60); do
    netlab exec 0 "$0" "$1" probe 10.77.0.1 10.77.0.3 '"$PORT"' 1 >/dev/null 2>&1 && break; sleep 0.05
  done
  netlab exec 0 "$0" "$1" probe 10.77.0.1 10.77.0.3 '"$PORT"' 1
  netlab exec 1 "$0" "$1" probe 10.77.0.2 10.77.0.3 '"$PORT"' 1
  exit 7' "$PY" "$TMP/labprobe.py" >/dev/null || rc=$?
[[ $rc == 7 ]] || fail "run: expected the command's exit status 7, got $rc"
if grep -q "^$LAB2-" <<<"$(ip netns list | awk '{print $1}')"; then fail "run left namespaces of $LAB2 behind"; fi
expect_ok 0 0 1
ok "run: second lab (3 hosts, bridged) worked alongside, exit status passed through, torn down"

# ---- down
kill "$SRV" 2>/dev/null || true; wait "$SRV" 2>/dev/null || true; SRV=""
"$NETLAB" down >/dev/null || fail "netlab.sh down failed"
if grep -q "^$LAB-" <<<"$(ip netns list | awk '{print $1}')"; then fail "down left namespaces: $(ip netns list | grep "^$LAB-")"; fi
[[ ! -e /run/rerail-lab/$LAB.env ]] || fail "down left /run/rerail-lab/$LAB.env"
"$NETLAB" down >/dev/null || fail "second down (idempotent) failed"
ok "down leaves no namespace behind and is idempotent"

echo "netlab self-test passed in $((SECONDS - T0)) s"
