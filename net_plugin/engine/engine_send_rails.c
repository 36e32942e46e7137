/* Sender side of the engine: which rail carries a send's next chunks.
 * Chain mode keeps a message on the control rail, balance mode spreads
 * chunks over the usable rails by bandwidth; either way only over rails
 * that can reach the message's memory (GPU memory, issue 23), in groups of
 * as many chunks as one write may carry. The posting itself: engine_send.c. */
#include "engine_internal.h"
#include "rr_clock.h"

/* GPU memory (issue 23): a message in GPU memory, or for a receive buffer
 * in GPU memory, goes only over a rail whose NIC registered our buffer and
 * the receiver's (its clear-to-send key for that rail is not 0): any other
 * rail would have a CPU read or write it (a TCP rail's send() or recv()).
 * Zero bytes touch no memory and go anywhere. */
static int rail_carries(const rr_engine *e, const rr_send_req *r, int i) {
  if (!r->nic_only || !r->size) return 1;
  int dev = e->rails[i].ep->dev->index;
  const rr_rail_mr *local = r->mr ? r->mr->reg[dev] : engine_snd(e)->bounce_reg[i];
  return local && r->rkey[i];
}

/* Chain order's first usable rail that can carry r (-1: none). */
static int first_carrier(rr_engine *e, const rr_send_req *r) {
  for (int i = 0; i < e->nrails; i++)
    if (engine_rail_usable(e, i) && rail_carries(e, r, i)) return i;
  return -1;
}

/* Which rail carries the next chunk of r; -1 when none can take it now. */
int engine_send_pick_rail(rr_engine *e, rr_send_req *r) {
  if (e->cfg.failover_mode == RR_FAILOVER_CHAIN) {
    /* A message stays on one rail (fail-back happens at message boundaries). */
    if (r->rail >= 0 && engine_rail_usable(e, r->rail)) return r->rail;
    r->rail = (int8_t)engine_control_rail(e);
    /* issue 23 (GPU memory): the control rail may not have registered it. */
    if (r->rail >= 0 && !rail_carries(e, r, r->rail)) r->rail = (int8_t)first_carrier(e, r);
    return r->rail;
  }
  /* Balance: weighted fair placement. Each chunk goes to the usable rail
   * that has been given the least per unit of bandwidth, so traffic splits
   * in proportion to bandwidth over the rails that are up; a rail whose own
   * queue is backed up (it drains slower than its share) is skipped. */
  int best = -1;
  for (int i = 0; i < e->nrails; i++) {
    if (!engine_rail_usable(e, i) || !rail_carries(e, r, i)) continue; /* issue 23: GPU memory */
    if (e->rails[i].ep->ops->backlog(e->rails[i].ep) > 2 * e->cfg.chunk_size) continue;
    if (best < 0 || e->rails[i].vtime < e->rails[best].vtime) best = i;
  }
  return best;
}

/* How many chunks of r, from its next, go in one write on rail ri (a
 * group, docs/protocol.md): the chunks the engine would place on ri one by
 * one in this pass anyway, up to what one write of the rail may carry.
 * Chain mode keeps a message on its rail, so that is all the rest; balance
 * mode places chunk by chunk on the rail given least so far, and a group is
 * the run of them that would land on ri. An eager write stays one chunk. */
uint32_t engine_send_group_chunks(rr_engine *e, rr_send_req *r, int ri) {
  const rr_rail_dev_attr *a = &e->rails[ri].ep->dev->attr;
  size_t cs = e->cfg.chunk_size;
  uint32_t room = r->nchunks - r->posted;
  uint32_t max = a->write_max > cs ? (uint32_t)(a->write_max / cs) : 1;
  /* A split group names at most IMM_SPLIT_MAX_FULL full chunks. */
  if ((a->caps & RR_RAIL_CAP_ADAPTIVE_ROUTING) && max > IMM_SPLIT_MAX_FULL) max = IMM_SPLIT_MAX_FULL;
  if (max > 0xffff) max = 0xffff; /* the count rides in 16 bits of wr_id */
  if (max > room) max = room;
  if (r->eager || max < 2) return 1;
  if (e->cfg.failover_mode == RR_FAILOVER_CHAIN) return max;
  uint32_t n = 1;
  double saved = e->rails[ri].vtime;
  while (n < max) {
    e->rails[ri].vtime += (double)cs / e->rails[ri].weight; /* chunk n - 1 is full: another follows */
    if (engine_send_pick_rail(e, r) != ri) break;
    n++;
  }
  e->rails[ri].vtime = saved;
  return n;
}

/* No rail can take r's next chunk now. With no rail up at all the
 * connection's own bound applies (engine_rails.c, check_rails_left); but a
 * message in GPU memory that no up rail registered waits for a rail that
 * did, and fails within the same bound (δ + 600 ms) when none comes, rather
 * than hang. */
rr_status engine_send_no_carrier(rr_engine *e, const rr_send_req *r, uint64_t now) {
  if (!r->nic_only || engine_control_rail(e) < 0) {
    engine_snd(e)->no_carrier_since_ns = 0;
    return RR_OK;
  }
  if (!now) now = rr_now_ns();
  if (!engine_snd(e)->no_carrier_since_ns) engine_snd(e)->no_carrier_since_ns = now;
  if (now - engine_snd(e)->no_carrier_since_ns < e->cfg.progress_timeout_ns + 600 * 1000000ull) return RR_OK;
  return engine_fail(e, RR_ERR_RAIL,
                     "message %u (%zu bytes) is in GPU memory at one end, and no rail up has a NIC that registered it",
                     r->seq, r->size);
}
