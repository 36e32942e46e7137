/* Probe filler on a verbs rail (RR_WRITE_PROBE, RR_RAIL_CAP_PROBE_WRITE).
 *
 * The engine measures a demoted rail by writing filler through it
 * (engine_gray.c). A TCP receiver reads each write's header before the
 * bytes land and discards filler there; a verbs NIC places a write itself,
 * where the writer named, and a write with immediate data consumes a
 * receive and reaches the peer's engine as a chunk. So filler travels as a
 * plain RDMA WRITE, no immediate, from this device opening's scratch into
 * the peer's (its address and key come in the peer's address blob): the
 * peer's NIC places it and acknowledges it like data, so its completion
 * times the path as data would cross it, and neither engine nor rail at
 * the peer ever hears of it. The scratch is one registration per device
 * opening (verbs_gen_scratch), not per endpoint: nobody reads it, so every
 * peer may write it at once, and a connection costs no pinned memory for it.
 *
 * A probe is not an ordered request: the peer delivers nothing for it, so it
 * does not count in tx_ops (which the peer's delivery order follows). It
 * goes on the QP of the next ordered request, behind whatever that QP
 * carries, and completes like a write (the backlog, flushed(), on_write_done
 * with the engine's wr_id). */
#include "verbs_ep.h"

static rr_status verbs_post_probe(verbs_ep *ep, const rr_write_wr *w) {
  rr_status st = verbs_ep_usable(ep);
  if (st != RR_OK) return st;
  /* No scratch at either end: this rail cannot be probed (the engine then
   * never restores it on probes; it judges only rails that can be). */
  if (!ep->scratch_mr || !ep->peer_scratch || w->len == 0 || w->len > VERBS_SCRATCH_BYTES) return RR_ERR_INVALID;
  verbs_qp *q = next_qp(ep);
  if (sq_full(q)) return RR_AGAIN; /* one credit stays free for a signal (sq_full) */
  struct ibv_sge sge = {.addr = (uintptr_t)ep->scratch_mr->addr, .length = (uint32_t)w->len,
                        .lkey = ep->scratch_mr->lkey};
  struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE};
  wr.wr.rdma.remote_addr = ep->peer_scratch;
  wr.wr.rdma.rkey = ep->peer_scratch_rkey;
  return verbs_post_send(ep, q, &wr, w->wr_id, (uint32_t)w->len, -1, w->post_ns);
}

rr_status verbs_post_write_or_probe(rr_rail_ep *rep, const rr_write_wr *w) {
  if (w->flags & RR_WRITE_PROBE) return verbs_post_probe(to_ep(rep), w);
  return verbs_post_write(rep, w);
}
