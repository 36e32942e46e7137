/* The verbs endpoint's progress (verbs_ep.h): chains still queued go to
 * the NIC; completions from the endpoint's own CQ retire sends (and measure
 * each QP's rate) and bring arrivals, which are delivered to the engine in
 * the writer's order with the control messages of the ring; an unsignalled
 * tail that flushed() or the engine's doubt asked about gets its signal;
 * the setup socket tells when the peer's process is gone. */
#include "verbs_ep.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

/* A completion on our CQ that names none of our QPs: nothing waits for it,
 * but it is never dropped without a word (the first of each endpoint is a
 * WARN, every one is counted in verbs_stray_completions_total, which the
 * lab asserts is 0). Only a provider bug or a QP given up at connect whose
 * posted receives were flushed can make one. */
static void stray(verbs_ep *ep, const struct ibv_wc *wc) {
  rr_counter_inc(RR_CTR_VERBS_STRAY_COMPLETIONS);
  if (ep->stray++ == 0)
    RR_WARN("verbs rail %s: a completion for QP %u, not one of this endpoint's (status %d, opcode %d): "
            "dropped and counted", ep->hca->port.dev_name, wc->qp_num, (int)wc->status, (int)wc->opcode);
}

static int qp_index(const verbs_ep *ep, uint32_t qpn) {
  for (int q = 0; q < ep->nqps; q++)
    if (ep->qps[q].qp && ep->qps[q].qp->qp_num == qpn) return q;
  return -1;
}

/* Every WATCH_EVERY progress calls, one non-blocking read of the setup
 * socket: end of file or a reset is the peer's process gone (or its end of
 * this rail closed, as when it reopens the rail). Nothing else is expected
 * on it; stray bytes are read and dropped. */
#define WATCH_EVERY 64
static int peer_closed(verbs_ep *ep) {
  if (ep->watch_fd < 0 || ++ep->progress_calls % WATCH_EVERY) return 0;
  char buf[64];
  ssize_t n = recv(ep->watch_fd, buf, sizeof buf, MSG_DONTWAIT);
  /* Data (dropped), nothing yet, or an error that says nothing of the peer: 0. */
  return n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE));
}

/* A signalled completion of sequence number seq on q: it and everything
 * ahead of it completed (RC completes in order). The writes among them give
 * a sample of the QP's rate: their bytes over the time since the later of
 * the previous completion and the first one's posting, during which the
 * NIC was at them (the silence judge's, rail_verbs.c). */
static rr_status retire_to(verbs_ep *ep, verbs_qp *q, uint64_t seq, uint64_t now) {
  uint64_t bytes = 0, from = q->done_ns;
  while (q->sq_head <= seq && q->sq_head < q->sq_tail) {
    sq_entry *s = &q->sq[q->sq_head % VERBS_SQ_DEPTH];
    q->sq_head++;
    if (s->slot >= 0) {
      ep->send_free[ep->nsend_free++] = s->slot;
      continue;
    }
    if (s->slot == SLOT_INTERNAL) continue;
    if (!bytes && s->post_ns > from) from = s->post_ns;
    bytes += s->len;
    ep->backlog -= s->len;
    if (s->slot == SLOT_BULK) continue; /* the write with immediate behind it reports both */
    if (ep->base.tel_tx) rr_tel_record(ep->base.tel_tx, s->post_ns, now, s->len);
    rr_status st = ep->base.events->on_write_done(&ep->base, s->wr_id);
    if (st != RR_OK) return verbs_ep_fail(ep, st, "write completion rejected by the engine");
  }
  if (bytes >= RATE_SAMPLE_MIN && from && now > from) {
    double sample = (double)bytes / (double)(now - from);
    q->rate = q->rate > 0 ? (3 * q->rate + sample) / 4 : sample;
  }
  q->done_ns = now;
  return RR_OK;
}

/* What a failed work completion means (NCCL's IB transport treats only
 * transport errors as recoverable):
 *  - the path failed (retries exhausted, the QP flushed after an error, the
 *    responder aborted or the device failed): RR_ERR_RAIL, the rail fails
 *    over and its work is replayed on another;
 *  - the peer refused what we named (a key or address from its
 *    clear-to-send, or an operation it does not allow), or sent more than a
 *    receive holds: RR_ERR_PROTOCOL, that rail fails over;
 *  - our own work request was wrong (a local protection, length or
 *    operation error on a send): a bug in rerail, which a replay on another
 *    NIC would only hide: RR_ERR_INTERNAL fails the connection, saying which
 *    status it was. */
static rr_status wc_class(const struct ibv_wc *wc) {
  int recv = (wc->wr_id & RECV_TAG) != 0;
  switch (wc->status) {
  case IBV_WC_RETRY_EXC_ERR:
  case IBV_WC_RNR_RETRY_EXC_ERR:
  case IBV_WC_WR_FLUSH_ERR:
  case IBV_WC_REM_ABORT_ERR:
  case IBV_WC_RESP_TIMEOUT_ERR:
  case IBV_WC_FATAL_ERR:
  case IBV_WC_GENERAL_ERR:
  /* A local QP operation error is also what Soft-RoCE reports when it
   * cannot transmit (its netdev went down under a flapping port: verbs_flaps
   * saw it on both rails of a flap), so it is taken as the path failing:
   * calling a link flap a bug would end a job that a replay saves. */
  case IBV_WC_LOC_QP_OP_ERR:
    return RR_ERR_RAIL;
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_REM_OP_ERR:
  case IBV_WC_BAD_RESP_ERR:
    return RR_ERR_PROTOCOL;
  case IBV_WC_LOC_LEN_ERR:
    /* On a receive: the peer's SEND was longer than any receive we post. */
    return recv ? RR_ERR_PROTOCOL : RR_ERR_INTERNAL;
  default: /* LOC_PROT_ERR, LOC_EEC_OP_ERR, MW_BIND_ERR, LOC_ACCESS_ERR, ... */
    return RR_ERR_INTERNAL;
  }
}

static rr_status wc_status(verbs_ep *ep, const struct ibv_wc *wc) {
  const char *why = ep->hca->api->wc_status_str(wc->status);
  rr_status st = wc_class(wc);
  if (st == RR_ERR_INTERNAL)
    RR_WARN("verbs rail %s: work completion status %d (%s) on our %s, opcode %d, QP %u: a bug in rerail, "
            "not a path failure; the connection fails rather than replay it elsewhere",
            ep->hca->port.dev_name, (int)wc->status, why, (wc->wr_id & RECV_TAG) ? "receive" : "send",
            (int)wc->opcode, wc->qp_num);
  return verbs_ep_fail(ep, st, why);
}

/* A receive completed on QP q: a NOP is done with at once; a write or a
 * drain waits on its QP's list for its turn in the global order. Checked
 * here, as it arrives. */
static rr_status on_arrival(verbs_ep *ep, int q, const struct ibv_wc *wc, uint64_t now) {
  uint64_t i = wc->wr_id & 0xffffffffu;
  if ((wc->wr_id & ~RECV_TAG) >> 32 != (uint64_t)q || i >= VERBS_RQ_DEPTH)
    return verbs_ep_fail(ep, RR_ERR_INTERNAL, "a receive of no slot");
  ep->last_rx_ns = now;
  verbs_qp *qp = &ep->qps[q];
  if (wc->opcode == IBV_WC_RECV) {
    const char *b = recv_slot(ep, q, (int)i);
    if (wc->byte_len != MSG_HDR || b[1] || b[2] || b[3] || (b[0] != MSG_DRAIN && b[0] != MSG_NOP))
      return verbs_ep_fail(ep, RR_ERR_PROTOCOL, "a malformed message");
    if (b[0] == MSG_NOP)
      return verbs_recv_consumed(ep, q, (int)i) == RR_OK ? RR_OK : verbs_ep_fail(ep, RR_ERR_RAIL, "cannot repost a receive");
  } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    if (ep->base.tel_rx) rr_tel_record(ep->base.tel_rx, now, now, wc->byte_len);
  } else {
    return verbs_ep_fail(ep, RR_ERR_PROTOCOL, "an unexpected completion");
  }
  /* Each entry holds one of the QP's receives: the list cannot overflow. */
  if (qp->arr_tail - qp->arr_head >= VERBS_RQ_DEPTH) return verbs_ep_fail(ep, RR_ERR_INTERNAL, "arrival list full");
  qp->arrived[qp->arr_tail++ % VERBS_RQ_DEPTH] = (verbs_arrival){
      .imm = wc->imm_data, .byte_len = wc->byte_len, .slot = (uint16_t)i,
      .is_write = wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM};
  return RR_OK;
}

/* Hand the engine what is due, in the writer's order: before ordered
 * request number rx_ops, the control messages posted before it; then that
 * request, once the QP it went on (rx_ops % nqps) has it. */
static rr_status deliver(verbs_ep *ep, uint64_t now) {
  for (;;) {
    rr_status st = verbs_ctrl_deliver(ep, now);
    if (st != RR_OK || ep->invalidated) return st;
    int q = (int)(ep->rs.rx_ops % (uint32_t)ep->nqps);
    verbs_qp *qp = &ep->qps[q];
    if (qp->arr_head == qp->arr_tail) return RR_OK;
    verbs_arrival a = qp->arrived[qp->arr_head++ % VERBS_RQ_DEPTH];
    int i = a.slot;
    if (a.is_write) {
      rr_write_hdr h = {.imm = ntohl(a.imm), .len = a.byte_len};
      st = ep->base.events->on_write_recv(&ep->base, &h);
    } else {
      uint32_t v;
      memcpy(&v, recv_slot(ep, q, i) + 4, 4);
      st = ep->base.events->on_drain(&ep->base, le32toh(v));
    }
    if (st != RR_OK) return verbs_ep_fail(ep, st, "rejected by the engine");
    ep->rs.rx_ops++;
    if (verbs_recv_consumed(ep, q, i) != RR_OK) return verbs_ep_fail(ep, RR_ERR_RAIL, "cannot repost a receive");
  }
}

/* One pass over our CQ and what is due. */
#define POLL_BATCH 32
static rr_status progress_once(verbs_ep *ep) {
  /* Nothing waits on a chain past a pass (verbs_chain.c). */
  for (int k = 0; k < ep->nqps && !ep->invalidated; k++) {
    rr_status st = verbs_ring_chain(ep, &ep->qps[k], 0);
    if (st != RR_OK) return st;
  }
  for (;;) {
    struct ibv_wc wc[POLL_BATCH];
    int n = ibv_poll_cq(ep->cq, POLL_BATCH, wc);
    if (n < 0) return verbs_ep_fail(ep, RR_ERR_RAIL, "polling the completion queue failed");
    if (!n) break;
    uint64_t now = rr_now_ns();
    for (int i = 0; i < n; i++) {
      /* Every completion polled is host work, whatever it brings. */
      ep->base.cost.n[(wc[i].wr_id & RECV_TAG) ? RR_TEL_COST_CQES_RECV : RR_TEL_COST_CQES_SEND]++;
      /* After an invalidation the QPs are in error: their flushed requests are
       * replayed by the engine, nothing of them is reported. */
      if (ep->invalidated) continue;
      int q = qp_index(ep, wc[i].qp_num);
      if (q < 0) {
        stray(ep, &wc[i]);
        continue;
      }
      if (wc[i].status != IBV_WC_SUCCESS) return wc_status(ep, &wc[i]);
      rr_status st;
      if (wc[i].wr_id & RECV_TAG) {
        st = on_arrival(ep, q, &wc[i], now);
        /* Delivered as they come when one QP carries everything, so the
         * engine sees writes as early as before. */
        if (st == RR_OK) st = deliver(ep, now);
      } else {
        st = retire_to(ep, &ep->qps[q], wc[i].wr_id, now);
        ep->last_tx_ns = now;
      }
      if (st != RR_OK) return st;
    }
    if (n < POLL_BATCH) break;
  }
  if (!ep->invalidated) {
    rr_status st = deliver(ep, rr_now_ns());
    if (st == RR_OK) st = verbs_ctrl_return_credit(ep);
    if (st != RR_OK) return st;
  }
  /* An unsignalled tail someone asked about (flushed(), last_alive_ns())
   * gets a signal behind it (verbs_chain.c); writes never need one: their
   * chains end signalled. */
  for (int k = 0; k < ep->nqps && !ep->invalidated; k++) {
    verbs_qp *q = &ep->qps[k];
    if (!q->signal_wanted) continue;
    if (q->sq_tail == q->last_signaled) {
      q->signal_wanted = 0;
      continue;
    }
    rr_status st = verbs_ctrl_signal(ep, q);
    if (st != RR_OK && st != RR_AGAIN) return st;
  }
  return RR_OK;
}

rr_status verbs_progress(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  if (verbs_ep_check_async(ep)) return ep->failed;
  if (!ep->connected) return RR_OK;
  rr_status st = progress_once(ep);
  verbs_ep_publish_cost(rep);
  if (st != RR_OK || !peer_closed(ep)) return st;
  /* A peer closing in order waited for its last writes to complete, so
   * they were placed here before its socket closed; their completions may
   * have reached the CQ after the pass above: deliver them first (its
   * last acknowledgements may be among them), then report the close. */
  st = progress_once(ep);
  verbs_ep_publish_cost(rep);
  if (st != RR_OK) return st;
  return verbs_ep_fail(ep, RR_ERR_PEER, "the peer closed its end of the rail");
}
