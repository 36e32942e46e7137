#!/bin/bash
# Inside the rxe lab: the verbs device layer (verbs_probe PROBE) finds what the lab built —
# the four ACTIVE rxe ports with their IPv4-mapped RoCE v2 GID (index 1) and netdev, honours
# RERAIL_IB_HCA (prefix, ':port', '^', '=') and RERAIL_IB_GID_INDEX. (lab_checks.sh checks that
# a port whose link is down is left out.) Prints ok/FAIL lines; exit status = number of failures.
set -uo pipefail
probe=$1
fails=0
ok()  { echo "rxe_lab: ok   - verbs_probe: $*"; }
bad() { echo "rxe_lab: FAIL - verbs_probe: $*"; fails=$((fails + 1)); }
# The sorted "dev:port" list the probe reports under the given environment.
ports() { env "$@" "$probe" | awk '$1 == "port" {print $2}' | sort | tr '\n' ' ' | sed 's/ $//'; }
expect() {  # WHAT EXPECTED ENV...
  local what=$1 want=$2 got; shift 2
  got=$(ports "$@")
  if [[ $got == "$want" ]]; then ok "$what: $got"; else bad "$what: got '$got', want '$want'"; fi
}

out=$("$probe" --require-lib) || bad "the probe failed (status $?)"
echo "$out" | sed 's/^/  /'
for spec in "rxe0:1 gid_index=1 gid=::ffff:10.55.0.1 gid_type=v2 netdev=vethA0" \
            "rxe1:1 gid_index=1 gid=::ffff:10.55.1.1 gid_type=v2 netdev=vethA1" \
            "rxe2:1 gid_index=1 gid=::ffff:10.55.0.2 gid_type=v2 netdev=vethB0" \
            "rxe3:1 gid_index=1 gid=::ffff:10.55.1.2 gid_type=v2 netdev=vethB1"; do
  read -r dev want <<<"$spec"
  line=$(echo "$out" | awk -v d="$dev" '$1 == "port" && $2 == d')
  if [[ -z $line ]]; then bad "$dev not found"; continue; fi
  miss=""
  for w in link=roce $want; do [[ " $line " == *" $w "* ]] || miss+=" $w"; done
  # Properties NCCL reads: a speed, a GUID, maxComms from the device's QP limit.
  [[ $line =~ speed_mbps=[1-9] ]] || miss+=" speed_mbps>0"
  [[ $line =~ guid=0x0*[1-9a-f] ]] || miss+=" guid!=0"
  [[ $line =~ max_qp=[1-9] ]] || miss+=" max_qp>0"
  # rxe cannot import DMA-BUF memory: the probe registration must say so (EOPNOTSUPP).
  [[ " $line " == *" dmabuf=0 "* ]] || miss+=" dmabuf=0"
  if [[ -z $miss ]]; then ok "$dev: RoCE v2, IPv4 GID 1, netdev, speed, guid, max_qp, no DMA-BUF"
  else bad "$dev: missing$miss in: $line"; fi
done

# Filters and the GID override: the parsing itself is unit-tested (unit_verbs_dev); here a few
# cases against real devices, each probe run costing ~0.5 s under TCG.
got=$(echo "$out" | awk '$1 == "port" {print $2}' | sort | tr '\n' ' ' | sed 's/ $//')
if [[ $got == "rxe0:1 rxe1:1 rxe2:1 rxe3:1" ]]; then ok "no filter: $got"; else bad "no filter: $got"; fi
expect "RERAIL_IB_HCA=rxe0,rxe1 (prefixes)" "rxe0:1 rxe1:1" RERAIL_IB_HCA=rxe0,rxe1
expect "RERAIL_IB_HCA=^=rxe1:1,rxe3 (exact exclusion, with a port)" "rxe0:1 rxe2:1" \
  RERAIL_IB_HCA=^=rxe1:1,rxe3
line=$(RERAIL_IB_GID_INDEX=0 RERAIL_IB_HCA=rxe0 "$probe" | awk '$1 == "port"')
if [[ $line == *"gid_index=0 gid=fe80:"* ]]; then ok "RERAIL_IB_GID_INDEX=0 gives the link-local GID"
else bad "RERAIL_IB_GID_INDEX=0: $line"; fi
exit "$fails"
