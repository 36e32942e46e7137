/* The verbs endpoint's send queues as the NIC sees them (verbs_ep.h): every
 * send-queue request goes through here, onto its QP's chain, and the chain
 * goes to the NIC as one ibv_post_send, one doorbell, with one signalled
 * request, its last.
 *
 * When a chain is rung. The engine's writes wait on the chain until the
 * engine's pass is over (post_flush), so the chunks of a message, and of every
 * message posted in the pass, ring the doorbell once: on a real HCA a
 * doorbell is an uncached MMIO write and a WQE fetch the NIC starts on its
 * own, per call; on Soft-RoCE it is a system call. Anything else (a ring
 * write, the credit word, a drain) joins the chain behind what waits and
 * rings it at once: order on the QP is the order of the calls, as RC needs.
 * A chain also rings at CHAIN_MAX requests or CHAIN_BYTES, and progress()
 * rings what is left, so nothing waits for a post_flush that never comes
 * (a write posted outside a pass: the engine's rate probe).
 *
 * Which requests are signalled. RC completes a QP's requests in order, so a
 * signalled completion retires every request ahead of it: a write is done
 * (on_write_done) when a later signalled request completes, and a flushed
 * one (the QP failed) is never reported, because a failed completion fails
 * the endpoint before anything behind the last good signal is retired.
 *   - A chain that holds a write ends signalled: the writes' completion is
 *     what gives NCCL its buffer back (RR_RAIL_CAP_WRITE_DONE_PLACED), so it
 *     must not wait for whatever is posted next. One completion per chain,
 *     as NCCL's one per request.
 *   - The rail's own requests alone (clear-to-send and ack ring writes, the
 *     credit word, drains) go unsignalled, as NCCL's FIFO writes do, unless
 *     SIGNAL_RUN requests in a row would otherwise be, or half the send
 *     slots are held by messages too long to go inline (their slot is the
 *     NIC's to read until a later signal retires it; an inline one is free
 *     once posted, the NIC having copied it): the hardware frees send queue
 *     entries only on a signalled completion, and slots come back only on
 *     one, so a signal always comes before either runs out.
 *   - flushed() asks for a signal when an unsignalled tail is all that
 *     keeps it from saying yes, and last_alive_ns() when the engine is in
 *     doubt about the rail (its probe is such a tail: its completion is the
 *     life the probe was for); progress() then writes the credit word,
 *     signalled (verbs_ctrl_signal): it lands nothing new at the peer.
 * Liveness no longer comes from a signal every quarter MiB: the silence
 * judge credits the bytes ahead of the next completion at the QP's
 * measured rate (rail_verbs.c, verbs_last_alive_ns). */
#include "verbs_ep.h"

#include <string.h>

/* Take wr into q's chain with its send-queue entry (the caller checked
 * there is room). */
static rr_status chain_add(verbs_ep *ep, verbs_qp *q, const struct ibv_send_wr *wr, uint64_t wr_id, uint32_t len,
                           int16_t slot, uint64_t post_ns) {
  if (wr->num_sge > 1) return verbs_ep_fail(ep, RR_ERR_INTERNAL, "a work request of several gather entries");
  chain_wr *c = &q->chain[q->nchain++];
  *c = (chain_wr){.raddr = wr->wr.rdma.remote_addr, .rkey = wr->wr.rdma.rkey, .imm = wr->imm_data,
                  .opcode = (uint8_t)wr->opcode, .flags = (uint8_t)(wr->send_flags & IBV_SEND_INLINE),
                  .nsge = (uint8_t)wr->num_sge};
  if (wr->num_sge) c->laddr = wr->sg_list[0].addr, c->len = wr->sg_list[0].length, c->lkey = wr->sg_list[0].lkey;
  q->sq[q->sq_tail % VERBS_SQ_DEPTH] =
      (sq_entry){.wr_id = wr_id, .post_ns = post_ns, .len = len, .slot = slot, .signaled = 0};
  q->sq_tail++;
  q->chain_bytes += len;
  if (slot == -1 || slot == SLOT_BULK) {
    q->chain_writes++;
    ep->backlog += len;
  }
  return RR_OK;
}

/* Send slots held by messages the NIC reads from them (not inline). */
static int slots_held(const verbs_ep *ep) { return SEND_SLOTS - ep->nsend_free; }

rr_status verbs_ring_chain(verbs_ep *ep, verbs_qp *q, int force_signal) {
  int n = q->nchain;
  if (!n) return RR_OK;
  q->nchain = 0;
  uint64_t first = q->sq_tail - (uint64_t)n;
  /* Inline messages give their slots back once posted: count what stays held. */
  int inline_slots = 0;
  for (int i = 0; i < n; i++)
    if (q->sq[(first + (uint64_t)i) % VERBS_SQ_DEPTH].slot >= 0 && (q->chain[i].flags & IBV_SEND_INLINE))
      inline_slots++;
  int signal = force_signal || q->signal_wanted || q->chain_writes > 0 ||
               q->sq_tail - q->last_signaled >= SIGNAL_RUN || slots_held(ep) - inline_slots >= SEND_SLOTS / 2;
  struct ibv_send_wr wr[CHAIN_MAX];
  struct ibv_sge sge[CHAIN_MAX];
  for (int i = 0; i < n; i++) {
    const chain_wr *c = &q->chain[i];
    sge[i] = (struct ibv_sge){.addr = c->laddr, .length = c->len, .lkey = c->lkey};
    wr[i] = (struct ibv_send_wr){.wr_id = first + (uint64_t)i, .next = i + 1 < n ? &wr[i + 1] : NULL,
                                 .sg_list = &sge[i], .num_sge = c->nsge, .opcode = (enum ibv_wr_opcode)c->opcode,
                                 .send_flags = c->flags, .imm_data = c->imm};
    wr[i].wr.rdma.remote_addr = c->raddr;
    wr[i].wr.rdma.rkey = c->rkey;
  }
  if (signal) wr[n - 1].send_flags |= IBV_SEND_SIGNALED;
  q->chain_writes = 0;
  q->chain_bytes = 0;
  struct ibv_send_wr *bad;
  /* A failure leaves part of the chain posted, perhaps: the endpoint fails,
   * and a failed endpoint reports no completion (verbs_progress). */
  if (ibv_post_send(q->qp, wr, &bad) != 0) return verbs_ep_fail(ep, RR_ERR_RAIL, "ibv_post_send failed");
  /* One call is one doorbell, however many requests it chains. */
  ep->base.cost.n[RR_TEL_COST_DOORBELLS_SEND]++;
  ep->base.cost.n[RR_TEL_COST_WRS_SEND] += (uint64_t)n;
  for (int i = 0; i < n; i++) {
    sq_entry *s = &q->sq[(first + (uint64_t)i) % VERBS_SQ_DEPTH];
    if (s->slot >= 0 && (q->chain[i].flags & IBV_SEND_INLINE)) {
      ep->send_free[ep->nsend_free++] = s->slot;
      s->slot = SLOT_INTERNAL;
    }
  }
  if (signal) {
    q->sq[(q->sq_tail - 1) % VERBS_SQ_DEPTH].signaled = 1;
    q->last_signaled = q->sq_tail;
    q->signal_wanted = 0;
  }
  return RR_OK;
}

static rr_status post_one(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint64_t wr_id, uint32_t len,
                          int16_t slot, uint64_t post_ns, int force_signal) {
  rr_status st = chain_add(ep, q, wr, wr_id, len, slot, post_ns);
  if (st != RR_OK) return st;
  if ((slot != -1 && slot != SLOT_BULK) || force_signal || q->nchain == CHAIN_MAX || q->chain_bytes >= CHAIN_BYTES)
    return verbs_ring_chain(ep, q, force_signal);
  return RR_OK;
}

rr_status verbs_post_send(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint64_t wr_id, uint32_t len,
                          int16_t slot, uint64_t post_ns) {
  return post_one(ep, q, wr, wr_id, len, slot, post_ns, 0);
}

rr_status verbs_post_send_signaled(verbs_ep *ep, verbs_qp *q, struct ibv_send_wr *wr, uint32_t len) {
  return post_one(ep, q, wr, 0, len, SLOT_INTERNAL, 0, 1);
}

/* rr_rail_ops.post_flush: the engine's pass is over. */
rr_status verbs_post_flush(rr_rail_ep *rep) {
  verbs_ep *ep = to_ep(rep);
  rr_status st = verbs_ep_usable(ep);
  if (st != RR_OK) return st;
  for (int k = 0; k < ep->nqps && st == RR_OK; k++) st = verbs_ring_chain(ep, &ep->qps[k], 0);
  return st;
}
