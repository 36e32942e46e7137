/* The verbs endpoint's life (verbs_ep.h): open (its CQ and QPs, send and
 * receive buffers, the control ring the peer writes into), the address the
 * peer connects to, the connect itself (INIT -> RTR -> RTS, agreeing on the
 * number of QPs), and destroy.
 *
 * A completion queue per endpoint, as NCCL gives each connection its own,
 * rather than one per device. A device CQ must hold everything every
 * endpoint on it can have outstanding, so it costs the same CQ entries as
 * per-endpoint CQs and caps the endpoints (32768 entries held 42 of them);
 * growing it (ibv_resize_cq, or more CQs) keeps the cost and adds a step
 * that can fail mid-connect. Its completions must also be sorted to their
 * endpoints (a lookup per completion and an inbox per endpoint, 37 KB each,
 * under a device lock every endpoint's progress took). With its own CQ, an
 * endpoint polls only its own completions, takes no lock, and needs no
 * inbox; an empty poll is one read of the CQ's next entry. Measured: bench/
 * RESULTS.md (verbs: connections per process). */
#include "verbs_ep.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

/* Every QP's send and receive queues full at once: the CQ cannot overrun. */
static int verbs_cq_depth(int nqps) { return nqps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH); }

void verbs_ep_footprint_of(int nqps, verbs_ep_footprint *f) {
  *f = (verbs_ep_footprint){.host = sizeof(verbs_ep) + (size_t)nqps * sizeof(verbs_qp),
                            .registered = verbs_pages(bufs_bytes(nqps)) + verbs_pages(VERBS_RING_BYTES),
                            .sq_depth = VERBS_SQ_DEPTH, .rq_depth = VERBS_RQ_DEPTH,
                            .cq_depth = (uint32_t)verbs_cq_depth(nqps), .max_inline = VERBS_MAX_INLINE};
}

static void destroy_qps(verbs_ep *ep, int from) {
  for (int k = from; ep->qps && k < ep->nqps; k++)
    if (ep->qps[k].qp) ep->hca->api->destroy_qp(ep->qps[k].qp), ep->qps[k].qp = NULL;
}

void verbs_destroy(rr_rail_ep *rep) {
  if (!rep) return;
  verbs_ep *ep = to_ep(rep);
  const rr_ibv_api *api = ep->hca->api;
  /* What the last progress did not publish (the recorder outlives us, or
   * went to the endpoint that replaces this one: then both are NULL). */
  verbs_ep_publish_cost(rep);
  if (ep->attached) verbs_hca_detach(ep->hca, ep);
  destroy_qps(ep, 0);
  if (ep->cq) api->destroy_cq(ep->cq); /* after its QPs: libibverbs refuses a CQ still in use */
  if (ep->watch_fd >= 0) close(ep->watch_fd);
  /* The QPs are gone first: the peer's writes into the ring fail from here. */
  if (ep->ring_mr) api->dereg_mr(ep->ring_mr);
  free(ep->ring);
  if (ep->bufs_mr) api->dereg_mr(ep->bufs_mr);
  free(ep->bufs);
  free(ep->qps);
  free(ep);
}

static rr_status open_qp(verbs_ep *ep, int k) {
  verbs_hca *h = ep->hca;
  const rr_ibv_api *api = h->api;
  /* A small control message's worth of inline data (VERBS_MAX_INLINE), or
   * none where the device allows none; the other QPs of the endpoint ask
   * for what the first one got. */
  const uint32_t inline_tries[] = {VERBS_MAX_INLINE, 0};
  const uint32_t *tries = k == 0 ? inline_tries : &ep->max_inline;
  size_t ntries = k == 0 ? sizeof inline_tries / sizeof *inline_tries : 1;
  struct ibv_qp_init_attr qa;
  struct ibv_qp *qp = NULL;
  for (size_t t = 0; !qp && t < ntries; t++) {
    qa = (struct ibv_qp_init_attr){.qp_context = ep, .send_cq = ep->cq, .recv_cq = ep->cq, .qp_type = IBV_QPT_RC,
                                   .sq_sig_all = 0,
                                   .cap = {.max_send_wr = VERBS_SQ_DEPTH, .max_recv_wr = VERBS_RQ_DEPTH,
                                           .max_send_sge = 1, .max_recv_sge = 1,
                                           .max_inline_data = tries[t]}};
    qp = api->create_qp(h->pd, &qa);
  }
  if (!qp) {
    RR_WARN("verbs %s: cannot create a queue pair: %s", h->port.dev_name, strerror(errno));
    return RR_ERR_SYSTEM;
  }
  ep->qps[k].qp = qp;
  if (k == 0) ep->max_inline = qa.cap.max_inline_data;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)h->port.port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE};
  if (api->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    return RR_ERR_SYSTEM;
  uint16_t slots[VERBS_RQ_DEPTH];
  for (int i = 0; i < VERBS_RQ_DEPTH; i++) slots[i] = (uint16_t)i;
  if (verbs_post_recvs(ep, k, slots, VERBS_RQ_DEPTH) != RR_OK) return RR_ERR_SYSTEM;
  return RR_OK;
}

rr_status verbs_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg, rr_rail_ep **out) {
  verbs_hca *h = rr_container_of(dev, verbs_hca, base);
  const rr_ibv_api *api = h->api;
  verbs_ep *ep = calloc(1, sizeof *ep);
  if (!ep) return RR_ERR_NOMEM;
  ep->base = (rr_rail_ep){.ops = &rr_verbs_rail_ops, .dev = dev, .events = events, .events_arg = events_arg, .rail = -1,
                          .wire_id = -1, .traffic_class = -1};
  ep->watch_fd = -1;
  ep->hca = h;
  pthread_mutex_lock(&h->lock); /* a GID change event rewrites them under it */
  ep->gid = h->port.gid;
  ep->gid_index = h->port.gid_index;
  pthread_mutex_unlock(&h->lock);
  for (int i = 0; i < SEND_SLOTS; i++) ep->send_free[i] = (int16_t)i;
  ep->nsend_free = SEND_SLOTS;
  uint64_t delta_ns = rr_params_get()->progress_timeout_ms * 1000000ull;
  ep->rate_floor = (double)SIGNAL_BYTES * 4.0 / (double)(delta_ns ? delta_ns : 1);
  int n = rr_params_get()->ib_qps_per_rail;
  ep->nqps = n < 1 ? 1 : n > RR_VERBS_MAX_QPS ? RR_VERBS_MAX_QPS : n;
  ep->rs.max_ahead = (uint32_t)ep->nqps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH);
  rr_status st = RR_ERR_SYSTEM;
  size_t bytes = bufs_bytes(ep->nqps);
  ep->qps = calloc((size_t)ep->nqps, sizeof *ep->qps);
  ep->bufs = aligned_alloc(4096, verbs_pages(bytes));
  ep->ring = aligned_alloc(4096, verbs_pages(VERBS_RING_BYTES));
  if (!ep->qps || !ep->bufs || !ep->ring) {
    st = RR_ERR_NOMEM;
    goto fail;
  }
  memset(ep->ring, 0, VERBS_RING_BYTES); /* every slot empty, no credit returned */
  ep->bufs_mr = api->reg_mr(h->pd, ep->bufs, bytes, IBV_ACCESS_LOCAL_WRITE);
  /* The peer may write into the ring and nowhere else of ours but NCCL's
   * receive buffers. */
  ep->ring_mr = ep->bufs_mr ? api->reg_mr(h->pd, ep->ring, VERBS_RING_BYTES,
                                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
                            : NULL;
  if (!ep->ring_mr) goto fail;
  ep->cq = api->create_cq(h->ctx, verbs_cq_depth(ep->nqps), ep, NULL, 0);
  if (!ep->cq) {
    RR_WARN("verbs %s: cannot create a completion queue: %s", h->port.dev_name, strerror(errno));
    goto fail;
  }
  for (int k = 0; k < ep->nqps; k++)
    if ((st = open_qp(ep, k)) != RR_OK) goto fail;
  /* Writes go round-robin over the QPs: the first one names the endpoint. */
  ep->base.wire_id = (int)ep->qps[0].qp->qp_num;
  if (getrandom(&ep->psn, sizeof ep->psn, 0) != (ssize_t)sizeof ep->psn) ep->psn = (uint32_t)rr_now_ns();
  ep->psn &= 0xffffff;
  verbs_hca_attach(h, ep);
  *out = &ep->base;
  return RR_OK;
fail:
  verbs_destroy(&ep->base);
  return st == RR_OK ? RR_ERR_SYSTEM : st;
}

rr_status verbs_ep_addr(rr_rail_ep *rep, void *blob, uint32_t *len) {
  verbs_ep *ep = to_ep(rep);
  const rr_verbs_port *p = &ep->hca->port;
  rr_verbs_addr a = {.psn = ep->psn, .lid = p->lid, .mtu = (uint8_t)p->active_mtu,
                     .link_layer = (uint8_t)p->link_layer, .nqps = (uint8_t)ep->nqps,
                     .ring_addr = (uintptr_t)ep->ring, .ring_rkey = ep->ring_mr->rkey,
                     .ring_slots = VERBS_RING_SLOTS,
                     .scratch_addr = ep->scratch_mr ? (uintptr_t)ep->scratch_mr->addr : 0,
                     .scratch_rkey = ep->scratch_mr ? ep->scratch_mr->rkey : 0};
  for (int k = 0; k < ep->nqps; k++) a.qpn[k] = ep->qps[k].qp->qp_num;
  memcpy(a.gid, ep->gid.raw, 16);
  rr_verbs_addr_encode(&a, blob);
  *len = RR_VERBS_ADDR_LEN;
  return RR_OK;
}

/* An InfiniBand GID is a 64-bit subnet prefix (its low 16 bits the local
 * subnet, the 16 above them the FLID of a router-connected subnet) and a
 * 64-bit port GUID, in network order. */
static int verbs_same_ib_subnet(const uint8_t *local, const uint8_t *peer) {
  return local[6] == peer[6] && local[7] == peer[7];
}
static uint16_t verbs_gid_flid(const uint8_t *gid) { return (uint16_t)(gid[4] << 8 | gid[5]); }

/* INIT -> RTR -> RTS towards the peer's QP. The ACK timeout and retry count
 * are NCCL's knobs (RERAIL_IB_TIMEOUT, RERAIL_IB_RETRY_CNT); their defaults
 * leave the hardware's retry error well behind rerail's own detection. */
static rr_status connect_qp(verbs_ep *ep, struct ibv_qp *qp, const rr_verbs_addr *peer, uint32_t dest_qpn) {
  const rr_ibv_api *api = ep->hca->api;
  const rr_verbs_port *p = &ep->hca->port;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                          .path_mtu = peer->mtu < p->active_mtu ? peer->mtu : (enum ibv_mtu)p->active_mtu,
                          .dest_qp_num = dest_qpn, .rq_psn = peer->psn, .max_dest_rd_atomic = 1,
                          .min_rnr_timer = 12};
  const rr_params *prm = rr_params_get();
  a.ah_attr.port_num = (uint8_t)p->port;
  a.ah_attr.dlid = peer->lid;
  /* The fabric's QoS on every QP of the rail, which carries data and
   * control messages alike (the device's flush QP is a loopback: its reads
   * never reach the wire). NCCL's rule (net_ib/connect.cc,
   * ncclIbConnectImpl): NCCL_IB_SL, else the communicator's trafficClass,
   * else 0; NCCL_IB_TC, else the trafficClass, else 0. Ours: RERAIL_IB_SL /
   * RERAIL_IB_TC (which default to NCCL's) in their place. NCCL's receiver
   * takes the connector's values from its metadata; here each end applies
   * its own, which agree when both ends' settings do (the same communicator,
   * cluster-wide variables). RoCE copies the GRH traffic class into the IP
   * header (DSCP = TC >> 2). */
  int cls = ep->base.traffic_class >= 0 && ep->base.traffic_class <= 255 ? ep->base.traffic_class : -1;
  int tc = prm->ib_tc >= 0 ? prm->ib_tc : cls >= 0 ? cls : 0;
  /* The SL field has 4 bits: a class beyond 15 keeps its low bits, as
   * mlx5 does with the value NCCL passes it unmasked. */
  a.ah_attr.sl = (uint8_t)(prm->ib_sl >= 0 ? prm->ib_sl : cls >= 0 ? cls & 0xf : 0);
  /* Addressing as NCCL's (connect.cc, ncclIbQpRtr): RoCE always carries a
   * GRH; InfiniBand routes by LID within a subnet and adds a GRH only to
   * reach another subnet, through the peer's FLID when it has one. The GID
   * is the endpoint's own snapshot (a GID change event may move the port's). */
  int global = p->link_layer == IBV_LINK_LAYER_ETHERNET;
  if (!global && !verbs_same_ib_subnet(ep->gid.raw, peer->gid)) {
    uint16_t flid = verbs_gid_flid(peer->gid);
    if (flid) a.ah_attr.dlid = flid;
    global = 1;
  }
  if (global) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)ep->gid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)tc;
  }
  if (api->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    RR_WARN("verbs %s: queue pair to RTR failed: %s", p->dev_name, strerror(errno));
    return RR_ERR_RAIL;
  }
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = (uint8_t)prm->ib_timeout,
                          .retry_cnt = (uint8_t)prm->ib_retry_cnt, .rnr_retry = 7, .sq_psn = ep->psn,
                          .max_rd_atomic = 1};
  if (api->modify_qp(qp, &r, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0) {
    RR_WARN("verbs %s: queue pair to RTS failed: %s", p->dev_name, strerror(errno));
    return RR_ERR_RAIL;
  }
  return RR_OK;
}

/* Both ends use as many QPs as the one with fewer offers: QP k talks to the
 * peer's QP k; our extra QPs are destroyed (the peer does the same with its
 * own, as it computes the same minimum). */
rr_status verbs_ep_connect(rr_rail_ep *rep, const rr_rail_connect_args *args) {
  verbs_ep *ep = to_ep(rep);
  const rr_verbs_port *p = &ep->hca->port;
  rr_verbs_addr peer;
  if (ep->connected) return RR_ERR_INVALID;
  if (rr_verbs_addr_decode(args->peer_addr, args->peer_addr_len, &peer) != RR_OK ||
      peer.link_layer != (uint8_t)p->link_layer || peer.ring_slots != VERBS_RING_SLOTS) {
    RR_WARN("verbs %s: the peer's queue pair address is malformed", p->dev_name);
    return RR_ERR_PROTOCOL;
  }
  int n = peer.nqps < ep->nqps ? peer.nqps : ep->nqps, had = ep->nqps;
  /* The event reader finds a QP's endpoint by the QP's context and checks,
   * under the device lock, that the QP is one of its nqps; destroy_qp itself
   * waits for the event reader's acknowledgement, so not under it. */
  pthread_mutex_lock(&ep->hca->lock);
  ep->nqps = n;
  pthread_mutex_unlock(&ep->hca->lock);
  ep->rs.max_ahead = (uint32_t)n * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH);
  for (int k = n; k < had; k++) ep->hca->api->destroy_qp(ep->qps[k].qp), ep->qps[k].qp = NULL;
  if (n > 1 || n < had)
    RR_INFO(RR_SUB_NET, "verbs %s: %d queue pair(s) per rail (we offer %d, the peer %d)", p->dev_name, n, had, peer.nqps);
  for (int k = 0; k < n; k++) {
    rr_status st = connect_qp(ep, ep->qps[k].qp, &peer, peer.qpn[k]);
    if (st != RR_OK) return st;
  }
  ep->peer_ring = peer.ring_addr;
  ep->peer_ring_rkey = peer.ring_rkey;
  ep->peer_scratch = peer.scratch_addr;
  ep->peer_scratch_rkey = peer.scratch_rkey;
  ep->connected = 1;
  rr_counter_inc(RR_CTR_VERBS_ENDPOINTS_CONNECTED);
  rr_counter_add(RR_CTR_VERBS_QPS_CONNECTED, (uint64_t)n);
  ep->last_rx_ns = ep->last_tx_ns = rr_now_ns();
  if (args->nfds >= 1 && args->fds[0] >= 0) {
    ep->watch_fd = args->fds[0];
    args->fds[0] = -1; /* ours now */
  }
  return RR_OK;
}
