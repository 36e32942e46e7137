/* Which transport serves each pooled NIC.
 *
 * RERAIL_TRANSPORT=auto (the default) puts a NIC on the verbs rail when an
 * ACTIVE RDMA port (InfiniBand, or RoCE whose GID lives on that NIC) that
 * RERAIL_IB_HCA selects sits behind it, and on the TCP rail otherwise;
 * `verbs` does the same but says so for every NIC that has no RDMA port;
 * `tcp` never looks for verbs. libibverbs is opened at run time: without
 * rdma-core every NIC runs TCP. The core's setup sockets (connection
 * setup, authentication, reconnects) always travel over the NIC's IP
 * address, whichever rail then carries the data. */
#include "core_internal.h"
#include "rail_verbs.h"
#include "rr_log.h"
#include "rr_params.h"

#include <string.h>

static rr_verbs_port ports[RR_VERBS_MAX_PORTS];
static int nports;
static int ports_taken[RR_VERBS_MAX_PORTS];

void rr_core_transport_discover(void) {
  const rr_params *p = rr_params_get();
  nports = 0;
  memset(ports_taken, 0, sizeof ports_taken);
  if (p->transport == RR_TRANSPORT_TCP) return;
  const rr_ibv_api *api = rr_ibv_load();
  rr_verbs_opts opts = {.hca_spec = p->ib_hca, .gid_index = p->ib_gid_index, .sysfs_root = rr_verbs_sysfs_root()};
  if (!api || rr_verbs_discover(api, &opts, ports, RR_VERBS_MAX_PORTS, &nports) != RR_OK) nports = 0;
  if (p->transport == RR_TRANSPORT_VERBS && nports == 0)
    RR_WARN("RERAIL_TRANSPORT=verbs: no usable RDMA port (%s); every NIC runs TCP",
            api ? "none is ACTIVE and selected by RERAIL_IB_HCA" : "libibverbs cannot be loaded");
}

rr_status rr_core_dev_open(int index, const rr_netif *nif, rr_rail_dev **out, const rr_verbs_port **vport) {
  *vport = NULL;
  for (int j = 0; j < nports; j++) {
    if (ports_taken[j] || strcmp(ports[j].netdev, nif->name) != 0) continue;
    if (rr_verbs_dev_open(index, &ports[j], out) == RR_OK) {
      ports_taken[j] = 1;
      *vport = &ports[j];
      RR_INFO(RR_SUB_INIT | RR_SUB_NET, "device %d: %s on the verbs rail (%s port %d)", index, nif->name,
              ports[j].dev_name, ports[j].port);
      return RR_OK;
    }
    RR_WARN("device %s: RDMA port %s:%d cannot be opened; using TCP", nif->name, ports[j].dev_name, ports[j].port);
  }
  if (rr_params_get()->transport == RR_TRANSPORT_VERBS && nports > 0)
    RR_WARN("RERAIL_TRANSPORT=verbs: %s has no RDMA port; it runs TCP", nif->name);
  rr_status st = rr_tcp_transport.dev_open(index, out);
  if (st == RR_OK) (*out)->attr.speed_mbps = nif->speed_mbps;
  return st;
}
