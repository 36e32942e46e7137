/* Sender side of the engine: match isends to clear-to-sends, cut messages
 * into chunks, place chunks on rails, and follow the receiver's rollbacks. */
#include "engine_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* wr_id = request index | round << 16 | chunks << 32 | epoch << 48:
 * completions of an older epoch's writes, or of an earlier round of the
 * request (rewound, or the request slot reused), are recognised and
 * ignored: a send must count as placed only the writes of the round it
 * completes on. A write carries a group of chunks: its completion counts
 * them all. (16 bits of epoch: a completion cannot trail 65,536 rollbacks,
 * as each one invalidates or drains the rails it went on.) */
static uint64_t wr_id_make(uint32_t idx, uint16_t gen, uint32_t nchunks, uint32_t epoch) {
  return idx | (uint64_t)gen << 16 | (uint64_t)(nchunks & 0xffff) << 32 | (uint64_t)(epoch & 0xffff) << 48;
}

/* Every chunk of r is in the receiver's memory and no earlier write of it
 * can still read the buffer: NCCL may have it back, and r is never written
 * again (docs/protocol.md, invariant 8). An eager or parked message has no
 * place the receiver agreed to yet. */
static int send_placed(const rr_send_req *r) {
  return !r->ack_only && !r->eager && !r->parked && r->placed == r->nchunks;
}

/* r goes again from chunk `from` in a new round. A write of the round left
 * behind that has not completed may still read NCCL's buffer (a verbs QP
 * not yet drained): if so, only the receiver's ack, which follows the
 * drains, may complete r. Chunks below `from` the receiver holds. */
static void rewind_to(rr_send_req *r, uint32_t from) {
  if (r->posted > r->transmitted) r->ack_only = 1;
  r->posted = r->transmitted = r->placed = from;
  r->gen++;
  r->rail = -1;
}


/* An ack completes r towards NCCL, unless r is ack-only and a write of an
 * older epoch may still read its buffer. The ack follows the drains of the
 * rails the receiver holds live; a rail it holds down it invalidated at its own
 * end instead, which empties nothing here: a fresh endpoint it cut off at
 * its rollback may be up at our end (we keep a rail reopened within δ
 * although the receiver names it down), and our QP then holds the old
 * write, reading the buffer again at each retry, until it errors out or we
 * invalidate it. So r waits until no endpoint we did not invalidate has such a write
 * outstanding (invariant 8; the count is per rail, not per send: old writes
 * exist only after a rollback, and the rails it drained complete theirs). */
static int ack_completes(rr_engine *e, rr_send_req *r) {
  if (!r->acked) return 0;
  if (!r->ack_only) return 1;
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].writes_old) {
      if (!r->held) r->held = 1, e->stats.acks_held++;
      return 0;
    }
  return 1;
}

static void req_release(rr_engine *e, rr_send_req *r) {
  if (r->bounce >= 0) engine_snd(e)->bounce_free[engine_snd(e)->nbounce_free++] = r->bounce;
  r->bounce = -1;
  r->in_use = 0;
}

/* Retire acked sends from the head of the posting-order FIFO; a request
 * leaves the pool once retired and reported to NCCL. */
static void fifo_retire(rr_engine *e) {
  while (engine_snd(e)->fifo_head != engine_snd(e)->fifo_tail) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[engine_snd(e)->fifo_head % RR_SEND_POOL]);
    if (!r->acked) break;
    if (r->claim_owed) r->claim_owed = 0, engine_snd(e)->claims_owed--; /* the receive completed: nothing to claim */
    engine_snd(e)->fifo_head++;
    if (seq_before(engine_snd(e)->fifo_post, engine_snd(e)->fifo_head)) engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
    if (r->user_done) req_release(e, r);
  }
}

static int req_retired(const rr_engine *e, const rr_send_req *r) {
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++)
    if (engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]) == r) return 0;
  return 1;
}

/* After a rollback every rail carries a drain barrier of the new epoch
 * behind whatever it still had of the old one: the receiver completes
 * nothing while a rail whose invalidation is destructive may land an old write. */
static void post_drains(rr_engine *e) {
  for (int i = 0; i < e->nrails; i++) {
    engine_rail *rl = &e->rails[i];
    if (rl->state == RR_RAIL_DEAD || rl->drain_posted == e->epoch) continue;
    if (rl->ep->ops->post_drain(rl->ep, e->epoch) == RR_OK) rl->drain_posted = e->epoch;
  }
}

/* RERAIL_TEST_FORGE_WRITE=N (tests only): the Nth data write this process
 * posts names the last chunk an immediate can name, which no receive of a
 * test's size has: the peer stands in for a hostile one, and its engine must
 * refuse the write (before it lands on TCP, after the NIC placed it on
 * verbs), fail that rail over and get the message again by replay. */
static _Atomic uint64_t writes_posted; /* counted only while the knob is set */
static int forge_due(void) {
  uint64_t n = rr_params_get()->test_forge_write;
  return n && atomic_load_explicit(&writes_posted, memory_order_relaxed) + 1 == n;
}
static void forge_count(void) {
  if (rr_params_get()->test_forge_write) atomic_fetch_add_explicit(&writes_posted, 1, memory_order_relaxed);
}

/* After an announcement: tell the receiver of every placed send it may not
 * know holds its bytes (on_resume_end). A claim lost with a rail comes
 * again: the rail's failure starts a rollback whose announcement names the
 * receive again, incomplete. */
static void post_claims(rr_engine *e) {
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail && engine_snd(e)->claims_owed; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (!r->claim_owed) continue;
    if (!r->acked) {
      engine_msg m = {.type = ENGINE_CTRL_PLACED, .u.placed = {.seq = r->seq, .sub = r->sub, .size = r->size}};
      if (engine_post_msg(e, &m) != RR_OK) return;
    }
    r->claim_owed = 0;
    engine_snd(e)->claims_owed--;
  }
}

static rr_status send_post_pass(rr_engine *e, uint64_t now) {
  if (e->fail_notice_pending) {
    engine_msg msg = engine_notice(e, ENGINE_CTRL_FAIL, engine_snd(e)->fail_epoch, engine_down_mask(e));
    if (engine_post_msg(e, &msg) == RR_OK) e->fail_notice_pending = engine_snd(e)->down_notice_pending = engine_snd(e)->restore_notice = 0;
  } else if (engine_snd(e)->down_notice_pending) {
    /* The receiver takes the rails down (rolling back if one carried traffic
     * for it) and asks nothing of us; demoted rails it holds demoted, and
     * restores the ones the notice no longer names. */
    uint32_t mask = engine_given_up_mask(e, rr_now_ns());
    for (int i = 0; i < e->nrails; i++)
      if (e->rails[i].state == RR_RAIL_DEGRADED || e->rails[i].g_demoted) mask |= 1u << i;
    engine_msg msg = engine_notice(e, ENGINE_CTRL_DOWN, e->epoch, mask);
    if ((!mask && !engine_snd(e)->restore_notice) || engine_post_msg(e, &msg) == RR_OK)
      engine_snd(e)->down_notice_pending = engine_snd(e)->restore_notice = 0;
  }
  if (engine_send_holding(e)) return RR_OK; /* the receiver has yet to say what it holds */
  post_drains(e);
  if (engine_snd(e)->claims_owed) post_claims(e);
  while (engine_snd(e)->fifo_post != engine_snd(e)->fifo_tail) {
    uint16_t idx = engine_snd(e)->fifo[engine_snd(e)->fifo_post % RR_SEND_POOL];
    rr_send_req *r = engine_sreq(e, idx);
    /* A parked request has no place yet; placing it rewinds fifo_post. */
    while (!r->parked && !r->acked && r->posted < r->nchunks) {
      int ri = engine_send_pick_rail(e, r);
      if (ri < 0) return engine_send_no_carrier(e, r, now);
      engine_snd(e)->no_carrier_since_ns = 0;
      uint32_t k = r->posted;
      size_t off = (size_t)k * e->cfg.chunk_size;
      if (!now) now = rr_now_ns();
      rr_rail_ep *ep = e->rails[ri].ep;
      uint32_t caps = ep->dev->attr.caps;
      /* Only a rail whose receiver places writes itself can carry an eager
       * write; elsewhere it goes as an ordinary one once its place is known
       * (its receive is no longer assumed), and waits until then. */
      if (r->eager && !(caps & RR_RAIL_CAP_EAGER)) {
        if (!seq_before(r->seq, engine_snd(e)->known_seq)) return RR_OK;
        r->eager = 0;
      }
      /* A forged write is one chunk, whole: its immediate names one. */
      int forged = r->size > off && forge_due();
      uint32_t n = forged ? 1 : engine_send_group_chunks(e, r, ri);
      size_t len = r->size - off < (size_t)n * e->cfg.chunk_size ? r->size - off : (size_t)n * e->cfg.chunk_size;
      int last = k + n == r->nchunks;
      /* Ack now: we hold NCCL's buffer until the ack, unless the write's
       * completion says it is placed. */
      int ack_now = r->bounce < 0 && (r->ack_only || !(caps & RR_RAIL_CAP_WRITE_DONE_PLACED));
      uint32_t imm = imm_encode(e->epoch, r->seq % RR_NET_MAX_REQUESTS, r->sub, last, ack_now, k);
      /* Adaptive routing: the group's full chunks as a plain write, the
       * rest (under a chunk) with the immediate that completes it. */
      size_t full = len / e->cfg.chunk_size, bulk = 0;
      if ((caps & RR_RAIL_CAP_ADAPTIVE_ROUTING) && !r->eager && !forged && len > e->cfg.ar_threshold && full &&
          full <= IMM_SPLIT_MAX_FULL && k < IMM_SPLIT_MAX_FIRST) {
        bulk = full * e->cfg.chunk_size;
        imm = imm_encode_split(e->epoch, r->seq % RR_NET_MAX_REQUESTS, r->sub, last, ack_now, k, (uint32_t)full);
      }
      rr_write_wr wr = {
          .wr_id = wr_id_make(idx, r->gen, n, e->epoch),
          .local = r->data + off,
          .len = len,
          .local_mr = r->mr ? r->mr->reg[ep->dev->index] : engine_snd(e)->bounce_reg[ri],
          .remote_addr = r->raddr + off,
          .rkey = r->rkey[ri],
          .imm = imm,
          .epoch_tag = (uint16_t)e->epoch,
          .post_ns = now,
          .bulk = bulk,
      };
      if (forged) wr.imm |= IMM_MAX_CHUNKS - 1;
      rr_status st;
      if (r->eager) {
        /* One chunk (at most the bounce size) naming its receive and what
         * the choice of it assumed, instead of a buffer. */
        rr_eager_wr ew = {.wr_id = wr.wr_id, .local = wr.local, .len = wr.len, .local_mr = wr.local_mr,
                          .imm = imm_encode(e->epoch, r->seq % RR_NET_MAX_REQUESTS, 0, 1, 0, 0), .epoch_tag = wr.epoch_tag,
                          .post_ns = now, .name = {.seq = r->seq, .known = r->known, .tag = (int32_t)r->tag}};
        if (forged) ew.imm |= IMM_MAX_CHUNKS - 1;
        st = ep->ops->post_eager(ep, &ew);
      } else {
        st = ep->ops->post_write(ep, &wr);
      }
      if (st == RR_AGAIN) return RR_OK;
      if (st == RR_OK && len) forge_count();
      if (st == RR_OK && forged) rr_counter_inc(RR_CTR_TEST_FORGED_WRITES);
      if (st == RR_OK && bulk) rr_counter_inc(RR_CTR_SPLIT_WRITES);
      if (st == RR_OK && forged)
        RR_INFO(RR_SUB_NET, "test: write %llu to %s went with a forged immediate (RERAIL_TEST_FORGE_WRITE)",
                (unsigned long long)rr_params_get()->test_forge_write, e->cfg.peer);
      if (st != RR_OK) {
        e->rails[ri].cause = st;
        engine_rail_set_state(e, ri, RR_RAIL_DEAD, "cannot post a write");
        if (engine_send_holding(e) || e->failed) return RR_OK;
        continue;
      }
      r->posted += n;
      if (r->posted == r->nchunks) rr_tel_message(ep->tel_tx); /* the last chunk went here */
      e->rails[ri].writes_cur++;
      e->rails[ri].vtime += (double)(len ? len : 1) / e->rails[ri].weight;
      e->rails[ri].g_posted += len;
    }
    engine_snd(e)->fifo_post++;
  }
  return RR_OK;
}

/* One posting pass, then every rail that batches writes (rail.h,
 * post_flush) hands what the pass queued on it to its NIC: the chunks
 * posted together leave together, one doorbell per queue. */
rr_status engine_send_post(rr_engine *e, uint64_t now) {
  rr_status st = send_post_pass(e, now);
  for (int i = 0; i < e->nrails; i++) {
    engine_rail *rl = &e->rails[i];
    if (rl->state == RR_RAIL_DEAD || !rl->ep->ops->post_flush) continue;
    rr_status fst = rl->ep->ops->post_flush(rl->ep);
    if (fst != RR_OK) {
      rl->cause = fst;
      engine_rail_set_state(e, i, RR_RAIL_DEAD, "cannot post a write");
    }
  }
  return st;
}

rr_status engine_send_on_write_done(rr_engine *e, int rail, uint64_t wr_id, int placed) {
  if (wr_id == ENGINE_PROBE_WR_ID) return RR_OK; /* filler measuring a demoted rail */
  uint32_t idx = (uint32_t)(wr_id & 0xffff);
  uint16_t gen = (uint16_t)(wr_id >> 16);
  uint32_t n = (uint32_t)(wr_id >> 32) & 0xffff;
  uint16_t epoch = (uint16_t)(wr_id >> 48);
  if (idx >= engine_snd(e)->sreq_cap || rail < 0 || rail >= e->nrails) return RR_ERR_INTERNAL;
  /* Whatever it belonged to, this write reads its source no more. */
  uint32_t *out = epoch == (uint16_t)e->epoch ? &e->rails[rail].writes_cur : &e->rails[rail].writes_old;
  if (*out) (*out)--; /* 0: it was invalidated (counts end there), then completed anyway */
  rr_send_req *r = engine_sreq(e, idx);
  /* An older epoch's write, or an earlier round's: its chunks are replayed. */
  if (epoch != (uint16_t)e->epoch || !r->in_use || gen != r->gen) return RR_OK;
  r->transmitted = r->posted - r->transmitted > n ? r->transmitted + n : r->posted;
  if (placed && r->placed < r->posted) {
    r->placed = r->posted - r->placed > n ? r->placed + n : r->posted;
    if (r->placed == r->nchunks && send_placed(r)) {
      e->stats.placed_sends++;
      rr_counter_inc(RR_CTR_PLACED_SENDS);
    }
  }
  return RR_OK;
}

/* A rail under us went down: stop, ask the receiver to roll back, and wait
 * for it to say what it holds. */
void engine_send_rail_lost(rr_engine *e, engine_rail_seen seen) {
  /* A rail the receiver itself reported down while we wait for its
   * announcement: the rollback it is announcing covers it. Once we post
   * again, a rail it reports down may have swallowed chunks of this epoch,
   * and we ask for a new rollback. */
  if (seen == ENGINE_SEEN_BY_PEER && engine_send_holding(e)) return;
  engine_send_set_phase(e, RR_SEND_ROLLBACK_ASKED, RR_SEND_RAIL_LOST, rr_now_ns());
}

/* The receiver moved to epoch `epoch`: everything posted is of the old one
 * and is replayed as the announcement says (from each named receive's
 * prefix; a send it does not name completed if its receive was posted
 * before the rollback began, else it starts over). Rails whose invalidation is
 * cheap drop what they still queue of the old epoch; the others carry a
 * drain barrier behind it. */
static void adopt_epoch(rr_engine *e, uint32_t epoch) {
  e->epoch = epoch;
  e->stats.rollbacks++;
  rr_counter_inc(RR_CTR_ROLLBACKS);
  for (int i = 0; i < e->nrails; i++) {
    engine_rail *rl = &e->rails[i];
    rl->writes_old += rl->writes_cur;
    rl->writes_cur = 0;
    if (rl->state != RR_RAIL_DEAD && engine_rail_invalidate_cheap(e, i)) rl->ep->ops->invalidate(rl->ep), rl->writes_old = 0;
    rl->g_prev_ns = 0; /* the invalidation emptied its queue: that is no delivery */
    rl->g_lat_t0 = 0;  /* nor a request's latency */
  }
  /* A placed send keeps its place: its bytes are in the receiver's memory
   * and NCCL may have its buffer back; the receiver is told so once the
   * announcement is complete (on_resume_end). */
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (!r->acked && !send_placed(r)) rewind_to(r, 0);
  }
  engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
  engine_send_set_phase(e, RR_SEND_AWAITING_RESUME, RR_SEND_NEW_EPOCH, rr_now_ns());
}

/* The sub-receive an isend with this tag takes: the first not yet taken
 * (the receiver places an eager message by the same rule). */
static int cts_sub_for_tag(const engine_cts *c, uint8_t matched, int tag) {
  for (int i = 0; i < c->n; i++)
    if (c->e[i].tag == tag && !(matched & (1u << i))) return i;
  return -1;
}

static int cts_full(const engine_cts_slot *s) { return s->matched == (1u << s->cts.n) - 1; }

/* Request r takes sub-receive sub of the receive s names (checked: it fits). */
static void take_place(rr_send_req *r, engine_cts_slot *s, int sub) {
  const engine_cts_entry *ce = &s->cts.e[sub];
  r->seq = s->cts.seq;
  r->sub = (uint8_t)sub;
  r->raddr = ce->addr;
  memcpy(r->rkey, ce->rkey, sizeof r->rkey);
  if (ce->flags & ENGINE_CTS_NO_CPU) r->nic_only = 1;
  s->matched |= (uint8_t)(1u << sub);
}

/* An eager request learns its place from a clear-to-send and becomes an
 * ordinary one. */
static rr_status place_by_cts(rr_engine *e, rr_send_req *r, engine_cts_slot *s, int sub) {
  if (sub < 0)
    return engine_fail(e, RR_ERR_INVALID, "message for receive %u (tag %d): the receive has no buffer with its tag",
                       s->cts.seq, r->tag);
  if (r->size > s->cts.e[sub].size)
    return engine_fail(e, RR_ERR_INVALID, "message of %zu bytes for a receive of %llu bytes (receive %u, tag %d)",
                       r->size, (unsigned long long)s->cts.e[sub].size, s->cts.seq, r->tag);
  int was_eager = r->eager;
  r->eager = 0;
  take_place(r, s, sub);
  if (was_eager && (s->cts.e[sub].flags & ENGINE_CTS_NO_CPU)) {
    /* The buffer is GPU memory: the receiver sank our eager copy (the same
     * flag told it to), so the message goes again, as an ordinary write on
     * a rail whose NIC registered the buffer. */
    rewind_to(r, 0);
    r->resumed = 0;
    engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
  }
  return RR_OK;
}

static rr_send_req *eager_req_for(rr_engine *e, uint32_t seq) {
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (!r->parked && r->eager && r->seq == seq) return r;
  }
  return NULL;
}

/* Eager messages may be assumed for several receives at once only while
 * they share one tag: the receiver checks an assumption against the tags of
 * the receives it spans (engine_recv.c, assumption_holds), so both ends
 * agree on which copies land without knowing each other's state. */
static int may_assume(const rr_engine *e, int tag) {
  return engine_snd(e)->send_seq == engine_snd(e)->known_seq || tag == engine_snd(e)->assumed_tag;
}

/* Give r receive send_seq on the assumption that it takes r alone. */
static void assume(rr_engine *e, rr_send_req *r) {
  if (engine_snd(e)->send_seq == engine_snd(e)->known_seq) engine_snd(e)->assumed_tag = r->tag;
  r->eager = 1;
  r->seq = engine_snd(e)->send_seq++;
  r->known = engine_snd(e)->known_seq;
}

/* r was sent to a receive that has no buffer with its tag (NCCL drives
 * grouped sends in any order): the receiver dropped it, and it waits for
 * the receive it belongs to, as an isend refused "not now" would have. */
static void park(rr_engine *e, rr_send_req *r) {
  r->parked = 1;
  r->eager = 0;
  rewind_to(r, 0);
  r->resumed = 0;
  engine_snd(e)->nparked++;
  e->stats.parked++;
  rr_counter_inc(RR_CTR_PARKED_SENDS);
}

static rr_status place_by_cts(rr_engine *e, rr_send_req *r, engine_cts_slot *s, int sub);

/* Parked requests, in posting order, take the receive the next message
 * goes to when it has a buffer with their tag, or are assumed for it
 * eagerly when its clear-to-send is not here yet. */
static rr_status place_parked(rr_engine *e) {
  int placed = 0;
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail && engine_snd(e)->nparked; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (!r->parked) continue;
    engine_cts_slot *s = &engine_snd(e)->cts[engine_snd(e)->send_seq % RR_NET_MAX_REQUESTS];
    int have_cts = engine_snd(e)->known_seq == engine_snd(e)->send_seq && s->valid && s->cts.seq == engine_snd(e)->send_seq;
    if (have_cts) {
      int sub = cts_sub_for_tag(&s->cts, s->matched, r->tag);
      if (sub < 0) continue;
      r->parked = 0;
      engine_snd(e)->nparked--;
      rr_status st = place_by_cts(e, r, s, sub);
      if (st != RR_OK) return st;
      if (cts_full(s)) engine_snd(e)->known_seq = ++engine_snd(e)->send_seq;
    } else if (engine_snd(e)->send_seq - engine_snd(e)->known_seq < RR_NET_MAX_REQUESTS / 2 && may_assume(e, r->tag)) {
      r->parked = 0;
      engine_snd(e)->nparked--;
      assume(e, r);
    } else {
      continue;
    }
    placed = 1;
  }
  if (placed) engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
  return RR_OK;
}

/* Receive `at` takes more than the one message assumed: every eager message
 * chosen after it went under a wrong sequence number. The receiver drops
 * those (their frames name an assumption it can check), so they are placed
 * again in posting order, as isend would have placed them knowing this:
 * into the rest of `at` while it has room, then eagerly into the receives
 * after it, each carrying a known_seq past `at`. */
static rr_status relabel_after(rr_engine *e, uint32_t at) {
  engine_snd(e)->send_seq = at;
  engine_snd(e)->known_seq = at;
  engine_snd(e)->implied_mask = 0;
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (r->parked || !r->eager || !seq_before(at, r->seq)) continue;
    rewind_to(r, 0);
    r->resumed = 0;
    engine_cts_slot *s = &engine_snd(e)->cts[engine_snd(e)->send_seq % RR_NET_MAX_REQUESTS];
    if (engine_snd(e)->known_seq == engine_snd(e)->send_seq && s->valid && s->cts.seq == engine_snd(e)->send_seq) {
      int sub = cts_sub_for_tag(&s->cts, s->matched, r->tag);
      if (sub < 0) {
        park(e, r);
        continue;
      }
      rr_status st = place_by_cts(e, r, s, sub);
      if (st != RR_OK) return st;
      if (cts_full(s)) engine_snd(e)->known_seq = ++engine_snd(e)->send_seq;
    } else if (may_assume(e, r->tag)) {
      assume(e, r);
    } else {
      park(e, r);
    }
  }
  engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
  return place_parked(e);
}

/* Learn the shapes of assumed receives, oldest first (an eager message's
 * place depends on every receive before it): a clear-to-send says which
 * sub-receive the message took (the receiver chose by the same rule) and
 * makes it an ordinary one, so a replay goes where the clear-to-send says;
 * an ack says the receive completed with it alone. A receive that cannot
 * take the message is NCCL's error, as it would have been at isend. */
static rr_status settle_assumed(rr_engine *e) {
  while (engine_snd(e)->known_seq != engine_snd(e)->send_seq) {
    uint32_t at = engine_snd(e)->known_seq, bit = 1u << (at % RR_NET_MAX_REQUESTS);
    engine_cts_slot *s = &engine_snd(e)->cts[at % RR_NET_MAX_REQUESTS];
    if (!(s->valid && s->cts.seq == at)) {
      if (!(engine_snd(e)->implied_mask & bit)) return RR_OK;
      engine_snd(e)->implied_mask &= ~bit;
      engine_snd(e)->known_seq++;
      continue;
    }
    engine_snd(e)->implied_mask &= ~bit;
    rr_send_req *r = eager_req_for(e, at);
    int sub = r ? cts_sub_for_tag(&s->cts, 0, r->tag) : -1;
    if (r && sub < 0) {
      park(e, r); /* the receive has no buffer with its tag: it belongs to a later one */
    } else if (r) {
      rr_status st = place_by_cts(e, r, s, sub);
      if (st != RR_OK) return st;
    } else if (s->cts.n == 1) {
      s->matched = 1; /* acked and gone: it took the only buffer */
    } else {
      return engine_fail(e, RR_ERR_INTERNAL, "receive %u: its eager message is gone before its place is known", at);
    }
    if (cts_full(s)) {
      engine_snd(e)->known_seq++;
      continue;
    }
    rr_status st = relabel_after(e, at);
    if (st != RR_OK) return st;
  }
  return engine_snd(e)->nparked ? place_parked(e) : RR_OK;
}

/* A clear-to-send may arrive out of order (control messages travel on
 * whichever rail is the control rail when they leave). It is installed when
 * its slot is free, or holds an older receive whose messages were all
 * matched: the receiver reuses a slot only after its receive completed. */
static rr_status install_cts(rr_engine *e, int rail, const engine_cts *c) {
  if (seq_before(c->seq, engine_snd(e)->known_seq)) return RR_OK; /* a repeat of one already used */
  if (!seq_before(c->seq, engine_snd(e)->known_seq + RR_NET_MAX_REQUESTS))
    return engine_violation(e, rail, ENGINE_VIOL_WINDOW, "clear-to-send %u beyond the receive window", c->seq);
  engine_cts_slot *s = &engine_snd(e)->cts[c->seq % RR_NET_MAX_REQUESTS];
  if (s->valid && s->cts.seq == c->seq) return RR_OK; /* a repeat */
  if (s->valid && s->matched != (1u << s->cts.n) - 1)
    return engine_violation(e, rail, ENGINE_VIOL_WINDOW, "clear-to-send %u over a receive still in use", c->seq);
  s->cts = *c;
  s->matched = 0;
  s->valid = 1;
  return settle_assumed(e);
}

/* Receive seq completed: if it was assumed, it took its eager message alone. */
static void implied_one(rr_engine *e, uint32_t seq) {
  if (seq_before(seq, engine_snd(e)->known_seq) || !seq_before(seq, engine_snd(e)->send_seq)) return;
  engine_snd(e)->implied_mask |= 1u << (seq % RR_NET_MAX_REQUESTS);
}

static void on_ack(rr_engine *e, uint32_t seq) {
  implied_one(e, seq);
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (!r->parked && r->seq == seq) r->acked = 1;
  }
  fifo_retire(e); /* an ack for nothing outstanding is a repeat: harmless */
}

/* Each send obeys one RESUME_SLOT per epoch: an announcement repeated on
 * request must not send a chunk twice in one epoch (the receiver counts a
 * repeat as a violation, and a late one could land in the slot's next
 * receive). */
static void on_resume_slot(rr_engine *e, uint32_t epoch, const uint32_t *prefix, const engine_cts *c) {
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    if (r->parked || r->seq != c->seq || r->acked || (r->resumed && r->resumed_epoch == epoch)) continue;
    if (send_placed(r)) continue; /* never written again: on_resume_end claims it */
    /* An eager message not settled yet took the first buffer with its tag,
     * if its receive was the right one (else nothing of it is held there). */
    int sub = r->eager ? cts_sub_for_tag(c, 0, r->tag) : r->sub;
    uint32_t got = sub >= 0 ? prefix[sub] : 0;
    uint32_t held = got < r->nchunks ? got : r->nchunks;
    rewind_to(r, held);
    r->resumed = 1;
    r->resumed_epoch = epoch;
  }
  engine_snd(e)->resume_got |= 1u << (c->seq % RR_NET_MAX_REQUESTS);
}

static void on_resume_end(rr_engine *e, uint32_t epoch, uint32_t recv_seq, uint32_t mask) {
  /* Every RESUME_SLOT the announcement names must be here first: one that
   * travelled on another rail may still be on its way (or lost, and then
   * the re-ask brings the announcement again). */
  if (mask & ~engine_snd(e)->resume_got) return;
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    /* Not named, and the receiver had posted it when the rollback began: it
     * completed; its ack was lost. */
    if (!r->parked && !(mask & (1u << (r->seq % RR_NET_MAX_REQUESTS))) && seq_before(r->seq, recv_seq)) r->acked = 1;
    /* Placed, and the receiver may not know it: the completions of its
     * writes may have been lost with a device, or not polled when it rolled
     * back, or the receive was posted after the rollback began and the
     * writes (of the old epoch) were not counted. Its bytes are there and
     * NCCL may have reused the source: the receiver is told, not sent them
     * again. */
    else if (!r->acked && send_placed(r) && !r->claim_owed) r->claim_owed = 1, engine_snd(e)->claims_owed++;
  }
  /* Likewise an assumed receive: it completed with its eager message. */
  for (uint32_t q = engine_snd(e)->known_seq; q != engine_snd(e)->send_seq && seq_before(q, recv_seq); q++)
    if (!(mask & (1u << (q % RR_NET_MAX_REQUESTS)))) implied_one(e, q);
  if (settle_assumed(e) != RR_OK) return;
  engine_snd(e)->fifo_post = engine_snd(e)->fifo_head;
  fifo_retire(e);
  /* Only the announcement awaited gets here (resume_current). */
  uint64_t now = rr_now_ns();
  uint64_t stall = engine_snd(e)->stall_start_ns ? now - engine_snd(e)->stall_start_ns : 0;
  engine_send_set_phase(e, RR_SEND_STREAMING, RR_SEND_RESUME_END, now);
  /* Traffic moved off the rail that failed last, onto the control rail
   * (chain) or the others (balance). A chain backup failing moves nothing. */
  int to = engine_control_rail(e), from = -1;
  for (int i = 0; i < e->nrails; i++)
    if (!engine_rail_usable(e, i) && (from < 0 || e->rails[i].state_since_ns > e->rails[from].state_since_ns))
      from = i;
  if (to < 0 || from < 0 || (e->cfg.failover_mode == RR_FAILOVER_CHAIN && from > to)) return;
  rr_health_event ev = {.kind = RR_HEV_FAILOVER, .dev = e->rails[from].ep->dev->index,
                        .to_dev = to >= 0 ? e->rails[to].ep->dev->index : -1, .stall_ns = stall};
  snprintf(ev.ifname, sizeof ev.ifname, "%s", e->rails[from].ifname);
  if (to >= 0) snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", e->rails[to].ifname);
  snprintf(ev.peer, sizeof ev.peer, "%s", e->cfg.peer);
  snprintf(ev.reason, sizeof ev.reason, "send side resumed in epoch %u on %.60s", epoch,
           to >= 0 ? e->rails[to].name : "?");
  rr_health_report(&ev);
}

/* A RESUME_SLOT or RESUME_END of epoch x: obeyed only while we wait for
 * the announcement of an epoch after fail_epoch (the epoch we lost
 * something in, or wait to leave). An announcement repeated after we
 * finished x, or one of the epoch we are asking to leave, is stale: obeying
 * it would rewind sends whose chunks already went out in x. */
static int resume_current(rr_engine *e, uint32_t x) {
  if (seq_before(x, e->epoch)) return 0;
  if (seq_before(e->epoch, x)) adopt_epoch(e, x);
  return engine_send_holding(e) && seq_before(engine_snd(e)->fail_epoch, x);
}

rr_status engine_send_on_msg(rr_engine *e, int rail, const engine_msg *m) {
  switch (m->type) {
  case ENGINE_CTRL_CTS:
    return install_cts(e, rail, &m->u.cts);
  case ENGINE_CTRL_ACK:
    /* An ack for nothing outstanding is a repeat: harmless. */
    on_ack(e, m->u.ack.seq);
    for (uint32_t i = 0, more = m->u.ack.more; more; i++, more >>= 1)
      if (more & 1) on_ack(e, m->u.ack.seq + 1 + i);
    return settle_assumed(e);
  case ENGINE_CTRL_FAIL:
    /* The receiver's word: adopt its epoch first, then take its rails down
     * (on its word: engine_send_rail_lost decides whether that asks for a
     * new rollback). */
    if (seq_before(e->epoch, m->u.fail.epoch)) adopt_epoch(e, m->u.fail.epoch);
    /* A notice may be older than a rail's fresh endpoint (it was sent before
     * we reopened the rail): a rail reopened within δ is not taken down on
     * it. The receiver repeats its list every δ while a rail stays down. */
    uint64_t now = rr_now_ns();
    engine_notice_where(e, m);
    /* Rails it names degraded are the ones we demoted, echoed back. */
    for (int i = 0; i < e->nrails; i++)
      if ((m->u.fail.down_mask & ~m->u.fail.degraded_mask & (1u << i)) && engine_rail_usable(e, i) &&
          now - e->rails[i].swapped_ns >= e->cfg.progress_timeout_ns)
        engine_rail_set_state_seen(e, i, RR_RAIL_DOWN, "the receiver sees it down", ENGINE_SEEN_BY_PEER);
    return RR_OK;
  case ENGINE_CTRL_RESUME_SLOT: {
    if (!resume_current(e, m->u.slot.epoch)) return RR_OK;
    rr_status st = install_cts(e, rail, &m->u.slot.cts);
    if (st != RR_OK) return st;
    on_resume_slot(e, m->u.slot.epoch, m->u.slot.prefix, &m->u.slot.cts);
    return RR_OK;
  }
  case ENGINE_CTRL_RESUME_END:
    if (resume_current(e, m->u.end.epoch)) on_resume_end(e, m->u.end.epoch, m->u.end.recv_seq, m->u.end.slot_mask);
    return RR_OK;
  default:
    return engine_violation(e, rail, ENGINE_VIOL_DIRECTION, "control message %u sent to a sender", m->type);
  }
}

/* The bounce arena, registered on each rail's device (a rail that cannot
 * register it keeps a NULL key: TCP needs none). */
static void bounce_setup(rr_engine *e) {
  engine_snd(e)->bounce = malloc((size_t)RR_BOUNCE_COUNT * RR_BOUNCE_SIZE);
  if (!engine_snd(e)->bounce) return;
  for (int i = 0; i < e->nrails; i++) {
    rr_rail_ep *ep = e->rails[i].ep;
    if (ep->ops->reg_mr(ep->dev, engine_snd(e)->bounce, (size_t)RR_BOUNCE_COUNT * RR_BOUNCE_SIZE, RR_MEM_HOST, -1, 0,
                        &engine_snd(e)->bounce_reg[i]) != RR_OK)
      engine_snd(e)->bounce_reg[i] = NULL;
  }
}

/* An eager message must be replayable from our own copy (a bounce buffer,
 * or nothing at all), and go where the receiver places writes itself. At
 * most EAGER_AHEAD receives are assumed at once, and the receiver's slot
 * for this one must be past every receive we still wait to hear from (its
 * early buffer holds one message per slot). */
#define EAGER_AHEAD 16
static int eager_allowed(rr_engine *e, size_t size, int tag, const rr_mr *mr) {
  if (rr_mr_is_gpu(mr)) return 0; /* the CPU never reads GPU memory, and an eager copy is all CPU */
  if (!e->cfg.eager_max || size > e->cfg.eager_max || size > RR_BOUNCE_SIZE) return 0;
  /* Parked messages go first; assumptions in a row share a tag. */
  if (engine_snd(e)->nparked || !may_assume(e, tag)) return 0;
  if (engine_snd(e)->send_seq - engine_snd(e)->known_seq >= EAGER_AHEAD) return 0;
  if (engine_snd(e)->fifo_head != engine_snd(e)->fifo_tail &&
      engine_snd(e)->send_seq - engine_sreq(e, engine_snd(e)->fifo[engine_snd(e)->fifo_head % RR_SEND_POOL])->seq >= RR_NET_MAX_REQUESTS)
    return 0;
  int r = engine_control_rail(e);
  if (r < 0 || !(e->rails[r].ep->dev->attr.caps & RR_RAIL_CAP_EAGER)) return 0;
  if (size == 0) return 1;
  if (!engine_snd(e)->bounce) bounce_setup(e);
  return engine_snd(e)->bounce && engine_snd(e)->nbounce_free > 0;
}

static rr_status isend_locked(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                              void *phandle, void **request) {
  if (e->failed) return e->failed;
  if (engine_snd(e)->nparked) {
    rr_status st = place_parked(e);
    if (st != RR_OK) return st;
  }
  engine_cts_slot *s = &engine_snd(e)->cts[engine_snd(e)->send_seq % RR_NET_MAX_REQUESTS];
  /* With a clear-to-send and no receive assumed, the message goes where it
   * says. Without one, a small message still leaves at once (the receiver
   * places it; polling for a clear-to-send first would put a system call in
   * front of it). Else look for what is missing, and let NCCL retry. A
   * small message for a receive of one buffer goes eagerly even when its
   * clear-to-send is here: that tells the receiver we send eagerly, and it
   * holds back the clear-to-sends eager messages make moot. */
  int have_cts = s->valid && s->cts.seq == engine_snd(e)->send_seq && engine_snd(e)->known_seq == engine_snd(e)->send_seq;
  int eager = eager_allowed(e, size, tag, mr) &&
              (!have_cts || (s->cts.n == 1 && s->matched == 0 && !(s->cts.e[0].flags & ENGINE_CTS_NO_CPU)));
  if (!have_cts && !eager) {
    engine_snd(e)->cts_wanted = 1;
    return engine_progress(e);
  }
  int sub = -1;
  if (have_cts) {
    sub = cts_sub_for_tag(&s->cts, s->matched, tag);
    /* The receive the next message goes to has no free buffer with this
     * tag: the send belongs to a later receive, and NCCL (its proxy drives
     * grouped sends in any order) calls again once the others went. Not now,
     * as NCCL's IB transport answers, never an error. */
    if (sub < 0) return engine_progress(e);
    if (size > s->cts.e[sub].size) {
      RR_WARN("isend: message of %zu bytes for a receive of %llu bytes (tag %d)", size,
              (unsigned long long)s->cts.e[sub].size, tag);
      return RR_ERR_INVALID;
    }
  }
  size_t nchunks = size ? (size + e->cfg.chunk_size - 1) / e->cfg.chunk_size : 1;
  if (nchunks > IMM_MAX_CHUNKS) {
    RR_WARN("isend: %zu bytes need more than %u chunks of %zu", size, IMM_MAX_CHUNKS,
            e->cfg.chunk_size);
    return RR_ERR_INVALID;
  }
  if (engine_snd(e)->fifo_tail - engine_snd(e)->fifo_head == RR_SEND_POOL) return engine_progress(e);
  /* A free request: the pool holds every request the protocol allows. */
  int idx = -1;
  for (uint32_t i = 0; i < engine_snd(e)->sreq_cap && idx < 0; i++) {
    uint32_t j = (engine_snd(e)->fifo_tail + i) % engine_snd(e)->sreq_cap;
    if (!engine_sreq(e, j)->in_use) idx = (int)j;
  }
  if (idx < 0 && engine_snd(e)->sreq_cap < RR_SEND_POOL) {
    idx = (int)engine_snd(e)->sreq_cap;
    rr_status gst = engine_sreq_grow(e);
    if (gst != RR_OK) return gst;
  }
  if (idx < 0) return engine_progress(e);
  rr_send_req *r = engine_sreq(e, (uint32_t)idx);
  uint16_t gen = (uint16_t)(r->gen + 1); /* late completions of the slot's last request do not count */
  *r = (rr_send_req){.gen = gen, .kind = RR_REQ_SEND, .in_use = 1, .sub = 0, .eager = (uint8_t)eager, .known = engine_snd(e)->known_seq, .rail = -1,
                     .bounce = -1, .engine = e, .seq = engine_snd(e)->send_seq, .tag = tag, .data = data,
                     .size = size, .mr = mr, .nchunks = (uint32_t)nchunks,
                     .nic_only = (uint8_t)rr_mr_is_gpu(mr)};
  /* The bounce arena is registered on every rail's device the first time
   * it is used (verbs writes need a local key on the NIC they leave by). */
  if (size <= RR_BOUNCE_SIZE && size > 0 && !rr_mr_is_gpu(mr)) {
    if (!engine_snd(e)->bounce) bounce_setup(e);
    if (engine_snd(e)->bounce && engine_snd(e)->nbounce_free > 0) {
      r->bounce = engine_snd(e)->bounce_free[--engine_snd(e)->nbounce_free];
      char *b = engine_snd(e)->bounce + (size_t)r->bounce * RR_BOUNCE_SIZE;
      memcpy(b, data, size);
      r->data = b;
      r->mr = NULL; /* local keys come from the arena's registrations */
    }
  }
  if (have_cts) {
    take_place(r, s, sub); /* an eager one too: its place is known, a replay may use it */
    if (cts_full(s)) engine_snd(e)->known_seq = ++engine_snd(e)->send_seq; /* nothing was assumed (have_cts) */
  } else {
    if (engine_snd(e)->send_seq == engine_snd(e)->known_seq) engine_snd(e)->assumed_tag = tag;
    engine_snd(e)->send_seq++; /* assumed: the receive takes only this message */
  }
  engine_snd(e)->fifo[engine_snd(e)->fifo_tail++ % RR_SEND_POOL] = (uint16_t)idx;
  engine_snd(e)->cts_wanted = 0;
  engine_prof_start(e, &r->prof_event, phandle, ENGINE_PROF_SEND, r->seq, size);
  *request = r;
  /* Errors surface through test(): the request exists now. */
  engine_progress(e);
  return RR_OK;
}

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void *phandle, void **request) {
  *request = NULL;
  if (!engine_is_sender(e)) return RR_ERR_INVALID; /* no send requests here */
  pthread_mutex_lock(&e->lock);
  atomic_store_explicit(&e->idle_hint, 0, memory_order_relaxed); /* rr_engine_background */
  rr_status st = isend_locked(e, data, size, tag, mr, phandle, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status engine_send_test(rr_send_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  /* A bounced message's buffer is free as soon as it was copied, an acked
   * or placed one once acked or placed: no need to touch the network to say
   * so (acks of bounced messages are read by the next call that waits on
   * something). */
  int finished = r->bounce >= 0 || ack_completes(e, r) || send_placed(r);
  if (!finished) {
    rr_status st = engine_progress(e);
    finished = ack_completes(e, r) || send_placed(r);
    /* A placed send is done even if the connection failed after: its bytes
     * are in the receiver's memory and its buffer is free. */
    if (st != RR_OK && !finished) {
      if (e->peer_bye && st == RR_ERR_PEER) engine_report_unanswered(e, "send", r->seq);
      return st;
    }
  }
  *done = finished;
  if (finished && !r->user_done) {
    if (sizes) sizes[0] = r->size;
    r->user_done = 1;
    engine_prof_stop(e, &r->prof_event);
    if (r->acked && req_retired(e, r)) req_release(e, r);
  }
  return RR_OK;
}
