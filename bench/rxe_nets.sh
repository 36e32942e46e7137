# Sourced by benchmarks that run inside the Soft-RoCE lab (test/lab/rxe/rxelab.sh): how to run
# rerail's verbs rail or NCCL's own IB transport between lab host A (rxe0, on vethA0) and host B
# (rxe2, on vethB0), one NIC per side on rail 0, so that both are measured on the same rxe pair
# through the same driver (rerail-net-bench, rerail-harness).
#   rxe_net_plugin NET   prints the --plugin value: rerail, or nccl-ib[:$NCCL_LIB]
#   rxe_net_env NET A|B  sets the array rxe_env to that side's VAR=VALUE list for env(1)
# NET:
#   rerail   RERAIL_TRANSPORT=verbs on the one NIC (RERAIL_IB_HCA), no backup rail
#   nccl-ib  NCCL_IB_HCA=<port>; NCCL_IB_GID_INDEX=1, the lab's RoCE v2 IPv4 GID (NCCL's own
#            choice finds the same one; set so that a change in its rules cannot move it)
# Both set up their connections out of band over lo, the lab hosts' shared management network,
# as NCCL ranks use their socket interface (NCCL_SOCKET_IFNAME, RERAIL_SOCKET_IFNAME).
# Example (inside the lab; the harness takes the same):
#   source bench/rxe_nets.sh; rxe_net_env nccl-ib B
#   env "${rxe_env[@]}" rerail-harness --plugin "$(rxe_net_plugin nccl-ib)" --role server ...
# shellcheck shell=bash
rxe_net_plugin() {
  case $1 in
    rerail) echo rerail ;;
    nccl-ib) echo "nccl-ib${NCCL_LIB:+:$NCCL_LIB}" ;;
    *) echo "rxe_nets: unknown net '$1' (rerail, nccl-ib)" >&2; return 2 ;;
  esac
}
# shellcheck disable=SC2034  # rxe_env is the caller's
rxe_net_env() {
  local net=$1 side=$2 dev
  case $side in
    A) dev=rxe0 ;;
    B) dev=rxe2 ;;
    *) echo "rxe_nets: side '$side' is not A or B" >&2; return 2 ;;
  esac
  case $net in
    rerail) rxe_env=(RERAIL_TRANSPORT=verbs "RERAIL_IB_HCA==$dev" RERAIL_IB_GID_INDEX=1 RERAIL_BACKUPS=0
                     RERAIL_SOCKET_IFNAME=lo "RERAIL_HEALTH_PATH=/dev/shm/rr-bench-$side") ;;
    nccl-ib) rxe_env=("NCCL_IB_HCA==$dev:1" NCCL_IB_GID_INDEX=1 NCCL_SOCKET_IFNAME=lo) ;;
    *) echo "rxe_nets: unknown net '$net' (rerail, nccl-ib)" >&2; return 2 ;;
  esac
}
