/* Flushing GPU memory a verbs device wrote into.
 *
 * A NIC's writes into GPU memory are PCIe posted writes: the receive's
 * completion can reach the host before the last bytes are visible to the
 * GPU. A read by the same NIC from that memory is ordered behind them, so
 * when the read completes the data is there. As NCCL's IB transport does,
 * the read is an RDMA READ of one byte of the received buffer, into a small
 * host buffer, on an RC queue pair connected to itself.
 *
 * One such QP per device, made on the first flush and shared by every
 * connection on the device, with its own small CQ (the device's shared CQ
 * dispatches by endpoint and must never see these completions). RC
 * completes in posting order, so the outstanding flushes form a ring: the
 * work request id is the slot.
 *
 * Never a hang: a port that is down, a QP that cannot be made or an error
 * completion make the flush FAIL (the caller tries another device); one
 * that stays PENDING too long is abandoned by the caller, which resets the
 * QP here (every flush still on it FAILS; the next flush makes a new one). */
#include "rail_verbs.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define FLUSH_DEPTH 64 /* flushes in flight per device */

typedef struct verbs_flusher {
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *sink_mr;
  uint8_t sink[64];                  /* where the reads land (never looked at) */
  rr_rail_flush *slot[FLUSH_DEPTH];  /* in flight, by work request id */
  uint32_t head, tail;               /* oldest in flight, next to post */
  int broken;                        /* an error completion: reset before the next post */
  uint64_t reads;                    /* completed on this QP */
} verbs_flusher;

static _Atomic uint64_t flush_reads, flush_failures;

uint64_t rr_verbs_flush_reads(void) { return atomic_load(&flush_reads); }
uint64_t rr_verbs_flush_failures(void) { return atomic_load(&flush_failures); }

static verbs_hca *to_hca(rr_rail_dev *dev) { return rr_container_of(dev, verbs_hca, base); }

/* Every flush still in flight FAILS and the QP goes (caller holds flush_lock). */
static void flusher_free(verbs_hca *h) {
  verbs_flusher *f = h->flusher;
  if (!f) return;
  for (; f->head != f->tail; f->head++) {
    rr_rail_flush *fl = f->slot[f->head % FLUSH_DEPTH];
    f->slot[f->head % FLUSH_DEPTH] = NULL;
    if (fl) {
      fl->state = RR_FLUSH_FAILED;
      atomic_fetch_add(&flush_failures, 1);
    }
  }
  const rr_ibv_api *api = h->api;
  if (f->qp) api->destroy_qp(f->qp);
  if (f->cq) api->destroy_cq(f->cq);
  if (f->sink_mr) api->dereg_mr(f->sink_mr);
  free(f);
  h->flusher = NULL;
}

/* RESET -> INIT -> RTR -> RTS with the QP as its own peer. */
static rr_status flusher_connect(verbs_hca *h, verbs_flusher *f) {
  const rr_ibv_api *api = h->api;
  const rr_verbs_port *p = &h->port;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)p->port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE};
  if (api->modify_qp(f->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
    return RR_ERR_RAIL;
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)p->active_mtu,
                           .dest_qp_num = f->qp->qp_num, .rq_psn = 0, .max_dest_rd_atomic = 1,
                           .min_rnr_timer = 12};
  a.ah_attr.port_num = (uint8_t)p->port;
  a.ah_attr.dlid = p->lid;
  if (p->link_layer == IBV_LINK_LAYER_ETHERNET || p->gid_index > 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = p->gid;
    a.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
    a.ah_attr.grh.hop_limit = 255;
  }
  if (api->modify_qp(f->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
    return RR_ERR_RAIL;
  /* The connections' own ACK timeout and retry count: a read that cannot
   * complete errors out after the same ~2 s (the caller gives up sooner). */
  const rr_params *prm = rr_params_get();
  a = (struct ibv_qp_attr){.qp_state = IBV_QPS_RTS, .timeout = (uint8_t)prm->ib_timeout,
                           .retry_cnt = (uint8_t)prm->ib_retry_cnt, .rnr_retry = 7, .sq_psn = 0,
                           .max_rd_atomic = 1};
  if (api->modify_qp(f->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) != 0)
    return RR_ERR_RAIL;
  return RR_OK;
}

/* The device's flush QP, made now if there is none (caller holds flush_lock). */
static verbs_flusher *flusher_get(verbs_hca *h) {
  if (h->flusher) return h->flusher;
  if (!h->pd) return NULL; /* closed by a reset (verbs_reset.c) */
  const rr_ibv_api *api = h->api;
  verbs_flusher *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  h->flusher = f;
  f->sink_mr = api->reg_mr(h->pd, f->sink, sizeof f->sink, IBV_ACCESS_LOCAL_WRITE);
  f->cq = f->sink_mr ? api->create_cq(h->ctx, FLUSH_DEPTH, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr qa = {.send_cq = f->cq, .recv_cq = f->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
                                .cap = {.max_send_wr = FLUSH_DEPTH, .max_recv_wr = 1, .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  f->qp = f->cq ? api->create_qp(h->pd, &qa) : NULL;
  if (!f->qp || flusher_connect(h, f) != RR_OK) {
    RR_WARN("verbs %s: cannot make the flush queue pair: %s", h->port.dev_name, strerror(errno));
    flusher_free(h);
    return NULL;
  }
  RR_INFO(RR_SUB_NET, "verbs %s: flush queue pair %u ready (RDMA reads from GPU memory after receives)",
          h->port.dev_name, f->qp->qp_num);
  return f;
}

/* Move completed flushes to DONE or FAILED (caller holds flush_lock). */
static void flusher_poll(verbs_hca *h) {
  verbs_flusher *f = h->flusher;
  if (!f) return;
  struct ibv_wc wc[16];
  int n = 0;
  while (f->head != f->tail && (n = ibv_poll_cq(f->cq, 16, wc)) > 0) {
    for (int i = 0; i < n; i++) {
      uint32_t s = (uint32_t)wc[i].wr_id % FLUSH_DEPTH;
      rr_rail_flush *fl = f->slot[s];
      f->slot[s] = NULL;
      if (wc[i].status == IBV_WC_SUCCESS) {
        if (f->reads++ == 0)
          RR_INFO(RR_SUB_NET, "verbs %s: first flush read completed", h->port.dev_name);
        atomic_fetch_add(&flush_reads, 1);
        rr_counter_inc(RR_CTR_VERBS_FLUSH_READS);
        if (fl) fl->state = RR_FLUSH_DONE;
      } else {
        if (!f->broken)
          RR_WARN("verbs %s: flush read failed: %s; the flush queue pair is made again", h->port.dev_name,
                  h->api->wc_status_str(wc[i].status));
        f->broken = 1; /* the QP is in error: what follows is flushed in error too */
        atomic_fetch_add(&flush_failures, 1);
        if (fl) fl->state = RR_FLUSH_FAILED;
      }
    }
    /* RC completes in posting order: the ring's head moves past them. */
    while (f->head != f->tail && !f->slot[f->head % FLUSH_DEPTH]) f->head++;
    if (n < 16) break;
  }
  if (n < 0) f->broken = 1;
  if (f->broken) flusher_free(h);
}

rr_status verbs_flush_post(rr_rail_dev *dev, const rr_rail_mr *mr, const void *addr, rr_rail_flush *fl) {
  verbs_hca *h = to_hca(dev);
  if (!mr || mr->dev != dev) return RR_ERR_INVALID;
  const char *a = addr;
  if (a < (const char *)mr->base || a >= (const char *)mr->base + mr->len) return RR_ERR_INVALID;
  if (h->port_down) return RR_ERR_RAIL; /* a read there could only time out */
  pthread_mutex_lock(&h->flush_lock);
  flusher_poll(h);
  verbs_flusher *f = flusher_get(h);
  rr_status st = RR_OK;
  if (!f) st = RR_ERR_RAIL;
  else if (f->tail - f->head == FLUSH_DEPTH) st = RR_AGAIN;
  if (st == RR_OK) {
    uint32_t s = f->tail % FLUSH_DEPTH;
    struct ibv_sge sge = {.addr = (uintptr_t)f->sink, .length = 1, .lkey = f->sink_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = s, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = (uintptr_t)addr;
    wr.wr.rdma.rkey = mr->rkey;
    struct ibv_send_wr *bad = NULL;
    fl->state = RR_FLUSH_PENDING;
    fl->posted_ns = rr_now_ns();
    f->slot[s] = fl;
    int rc = ibv_post_send(f->qp, &wr, &bad);
    if (rc == 0) {
      f->tail++;
    } else {
      f->slot[s] = NULL;
      fl->state = RR_FLUSH_IDLE;
      RR_WARN("verbs %s: posting a flush read failed: %s", h->port.dev_name, strerror(rc));
      flusher_free(h);
      st = RR_ERR_RAIL;
    }
  }
  pthread_mutex_unlock(&h->flush_lock);
  return st;
}

void verbs_flush_poll(rr_rail_dev *dev) {
  verbs_hca *h = to_hca(dev);
  if (pthread_mutex_trylock(&h->flush_lock) != 0) return; /* another thread is polling */
  flusher_poll(h);
  pthread_mutex_unlock(&h->flush_lock);
}

void verbs_flush_abandon(rr_rail_dev *dev, rr_rail_flush *fl) {
  verbs_hca *h = to_hca(dev);
  pthread_mutex_lock(&h->flush_lock);
  flusher_poll(h);
  if (fl->state == RR_FLUSH_PENDING && h->flusher) {
    RR_WARN("verbs %s: a flush read is still pending after %llu ms; the flush queue pair is made again",
            h->port.dev_name, (unsigned long long)((rr_now_ns() - fl->posted_ns) / 1000000));
    flusher_free(h);
  }
  if (fl->state == RR_FLUSH_PENDING) fl->state = RR_FLUSH_FAILED; /* not ours (any more) */
  pthread_mutex_unlock(&h->flush_lock);
}

void verbs_flush_close(verbs_hca *h) {
  pthread_mutex_lock(&h->flush_lock);
  flusher_free(h);
  pthread_mutex_unlock(&h->flush_lock);
}
