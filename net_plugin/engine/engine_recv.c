/* Receiver side of the engine: post clear-to-sends, place and count chunks
 * as they land, acknowledge complete receives, and drive rollbacks.
 *
 * The receiver decides where bytes go: a chunk (slot, sub-receive, index) of
 * the current epoch has exactly one place inside the receive NCCL posted,
 * and a write that names anything else (another key, another address, a
 * length the chunk cannot have, a chunk the posted size does not allow, a
 * repeat) writes nothing and fails the rail that carried it. */
#include "engine_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <stdlib.h>
#include <string.h>

/* While the sender sends eagerly, the clear-to-send of a receive that takes
 * one message waits this long for the eager message, which makes it
 * unnecessary (one frame fewer per message). A sender that needs it (a
 * large message) waits at most this long for it. */
#define CTS_HOLD_NS 100000ull
/* An ack the sender waits on (a large message: NCCL's buffer is held until
 * it arrives) waits this long for company while other receives are
 * outstanding: NCCL reposts the completed receive's slot right after test()
 * says done, and the ack then leaves with that clear-to-send in one frame
 * pair and one system call, instead of alone. On loopback each control
 * frame costs the sender (the bottleneck there) a segment to process: going
 * from two frames per message to one is worth 8-23 % at 64 KiB-1 MiB
 * (bench/RESULTS.md 8.3). The sender keeps the rest of its window in flight
 * meanwhile; with nothing else outstanding the ack leaves at once. */
#define ACK_COMPANY_NS 50000ull

static int seen_test(const rr_recv_sub *s, uint32_t k) { return (s->seen[k / 64] >> (k % 64)) & 1; }
static void seen_set(rr_recv_sub *s, uint32_t k) { s->seen[k / 64] |= 1ull << (k % 64); }

/* No receive completes while a rail may still land a write of an older
 * epoch: the rails whose invalidation would destroy them are drained instead. */
static int rails_drained(const rr_engine *e) {
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].need_drain) return 0;
  return 1;
}

static void recv_complete(rr_engine *e, rr_recv_req *r) {
  r->complete = 1;
  engine_recv_ack_enqueue(e, r->seq);
  /* The sender holds NCCL's buffer until this ack. While another receive
   * is still outstanding NCCL keeps testing this connection, so the ack
   * can wait (ACK_COMPANY_NS at most) for the clear-to-send NCCL posts
   * meanwhile and leave with it (one system call instead of two);
   * otherwise it must leave before test() returns. A bounced message's ack
   * only frees the sender's copy: it waits longer (engine_recv_acks.c). */
  if (r->ack_now) {
    if (!engine_outstanding(e)) {
      engine_rcv(e)->ack_flush = 1;
      engine_rcv(e)->urgent = 1;
    } else if (!engine_rcv(e)->ack_due_ns) {
      engine_rcv(e)->ack_due_ns = rr_now_ns() + ACK_COMPANY_NS;
    }
  }
}

/* Receives whose chunks all landed complete once the rails are drained. */
static void complete_landed(rr_engine *e) {
  if (!rails_drained(e)) return;
  for (int i = 0; i < RR_NET_MAX_REQUESTS; i++) {
    rr_recv_req *r = &engine_rcv(e)->rreq[i];
    if (r->in_use && r->landed && !r->complete) recv_complete(e, r);
  }
}

/* h is of our epoch: every rail carries its low 4 bits (the immediate's), rails
 * with epoch tags 16, as a frame can wait in a failed rail's kernel buffer
 * through any number of failovers. */
static int write_of_this_epoch(const rr_engine *e, int rail, const rr_write_hdr *h) {
  int tagged = (e->rails[rail].ep->dev->attr.caps & RR_RAIL_CAP_EPOCH_TAG) != 0;
  return imm_epoch(h->imm) == (e->epoch & 0xf) && (!tagged || h->epoch_tag == (uint16_t)e->epoch);
}

/* Which chunks h carries (a group: imm_group), and whether they may land:
 * the checks every chunk of it passes before (TCP) or right after (verbs)
 * it lands, as if each had come alone. RR_OK with *sub_out NULL: a write of
 * another epoch, dropped without a word. */
static rr_status check_write(rr_engine *e, int rail, const rr_write_hdr *h, rr_recv_req **req,
                             rr_recv_sub **sub_out, uint32_t *first, uint32_t *nchunks, uint64_t *bytes) {
  *sub_out = NULL;
  uint32_t imm = h->imm;
  if (!write_of_this_epoch(e, rail, h)) return RR_OK;
  int sees_begin = (e->rails[rail].ep->dev->attr.caps & RR_RAIL_CAP_WRITE_BEGIN) != 0;
  rr_recv_req *r = &engine_rcv(e)->rreq[imm_slot(imm)];
  uint32_t sub = imm_sub(imm), f, n;
  uint64_t len;
  if (!r->in_use || sub >= r->n) return engine_violation(e, rail, ENGINE_VIOL_NO_RECEIVE, "a write for no posted receive (slot %u)", imm_slot(imm));
  rr_recv_sub *s = &r->sub[sub];
  const engine_cts_entry *ce = &r->cts.e[sub];
  size_t chunk_size = e->cfg.chunk_size;
  /* A rail that sees writes before they land carries no plain write for a
   * split one to complete. */
  if (!imm_group(imm, h->len, chunk_size, &f, &n, &len) || (sees_begin && imm_split(imm)))
    return engine_violation(e, rail, ENGINE_VIOL_LENGTH, "a split write of %u bytes", h->len);
  if (f >= s->max_chunks || n > s->max_chunks - f)
    return engine_violation(e, rail, ENGINE_VIOL_CHUNK_INDEX, "chunks %u+%u outside a %zu-byte receive", f, n, s->posted_size);
  uint32_t k_last = f + n - 1;
  /* A rail that sees the write before it lands reports the key and address
   * the writer named: they must be this buffer's and this group's. (A NIC
   * placing the bytes itself checked the key against its registrations and
   * reports neither.) */
  if (sees_begin) {
    /* Key 0: this rail's NIC did not register the buffer (GPU memory on a
     * TCP rail, whose recv() would have the CPU write it). */
    if (h->len && !ce->rkey[rail])
      return engine_violation(e, rail, ENGINE_VIOL_KEY, "a write over a rail whose NIC did not register the buffer");
    if (h->rkey != ce->rkey[rail]) return engine_violation(e, rail, ENGINE_VIOL_KEY, "a write with a key the receive does not have");
    if (h->raddr != ce->addr + (uint64_t)f * chunk_size)
      return engine_violation(e, rail, ENGINE_VIOL_ADDRESS, "a write to an address chunk %u does not have", f);
  }
  /* Every group ends inside the posted size (a full chunk that is not the
   * last can pass the end of a buffer whose size is no multiple of the
   * chunk), and every chunk but the message's last is full: a group that
   * is not last is whole chunks. */
  size_t off = (size_t)f * chunk_size;
  if (len > s->posted_size - off || (!imm_last(imm) && len != (uint64_t)n * chunk_size))
    return engine_violation(e, rail, ENGINE_VIOL_LENGTH, "chunks %u+%u of %llu bytes", f, n, (unsigned long long)len);
  if (r->complete || r->landed) return engine_violation(e, rail, ENGINE_VIOL_DUPLICATE, "chunk %u again in one epoch", f);
  for (uint32_t k = f; k <= k_last; k++)
    if (seen_test(s, k)) return engine_violation(e, rail, ENGINE_VIOL_DUPLICATE, "chunk %u again in one epoch", k);
  if (s->expected && k_last >= s->expected) return engine_violation(e, rail, ENGINE_VIOL_CHUNK_INDEX, "chunk %u past the last one", k_last);
  if (imm_last(imm) && k_last + 1 < s->high) return engine_violation(e, rail, ENGINE_VIOL_CHUNK_INDEX, "a last chunk before others");
  *req = r;
  *sub_out = s;
  *first = f;
  *nchunks = n;
  *bytes = len;
  return RR_OK;
}

/* Chunks [f, f + n) of s (bytes in all, sent with immediate imm) are in place. */
static void chunks_landed(rr_engine *e, rr_recv_req *r, rr_recv_sub *s, uint32_t f, uint32_t n, uint64_t bytes,
                          uint32_t imm) {
  for (uint32_t k = f; k < f + n; k++) seen_set(s, k);
  if (f + n > s->high) s->high = f + n;
  while (s->prefix < s->max_chunks && seen_test(s, s->prefix)) s->prefix++;
  if (imm_ack_now(imm)) r->ack_now = 1;
  if (imm_last(imm)) {
    s->expected = f + n;
    s->size = (size_t)f * e->cfg.chunk_size + (size_t)bytes;
  }
  if (s->expected && s->prefix >= s->expected && ++r->subs_done == r->n) {
    r->landed = 1;
    complete_landed(e);
  }
}

/* ------------------------------------------------------------ eager writes */

/* An eager message (it left before its clear-to-send) is the first of its
 * receive, and goes to the first sub-receive with its tag: the sender
 * resolves it by the same rule when the clear-to-send arrives. */
static int sub_for_tag(const rr_recv_req *r, int tag) {
  for (int i = 0; i < r->n; i++)
    if (r->cts.e[i].tag == tag) return i;
  return -1;
}

/* The message does not fit r's sub-receive for its tag: NCCL's error (it
 * would have failed the isend had the sender known the receive), not the
 * network's. */
static rr_status eager_misfit(rr_engine *e, const rr_recv_req *r, int sub, int tag, uint32_t len) {
  return engine_fail(e, RR_ERR_INVALID, "message truncated: %u bytes for a receive of %zu bytes (receive %u, tag %d)",
                     len, r->sub[sub].posted_size, r->seq, tag);
}

/* The sender chose receive `seq` for an eager message assuming that each
 * receive from `known` on takes one message, the eager one it sent there
 * with the same tag (the sender assumes several receives at once only for
 * messages of one tag): true when every one of them is a single receive of
 * that tag (all are posted: seq is). If not, the sender learns it from a
 * clear-to-send and sends the message again under its right place; this
 * copy is dropped. */
static int assumption_holds(const rr_engine *e, uint32_t known, uint32_t seq, int tag) {
  for (uint32_t q = known; q != seq; q++) {
    const rr_recv_req *p = &engine_rcv(e)->rreq[q % RR_NET_MAX_REQUESTS];
    if (p->seq != q || p->n != 1 || p->cts.e[0].tag != tag) return 0;
  }
  return 1;
}

/* Early buffer entries: EARLY_COPIES per slot, because a copy chosen on a
 * later assumption may start arriving (on another stream or rail) while the
 * earlier copy for the same receive is still being written. */
static engine_early *early_at(rr_engine *e, uint32_t slot, int copy) { return &engine_rcv(e)->early[slot * EARLY_COPIES + copy]; }
static char *early_data(rr_engine *e, uint32_t slot, int copy) {
  return engine_rcv(e)->early_buf + ((size_t)slot * EARLY_COPIES + copy) * RR_BOUNCE_SIZE;
}
static int early_is(const rr_engine *e, const engine_early *x, uint32_t seq) {
  return x->state != EARLY_EMPTY && x->seq == seq && x->epoch == e->epoch;
}

/* An eager message held in the early buffer goes into receive r once both
 * are there (whichever came second calls this): the latest copy whose
 * assumption holds (an earlier one was chosen on a wrong assumption). */
static rr_status land_early(rr_engine *e, rr_recv_req *r) {
  uint32_t slot = r->seq % RR_NET_MAX_REQUESTS;
  int best = -1;
  for (int c = 0; c < EARLY_COPIES; c++) {
    engine_early *x = early_at(e, slot, c);
    if (!early_is(e, x, r->seq) || x->state != EARLY_HERE || !assumption_holds(e, x->known, r->seq, x->tag)) continue;
    if (best < 0 || seq_before(early_at(e, slot, best)->known, x->known)) best = c;
  }
  if (best < 0) return RR_OK;
  engine_early *x = early_at(e, slot, best);
  x->state = EARLY_EMPTY;
  engine_rcv(e)->peer_eager = 1;
  int sub = sub_for_tag(r, x->tag);
  /* No buffer with its tag: it belongs to a later receive, and the sender,
   * seeing this receive's clear-to-send, parks it and sends it again there. */
  if (sub < 0) return RR_OK;
  /* GPU memory: the CPU never writes it. The copy is dropped; the sender,
   * told by the same flag in the clear-to-send, sends it again as a write. */
  if (r->cts.e[sub].flags & ENGINE_CTS_NO_CPU) return RR_OK;
  if (x->len > r->sub[sub].posted_size) return eager_misfit(e, r, sub, x->tag, x->len);
  rr_recv_sub *s = &r->sub[sub];
  if (x->len) memcpy(s->data, early_data(e, slot, best), x->len);
  chunks_landed(e, r, s, 0, 1, x->len, imm_encode(e->epoch, slot, (uint32_t)sub, 1, 0, 0));
  return RR_OK;
}

/* Where an eager write goes: into its receive if posted (it becomes the
 * write the sender would have made with the clear-to-send, and is checked
 * as one), else into the early buffer until the receive is posted. */
static rr_status eager_begin(rr_engine *e, int rail, rr_write_hdr *h, void **dst) {
  uint32_t imm = h->imm;
  if (!write_of_this_epoch(e, rail, h)) return RR_OK; /* sink it */
  uint32_t seq = h->eager.seq, known = h->eager.known, slot = seq % RR_NET_MAX_REQUESTS;
  if (seq - known >= RR_NET_MAX_REQUESTS || imm_slot(imm) != slot || imm_sub(imm) || !imm_last(imm) ||
      imm_ack_now(imm) || imm_chunk(imm) || h->len > RR_BOUNCE_SIZE)
    return engine_violation(e, rail, ENGINE_VIOL_MALFORMED, "a malformed eager write (%u bytes)", h->len);
  int tag = h->eager.tag;
  rr_recv_req *r = &engine_rcv(e)->rreq[slot];
  if (r->in_use && r->seq == seq) {
    if (!assumption_holds(e, known, seq, tag)) return RR_OK; /* sink it: it comes again where it belongs */
    engine_rcv(e)->peer_eager = 1;
    int sub = sub_for_tag(r, tag);
    if (sub < 0) return RR_OK; /* sink it: a later receive's (land_early says why) */
    if (r->cts.e[sub].flags & ENGINE_CTS_NO_CPU) return RR_OK; /* sink it: GPU memory (land_early says why) */
    if (h->len > r->sub[sub].posted_size) return eager_misfit(e, r, sub, tag, h->len);
    *h = (rr_write_hdr){.imm = imm_encode(e->epoch, slot, (uint32_t)sub, 1, 0, 0), .len = h->len,
                        .rkey = r->cts.e[sub].rkey[rail], .raddr = r->cts.e[sub].addr, .epoch_tag = h->epoch_tag};
    return engine_recv_write_begin(e, rail, h, dst);
  }
  if (seq - engine_rcv(e)->recv_seq >= RR_NET_MAX_REQUESTS)
    return engine_violation(e, rail, ENGINE_VIOL_WINDOW, "an eager write for receive %u (the next to be posted is %u)", seq, engine_rcv(e)->recv_seq);
  /* Copies for the same receive: the same assumption twice is a repeat; an
   * earlier assumption than one already here is stale (sink it); a later
   * one supersedes what is here and takes a free entry (an earlier copy
   * may still be landing in the other). */
  int free_copy = -1;
  for (int c = 0; c < EARLY_COPIES; c++) {
    engine_early *x = early_at(e, slot, c);
    if (early_is(e, x, seq)) {
      if (seq_before(known, x->known)) return RR_OK;
      if (known == x->known) return engine_violation(e, rail, ENGINE_VIOL_DUPLICATE, "eager message %u again in one epoch", seq);
      if (x->state == EARLY_ARRIVING) continue;
    }
    if (free_copy < 0) free_copy = c;
  }
  if (free_copy < 0)
    return engine_violation(e, rail, ENGINE_VIOL_OVERFLOW, "eager message %u: more copies arriving at once than the early buffer holds", seq);
  if (!engine_rcv(e)->early_buf && !(engine_rcv(e)->early_buf = malloc((size_t)RR_NET_MAX_REQUESTS * EARLY_COPIES * RR_BOUNCE_SIZE)))
    return engine_fail(e, RR_ERR_NOMEM, "no memory to hold messages that arrive before their receive");
  *early_at(e, slot, free_copy) = (engine_early){.state = EARLY_ARRIVING, .seq = seq, .epoch = e->epoch,
                                                 .len = h->len, .known = known, .tag = tag};
  *dst = early_data(e, slot, free_copy);
  return RR_OK;
}

/* An eager write finished landing in the early buffer. */
static rr_status eager_arrived(rr_engine *e, const rr_write_hdr *h) {
  uint32_t seq = h->eager.seq, known = h->eager.known, slot = seq % RR_NET_MAX_REQUESTS;
  for (int c = 0; c < EARLY_COPIES; c++) {
    engine_early *x = early_at(e, slot, c);
    if (!early_is(e, x, seq) || x->state != EARLY_ARRIVING || x->known != known) continue;
    x->state = EARLY_HERE;
    rr_recv_req *r = &engine_rcv(e)->rreq[slot];
    return r->in_use && r->seq == seq ? land_early(e, r) : RR_OK;
  }
  return RR_OK;
}

rr_status engine_recv_write_begin(rr_engine *e, int rail, rr_write_hdr *h, void **dst) {
  rr_recv_req *r;
  rr_recv_sub *s;
  uint32_t f, n;
  uint64_t bytes;
  *dst = NULL;
  if (h->flags & RR_WRITE_EAGER) return eager_begin(e, rail, h, dst);
  if (h->flags & RR_WRITE_PROBE) return engine_gray_probe_begin(e, rail, h); /* read and forgotten */
  rr_status st = check_write(e, rail, h, &r, &s, &f, &n, &bytes);
  if (st != RR_OK || !s) return st;
  *dst = s->data + (size_t)f * e->cfg.chunk_size;
  return RR_OK;
}

rr_status engine_recv_write(rr_engine *e, int rail, const rr_write_hdr *h) {
  rr_recv_req *r;
  rr_recv_sub *s;
  uint32_t f, n;
  uint64_t bytes;
  if (h->flags & RR_WRITE_EAGER) return eager_arrived(e, h);
  rr_status st = check_write(e, rail, h, &r, &s, &f, &n, &bytes);
  if (st != RR_OK || !s) return st;
  /* A message the sender did not copy (a large one) needs clear-to-sends:
   * hold none back for it. */
  if (imm_ack_now(h->imm)) engine_rcv(e)->peer_eager = 0;
  chunks_landed(e, r, s, f, n, bytes, h->imm);
  engine_inbound_on_arrival(e, rail, bytes, rr_now_ns()); /* the rail is bringing what we invited */
  if (imm_last(h->imm)) rr_tel_message(e->rails[rail].ep->tel_rx); /* the last chunk landed here */
  return RR_OK;
}

void engine_recv_check_landed(rr_engine *e) { complete_landed(e); }

rr_status engine_recv_on_drain(rr_engine *e, int rail, uint32_t epoch) {
  if (epoch == e->epoch && e->rails[rail].need_drain) {
    e->rails[rail].need_drain = 0;
    complete_landed(e);
  }
  return RR_OK;
}

/* ------------------------------------------------------------- outbox */

/* With no rail up, the notice that rails are down still has to reach the
 * sender, which alone reopens rails: a rail this end gave up on may still
 * carry it (the sender may not have seen it fail at all). */
static void notice_on_down_rail(rr_engine *e) {
  /* Each repeat tries the next rail: the one that took the last may be a
   * black hole (silent, yet its endpoint takes everything), while another
   * we gave up on may be one the sender still uses, idle and unaware. */
  for (int k = 1; k <= e->nrails; k++) {
    int i = (engine_rcv(e)->notice_rail + k) % e->nrails;
    engine_rail *rl = &e->rails[i];
    if (rl->state == RR_RAIL_DEAD) continue;
    engine_msg f = engine_notice(e, ENGINE_CTRL_FAIL, e->epoch, engine_down_mask(e));
    if (engine_post_msg_on(rl->ep, &f) == RR_OK) {
      engine_rcv(e)->notice_rail = i;
      e->fail_notice_pending = 0;
      return;
    }
  }
}

/* A rollback's announcement: FAIL (the new epoch and the rails down), one
 * RESUME_SLOT per receive posted before the rollback began and not complete,
 * then RESUME_END naming exactly those slots, so the sender knows when it has
 * heard all of them whatever rails they travelled on. */
static void cts_unhold(rr_engine *e, rr_recv_req *r) {
  if (!r->cts_held) return;
  r->cts_held = 0;
  engine_rcv(e)->cts_held--;
}

/* Held clear-to-sends: moot once the eager message is here, sent when it
 * has not come in time (with the acks, so the sender also learns the
 * receives it assumed took one message, and may send what needs this one). */
static rr_status release_held_cts(rr_engine *e) {
  uint64_t now = rr_now_ns();
  for (int i = 0; i < RR_NET_MAX_REQUESTS && engine_rcv(e)->cts_held; i++) {
    rr_recv_req *r = &engine_rcv(e)->rreq[i];
    if (!r->cts_held) continue;
    if (r->landed || r->complete || r->sub[0].high) {
      cts_unhold(e, r);
      continue;
    }
    if (now < r->cts_due_ns) continue;
    rr_status st = engine_recv_acks_flush(e);
    if (st != RR_OK) return st;
    engine_msg c = {.type = ENGINE_CTRL_CTS, .u.cts = r->cts};
    if (engine_post_msg(e, &c) != RR_OK) return RR_OK;
    cts_unhold(e, r);
  }
  return RR_OK;
}

rr_status engine_recv_outbox(rr_engine *e) {
  if (engine_control_rail(e) < 0) {
    if (e->fail_notice_pending) notice_on_down_rail(e);
    return RR_OK;
  }
  if (engine_rcv(e)->cts_held) {
    rr_status st = release_held_cts(e);
    if (st != RR_OK) return st;
  }
  /* Acks first: whatever else leaves now carries them along. */
  if (engine_rcv(e)->ack_pending && (engine_recv_acks_due(e) || e->fail_notice_pending || engine_rcv(e)->recv_phase != RR_RECV_STREAMING)) {
    rr_status st = engine_recv_acks_flush(e);
    if (st != RR_OK) return st;
  }
  if (e->fail_notice_pending) {
    engine_msg f = engine_notice(e, ENGINE_CTRL_FAIL, e->epoch, engine_down_mask(e));
    if (engine_post_msg(e, &f) != RR_OK) return RR_OK;
    e->fail_notice_pending = 0;
  }
  while (engine_rcv(e)->recv_phase == RR_RECV_ANNOUNCING) {
    rr_recv_req *r = &engine_rcv(e)->rreq[engine_rcv(e)->announce_slot];
    if (r->in_use && !r->complete && seq_before(r->seq, engine_rcv(e)->resume_recv_seq)) {
      engine_msg m;
      memset(&m, 0, sizeof m);
      m.type = ENGINE_CTRL_RESUME_SLOT;
      m.u.slot.epoch = e->epoch;
      for (int i = 0; i < r->n; i++) m.u.slot.prefix[i] = r->sub[i].prefix;
      m.u.slot.cts = r->cts;
      if (engine_post_msg(e, &m) != RR_OK) return RR_OK;
      engine_rcv(e)->resume_mask |= 1u << engine_rcv(e)->announce_slot;
    }
    if (++engine_rcv(e)->announce_slot == RR_NET_MAX_REQUESTS) engine_recv_set_phase(e, RR_RECV_END_OWED, RR_RECV_SLOTS_NAMED);
  }
  if (engine_rcv(e)->recv_phase == RR_RECV_END_OWED) {
    engine_msg m = {.type = ENGINE_CTRL_RESUME_END,
                    .u.end = {.epoch = e->epoch, .recv_seq = engine_rcv(e)->resume_recv_seq, .slot_mask = engine_rcv(e)->resume_mask}};
    if (engine_post_msg(e, &m) != RR_OK) return RR_OK;
    engine_recv_set_phase(e, RR_RECV_STREAMING, RR_RECV_END_POSTED);
  }
  return RR_OK;
}

/* --------------------------------------------------------------- rollback */

/* A rail died under us: move to a new epoch, cut off what is in flight, and
 * tell the sender what we hold so it replays the rest on the rails still up.
 * Rails whose invalidation is cheap (TCP: an incoming write in progress is sunk)
 * are invalidated; the others (verbs: an invalidation resets the QP) must deliver the
 * sender's drain barrier of the new epoch before any receive completes. The
 * failed rail itself was invalidated by the state change. */
void engine_recv_rollback(rr_engine *e, rr_recv_cause cause) {
  e->epoch++;
  e->stats.rollbacks++;
  rr_counter_inc(RR_CTR_ROLLBACKS);
  for (int i = 0; i < e->nrails; i++) {
    engine_rail *rl = &e->rails[i];
    rl->need_drain = 0;
    if (rl->state == RR_RAIL_DEAD) continue;
    if (engine_rail_invalidate_cheap(e, i)) rl->ep->ops->invalidate(rl->ep);
    else if (rl->state == RR_RAIL_ACTIVE || rl->state == RR_RAIL_RECOVERING) rl->need_drain = 1;
    else if (!rl->invalidated) {
      /* A fresh endpoint we still hold DOWN: the sender may already have
       * seen it alive and posted on it. It carries nothing for us yet, so
       * it is cut off rather than waited for (the sender reopens it). */
      rl->ep->ops->invalidate(rl->ep);
      rl->invalidated = 1;
      rl->fresh = 0; /* it comes back only as another fresh endpoint */
    }
  }
  for (int slot = 0; slot < RR_NET_MAX_REQUESTS; slot++) {
    rr_recv_req *r = &engine_rcv(e)->rreq[slot];
    if (!r->in_use || r->complete) continue;
    r->subs_done = 0;
    r->landed = 0;
    for (int i = 0; i < r->n; i++) {
      rr_recv_sub *s = &r->sub[i];
      /* Chunks past the prefix are forgotten and come again. */
      uint32_t words = (s->max_chunks + 63) / 64;
      for (uint32_t w = s->prefix / 64; w < words; w++) {
        uint32_t lo = w * 64;
        s->seen[w] &= s->prefix > lo ? (1ull << (s->prefix - lo)) - 1 : 0;
      }
      s->high = s->prefix;
      if (s->expected && s->prefix >= s->expected) r->subs_done++;
      else if (s->expected) s->expected = 0; /* the last chunk will come again */
    }
    if (r->subs_done == r->n) r->landed = 1;
  }
  /* Eager messages ahead of their receives are forgotten: the sender
   * replays every send of a receive posted after the rollback began. */
  for (int slot = 0; slot < RR_NET_MAX_REQUESTS; slot++) {
    for (int c = 0; c < EARLY_COPIES; c++) early_at(e, (uint32_t)slot, c)->state = EARLY_EMPTY;
    /* Its RESUME_SLOT carries the clear-to-send. */
    cts_unhold(e, &engine_rcv(e)->rreq[slot]);
  }
  /* Announce the new epoch (from the FAIL), naming the receives posted until now. */
  engine_recv_set_phase(e, RR_RECV_ANNOUNCING, cause);
  /* Receives re-derived as landed may owe no drain at all. */
  complete_landed(e);
}

/* The sender's claim that every chunk of one sub-receive is placed in our
 * memory (docs/protocol.md, invariant 8): the writes completed at its end
 * on rails whose completion means placement, but their arrivals may never
 * reach us (lost with a failed device, not polled when we rolled back, or
 * dropped as an older epoch's after we did). The claim writes nothing: it
 * can only complete a receive of a size the posted buffer holds, with the
 * bytes that are in it, which a hostile peer could have written anyway. A
 * claim contradicting what landed, or naming a receive not posted, is a
 * violation; one for a receive already complete or reaped is a repeat. */
static rr_status on_placed(rr_engine *e, int rail, const engine_msg *m) {
  uint32_t seq = m->u.placed.seq;
  uint64_t size = m->u.placed.size;
  if (!seq_before(seq, engine_rcv(e)->recv_seq)) return engine_violation(e, rail, ENGINE_VIOL_WINDOW, "a placement claim for receive %u, not posted", seq);
  rr_recv_req *r = &engine_rcv(e)->rreq[seq % RR_NET_MAX_REQUESTS];
  if (!r->in_use || r->seq != seq || r->complete) return RR_OK;
  if (m->u.placed.sub >= r->n) return engine_violation(e, rail, ENGINE_VIOL_CLAIM, "a placement claim for no sub-receive");
  rr_recv_sub *s = &r->sub[m->u.placed.sub];
  size_t chunk_size = e->cfg.chunk_size;
  if (size > s->posted_size) return engine_violation(e, rail, ENGINE_VIOL_CLAIM, "a placement claim of %llu bytes for a %zu-byte receive",
                                                     (unsigned long long)size, s->posted_size);
  uint32_t n = size ? (uint32_t)((size + chunk_size - 1) / chunk_size) : 1;
  if (n > s->max_chunks || s->high > n || (s->expected && (s->expected != n || s->size != size)))
    return engine_violation(e, rail, ENGINE_VIOL_CLAIM, "a placement claim that contradicts the chunks that landed");
  if (s->expected && s->prefix >= s->expected) return RR_OK; /* it knew already */
  for (uint32_t k = s->prefix; k < n; k++) seen_set(s, k);
  s->prefix = s->high = s->expected = n;
  s->size = (size_t)size;
  e->stats.claims_taken++;
  rr_counter_inc(RR_CTR_PLACED_CLAIMS);
  if (++r->subs_done == r->n) {
    r->landed = 1;
    complete_landed(e);
  }
  return RR_OK;
}

rr_status engine_recv_on_msg(rr_engine *e, int rail, const engine_msg *m) {
  if (m->type == ENGINE_CTRL_PLACED) return on_placed(e, rail, m);
  uint32_t failed = m->u.fail.down_mask & ~m->u.fail.degraded_mask;
  if (m->type == ENGINE_CTRL_DOWN) {
    /* Rails the sender gave up on while they carried no traffic: we must not
     * keep using them (for our control messages, above all). */
    engine_notice_where(e, m);
    for (int i = 0; i < e->nrails; i++)
      if ((failed & (1u << i)) && e->rails[i].state != RR_RAIL_DOWN && e->rails[i].state != RR_RAIL_DEAD)
        engine_rail_set_state_seen(e, i, RR_RAIL_DOWN, "the sender sees it down", ENGINE_SEEN_BY_PEER);
    engine_gray_on_notice(e, m);
    return RR_OK;
  }
  if (m->type != ENGINE_CTRL_FAIL)
    return engine_violation(e, rail, ENGINE_VIOL_DIRECTION, "control message %u sent to a receiver", m->type);
  uint32_t before = e->epoch, x = m->u.fail.epoch;
  if (seq_before(before, x)) return engine_violation(e, rail, ENGINE_VIOL_EPOCH, "a failure notice from a future epoch");
  engine_notice_where(e, m);
  for (int i = 0; i < e->nrails; i++)
    if ((failed & (1u << i)) && engine_rail_usable(e, i))
      engine_rail_set_state_seen(e, i, RR_RAIL_DOWN, "the sender sees it down", ENGINE_SEEN_BY_PEER);
  engine_gray_on_notice(e, m);
  if (e->epoch != before) return RR_OK; /* marking a rail down rolled back already */
  if (x == e->epoch) {
    /* The sender lost something in our current epoch: a new rollback. */
    RR_INFO(RR_SUB_NET, "recv from %s: the sender asks for a rollback (epoch %u)", e->cfg.peer, x);
    engine_recv_rollback(e, RR_RECV_SENDER_ASKED);
  } else if (engine_rcv(e)->recv_phase == RR_RECV_STREAMING && !e->fail_notice_pending) {
    /* The sender still waits to leave an older epoch: our announcement went
     * down with a rail, or crossed its request. Announce the same epoch
     * again: a new one would only restart the race. */
    engine_recv_set_phase(e, RR_RECV_ANNOUNCING, RR_RECV_SENDER_BEHIND);
  }
  return RR_OK;
}

/* ---------------------------------------------------------------- irecv */

/* Room to mark every chunk a posted size allows (kept across receives). */
static rr_status sub_prepare(rr_recv_sub *s, size_t size, size_t chunk_size) {
  size_t chunks = size ? (size + chunk_size - 1) / chunk_size : 1;
  if (chunks > IMM_MAX_CHUNKS) chunks = IMM_MAX_CHUNKS; /* the sender cannot name more */
  uint32_t words = (uint32_t)((chunks + 63) / 64);
  if (words > s->seen_words) {
    uint64_t *n = realloc(s->seen, words * sizeof *n);
    if (!n) return RR_ERR_NOMEM;
    s->seen = n;
    s->seen_words = words;
  }
  memset(s->seen, 0, words * sizeof *s->seen);
  s->max_chunks = (uint32_t)chunks;
  return RR_OK;
}

static rr_status irecv_locked(rr_engine *e, int n, void **data, const size_t *sizes,
                              const int *tags, rr_mr **mrs, void **phandles, void **request) {
  /* After the sender closed in order, a receive is still posted: what the
   * sender delivered before its BYE may be waiting in the early buffer.
   * Nothing more will come, so no clear-to-send goes out; test() reports a
   * receive the early buffer cannot fill. */
  int ended = e->failed == RR_ERR_PEER && e->peer_bye;
  if (e->failed && !ended) return e->failed;
  if (n < 1 || n > RR_NET_MAX_RECVS) {
    RR_WARN("irecv: %d grouped receives (1..%d supported)", n, RR_NET_MAX_RECVS);
    return RR_ERR_INVALID;
  }
  rr_recv_req *r = &engine_rcv(e)->rreq[engine_rcv(e)->recv_seq % RR_NET_MAX_REQUESTS];
  if (r->in_use) return RR_OK; /* every slot busy: NCCL retries */
  engine_msg c;
  memset(&c, 0, sizeof c);
  c.type = ENGINE_CTRL_CTS;
  c.u.cts.n = (uint8_t)n;
  c.u.cts.nrails = (uint8_t)e->nrails;
  c.u.cts.seq = engine_rcv(e)->recv_seq;
  for (int i = 0; i < n; i++) {
    const rr_mr *m = mrs ? mrs[i] : NULL;
    if (sizes[i] > 0 && !m) {
      RR_WARN("irecv: buffer %d of %zu bytes has no registration", i, sizes[i]);
      return RR_ERR_INVALID;
    }
    if (m && sizes[i] > 0 && ((uintptr_t)data[i] < (uintptr_t)m->base ||
                              (uintptr_t)data[i] - (uintptr_t)m->base > m->size ||
                              sizes[i] > m->size - ((uintptr_t)data[i] - (uintptr_t)m->base))) {
      RR_WARN("irecv: buffer %d (%zu bytes) lies outside its registration", i, sizes[i]);
      return RR_ERR_INVALID;
    }
    engine_cts_entry *ce = &c.u.cts.e[i];
    *ce = (engine_cts_entry){.tag = tags[i], .flags = rr_mr_is_gpu(m) ? ENGINE_CTS_NO_CPU : 0,
                             .addr = (uint64_t)(uintptr_t)data[i], .size = sizes[i]};
    /* The buffer's key on every rail's NIC, so any rail can carry any chunk
     * and a failover exchanges nothing. */
    for (int k = 0; k < e->nrails && m; k++) {
      const rr_rail_mr *reg = m->reg[e->rails[k].ep->dev->index];
      ce->rkey[k] = reg ? reg->rkey : 0;
    }
  }
  for (int i = 0; i < n; i++) {
    rr_status st = sub_prepare(&r->sub[i], sizes[i], e->cfg.chunk_size);
    if (st != RR_OK) return st;
  }
  /* The clear-to-send leaves with the next progress (NCCL tests a posted
   * receive right away), so a receive posted just before a send does not
   * put an extra system call in front of it; waiting acks go with it.
   * While the sender sends eagerly, a receive of one message holds it back
   * (CTS_HOLD_NS): the eager message usually comes first and makes it moot. */
  int hold = engine_rcv(e)->peer_eager && n == 1 && !ended && !(c.u.cts.e[0].flags & ENGINE_CTS_NO_CPU);
  if (!hold && !ended) {
    rr_status st = engine_rcv(e)->ack_pending ? engine_recv_acks_flush(e) : RR_OK;
    if (st != RR_OK) return st;
    st = engine_post_msg(e, &c);
    if (st == RR_AGAIN) return engine_progress(e); /* no room now: NCCL retries */
    if (st != RR_OK) return st;
    engine_rcv(e)->ctrl_queued = 1;
  }
  rr_recv_sub keep[RR_NET_MAX_RECVS];
  memcpy(keep, r->sub, sizeof keep);
  memset(r, 0, sizeof *r);
  r->kind = RR_REQ_RECV;
  r->engine = e;
  r->seq = engine_rcv(e)->recv_seq;
  r->n = (uint8_t)n;
  r->cts = c.u.cts;
  for (int i = 0; i < RR_NET_MAX_RECVS; i++) {
    r->sub[i] = (rr_recv_sub){.seen = keep[i].seen, .seen_words = keep[i].seen_words,
                              .max_chunks = keep[i].max_chunks};
    if (i >= n) continue;
    r->sub[i].data = data[i];
    r->sub[i].posted_size = sizes[i];
    engine_prof_start(e, &r->prof_event[i], phandles ? phandles[i] : NULL, ENGINE_PROF_RECV, r->seq,
                      sizes[i]);
  }
  r->in_use = 1;
  if (hold) {
    r->cts_held = 1;
    r->cts_due_ns = rr_now_ns() + CTS_HOLD_NS;
    engine_rcv(e)->cts_held++;
  }
  engine_rcv(e)->recv_seq++;
  *request = r;
  return land_early(e, r); /* an eager message may have come first */
}

rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **phandles, void **request) {
  *request = NULL;
  if (!engine_is_receiver(e)) return RR_ERR_INVALID; /* no receive requests here */
  pthread_mutex_lock(&e->lock);
  atomic_store_explicit(&e->idle_hint, 0, memory_order_relaxed); /* rr_engine_background */
  rr_status st = irecv_locked(e, n, data, sizes, tags, mrs, phandles, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status engine_recv_test(rr_recv_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  /* A clear-to-send queued by irecv leaves with the next progress: make sure
   * there is one even when the receive tested is already complete, or the
   * sender starves while NCCL reaps completed receives. */
  int idle = r->complete && !engine_rcv(e)->urgent && !engine_rcv(e)->ctrl_queued && !(engine_rcv(e)->ack_due_ns && rr_now_ns() >= engine_rcv(e)->ack_due_ns);
  rr_status st = idle ? e->failed : engine_progress(e);
  /* A sender waiting for an ack to free NCCL's buffer must not wait for our
   * next call: NCCL may have nothing more to ask of this connection. */
  if (st == RR_OK && engine_rcv(e)->urgent) {
    engine_rcv(e)->urgent = 0;
    st = engine_progress(e);
  }
  /* A receive that completed stays complete even if the connection failed after. */
  if (st != RR_OK && !r->complete) {
    if (e->peer_bye && st == RR_ERR_PEER) engine_report_unanswered(e, "receive", r->seq);
    return st;
  }
  *done = r->complete;
  if (r->complete) {
    for (int i = 0; i < r->n; i++) {
      if (sizes) sizes[i] = r->sub[i].size;
      engine_prof_stop(e, &r->prof_event[i]);
    }
    cts_unhold(e, r);
    r->in_use = 0;
  }
  return RR_OK;
}
