/* Verbs rail endpoints: RERAIL_IB_QPS_PER_RAIL RC QPs per endpoint (1 by
 * default), one FIFO to the engine: ordered request o (a write or a drain)
 * goes whole on QP o % N and the receiver delivers them in order o, each
 * QP's arrivals waiting for their turn while holding their receive.
 *
 * Send queue (per QP): every work request takes a credit (a slot of the send ring)
 * before it is posted, so a full queue is RR_AGAIN, never an error. Writes
 * are signalled every SIGNAL_EVERY requests or SIGNAL_BYTES, whichever comes
 * first; RC completes in order, so a
 * signalled completion retires everything posted before it. When writes sit
 * unsignalled and nothing follows them, progress() posts a signalled NOP
 * behind them so their completions (and the rail's liveness) do not wait.
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
 * and anything malformed fails the endpoint with RR_ERR_PROTOCOL. */
#include "rail_verbs.h"
#include "rr_clock.h"
#include "rr_log.h"
#include "rr_params.h"
#include "verbs_ring.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define SEND_SLOTS 96             /* control messages and markers in flight */
#define MSG_HDR 8                 /* type u8, 3 x 0, value u32 (epoch of a drain) */
#define SLOT_BYTES VERBS_RING_SLOT_BYTES /* a send slot holds a ring message as written */
#define RECV_BYTES 64             /* a receive slot: a drain or a NOP (MSG_HDR) */
#define SLOT_INTERNAL (-2)        /* sq_entry.slot of a request of the rail's own (a credit write) */
#define SIGNAL_EVERY 16
#define SIGNAL_BYTES (256u << 10) /* ... or as soon as this much was written unsignalled */
#define RECV_TAG (1ull << 63)

/* Type 1 was a control message by SEND: they travel through the ring now. */
enum verbs_msg_type { MSG_DRAIN = 2, MSG_NOP = 3 };

typedef struct sq_entry {
  uint64_t wr_id;                 /* the engine's, for writes */
  uint64_t post_ns;
  uint32_t len;
  int16_t slot;                   /* send slot of a SEND or ring write, -1 for the engine's write,
                                   * SLOT_INTERNAL for a credit write */
  uint8_t signaled;
} sq_entry;

/* One RC QP of the endpoint, with its own send queue accounting, and the
 * completions of ordered requests (writes, drains) that arrived on it ahead
 * of their turn. */
typedef struct verbs_qp {
  struct ibv_qp *qp;
  sq_entry sq[VERBS_SQ_DEPTH];
  uint64_t sq_head, sq_tail;      /* sequence numbers: posted = tail, retired = head */
  uint64_t last_signaled;         /* sequence number + 1 of the last signalled request */
  uint64_t unsignaled_bytes;      /* written since the last signalled request */
  uint64_t tail_seen;             /* sq_tail when progress last looked */
  struct ibv_wc arrived[VERBS_RQ_DEPTH]; /* each holds one of this QP's receives */
  uint32_t arr_head, arr_tail;
} verbs_qp;

struct verbs_ep {
  rr_rail_ep base;
  verbs_hca *hca;
  /* RERAIL_IB_QPS_PER_RAIL QPs, as many as both ends have after connect.
   * Ordered request number o (writes and drains, counted together) goes
   * whole on QP o % nqps; the receiver delivers them in that global order,
   * so the endpoint is one FIFO to the engine however many QPs carry it. */
  verbs_qp *qps;
  int nqps;
  uint32_t psn;                   /* the first PSN of every QP */
  uint32_t max_inline;            /* bytes a request may carry inline (the QPs' cap) */
  int attached;
  int connected;
  int fenced;
  rr_status failed;
  _Atomic int async_event;        /* ibv_event_type + 1 of an async error, 0 when none */
  size_t backlog;                 /* bytes of writes posted and not completed */
  char *bufs;                     /* send slots, a credit word, receive slots (bufs_bytes) */
  struct ibv_mr *bufs_mr;
  /* The control rings: ours, which the peer writes into, and the peer's. */
  uint8_t *ring;
  struct ibv_mr *ring_mr;
  uint64_t peer_ring;
  uint32_t peer_ring_rkey;
  /* Both directions' counts, which every message read from our ring is
   * judged against (verbs_ring_read). */
  verbs_ring_state rs;
  uint64_t rx_returned;           /* rs.rx_msgs as the peer was last told it */
  uint32_t tx_ops;                /* ordered requests posted */
  int16_t send_free[SEND_SLOTS];
  int nsend_free;
  verbs_inbox inbox;
  uint64_t last_rx_ns, last_tx_ns;
  /* The setup socket of stream 0, kept after connect only to learn that the
   * peer's process is gone: its kernel closes the socket (a QP of a dead
   * process just stops answering, which only δ of silence would tell). */
  int watch_fd;
  uint32_t progress_calls;
};

static verbs_ep *to_ep(rr_rail_ep *ep) { return rr_container_of(ep, verbs_ep, base); }
verbs_inbox *verbs_ep_inbox(verbs_ep *ep) { return &ep->inbox; }
int verbs_ep_nqps(const verbs_ep *ep) { return ep->nqps; }

int verbs_ep_has_qpn(const verbs_ep *ep, uint32_t qpn) {
  for (int q = 0; q < ep->nqps; q++)
    if (ep->qps[q].qp && ep->qps[q].qp->qp_num == qpn) return 1;
  return 0;
}

static int qp_index(const verbs_ep *ep, uint32_t qpn) {
  for (int q = 0; q < ep->nqps; q++)
    if (ep->qps[q].qp && ep->qps[q].qp->qp_num == qpn) return q;
  return -1;
}

/* bufs: SEND_SLOTS send slots, the credit word we write from, then
 * VERBS_RQ_DEPTH receive slots per QP. */
static size_t bufs_bytes(int nqps) {
  return (size_t)SEND_SLOTS * SLOT_BYTES + 64 + (size_t)nqps * VERBS_RQ_DEPTH * RECV_BYTES;
}
static char *send_slot(verbs_ep *ep, int i) { return ep->bufs + (size_t)i * SLOT_BYTES; }
static char *credit_src(verbs_ep *ep) { return ep->bufs + (size_t)SEND_SLOTS * SLOT_BYTES; }
static char *recv_slot(verbs_ep *ep, int q, int i) {
  return credit_src(ep) + 64 + ((size_t)q * VERBS_RQ_DEPTH + (size_t)i) * RECV_BYTES;
}

static rr_status ep_fail(verbs_ep *ep, rr_status st, const char *what) {
  if (ep->failed == RR_OK) {
    ep->failed = st;
    RR_INFO(RR_SUB_NET, "verbs rail %s: %s (%s)", ep->hca->port.dev_name, what, rr_status_str(st));
  }
  return ep->failed;
}

/* Every WATCH_EVERY progress calls, one non-blocking read of the setup
 * socket: end of file or a reset is the peer's process gone (or its end of
 * this rail closed, as when it reopens the rail). Nothing else is expected
 * on it; stray bytes are read and dropped. */
#define WATCH_EVERY 64
static rr_status watch_peer(verbs_ep *ep) {
  if (ep->watch_fd < 0 || ++ep->progress_calls % WATCH_EVERY) return RR_OK;
  char buf[64];
  ssize_t n = recv(ep->watch_fd, buf, sizeof buf, MSG_DONTWAIT);
  if (n == 0) return ep_fail(ep, RR_ERR_PEER, "the peer closed its end of the rail");
  if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) return ep_fail(ep, RR_ERR_PEER, "the peer reset its end of the rail");
  return RR_OK; /* data (dropped), nothing yet, or an error that says nothing of the peer */
}

void verbs_ep_async_error(verbs_ep *ep, enum ibv_event_type t) {
  int none = 0;
  atomic_compare_exchange_strong(&ep->async_event, &none, (int)t + 1);
}

/* The monitor thread's word that a QP (or the CQ, or the device) is in
 * error becomes the endpoint's failure on the owner's thread. */
static rr_status check_async(verbs_ep *ep) {
  int ev = atomic_load_explicit(&ep->async_event, memory_order_relaxed);
  if (ev && !ep->failed) ep_fail(ep, RR_ERR_RAIL, ep->hca->api->event_type_str((enum ibv_event_type)(ev - 1)));
  return ep->failed;
}

/* ------------------------------------------------------------------ posting */

#define RECV_ID(q, i) (RECV_TAG | (uint64_t)(q) << 32 | (uint64_t)(i))

static rr_status post_recv(verbs_ep *ep, int q, int i) {
  struct ibv_sge sge = {.addr = (uintptr_t)recv_slot(ep, q, i), .length = RECV_BYTES, .lkey = ep->bufs_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_ID(q, i), .sg_list = &sge, .num_sge = 1}, *bad;
  return ibv_post_recv(ep->qps[q].qp, &wr, &bad) == 0 ? RR_OK : RR_ERR_RAIL;
}

/* Post one send-queue request on QP q; the caller reserved its credit. */
static rr_status post_send(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint64_t wr_id, uint32_t len,
                           int16_t slot, uint64_t post_ns) {
  uint64_t seq = q->sq_tail;
  /* Completions are the sender's proof of life: while writes wait, only
   * theirs count (a probe queues behind them on the QP). Signalling by
   * count alone spaced them 16 chunks apart, 2 MiB at 128 KiB chunks, which a
   * slow path (the emulated lab under load: 2 MB/s) takes longer than the
   * silence limit δ to carry: the only rail was declared silent while
   * moving data. A byte limit keeps them a quarter MiB apart. */
  int signaled = slot >= 0 || seq % SIGNAL_EVERY == SIGNAL_EVERY - 1 || q->unsignaled_bytes + len >= SIGNAL_BYTES;
  wr->wr_id = seq;
  wr->send_flags |= signaled ? IBV_SEND_SIGNALED : 0;
  struct ibv_send_wr *bad;
  if (ibv_post_send(q->qp, wr, &bad) != 0) return ep_fail(ep, RR_ERR_RAIL, "ibv_post_send failed");
  q->sq[seq % VERBS_SQ_DEPTH] = (sq_entry){.wr_id = wr_id, .post_ns = post_ns, .len = len, .slot = slot,
                                          .signaled = (uint8_t)signaled};
  q->sq_tail++;
  if (signaled) q->last_signaled = q->sq_tail, q->unsignaled_bytes = 0;
  else q->unsignaled_bytes += len;
  if (slot == -1) ep->backlog += len;
  return RR_OK;
}

/* Small requests travel inside the work request: the NIC need not read
 * them from memory (one DMA read less on the way out, which is most of a
 * clear-to-send's or an ack's cost on real hardware). */
static unsigned inline_flag(const verbs_ep *ep, size_t len) {
  return len > 0 && len <= ep->max_inline ? IBV_SEND_INLINE : 0;
}

static int sq_full(const verbs_qp *q) { return q->sq_tail - q->sq_head >= VERBS_SQ_DEPTH - 1; }

/* The QP that carries the next ordered request, and any control message
 * or credit posted before it: RC then places those ahead of it. */
static verbs_qp *next_qp(verbs_ep *ep) { return &ep->qps[ep->tx_ops % (uint32_t)ep->nqps]; }

static rr_status usable(verbs_ep *ep) {
  if (check_async(ep)) return ep->failed;
  if (ep->fenced) return RR_ERR_RAIL;
  return ep->connected ? RR_OK : RR_ERR_INVALID;
}

static rr_status verbs_post_write(rr_rail_ep *rep, const rr_write_wr *w) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = usable(ep);
  if (st != RR_OK) return st;
  if (w->len > UINT32_MAX || (w->len && !w->local_mr)) return RR_ERR_INVALID;
  verbs_qp *q = next_qp(ep);
  if (sq_full(q)) return RR_AGAIN; /* one credit stays free for a NOP */
  struct ibv_sge sge = {.addr = (uintptr_t)w->local, .length = (uint32_t)w->len,
                        .lkey = w->local_mr ? w->local_mr->lkey : 0};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = w->len ? 1 : 0, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                           .imm_data = htonl(w->imm), .send_flags = inline_flag(ep, w->len)};
  wr.wr.rdma.remote_addr = w->remote_addr;
  wr.wr.rdma.rkey = w->rkey;
  st = post_send(ep, q, &wr, w->wr_id, (uint32_t)w->len, -1, w->post_ns);
  if (st == RR_OK) ep->tx_ops++;
  return st;
}

/* A SEND on QP q (a drain or a NOP). */
static rr_status post_msg(verbs_ep *ep, verbs_qp *q, uint8_t type, uint32_t value, int reserve_nop_credit) {
  rr_status st = usable(ep);
  if (st != RR_OK) return st;
  if (ep->nsend_free == 0 || (reserve_nop_credit && sq_full(q)) || q->sq_tail - q->sq_head >= VERBS_SQ_DEPTH)
    return RR_AGAIN;
  int16_t slot = ep->send_free[--ep->nsend_free];
  char *b = send_slot(ep, slot);
  uint32_t v = htole32(value);
  b[0] = (char)type;
  b[1] = b[2] = b[3] = 0;
  memcpy(b + 4, &v, 4);
  struct ibv_sge sge = {.addr = (uintptr_t)b, .length = MSG_HDR, .lkey = ep->bufs_mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                           .send_flags = inline_flag(ep, MSG_HDR)};
  st = post_send(ep, q, &wr, 0, MSG_HDR, slot, 0);
  if (st != RR_OK) ep->send_free[ep->nsend_free++] = slot;
  return st;
}

/* The peer's count of our messages it has consumed, from the credit word. */
static rr_status take_credit(verbs_ep *ep, uint32_t consumed) {
  if (verbs_ring_credit(&ep->rs, consumed, &ep->rs.tx_acked) != 0)
    return ep_fail(ep, RR_ERR_PROTOCOL, "the peer returned credits for control messages never sent");
  return RR_OK;
}

/* A control message: one RDMA WRITE of header, body and trailer into the
 * next slot of the peer's ring, which a credit says the peer has read. */
static rr_status verbs_post_ctrl(rr_rail_ep *rep, const void *msg, uint32_t len) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = usable(ep);
  if (st != RR_OK) return st;
  if (len > RR_RAIL_CTRL_MAX || (len && !msg)) return RR_ERR_INVALID;
  if (ep->rs.tx_msgs - ep->rs.tx_acked >= VERBS_RING_SLOTS && take_credit(ep, verbs_ring_credit_word(ep->ring)) != RR_OK)
    return ep->failed;
  verbs_qp *q = next_qp(ep);
  if (ep->rs.tx_msgs - ep->rs.tx_acked >= VERBS_RING_SLOTS || ep->nsend_free == 0 || sq_full(q)) return RR_AGAIN;
  int16_t slot = ep->send_free[--ep->nsend_free];
  char *b = send_slot(ep, slot);
  uint32_t n = verbs_ring_encode(b, ep->rs.tx_msgs, ep->tx_ops, (uint32_t)ep->rs.rx_msgs, msg, len);
  struct ibv_sge sge = {.addr = (uintptr_t)b, .length = n, .lkey = ep->bufs_mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = inline_flag(ep, n)};
  wr.wr.rdma.remote_addr = ep->peer_ring + verbs_ring_slot_off(ep->rs.tx_msgs);
  wr.wr.rdma.rkey = ep->peer_ring_rkey;
  st = post_send(ep, q, &wr, 0, n, slot, 0);
  if (st != RR_OK) {
    ep->send_free[ep->nsend_free++] = slot;
    return st;
  }
  ep->rs.tx_msgs++;
  ep->rx_returned = ep->rs.rx_msgs; /* carried in the header */
  return RR_OK;
}

/* A drain is an ordered request like a write: a SEND that the peer
 * delivers after every write posted before it (on whichever QP). */
static rr_status verbs_post_drain(rr_rail_ep *rep, uint32_t epoch) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = post_msg(ep, next_qp(ep), MSG_DRAIN, epoch, 1);
  if (st == RR_OK) ep->tx_ops++;
  return st;
}

/* Credits back without a message to carry them: once half the ring is
 * consumed and unreported, our count goes into the peer's credit word. The
 * source word is rewritten by later returns before the NIC may have read
 * it; it only ever grows, and a newer count is as true. */
static rr_status return_credit(verbs_ep *ep) {
  verbs_qp *q = next_qp(ep);
  if (ep->rs.rx_msgs - ep->rx_returned < VERBS_RING_SLOTS / 2 || sq_full(q)) return RR_OK;
  uint32_t v = htole32((uint32_t)ep->rs.rx_msgs);
  memcpy(credit_src(ep), &v, 4);
  struct ibv_sge sge = {.addr = (uintptr_t)credit_src(ep), .length = 4, .lkey = ep->bufs_mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = inline_flag(ep, 4)};
  wr.wr.rdma.remote_addr = ep->peer_ring + VERBS_RING_CREDIT_OFF;
  wr.wr.rdma.rkey = ep->peer_ring_rkey;
  rr_status st = post_send(ep, q, &wr, 0, 4, SLOT_INTERNAL, 0);
  if (st == RR_OK) ep->rx_returned = ep->rs.rx_msgs;
  return st;
}

/* ------------------------------------------------------------- completions */

static rr_status retire_to(verbs_ep *ep, verbs_qp *q, uint64_t seq, uint64_t now) {
  while (q->sq_head <= seq && q->sq_head < q->sq_tail) {
    sq_entry *s = &q->sq[q->sq_head % VERBS_SQ_DEPTH];
    q->sq_head++;
    if (s->slot >= 0) {
      ep->send_free[ep->nsend_free++] = s->slot;
      continue;
    }
    if (s->slot == SLOT_INTERNAL) continue;
    ep->backlog -= s->len;
    if (ep->base.tel_tx) rr_tel_record(ep->base.tel_tx, s->post_ns, now, s->len);
    rr_status st = ep->base.events->on_write_done(&ep->base, s->wr_id);
    if (st != RR_OK) return ep_fail(ep, st, "write completion rejected by the engine");
  }
  return RR_OK;
}

static rr_status wc_status(verbs_ep *ep, const struct ibv_wc *wc) {
  const char *why = ep->hca->api->wc_status_str(wc->status);
  switch (wc->status) {
  case IBV_WC_REM_ACCESS_ERR:
  case IBV_WC_REM_INV_REQ_ERR:
  case IBV_WC_LOC_LEN_ERR:
    /* Our write named memory the peer did not give us, or its message did
     * not fit: a protocol matter, not a broken path. */
    return ep_fail(ep, RR_ERR_PROTOCOL, why);
  default:
    return ep_fail(ep, RR_ERR_RAIL, why);
  }
}

/* Deliver the messages of our ring that are due: landed whole, and not
 * ahead of an ordered request the peer posted before them. */
static rr_status ring_deliver(verbs_ep *ep, uint64_t now) {
  while (!ep->fenced && !ep->failed) {
    verbs_ring_msg m;
    switch (verbs_ring_read(ep->ring, &ep->rs, &m)) {
    case VERBS_RING_READ_EMPTY:
    case VERBS_RING_READ_HELD:
      return RR_OK;
    case VERBS_RING_READ_MALFORMED:
      return ep_fail(ep, RR_ERR_PROTOCOL, "a malformed control message in the ring");
    case VERBS_RING_READ_BAD_ORDER:
      return ep_fail(ep, RR_ERR_PROTOCOL, "a control message stamped out of order");
    case VERBS_RING_READ_BAD_CREDIT:
      return ep_fail(ep, RR_ERR_PROTOCOL, "the peer returned credits for control messages never sent");
    case VERBS_RING_READ_READY:
      break;
    }
    verbs_ring_consume(ep->ring, &ep->rs, &m);
    ep->last_rx_ns = now;
    rr_status st = ep->base.events->on_ctrl(&ep->base, m.body, m.len);
    if (st != RR_OK) return ep_fail(ep, st, "a control message rejected by the engine");
  }
  return ep->failed;
}

/* A receive completed on QP q: a NOP is done with at once; a write or a
 * drain waits on its QP's list for its turn in the global order. Checked
 * here, as it arrives. */
static rr_status on_arrival(verbs_ep *ep, int q, const struct ibv_wc *wc, uint64_t now) {
  uint64_t i = wc->wr_id & 0xffffffffu;
  if ((wc->wr_id & ~RECV_TAG) >> 32 != (uint64_t)q || i >= VERBS_RQ_DEPTH)
    return ep_fail(ep, RR_ERR_INTERNAL, "a receive of no slot");
  ep->last_rx_ns = now;
  verbs_qp *qp = &ep->qps[q];
  if (wc->opcode == IBV_WC_RECV) {
    const char *b = recv_slot(ep, q, (int)i);
    if (wc->byte_len != MSG_HDR || b[1] || b[2] || b[3] || (b[0] != MSG_DRAIN && b[0] != MSG_NOP))
      return ep_fail(ep, RR_ERR_PROTOCOL, "a malformed message");
    if (b[0] == MSG_NOP)
      return post_recv(ep, q, (int)i) == RR_OK ? RR_OK : ep_fail(ep, RR_ERR_RAIL, "cannot repost a receive");
  } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
    if (ep->base.tel_rx) rr_tel_record(ep->base.tel_rx, now, now, wc->byte_len);
  } else {
    return ep_fail(ep, RR_ERR_PROTOCOL, "an unexpected completion");
  }
  /* Each entry holds one of the QP's receives: the list cannot overflow. */
  if (qp->arr_tail - qp->arr_head >= VERBS_RQ_DEPTH) return ep_fail(ep, RR_ERR_INTERNAL, "arrival list full");
  qp->arrived[qp->arr_tail++ % VERBS_RQ_DEPTH] = *wc;
  return RR_OK;
}

/* Hand the engine what is due, in the writer's order: before ordered
 * request number rx_ops, the control messages posted before it; then that
 * request, once the QP it went on (rx_ops % nqps) has it. */
static rr_status deliver(verbs_ep *ep, uint64_t now) {
  for (;;) {
    rr_status st = ring_deliver(ep, now);
    if (st != RR_OK || ep->fenced) return st;
    int q = (int)(ep->rs.rx_ops % (uint32_t)ep->nqps);
    verbs_qp *qp = &ep->qps[q];
    if (qp->arr_head == qp->arr_tail) return RR_OK;
    struct ibv_wc wc = qp->arrived[qp->arr_head++ % VERBS_RQ_DEPTH];
    int i = (int)(wc.wr_id & 0xffffffffu);
    if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
      rr_write_hdr h = {.imm = ntohl(wc.imm_data), .len = wc.byte_len};
      st = ep->base.events->on_write_recv(&ep->base, &h);
    } else {
      uint32_t v;
      memcpy(&v, recv_slot(ep, q, i) + 4, 4);
      st = ep->base.events->on_drain(&ep->base, le32toh(v));
    }
    if (st != RR_OK) return ep_fail(ep, st, "rejected by the engine");
    ep->rs.rx_ops++;
    if (post_recv(ep, q, i) != RR_OK) return ep_fail(ep, RR_ERR_RAIL, "cannot repost a receive");
  }
}

static rr_status verbs_progress(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  if (check_async(ep)) return ep->failed;
  if (!ep->connected) return RR_OK;
  rr_status wst = watch_peer(ep);
  if (wst != RR_OK) return wst;
  verbs_hca_poll(ep->hca);
  for (;;) {
    struct ibv_wc wc[32];
    int n = 0;
    pthread_mutex_lock(&ep->hca->lock);
    while (n < 32 && ep->inbox.head != ep->inbox.tail) wc[n++] = ep->inbox.wc[ep->inbox.head++ % ep->inbox.cap];
    pthread_mutex_unlock(&ep->hca->lock);
    if (!n) break;
    uint64_t now = rr_now_ns();
    for (int i = 0; i < n; i++) {
      /* After a fence the QPs are in error: their flushed requests are
       * replayed by the engine, nothing of them is reported. */
      if (ep->fenced) continue;
      if (wc[i].status != IBV_WC_SUCCESS) return wc_status(ep, &wc[i]);
      int q = qp_index(ep, wc[i].qp_num);
      if (q < 0) continue; /* a QP given up at connect */
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
  }
  if (!ep->fenced) {
    rr_status st = deliver(ep, rr_now_ns());
    if (st == RR_OK) st = return_credit(ep);
    if (st != RR_OK) return st;
  }
  /* Unsignalled writes with nothing behind them: a NOP brings their
   * completions. "Nothing behind them" is a whole progress cycle in which the
   * owner posted nothing on that QP (its burst is over), not an age: reading
   * the clock on every poll costs more than the NOP where the clock is not in
   * the vDSO (a virtual machine's HPET is a trap per read). */
  for (int k = 0; k < ep->nqps; k++) {
    verbs_qp *q = &ep->qps[k];
    if (!ep->fenced && q->sq_tail > q->last_signaled && q->sq_tail > q->sq_head && q->sq_tail == q->tail_seen) {
      rr_status st = post_msg(ep, q, MSG_NOP, 0, 0);
      if (st != RR_OK && st != RR_AGAIN) return st;
    }
    q->tail_seen = q->sq_tail;
  }
  return RR_OK;
}

/* Every QP goes to the error state: nothing posted on them lands after
 * this, and they are never used again (the engine reopens the rail). */
static void verbs_fence(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  if (ep->fenced || !ep->qps) return;
  for (int k = 0; k < ep->nqps; k++) {
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (ep->qps[k].qp) ep->hca->api->modify_qp(ep->qps[k].qp, &a, IBV_QP_STATE);
  }
  ep->fenced = 1;
}

static size_t verbs_backlog(rr_rail_ep *rep) { return to_ep(rep)->backlog; }

/* Completions prove the path: sends completing prove both ways; while our
 * requests wait on any QP, only their completions count. */
static uint64_t verbs_last_alive_ns(rr_rail_ep *rep, uint64_t now_ns) {
  (void)now_ns;
  verbs_ep *ep = to_ep(rep);
  for (int k = 0; k < ep->nqps; k++)
    if (ep->qps[k].sq_tail != ep->qps[k].sq_head) return ep->last_tx_ns;
  return ep->last_rx_ns > ep->last_tx_ns ? ep->last_rx_ns : ep->last_tx_ns;
}

static void destroy_qps(verbs_ep *ep, int from) {
  for (int k = from; ep->qps && k < ep->nqps; k++)
    if (ep->qps[k].qp) ep->hca->api->destroy_qp(ep->qps[k].qp), ep->qps[k].qp = NULL;
}

static void verbs_destroy(rr_rail_ep *rep) {
  if (!rep) return;
  verbs_ep *ep = to_ep(rep);
  const rr_ibv_api *api = ep->hca->api;
  if (ep->attached) verbs_hca_detach(ep->hca, ep);
  destroy_qps(ep, 0);
  if (ep->watch_fd >= 0) close(ep->watch_fd);
  /* The QPs are gone first: the peer's writes into the ring fail from here. */
  if (ep->ring_mr) api->dereg_mr(ep->ring_mr);
  free(ep->ring);
  if (ep->bufs_mr) api->dereg_mr(ep->bufs_mr);
  free(ep->bufs);
  free(ep->qps);
  free(ep->inbox.wc);
  free(ep);
}

/* --------------------------------------------------------- open, connect */

static rr_status open_qp(verbs_ep *ep, int k) {
  verbs_hca *h = ep->hca;
  const rr_ibv_api *api = h->api;
  /* As much inline data as a control message, or what the device allows;
   * the other QPs of the endpoint ask for what the first one got. */
  const uint32_t inline_tries[] = {SLOT_BYTES, 256, 64, 0};
  const uint32_t *tries = k == 0 ? inline_tries : &ep->max_inline;
  size_t ntries = k == 0 ? sizeof inline_tries / sizeof *inline_tries : 1;
  struct ibv_qp_init_attr qa;
  struct ibv_qp *qp = NULL;
  for (size_t t = 0; !qp && t < ntries; t++) {
    qa = (struct ibv_qp_init_attr){.send_cq = h->cq, .recv_cq = h->cq, .qp_type = IBV_QPT_RC, .sq_sig_all = 0,
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
  for (int i = 0; i < VERBS_RQ_DEPTH; i++)
    if (post_recv(ep, k, i) != RR_OK) return RR_ERR_SYSTEM;
  return RR_OK;
}

static rr_status verbs_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *events_arg, rr_rail_ep **out) {
  verbs_hca *h = rr_container_of(dev, verbs_hca, base);
  const rr_ibv_api *api = h->api;
  verbs_ep *ep = calloc(1, sizeof *ep);
  if (!ep) return RR_ERR_NOMEM;
  ep->base = (rr_rail_ep){.ops = &rr_verbs_rail_ops, .dev = dev, .events = events, .events_arg = events_arg, .rail = -1};
  ep->watch_fd = -1;
  ep->hca = h;
  for (int i = 0; i < SEND_SLOTS; i++) ep->send_free[i] = (int16_t)i;
  ep->nsend_free = SEND_SLOTS;
  int n = rr_params_get()->ib_qps_per_rail;
  ep->nqps = n < 1 ? 1 : n > RR_VERBS_MAX_QPS ? RR_VERBS_MAX_QPS : n;
  ep->rs.max_ahead = (uint32_t)ep->nqps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH);
  rr_status st = RR_ERR_SYSTEM;
  size_t bytes = bufs_bytes(ep->nqps);
  ep->qps = calloc((size_t)ep->nqps, sizeof *ep->qps);
  ep->inbox.cap = (uint32_t)ep->nqps * (VERBS_SQ_DEPTH + VERBS_RQ_DEPTH) + 8;
  ep->inbox.wc = calloc(ep->inbox.cap, sizeof *ep->inbox.wc);
  ep->bufs = aligned_alloc(4096, (bytes + 4095) & ~(size_t)4095);
  ep->ring = aligned_alloc(4096, (VERBS_RING_BYTES + 4095) & ~(size_t)4095);
  if (!ep->qps || !ep->inbox.wc || !ep->bufs || !ep->ring) {
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
  for (int k = 0; k < ep->nqps; k++)
    if ((st = open_qp(ep, k)) != RR_OK) goto fail;
  if (getrandom(&ep->psn, sizeof ep->psn, 0) != (ssize_t)sizeof ep->psn) ep->psn = (uint32_t)rr_now_ns();
  ep->psn &= 0xffffff;
  st = verbs_hca_attach(h, ep);
  if (st != RR_OK) goto fail;
  ep->attached = 1;
  *out = &ep->base;
  return RR_OK;
fail:
  verbs_destroy(&ep->base);
  return st == RR_OK ? RR_ERR_SYSTEM : st;
}

static rr_status verbs_ep_addr(rr_rail_ep *rep, void *blob, uint32_t *len) {
  verbs_ep *ep = to_ep(rep);
  const rr_verbs_port *p = &ep->hca->port;
  rr_verbs_addr a = {.psn = ep->psn, .lid = p->lid, .mtu = (uint8_t)p->active_mtu,
                     .link_layer = (uint8_t)p->link_layer, .nqps = (uint8_t)ep->nqps,
                     .ring_addr = (uintptr_t)ep->ring, .ring_rkey = ep->ring_mr->rkey,
                     .ring_slots = VERBS_RING_SLOTS};
  for (int k = 0; k < ep->nqps; k++) a.qpn[k] = ep->qps[k].qp->qp_num;
  memcpy(a.gid, p->gid.raw, 16);
  rr_verbs_addr_encode(&a, blob);
  *len = RR_VERBS_ADDR_LEN;
  return RR_OK;
}

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
  a.ah_attr.port_num = (uint8_t)p->port;
  a.ah_attr.dlid = peer->lid;
  if (p->link_layer == IBV_LINK_LAYER_ETHERNET || p->gid_index > 0) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)p->gid_index;
    a.ah_attr.grh.hop_limit = 255;
  }
  if (api->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0) {
    RR_WARN("verbs %s: queue pair to RTR failed: %s", p->dev_name, strerror(errno));
    return RR_ERR_RAIL;
  }
  const rr_params *prm = rr_params_get();
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
static rr_status verbs_ep_connect(rr_rail_ep *rep, const rr_rail_connect_args *args) {
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
  /* The device's poller and event reader look QPs up by number, under its
   * lock; destroy_qp itself may wait for the event reader, so not under it. */
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
  ep->connected = 1;
  ep->last_rx_ns = ep->last_tx_ns = rr_now_ns();
  if (args->nfds >= 1 && args->fds[0] >= 0) {
    ep->watch_fd = args->fds[0];
    args->fds[0] = -1; /* ours now */
  }
  return RR_OK;
}

const rr_rail_ops rr_verbs_rail_ops = {
    .name = "verbs",
    .reg_mr = verbs_reg_mr,
    .dereg_mr = verbs_dereg_mr,
    .dev_progress = verbs_dev_progress,
    .dev_event = verbs_dev_event,
    .dev_close = verbs_dev_close,
    .flush_post = verbs_flush_post,
    .flush_poll = verbs_flush_poll,
    .flush_abandon = verbs_flush_abandon,
    .ep_open = verbs_ep_open,
    .ep_addr = verbs_ep_addr,
    .ep_connect = verbs_ep_connect,
    .post_write = verbs_post_write,
    .post_ctrl = verbs_post_ctrl,
    .post_drain = verbs_post_drain,
    .progress = verbs_progress,
    .fence = verbs_fence,
    .backlog = verbs_backlog,
    .last_alive_ns = verbs_last_alive_ns,
    .destroy = verbs_destroy,
};
