/* Verbs rail endpoints: RERAIL_IB_QPS_PER_RAIL RC QPs per endpoint (1 by
 * default), one FIFO to the engine: ordered request o (a write or a drain)
 * goes whole on QP o % N and the receiver delivers them in order o, each
 * QP's arrivals waiting for their turn while holding their receive.
 *
 * Send queue (per QP): every work request takes a credit (a slot of the send ring)
 * before it is queued, so a full queue is RR_AGAIN, never an error. The
 * writes of one engine pass go to the NIC as one chained post whose last
 * request alone is signalled; RC completes in order, so a signalled
 * completion retires everything posted before it. The rail's own ring
 * writes are signalled rarely (verbs_chain.c says when and why).
 *
 * Receive queue (per QP): a ring of small buffers, posted again once what
 * they brought is delivered. A write with immediate consumes one (its
 * completion carries the immediate and the length; the data is already in
 * NCCL's buffer); a SEND brings a drain marker or a NOP. The QP retries
 * receiver-not-ready forever, so a slow receiver throttles the sender
 * instead of failing it.
 *
 * Control messages (clear-to-send, acks, notices) are plain RDMA WRITEs into
 * a ring in the peer's memory (verbs_ring.h), found by polling it: no
 * receive request, no completion, no copy out of a receive buffer on the
 * way. The writer holds a credit per ring slot; the reader gives them back
 * in every message it writes itself, and, when it has none to write, by
 * writing its count into the writer's credit word once half the ring is
 * consumed. A write-with-immediate's completion can be polled after a
 * later control message is already in memory, so each message carries the
 * writer's count of ordered requests (writes, drains) posted before it,
 * goes on the QP of the next one (so RC places it first), and waits until
 * that many are delivered: the engine sees writes, control messages and
 * drains in the order they were posted.
 *
 * Every message received is untrusted: its header and length are checked,
 * and anything malformed fails the endpoint with RR_ERR_PROTOCOL.
 *
 * This file holds the endpoint's state and failure, invalidate and liveness, and
 * the rail's ops table; the rest of the endpoint is in the files verbs_ep.h
 * lists. */
#include "verbs_ep.h"
#include "rr_log.h"

#include <stdatomic.h>

int verbs_ep_nqps(const verbs_ep *ep) { return ep->nqps; }

int verbs_ep_has_qpn(const verbs_ep *ep, uint32_t qpn) {
  for (int q = 0; q < ep->nqps; q++)
    if (ep->qps[q].qp && ep->qps[q].qp->qp_num == qpn) return 1;
  return 0;
}

rr_status verbs_ep_fail(verbs_ep *ep, rr_status st, const char *what) {
  if (ep->failed == RR_OK) {
    ep->failed = st;
    RR_INFO(RR_SUB_NET, "verbs rail %s: %s (%s)", ep->hca->port.dev_name, what, rr_status_str(st));
  }
  return ep->failed;
}

void verbs_ep_async_error(verbs_ep *ep, enum ibv_event_type t) {
  int none = 0;
  atomic_compare_exchange_strong(&ep->async_event, &none, (int)t + 1);
}

/* The monitor thread's word that a QP (or the CQ, or the device) is in
 * error becomes the endpoint's failure on the owner's thread. */
rr_status verbs_ep_check_async(verbs_ep *ep) {
  int ev = atomic_load_explicit(&ep->async_event, memory_order_relaxed);
  if (ev && !ep->failed) verbs_ep_fail(ep, RR_ERR_RAIL, ep->hca->api->event_type_str((enum ibv_event_type)(ev - 1)));
  return ep->failed;
}

rr_status verbs_ep_usable(verbs_ep *ep) {
  if (verbs_ep_check_async(ep)) return ep->failed;
  if (ep->invalidated) return RR_ERR_RAIL;
  return ep->connected ? RR_OK : RR_ERR_INVALID;
}

/* Every QP goes to the error state: nothing posted on them lands after
 * this, and they are never used again (the engine reopens the rail). */
static void verbs_invalidate(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  if (ep->invalidated || !ep->qps) return;
  for (int k = 0; k < ep->nqps; k++) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (ep->qps[k].qp) ep->hca->api->modify_qp(ep->qps[k].qp, &a, IBV_QP_STATE);
    ep->qps[k].nchain = 0; /* never rung: the engine replays it like the rest */
  }
  ep->invalidated = 1;
}

static size_t verbs_backlog(rr_rail_ep *rep) { return to_ep(rep)->backlog; }

/* Every work request completed: on RC the peer's NIC acknowledged it, so
 * it is placed. Chains of writes end signalled; a tail of the rail's own
 * unsignalled requests (the last ack, a BYE) has no completion coming, so
 * asking for it has progress() put a signal behind it (verbs_chain.c). */
static int verbs_flushed(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  if (ep->failed || !ep->connected || ep->invalidated) return 1;
  int done = 1;
  for (int k = 0; k < ep->nqps; k++) {
    verbs_qp *q = &ep->qps[k];
    if (q->sq_tail == q->sq_head) continue;
    done = 0;
    if (q->sq_tail > q->last_signaled) q->signal_wanted = 1;
  }
  return done;
}

/* When QP q's next completion is due at the earliest: the bytes ahead of
 * its first outstanding signalled request, at the QP's measured rate (or
 * rate_floor before it has one), from the later of its last completion and
 * their posting. 0 when no write is among them. */
static uint64_t next_completion_due(const verbs_ep *ep, const verbs_qp *q) {
  uint64_t bytes = 0, from = q->done_ns;
  for (uint64_t s = q->sq_head; s < q->last_signaled; s++) {
    const sq_entry *e = &q->sq[s % VERBS_SQ_DEPTH];
    if (e->slot == -1 || e->slot == SLOT_BULK) {
      if (!bytes && e->post_ns > from) from = e->post_ns;
      bytes += e->len;
    }
    if (e->signaled) break;
  }
  if (!bytes || !from) return 0;
  double rate = q->rate > ep->rate_floor ? q->rate : ep->rate_floor;
  return from + (uint64_t)((double)bytes / rate);
}

/* Completions prove the path: sends completing prove both ways; while a
 * signalled request of ours waits on any QP, only completions count.
 *
 * A completion comes once per chain now, up to CHAIN_BYTES apart, where a
 * signal every quarter MiB (SIGNAL_BYTES) used to keep them coming on a slow
 * path (the lab under load moves 2 MB/s: 4 MiB is two seconds, twice δ).
 * So silence is judged against what the QP has in hand: while the bytes
 * ahead of the next signal cannot have gone yet at the rate the QP has been
 * measured to move, no completion is overdue, and the path counts as alive
 * until then (never later than now). A dead path is still found, up to that
 * long after δ: at a measured 2 MB/s, 2 s for a full chain; at a NIC's rate,
 * microseconds. Before a QP has a rate, rate_floor stands in: SIGNAL_BYTES
 * per quarter of δ, what the old signalling guaranteed, so a fresh QP on a
 * slow path is judged no harsher than before, and at worst a dead fresh
 * QP's full chain is found 4 δ late. A zero-length probe behind the chain
 * would prove nothing sooner: RC completes it only after the chain. What
 * is not covered: a path whose rate falls many times over within one chain
 * (its measured rate still the old one) looks silent, as before chaining
 * such a fall below a quarter MiB per δ/4 did. */
static uint64_t verbs_last_alive_ns(rr_rail_ep *rep, uint64_t now_ns) {
  verbs_ep *ep = to_ep(rep);
  if (ep->failed || ep->invalidated) return ep->last_tx_ns;
  int waiting = 0;
  uint64_t due = 0;
  for (int k = 0; k < ep->nqps; k++) {
    const verbs_qp *q = &ep->qps[k];
    if (q->sq_head >= q->last_signaled) continue;
    waiting = 1;
    uint64_t d = next_completion_due(ep, q);
    if (d > due) due = d;
  }
  if (!waiting) {
    /* The engine asks when in doubt (life older than δ/8, or a rail not
     * ACTIVE; a receiver counts from when the bytes it invited are due,
     * engine_inbound.c), and probes it: ring writes of ours no signal covers, its
     * probe among them, get one, whose completion is the life it looks for
     * (an idle receiver's peer may send nothing for longer than δ). */
    for (int k = 0; k < ep->nqps; k++)
      if (ep->qps[k].sq_tail > ep->qps[k].last_signaled) ep->qps[k].signal_wanted = 1;
    return ep->last_rx_ns > ep->last_tx_ns ? ep->last_rx_ns : ep->last_tx_ns;
  }
  uint64_t alive = ep->last_tx_ns;
  if (due > alive) alive = due < now_ns ? due : now_ns;
  return alive;
}

const rr_rail_ops rr_verbs_rail_ops = {
    .name = "verbs",
    .wire = RR_RAIL_WIRE_QUEUE_PAIRS,
    .reg_mr = verbs_reg_mr,
    .dereg_mr = verbs_dereg_mr,
    .dev_progress = verbs_dev_progress,
    .dev_event = verbs_dev_event,
    .dev_close = verbs_dev_close,
    .flush_post = verbs_flush_post,
    .flush_poll = verbs_flush_poll,
    .flush_abandon = verbs_flush_abandon,
    .ep_open = verbs_reset_ep_open,
    .ep_addr = verbs_ep_addr,
    .ep_connect = verbs_ep_connect,
    .post_write = verbs_post_write_or_probe,
    /* No eager writes: the NIC places a write only where the writer named
     * registered memory, and an eager write names a receive instead. */
    .post_eager = NULL,
    .post_flush = verbs_post_flush,
    .post_ctrl = verbs_post_ctrl,
    .post_drain = verbs_post_drain,
    .progress = verbs_progress,
    .invalidate = verbs_invalidate,
    .backlog = verbs_backlog,
    .flushed = verbs_flushed,
    .last_alive_ns = verbs_last_alive_ns,
    .destroy = verbs_reset_ep_destroy,
};
