/* Device events that change what the device's new endpoints are made of
 * (verbs_hca.c's event reader handles the failures). One so far: the GID
 * table of the port changed (IBV_EVENT_GID_CHANGE: on RoCE an IP address
 * came or went on the netdev, on InfiniBand the subnet manager set a new
 * prefix). The GID the port addresses peers with is chosen again by the
 * rules of discovery, so endpoints opened from then on advertise the new one
 * and send from its index. Endpoints already open keep theirs (their QPs
 * were made with it): if the old GID is gone their traffic stops, the engine
 * fails them over, and the rail is reopened, with the new GID.
 *
 * The port's GID fields are written here, on the monitor thread (the only
 * caller of dev_event), under both the flush lock and the device lock, in
 * that order: the flush QP reads them under the first, endpoints opening
 * under the second. */
#include "rail_verbs.h"
#include "rr_log.h"
#include "rr_params.h"

#include <string.h>

/* The GID port p should use now, into *p (a copy of the device's port),
 * read through ctx (the device's, or a reopened device's new one). */
rr_status verbs_gid_choose(verbs_hca *h, struct ibv_context *ctx, const char *sysfs_root, rr_verbs_port *p) {
  struct ibv_port_attr pa;
  if (rr_ibv_query_port(h->api, ctx, (uint8_t)p->port, &pa) != 0) return RR_ERR_SYSTEM;
  if (p->link_layer == IBV_LINK_LAYER_ETHERNET) {
    rr_verbs_opts o = {.gid_index = rr_params_get()->ib_gid_index, .sysfs_root = sysfs_root};
    return rr_verbs_choose_roce_gid(h->api, ctx, &o, p, pa.gid_tbl_len) == 0 ? RR_OK : RR_ERR_RAIL;
  }
  /* InfiniBand: the same index (RERAIL_IB_GID_INDEX or 0), read again; the LID too. */
  p->lid = pa.lid;
  return h->api->query_gid(ctx, (uint8_t)p->port, p->gid_index, &p->gid) == 0 ? RR_OK : RR_ERR_SYSTEM;
}

rr_status verbs_gid_refresh(verbs_hca *h, const char *sysfs_root) {
  rr_verbs_port p = h->port; /* this thread is the only writer: no lock to read */
  char was[64], now[64];
  rr_gid_str(p.gid.raw, was, sizeof was);
  rr_status st = verbs_gid_choose(h, h->ctx, sysfs_root, &p);
  if (st != RR_OK) {
    RR_WARN("verbs %s port %d: the GID table changed and %s; new endpoints keep GID %d %s",
            p.dev_name, p.port, st == RR_ERR_RAIL ? "no GID qualifies any more" : "it cannot be read",
            h->port.gid_index, was);
    return st;
  }
  if (p.gid_index == h->port.gid_index && !memcmp(p.gid.raw, h->port.gid.raw, sizeof p.gid.raw)) return RR_OK;
  RR_INFO(RR_SUB_NET, "verbs %s port %d: GID %d %s replaced by GID %d %s for new endpoints", p.dev_name,
          p.port, h->port.gid_index, was, p.gid_index, rr_gid_str(p.gid.raw, now, sizeof now));
  pthread_mutex_lock(&h->flush_lock);
  pthread_mutex_lock(&h->lock);
  h->port.gid = p.gid;
  h->port.gid_index = p.gid_index;
  h->port.gid_type = p.gid_type;
  memcpy(h->port.netdev, p.netdev, sizeof h->port.netdev);
  pthread_mutex_unlock(&h->lock);
  pthread_mutex_unlock(&h->flush_lock);
  /* The flush QP is connected to the old GID: the next flush makes a new one. */
  verbs_flush_close(h);
  return RR_OK;
}
