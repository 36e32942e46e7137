/* The verbs endpoint's send and receive queues (verbs_ep.h): writes with
 * immediate, drains by SEND, and the receives they consume. Every send-queue
 * request then goes through verbs_chain.c (chained posts, signalling). */
#include "verbs_ep.h"

#include <arpa/inet.h>
#include <endian.h>

/* Receives for slots[0..n) of QP q, chained: one doorbell however many. */
rr_status verbs_post_recvs(verbs_ep *ep, int q, const uint16_t *slots, int n) {
  struct ibv_sge sge[VERBS_RECV_CHAIN];
  struct ibv_recv_wr wr[VERBS_RECV_CHAIN], *bad;
  while (n > 0) {
    int m = n < VERBS_RECV_CHAIN ? n : VERBS_RECV_CHAIN;
    for (int k = 0; k < m; k++) {
      sge[k] = (struct ibv_sge){.addr = (uintptr_t)recv_slot(ep, q, slots[k]), .length = RECV_BYTES,
                                .lkey = ep->bufs_mr->lkey};
      wr[k] = (struct ibv_recv_wr){.wr_id = RECV_ID(q, slots[k]), .sg_list = &sge[k], .num_sge = 1,
                                   .next = k + 1 < m ? &wr[k + 1] : NULL};
    }
    if (ibv_post_recv(ep->qps[q].qp, wr, &bad) != 0) return RR_ERR_RAIL;
    ep->base.cost.n[RR_TEL_COST_DOORBELLS_RECV]++;
    ep->base.cost.n[RR_TEL_COST_WRS_RECV] += (uint64_t)m;
    slots += m;
    n -= m;
  }
  return RR_OK;
}

/* A receive of QP q consumed (its slot is free again): posted again with
 * the next ones, VERBS_RECV_BATCH at a time (verbs_ep.h: what holding
 * them back costs the queue). */
rr_status verbs_recv_consumed(verbs_ep *ep, int q, int i) {
  verbs_qp *qp = &ep->qps[q];
  qp->repost[qp->nrepost++] = (uint16_t)i;
  if (qp->nrepost < VERBS_RECV_BATCH) return RR_OK;
  rr_status st = verbs_post_recvs(ep, q, qp->repost, (int)qp->nrepost);
  qp->nrepost = 0;
  return st;
}

rr_status verbs_post_write(rr_rail_ep *rep, const rr_write_wr *w) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = verbs_ep_usable(ep);
  if (st != RR_OK) return st;
  if (w->len > UINT32_MAX || (w->len && !w->local_mr) || w->bulk > w->len) return RR_ERR_INVALID;
  verbs_qp *q = next_qp(ep);
  /* One credit stays free for a signal (sq_full); a split write takes two. */
  if (sq_full(q) || (w->bulk && q->sq_tail + 1 - q->sq_head >= VERBS_SQ_DEPTH - 1)) return RR_AGAIN;
  uint32_t lkey = w->local_mr ? w->local_mr->lkey : 0;
  if (w->bulk) {
    /* Adaptive routing: the bulk as a plain RDMA WRITE, whose packets the
     * fabric may spread over paths (NCCL's IB transport does the same above
     * NCCL_IB_AR_THRESHOLD). It consumes no receive at the peer and is no
     * ordered request of ours: the write with immediate behind it, on the
     * same QP, completes at the peer only once the bulk is placed, and
     * stands for both. Its own completion means nothing to the engine. */
    struct ibv_sge bsge = {.addr = (uintptr_t)w->local, .length = (uint32_t)w->bulk, .lkey = lkey};
    struct ibv_send_wr bwr = {.sg_list = &bsge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
    bwr.wr.rdma.remote_addr = w->remote_addr;
    bwr.wr.rdma.rkey = w->rkey;
    st = verbs_post_send(ep, q, &bwr, 0, (uint32_t)w->bulk, SLOT_BULK, w->post_ns);
    if (st != RR_OK) return st;
  }
  uint32_t rest = (uint32_t)(w->len - w->bulk);
  struct ibv_sge sge = {.addr = (uintptr_t)w->local + w->bulk, .length = rest, .lkey = lkey};
  /* Never inline: IBV_SEND_INLINE has the CPU copy the source into the work
   * request, and a write's source may be GPU memory, which only the NIC may
   * read (NCCL's IB transport never inlines payload either). Only the
   * rail's own messages (ring, drains, NOPs) travel inline. */
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = rest ? 1 : 0, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                           .imm_data = htonl(w->imm)};
  wr.wr.rdma.remote_addr = w->remote_addr + w->bulk;
  wr.wr.rdma.rkey = w->rkey;
  /* The whole write's bytes are this request's: its completion frees them. */
  st = verbs_post_send(ep, q, &wr, w->wr_id, (uint32_t)w->len, -1, w->post_ns);
  if (st == RR_OK) ep->tx_ops++;
  return st;
}

/* A SEND on QP q (a drain). */
rr_status verbs_post_msg(verbs_ep *ep, verbs_qp *q, uint8_t type, uint32_t value, int reserve_signal_credit) {
  rr_status st = verbs_ep_usable(ep);
  if (st != RR_OK) return st;
  if (ep->nsend_free == 0 || (reserve_signal_credit && sq_full(q)) || q->sq_tail - q->sq_head >= VERBS_SQ_DEPTH)
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
  st = verbs_post_send(ep, q, &wr, 0, MSG_HDR, slot, 0);
  if (st != RR_OK) ep->send_free[ep->nsend_free++] = slot;
  return st;
}

/* A drain is an ordered request like a write: a SEND that the peer
 * delivers after every write posted before it (on whichever QP). */
rr_status verbs_post_drain(rr_rail_ep *rep, uint32_t epoch) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = verbs_post_msg(ep, next_qp(ep), MSG_DRAIN, epoch, 1);
  if (st == RR_OK) ep->tx_ops++;
  return st;
}
