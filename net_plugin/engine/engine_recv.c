/* Receiver side of the engine: post clear-to-sends, count chunks as they
 * land, acknowledge complete receives, and drive rollbacks. */
#include "engine.h"
#include "rr_log.h"

#include <string.h>

/* Acks that could not be posted wait here (a full control queue, or no rail
 * for a moment). An ack names a sequence number, so it stays true even if
 * NCCL reposts the slot before it leaves. */
static void ack_enqueue(rr_engine *e, uint32_t seq);

/* A write of another epoch is fenced off. The 4-bit epoch in the immediate
 * is what every rail carries; the TCP rail also carries the low 16 bits of
 * the epoch in its fence tag, because a frame can wait in the kernel buffer
 * of a failed rail for as long as the rail is down, through any number of
 * failovers. */
int engine_recv_write_begin(rr_engine *e, uint32_t imm, uint16_t fence) {
  return imm_epoch(imm) == (e->epoch & 0xf) && fence == (uint16_t)e->epoch;
}

static int write_current(const rr_engine *e, uint32_t imm) {
  return imm_epoch(imm) == (e->epoch & 0xf);
}

static void sub_land(rr_recv_sub *s, uint32_t k) {
  s->received++;
  uint32_t d = k - s->prefix;
  if (d < 64) s->window |= 1ull << d;
  while (s->window & 1) {
    s->window >>= 1;
    s->prefix++;
  }
}

rr_status engine_recv_write(rr_engine *e, uint32_t imm, uint32_t len) {
  if (e->cfg.role != RR_ENGINE_RECV)
    return engine_fail(e, RR_ERR_PROTOCOL, "data arrived on a send connection");
  /* Accepted at its start under this epoch (a fence in between would have
   * cut it off); a rail without a begin check is filtered here. */
  if (!write_current(e, imm)) return RR_OK;
  rr_recv_req *r = &e->rreq[imm_slot(imm)];
  uint32_t sub = imm_sub(imm), k = imm_chunk(imm);
  if (!r->in_use || sub >= r->n)
    return engine_fail(e, RR_ERR_PROTOCOL, "data for no posted receive (slot %u)", imm_slot(imm));
  rr_recv_sub *s = &r->sub[sub];
  /* Below the prefix or already in the window: a replayed chunk that is
   * already here. Same bytes, same place: count it once. */
  if (k < s->prefix || (k - s->prefix < 64 && (s->window >> (k - s->prefix)) & 1)) return RR_OK;
  if (r->complete) return engine_fail(e, RR_ERR_PROTOCOL, "data for a complete receive");
  sub_land(s, k);
  if (imm_ack_now(imm)) r->ack_now = 1;
  if (imm_last(imm)) {
    s->expected = k + 1;
    s->size = (size_t)k * e->cfg.chunk_size + len;
    if (s->size > s->posted_size)
      return engine_fail(e, RR_ERR_PROTOCOL, "a %zu-byte message for a %zu-byte receive", s->size,
                         s->posted_size);
  }
  if (s->expected && s->received > s->expected)
    return engine_fail(e, RR_ERR_PROTOCOL, "more chunks than the message has");
  if (s->expected && s->received == s->expected && ++r->subs_done == r->n) {
    r->complete = 1;
    ack_enqueue(e, r->seq);
    /* The sender holds NCCL's buffer until this ack. While another receive
     * is still outstanding NCCL keeps testing this connection, so the ack
     * can wait for that next call and leave with the clear-to-send NCCL
     * posts meanwhile (one system call instead of two); otherwise it must
     * leave before test() returns. */
    if (r->ack_now && !engine_outstanding(e)) e->urgent = 1;
    else e->ctrl_queued = 1;
  }
  return RR_OK;
}

/* ------------------------------------------------------------- outbox */

static void ack_enqueue(rr_engine *e, uint32_t seq) {
  engine_ack a = {.type = ENGINE_CTRL_ACK, .seq = seq};
  if (e->ack_pending == 0 && engine_post_ctrl(e, &a, sizeof a) == RR_OK) return;
  /* Keep order: once one waits, the rest queue behind it. */
  e->ack_queue[(e->ack_head + e->ack_pending) % RR_NET_MAX_REQUESTS] = seq;
  e->ack_pending++;
}

rr_status engine_recv_outbox(rr_engine *e) {
  if (engine_control_rail(e) < 0) return RR_OK;
  if (e->fail_notice_pending) {
    engine_fail_msg f = {.type = ENGINE_CTRL_FAIL, .epoch = e->epoch, .down_mask = engine_down_mask(e)};
    if (engine_post_ctrl(e, &f, sizeof f) != RR_OK) return RR_OK;
    e->fail_notice_pending = 0;
  }
  while (e->resume_cursor >= 0 && e->resume_cursor < RR_NET_MAX_REQUESTS) {
    rr_recv_req *r = &e->rreq[e->resume_cursor];
    if (r->in_use && !r->complete) {
      engine_resume_slot m;
      memset(&m, 0, sizeof m);
      m.type = ENGINE_CTRL_RESUME_SLOT;
      m.epoch = e->epoch;
      for (int i = 0; i < r->n; i++) m.prefix[i] = r->sub[i].prefix;
      m.cts = r->cts;
      uint32_t len = (uint32_t)(sizeof m - sizeof m.cts) + engine_cts_len(r->n);
      if (engine_post_ctrl(e, &m, len) != RR_OK) return RR_OK;
    }
    e->resume_cursor++;
  }
  if (e->resume_cursor == RR_NET_MAX_REQUESTS) {
    engine_resume_end m = {.type = ENGINE_CTRL_RESUME_END, .epoch = e->epoch,
                           .recv_seq = e->resume_recv_seq};
    if (engine_post_ctrl(e, &m, sizeof m) != RR_OK) return RR_OK;
    e->resume_cursor = -1;
  }
  while (e->ack_pending) {
    engine_ack a = {.type = ENGINE_CTRL_ACK, .seq = e->ack_queue[e->ack_head]};
    if (engine_post_ctrl(e, &a, sizeof a) != RR_OK) return RR_OK;
    e->ack_head = (e->ack_head + 1) % RR_NET_MAX_REQUESTS;
    e->ack_pending--;
  }
  return RR_OK;
}

/* --------------------------------------------------------------- rollback */

/* A rail died under us: fence every rail, move to a new epoch, and tell the
 * sender what we hold so it replays the rest on the rails still up. */
void engine_recv_rollback(rr_engine *e) {
  e->epoch++;
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].state != RR_RAIL_DEAD) e->rails[i].ep->ops->fence(e->rails[i].ep);
  for (int slot = 0; slot < RR_NET_MAX_REQUESTS; slot++) {
    rr_recv_req *r = &e->rreq[slot];
    if (!r->in_use || r->complete) continue;
    r->subs_done = 0;
    for (int i = 0; i < r->n; i++) {
      rr_recv_sub *s = &r->sub[i];
      /* Out-of-order chunks past the prefix are forgotten and come again. */
      s->received = s->prefix;
      s->window = 0;
      if (s->expected && s->received == s->expected) r->subs_done++;
    }
  }
  e->fail_notice_pending = 1;
  e->resume_cursor = 0;
  e->resume_recv_seq = e->recv_seq;
  e->urgent = 1;
}

rr_status engine_recv_on_ctrl(rr_engine *e, const void *msg, uint32_t len) {
  uint8_t type = *(const uint8_t *)msg;
  if (type == ENGINE_CTRL_FAIL && len == sizeof(engine_fail_msg)) {
    engine_fail_msg f;
    memcpy(&f, msg, len);
    uint32_t before = e->epoch;
    for (int i = 0; i < e->nrails; i++)
      if ((f.down_mask & (1u << i)) && engine_rail_usable(e, i))
        engine_rail_set_state(e, i, RR_RAIL_DOWN, "the sender sees it down");
    /* The sender lost something in our current epoch and waits for a
     * rollback. A sender still in an older epoch with our last rollback
     * announced in full missed the announcement (it left on a rail that was
     * replaced or failed before delivering it): announce a new one. */
    int behind = (int32_t)(f.epoch - e->epoch) < 0 && e->resume_cursor < 0 && !e->fail_notice_pending;
    if (e->epoch == before && (f.epoch == e->epoch || behind)) {
      RR_INFO(RR_SUB_NET, "recv from %s: the sender asks for a rollback (its epoch %u, ours %u)",
              e->cfg.peer, f.epoch, e->epoch);
      engine_recv_rollback(e);
    }
    return RR_OK;
  }
  return engine_fail(e, RR_ERR_PROTOCOL, "unexpected control message %u (%u bytes)", type, len);
}

/* ---------------------------------------------------------------- irecv */

static rr_status irecv_locked(rr_engine *e, int n, void **data, const size_t *sizes,
                              const int *tags, rr_mr **mrs, void **phandles, void **request) {
  if (e->failed) return e->failed;
  if (n < 1 || n > RR_NET_MAX_RECVS) {
    RR_WARN("irecv: %d grouped receives (1..%d supported)", n, RR_NET_MAX_RECVS);
    return RR_ERR_INVALID;
  }
  rr_recv_req *r = &e->rreq[e->recv_seq % RR_NET_MAX_REQUESTS];
  if (r->in_use) return RR_OK; /* every slot busy: NCCL retries */
  engine_cts c;
  memset(&c, 0, sizeof c);
  c.type = ENGINE_CTRL_CTS;
  c.n = (uint8_t)n;
  c.seq = e->recv_seq;
  for (int i = 0; i < n; i++) {
    const rr_rail_mr *m = mrs && mrs[i] ? mrs[i]->rail_mr : NULL;
    if (sizes[i] > 0 && !m) {
      RR_WARN("irecv: buffer %d of %zu bytes has no registration", i, sizes[i]);
      return RR_ERR_INVALID;
    }
    c.e[i] = (engine_cts_entry){.tag = tags[i], .rkey = m ? m->rkey : 0,
                                .addr = (uint64_t)(uintptr_t)data[i], .size = sizes[i]};
  }
  /* The clear-to-send leaves with the next progress (NCCL tests a posted
   * receive right away), so a receive posted just before a send does not
   * put an extra system call in front of it. */
  rr_status st = engine_post_ctrl(e, &c, engine_cts_len(n));
  if (st == RR_AGAIN) return engine_progress(e); /* no room now: NCCL retries */
  if (st != RR_OK) return st;
  e->ctrl_queued = 1;
  memset(r, 0, sizeof *r);
  r->kind = RR_REQ_RECV;
  r->engine = e;
  r->seq = e->recv_seq;
  r->n = (uint8_t)n;
  r->cts = c;
  for (int i = 0; i < n; i++) {
    r->sub[i] = (rr_recv_sub){.data = data[i], .posted_size = sizes[i]};
    engine_prof_start(e, &r->prof_event[i], phandles ? phandles[i] : NULL, 1, sizes[i]);
  }
  r->in_use = 1;
  e->recv_seq++;
  *request = r;
  return RR_OK;
}

rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **phandles, void **request) {
  *request = NULL;
  pthread_mutex_lock(&e->lock);
  rr_status st = irecv_locked(e, n, data, sizes, tags, mrs, phandles, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status engine_recv_test(rr_recv_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  /* A clear-to-send queued by irecv leaves with the next progress: make sure
   * there is one even when the receive tested is already complete, or the
   * sender starves while NCCL reaps completed receives. */
  rr_status st = r->complete && !e->urgent && !e->ctrl_queued ? e->failed : engine_progress(e);
  /* A sender waiting for an ack to free NCCL's buffer must not wait for our
   * next call: NCCL may have nothing more to ask of this connection. */
  if (st == RR_OK && e->urgent) {
    e->urgent = 0;
    st = engine_progress(e);
  }
  /* A receive that completed stays complete even if the connection failed after. */
  if (st != RR_OK && !r->complete) return st;
  *done = r->complete;
  if (r->complete) {
    for (int i = 0; i < r->n; i++) {
      if (sizes) sizes[i] = r->sub[i].size;
      engine_prof_stop(e, &r->prof_event[i]);
    }
    r->in_use = 0;
  }
  return RR_OK;
}
