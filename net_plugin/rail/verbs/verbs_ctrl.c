/* The verbs endpoint's control messages (verbs_ep.h): RDMA WRITEs into the
 * peer's ring (verbs_ring.h), one credit per slot; our ring read in the
 * writer's order (the checks are verbs_ring_read's); credits given back in
 * our messages or, when we have none to write, by the credit word. */
#include "verbs_ep.h"
#include "rr_counters.h"

#include <endian.h>
#include <string.h>

/* A credit count (in the credit word or a message header) above what we sent. */
static rr_status fail_bad_credit(verbs_ep *ep) {
  return verbs_ep_fail(ep, RR_ERR_PROTOCOL, "the peer returned credits for control messages never sent");
}

/* The peer's count of our messages it has consumed, from the credit word. */
static rr_status take_credit(verbs_ep *ep, uint32_t consumed) {
  return verbs_ring_credit(&ep->rs, consumed, &ep->rs.tx_acked) != 0 ? fail_bad_credit(ep) : RR_OK;
}

/* A control message: one RDMA WRITE of header, body and trailer into the
 * next slot of the peer's ring, which a credit says the peer has read. */
rr_status verbs_post_ctrl(rr_rail_ep *rep, const void *msg, uint32_t len) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = verbs_ep_usable(ep);
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
  st = verbs_post_send(ep, q, &wr, 0, n, slot, 0);
  if (st != RR_OK) {
    ep->send_free[ep->nsend_free++] = slot;
    return st;
  }
  ep->rs.tx_msgs++;
  ep->rx_returned = ep->rs.rx_msgs; /* carried in the header */
  return RR_OK;
}

/* The credit word, written from credit_src with our count of consumed
 * messages. The source word is rewritten by later returns before the NIC
 * may have read it (it goes inline where it can, but need not); it only
 * ever grows, and a newer count is as true. */
static void credit_wr(verbs_ep *ep, struct ibv_sge *sge, struct ibv_send_wr *wr) {
  uint32_t v = htole32((uint32_t)ep->rs.rx_msgs);
  memcpy(credit_src(ep), &v, 4);
  *sge = (struct ibv_sge){.addr = (uintptr_t)credit_src(ep), .length = 4, .lkey = ep->bufs_mr->lkey};
  *wr = (struct ibv_send_wr){.sg_list = sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE, .send_flags = inline_flag(ep, 4)};
  wr->wr.rdma.remote_addr = ep->peer_ring + VERBS_RING_CREDIT_OFF;
  wr->wr.rdma.rkey = ep->peer_ring_rkey;
}

/* Credits back without a message to carry them: once half the ring is
 * consumed and unreported, our count goes into the peer's credit word. */
rr_status verbs_ctrl_return_credit(verbs_ep *ep) {
  verbs_qp *q = next_qp(ep);
  if (ep->rs.rx_msgs - ep->rx_returned < VERBS_RING_SLOTS / 2 || sq_full(q)) return RR_OK;
  struct ibv_sge sge;
  struct ibv_send_wr wr;
  credit_wr(ep, &sge, &wr);
  rr_status st = verbs_post_send(ep, q, &wr, 0, 4, SLOT_INTERNAL, 0);
  if (st == RR_OK) {
    ep->rx_returned = ep->rs.rx_msgs;
    rr_counter_inc(RR_CTR_CONTROL_CREDITS);
  }
  return st;
}

/* A signal behind QP q's unsignalled tail: the credit word again, which
 * lands nothing new at the peer and consumes none of its receives (the NOP
 * SEND it replaces cost the peer a receive completion and a repost). It
 * takes the credit sq_full keeps free. */
rr_status verbs_ctrl_signal(verbs_ep *ep, verbs_qp *q) {
  if (q->sq_tail - q->sq_head >= VERBS_SQ_DEPTH) return RR_AGAIN;
  struct ibv_sge sge;
  struct ibv_send_wr wr;
  credit_wr(ep, &sge, &wr);
  rr_status st = verbs_post_send_signaled(ep, q, &wr, 4);
  if (st == RR_OK) {
    ep->rx_returned = ep->rs.rx_msgs;
    rr_counter_inc(RR_CTR_CONTROL_SIGNALS);
  }
  return st;
}

/* Deliver the messages of our ring that are due: landed whole, and not
 * ahead of an ordered request the peer posted before them. */
rr_status verbs_ctrl_deliver(verbs_ep *ep, uint64_t now) {
  while (!ep->invalidated && !ep->failed) {
    verbs_ring_msg m;
    switch (verbs_ring_read(ep->ring, &ep->rs, &m)) {
    case VERBS_RING_READ_EMPTY:
    case VERBS_RING_READ_HELD:
      return RR_OK;
    case VERBS_RING_READ_MALFORMED:
      return verbs_ep_fail(ep, RR_ERR_PROTOCOL, "a malformed control message in the ring");
    case VERBS_RING_READ_BAD_ORDER:
      return verbs_ep_fail(ep, RR_ERR_PROTOCOL, "a control message stamped out of order");
    case VERBS_RING_READ_BAD_CREDIT:
      return fail_bad_credit(ep);
    case VERBS_RING_READ_READY:
      break;
    }
    verbs_ring_consume(ep->ring, &ep->rs, &m);
    ep->last_rx_ns = now;
    rr_status st = ep->base.events->on_ctrl(&ep->base, m.body, m.len);
    if (st != RR_OK) return verbs_ep_fail(ep, st, "a control message rejected by the engine");
  }
  return ep->failed;
}
