/* Sender side of the engine: match isends to clear-to-sends, cut messages
 * into chunks, place chunks on rails, and follow the receiver's rollbacks. */
#include "engine.h"
#include "rr_clock.h"
#include "rr_health.h"
#include "rr_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* wr_id = request index | epoch << 16: completions of an older epoch's
 * writes are recognised and ignored after a rollback. */
static uint64_t wr_id_make(uint32_t idx, uint32_t epoch) { return idx | (uint64_t)epoch << 16; }

/* Sequence numbers wrap: compare them the way TCP does. */
static int seq_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

static void req_release(rr_engine *e, rr_send_req *r) {
  if (r->bounce >= 0) e->bounce_free[e->nbounce_free++] = r->bounce;
  r->bounce = -1;
  r->in_use = 0;
}

/* Retire acked sends from the head of the posting-order FIFO; a request
 * leaves the pool once retired and reported to NCCL. */
static void fifo_retire(rr_engine *e) {
  while (e->fifo_head != e->fifo_tail) {
    rr_send_req *r = &e->sreq[e->fifo[e->fifo_head % RR_SEND_POOL]];
    if (!r->acked) break;
    e->fifo_head++;
    if (seq_before(e->fifo_post, e->fifo_head)) e->fifo_post = e->fifo_head;
    if (r->user_done) req_release(e, r);
  }
}

static int req_retired(const rr_engine *e, const rr_send_req *r) {
  for (uint32_t i = e->fifo_head; i != e->fifo_tail; i++)
    if (&e->sreq[e->fifo[i % RR_SEND_POOL]] == r) return 0;
  return 1;
}

/* Which rail carries the next chunk of r; -1 when none can take it now. */
static int pick_rail(rr_engine *e, rr_send_req *r) {
  if (e->cfg.failover_mode == RR_FAILOVER_CHAIN) {
    /* A message stays on one rail (fail-back happens at message boundaries). */
    if (r->rail >= 0 && engine_rail_usable(e, r->rail)) return r->rail;
    r->rail = (int8_t)engine_control_rail(e);
    return r->rail;
  }
  /* Balance: weighted fair placement. Each chunk goes to the usable rail
   * that has been given the least per unit of bandwidth, so traffic splits
   * in proportion to bandwidth over the rails that are up; a rail whose own
   * queue is backed up (it drains slower than its share) is skipped. */
  int best = -1;
  for (int i = 0; i < e->nrails; i++) {
    if (!engine_rail_usable(e, i)) continue;
    if (e->rails[i].ep->ops->backlog(e->rails[i].ep) > 2 * e->cfg.chunk_size) continue;
    if (best < 0 || e->rails[i].vtime < e->rails[best].vtime) best = i;
  }
  return best;
}

rr_status engine_send_post(rr_engine *e, uint64_t now) {
  if (e->fail_notice_pending) {
    engine_fail_msg msg = {.type = ENGINE_CTRL_FAIL, .epoch = e->epoch, .down_mask = engine_down_mask(e)};
    if (engine_post_ctrl(e, &msg, sizeof msg) == RR_OK) e->fail_notice_pending = 0;
  }
  if (e->resume_wait) return RR_OK; /* the receiver has yet to say what it holds */
  while (e->fifo_post != e->fifo_tail) {
    uint16_t idx = e->fifo[e->fifo_post % RR_SEND_POOL];
    rr_send_req *r = &e->sreq[idx];
    while (!r->acked && r->posted < r->nchunks) {
      int ri = pick_rail(e, r);
      if (ri < 0) return RR_OK;
      uint32_t k = r->posted;
      size_t off = (size_t)k * e->cfg.chunk_size;
      size_t len = r->size - off < e->cfg.chunk_size ? r->size - off : e->cfg.chunk_size;
      if (!now) now = rr_now_ns();
      rr_write_wr wr = {
          .wr_id = wr_id_make(idx, e->epoch),
          .local = r->data + off,
          .len = len,
          .local_mr = r->mr,
          .remote_addr = r->raddr + off,
          .rkey = r->rkey,
          .imm = imm_encode(e->epoch, r->seq % RR_NET_MAX_REQUESTS, r->sub, k + 1 == r->nchunks,
                            r->bounce < 0, k),
          .fence = (uint16_t)e->epoch,
          .post_ns = now,
      };
      rr_rail_ep *ep = e->rails[ri].ep;
      rr_status st = ep->ops->post_write(ep, &wr);
      if (st == RR_AGAIN) return RR_OK;
      if (st != RR_OK) {
        engine_rail_set_state(e, ri, RR_RAIL_DEAD, "cannot post a write");
        if (e->resume_wait || e->failed) return RR_OK;
        continue;
      }
      r->posted++;
      e->rails[ri].vtime += (double)(len ? len : 1) / e->rails[ri].weight;
    }
    e->fifo_post++;
  }
  return RR_OK;
}

rr_status engine_send_on_write_done(rr_engine *e, uint64_t wr_id) {
  uint32_t idx = (uint32_t)(wr_id & 0xffff);
  uint32_t epoch = (uint32_t)(wr_id >> 16);
  if (idx >= RR_SEND_POOL) return RR_ERR_INTERNAL;
  if (epoch != e->epoch) return RR_OK; /* an older epoch's write: its chunk is replayed */
  rr_send_req *r = &e->sreq[idx];
  if (r->in_use && r->transmitted < r->nchunks) r->transmitted++;
  return RR_OK;
}

/* A rail under us went down: stop, ask the receiver to roll back, and wait
 * for it to say what it holds. */
void engine_send_rail_lost(rr_engine *e) {
  e->fail_notice_pending = 1;
  if (!e->resume_wait) {
    e->resume_wait = 1;
    e->resume_wait_epoch = e->epoch;
    e->resume_wait_since_ns = rr_now_ns();
    if (!e->stall_start_ns) e->stall_start_ns = e->resume_wait_since_ns;
  }
}

/* The receiver moved to epoch `epoch`: everything queued is of the old one. */
static void adopt_epoch(rr_engine *e, uint32_t epoch) {
  e->epoch = epoch;
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].state != RR_RAIL_DEAD) e->rails[i].ep->ops->fence(e->rails[i].ep);
  if (!e->resume_wait) {
    e->resume_wait = 1;
    e->resume_wait_since_ns = rr_now_ns();
    if (!e->stall_start_ns) e->stall_start_ns = e->resume_wait_since_ns;
  }
  e->resume_wait_epoch = epoch - 1;
}

static rr_status install_cts(rr_engine *e, const engine_cts *c, uint32_t len) {
  if (len < engine_cts_len(1) || c->n < 1 || c->n > RR_NET_MAX_RECVS || len != engine_cts_len(c->n))
    return engine_fail(e, RR_ERR_PROTOCOL, "malformed clear-to-send");
  engine_cts_slot *s = &e->cts[c->seq % RR_NET_MAX_REQUESTS];
  if (s->valid && !seq_before(s->cts.seq, c->seq)) return RR_OK; /* a repeat or a stale one */
  /* The receiver reuses a slot only after the previous receive in it
   * completed, which needs every one of its messages sent. */
  int next = s->valid ? c->seq == s->cts.seq + RR_NET_MAX_REQUESTS && s->matched == (1u << s->cts.n) - 1
                      : c->seq < RR_NET_MAX_REQUESTS;
  if (!next) return engine_fail(e, RR_ERR_PROTOCOL, "clear-to-send %u out of sequence", c->seq);
  memcpy(&s->cts, c, len);
  s->matched = 0;
  s->valid = 1;
  return RR_OK;
}

static void on_ack(rr_engine *e, uint32_t seq) {
  for (uint32_t i = e->fifo_head; i != e->fifo_tail; i++) {
    rr_send_req *r = &e->sreq[e->fifo[i % RR_SEND_POOL]];
    if (r->seq == seq) r->acked = 1;
  }
  fifo_retire(e); /* an ack for nothing outstanding is a repeat: harmless */
}

static void on_resume_slot(rr_engine *e, const engine_resume_slot *m) {
  for (uint32_t i = e->fifo_head; i != e->fifo_tail; i++) {
    rr_send_req *r = &e->sreq[e->fifo[i % RR_SEND_POOL]];
    if (r->seq != m->cts.seq || r->acked) continue;
    uint32_t held = m->prefix[r->sub] < r->nchunks ? m->prefix[r->sub] : r->nchunks;
    r->posted = r->transmitted = held;
    r->resumed_epoch = m->epoch;
    r->rail = -1;
  }
}

static void on_resume_end(rr_engine *e, const engine_resume_end *m) {
  for (uint32_t i = e->fifo_head; i != e->fifo_tail; i++) {
    rr_send_req *r = &e->sreq[e->fifo[i % RR_SEND_POOL]];
    /* Not named, and the receiver had posted it: it completed; its ack was lost. */
    if (r->resumed_epoch != m->epoch && seq_before(r->seq, m->recv_seq)) r->acked = 1;
  }
  e->fifo_post = e->fifo_head;
  fifo_retire(e);
  if (e->resume_wait && seq_before(e->resume_wait_epoch, m->epoch)) {
    e->resume_wait = 0;
    uint64_t stall = e->stall_start_ns ? rr_now_ns() - e->stall_start_ns : 0;
    e->stall_start_ns = 0;
    /* Traffic moved off the rail that failed last, onto the control rail
     * (chain) or the others (balance). A chain backup failing moves nothing. */
    int to = engine_control_rail(e), from = -1;
    for (int i = 0; i < e->nrails; i++)
      if (!engine_rail_usable(e, i) && (from < 0 || e->rails[i].state_since_ns > e->rails[from].state_since_ns))
        from = i;
    if (to < 0 || from < 0 || (e->cfg.failover_mode == RR_FAILOVER_CHAIN && from > to)) return;
    rr_health_event ev = {.kind = RR_HEV_FAILOVER, .dev = e->rails[from].ep->dev,
                          .to_dev = to >= 0 ? e->rails[to].ep->dev : -1, .stall_ns = stall};
    snprintf(ev.ifname, sizeof ev.ifname, "%s", e->rails[from].ifname);
    if (to >= 0) snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", e->rails[to].ifname);
    snprintf(ev.peer, sizeof ev.peer, "%s", e->cfg.peer);
    snprintf(ev.reason, sizeof ev.reason, "send side resumed in epoch %u on %.60s", m->epoch,
             to >= 0 ? e->rails[to].name : "?");
    rr_health_report(&ev);
  }
}

rr_status engine_send_on_ctrl(rr_engine *e, const void *msg, uint32_t len) {
  uint8_t type = *(const uint8_t *)msg;
  switch (type) {
  case ENGINE_CTRL_CTS: {
    engine_cts c;
    if (len > sizeof c) break;
    memcpy(&c, msg, len); /* the rail's buffer need not be aligned for the struct */
    return install_cts(e, &c, len);
  }
  case ENGINE_CTRL_ACK: {
    engine_ack a;
    if (len != sizeof a) break;
    memcpy(&a, msg, len);
    on_ack(e, a.seq);
    return RR_OK;
  }
  case ENGINE_CTRL_FAIL: {
    engine_fail_msg f;
    if (len != sizeof f) break;
    memcpy(&f, msg, len);
    for (int i = 0; i < e->nrails; i++)
      if ((f.down_mask & (1u << i)) && engine_rail_usable(e, i))
        engine_rail_set_state(e, i, RR_RAIL_DOWN, "the receiver sees it down");
    if (seq_before(e->epoch, f.epoch)) adopt_epoch(e, f.epoch);
    return RR_OK;
  }
  case ENGINE_CTRL_RESUME_SLOT: {
    engine_resume_slot m;
    if (len < sizeof m - sizeof m.cts + engine_cts_len(1) || len > sizeof m) break;
    memset(&m, 0, sizeof m);
    memcpy(&m, msg, len);
    if (seq_before(m.epoch, e->epoch)) return RR_OK; /* stale */
    if (seq_before(e->epoch, m.epoch)) adopt_epoch(e, m.epoch);
    rr_status st = install_cts(e, &m.cts, len - (uint32_t)(sizeof m - sizeof m.cts));
    if (st != RR_OK) return st;
    on_resume_slot(e, &m);
    return RR_OK;
  }
  case ENGINE_CTRL_RESUME_END: {
    engine_resume_end m;
    if (len != sizeof m) break;
    memcpy(&m, msg, len);
    if (seq_before(m.epoch, e->epoch)) return RR_OK;
    if (seq_before(e->epoch, m.epoch)) adopt_epoch(e, m.epoch);
    on_resume_end(e, &m);
    return RR_OK;
  }
  default:
    break;
  }
  return engine_fail(e, RR_ERR_PROTOCOL, "unexpected control message %u (%u bytes)", type, len);
}

static rr_status isend_locked(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                              void *phandle, void **request) {
  if (e->failed) return e->failed;
  engine_cts_slot *s = &e->cts[e->send_seq % RR_NET_MAX_REQUESTS];
  if (!s->valid || s->cts.seq != e->send_seq) {
    /* No clear-to-send yet: look for one, then let NCCL retry. */
    return engine_progress(e);
  }
  int sub = -1;
  for (int i = 0; i < s->cts.n; i++)
    if (s->cts.e[i].tag == tag && !(s->matched & (1u << i))) sub = i;
  if (sub < 0) {
    RR_WARN("isend: no receive posted with tag %d for message %u", tag, e->send_seq);
    return RR_ERR_INVALID;
  }
  const engine_cts_entry *ce = &s->cts.e[sub];
  if (size > ce->size) {
    RR_WARN("isend: message of %zu bytes for a receive of %llu bytes (tag %d)", size,
            (unsigned long long)ce->size, tag);
    return RR_ERR_INVALID;
  }
  size_t nchunks = size ? (size + e->cfg.chunk_size - 1) / e->cfg.chunk_size : 1;
  if (nchunks > IMM_MAX_CHUNKS) {
    RR_WARN("isend: %zu bytes need more than %u chunks of %zu", size, IMM_MAX_CHUNKS,
            e->cfg.chunk_size);
    return RR_ERR_INVALID;
  }
  if (e->fifo_tail - e->fifo_head == RR_SEND_POOL) return engine_progress(e);
  /* A free request: the pool holds every request the protocol allows. */
  int idx = -1;
  for (int i = 0; i < RR_SEND_POOL && idx < 0; i++) {
    int j = (int)((e->fifo_tail + (uint32_t)i) % RR_SEND_POOL);
    if (!e->sreq[j].in_use) idx = j;
  }
  if (idx < 0) return engine_progress(e);
  rr_send_req *r = &e->sreq[idx];
  *r = (rr_send_req){.kind = RR_REQ_SEND, .in_use = 1, .sub = (uint8_t)sub, .rail = -1,
                     .bounce = -1, .engine = e, .seq = e->send_seq, .data = data, .size = size,
                     .mr = mr ? mr->rail_mr : NULL, .raddr = ce->addr, .rkey = ce->rkey,
                     .nchunks = (uint32_t)nchunks};
  if (size <= RR_BOUNCE_SIZE && size > 0) {
    if (!e->bounce) e->bounce = malloc((size_t)RR_BOUNCE_COUNT * RR_BOUNCE_SIZE);
    if (e->bounce && e->nbounce_free > 0) {
      r->bounce = e->bounce_free[--e->nbounce_free];
      char *b = e->bounce + (size_t)r->bounce * RR_BOUNCE_SIZE;
      memcpy(b, data, size);
      r->data = b;
      r->mr = NULL; /* the TCP rail needs no local key; a verbs rail registers the arena */
    }
  }
  s->matched |= (uint8_t)(1u << sub);
  if (s->matched == (1u << s->cts.n) - 1) e->send_seq++;
  e->fifo[e->fifo_tail++ % RR_SEND_POOL] = (uint16_t)idx;
  engine_prof_start(e, &r->prof_event, phandle, 0, size);
  *request = r;
  /* Errors surface through test(): the request exists now. */
  engine_progress(e);
  return RR_OK;
}

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void *phandle, void **request) {
  *request = NULL;
  pthread_mutex_lock(&e->lock);
  rr_status st = isend_locked(e, data, size, tag, mr, phandle, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status engine_send_test(rr_send_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  /* A bounced message's buffer is free as soon as it was copied, an acked
   * one once acked: no need to touch the network to say so (acks of bounced
   * messages are read by the next call that waits on something). */
  int finished = r->bounce >= 0 || r->acked;
  if (!finished) {
    rr_status st = engine_progress(e);
    if (st != RR_OK && !r->acked) return st;
    finished = r->acked;
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
