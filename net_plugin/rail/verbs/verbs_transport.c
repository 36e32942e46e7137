/* The verbs rail as a transport (rail.h, rr_rail_transport): which RDMA
 * ports become rerail devices, and what each says of itself.
 *
 * RERAIL_TRANSPORT=tcp never looks for verbs; libibverbs is opened at run
 * time, and without rdma-core there are no verbs devices (not an error). */
#include "rail_verbs.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdio.h>
#include <string.h>

static rr_verbs_port ports[RR_VERBS_MAX_PORTS];
static int nports;

/* Every ACTIVE port RERAIL_IB_HCA (else NCCL_IB_HCA) selects is a device,
 * InfiniBand or RoCE, with or without an IP address: as NCCL lists them.
 * Setup reaches them over the out-of-band interface, not their own. */
static int verbs_probe(const rr_rail_probe *in, rr_rail_found *out, int max) {
  const rr_params *p = rr_params_get();
  nports = 0;
  if (p->transport == RR_TRANSPORT_TCP) {
    if (in->left_out) in->left_out(in->left_out_arg, "verbs", RR_LEFT_OUT_TRANSPORT, "RERAIL_TRANSPORT=tcp: RDMA ports not looked for");
    return 0;
  }
  const rr_ibv_api *api = rr_ibv_load();
  if (!api && in->left_out)
    in->left_out(in->left_out_arg, "verbs", RR_LEFT_OUT_UNUSABLE, "libibverbs.so.1 cannot be loaded (rdma-core not installed?)");
  rr_verbs_opts opts = {.hca_spec = p->ib_hca, .gid_index = p->ib_gid_index, .sysfs_root = rr_verbs_sysfs_root(),
                        .left_out = in->left_out, .left_out_arg = in->left_out_arg};
  int cap = max < RR_VERBS_MAX_PORTS ? max : RR_VERBS_MAX_PORTS;
  if (!api || rr_verbs_discover(api, &opts, ports, cap, &nports) != RR_OK) nports = 0;
  for (int j = 0; j < nports; j++) {
    out[j] = (rr_rail_found){.which = j};
    snprintf(out[j].name, sizeof out[j].name, "%.48s:%d", ports[j].dev_name, ports[j].port);
    snprintf(out[j].netdev, sizeof out[j].netdev, "%s", ports[j].netdev);
  }
  if (p->transport == RR_TRANSPORT_VERBS && nports == 0)
    RR_WARN("RERAIL_TRANSPORT=verbs: no usable RDMA port (%s); the interfaces run TCP",
            api ? "none is ACTIVE and selected by RERAIL_IB_HCA" : "libibverbs cannot be loaded");
  return nports;
}

static rr_status verbs_open_found(int which, int index, rr_rail_dev **out) {
  if (which < 0 || which >= nports) return RR_ERR_INVALID;
  const rr_verbs_port *vp = &ports[which];
  rr_status st = rr_verbs_dev_open(index, vp, out);
  if (st != RR_OK) {
    RR_WARN("RDMA port %s:%d cannot be opened; left out", vp->dev_name, vp->port);
    return st;
  }
  rr_rail_dev_attr *a = &(*out)->attr;
  snprintf(a->name, sizeof a->name, "%.48s:%d", vp->dev_name, vp->port);
  snprintf(a->netdev, sizeof a->netdev, "%s", vp->netdev);
  snprintf(a->pci_path, sizeof a->pci_path, "%s", vp->pci_path);
  a->guid = vp->guid;
  a->port = vp->port;
  a->numa_node = vp->numa_node;
  if (vp->link_layer == IBV_LINK_LAYER_INFINIBAND) snprintf(a->link, sizeof a->link, "InfiniBand");
  else snprintf(a->link, sizeof a->link, "%s", vp->gid_type == RR_GID_TYPE_ROCE_V2 ? "RoCE v2"
                                                : vp->gid_type == RR_GID_TYPE_IB_ROCE_V1 ? "RoCE v1" : "RoCE");
  a->gid_index = vp->gid_index;
  memcpy(a->gid, vp->gid.raw, sizeof a->gid);
  a->lid = vp->link_layer == IBV_LINK_LAYER_INFINIBAND ? vp->lid : 0;
  rr_counter_inc(RR_CTR_VERBS_DEVICES_OPENED);
  RR_INFO(RR_SUB_INIT | RR_SUB_NET, "device %d: %s on the verbs rail (%s)", index, a->name,
          vp->link_layer == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand" : "RoCE");
  return RR_OK;
}

const rr_rail_transport rr_verbs_transport = {.name = "verbs", .probe = verbs_probe, .dev_open = verbs_open_found};
