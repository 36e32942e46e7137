/* Transfer engine: request matching, chunking and progress tracking. */
#include "engine.h"
#include "rr_log.h"

#include <stdlib.h>
#include <string.h>

static rr_status engine_fail(rr_engine *e, rr_status st, const char *why) {
  if (e->failed == RR_OK) {
    e->failed = st;
    RR_WARN("%s connection failed: %s (%s)", e->role == RR_ENGINE_SEND ? "send" : "receive", why,
            rr_status_str(st));
  }
  return e->failed;
}

rr_status rr_engine_init(rr_engine *e, int role, size_t chunk_size) {
  memset(e, 0, sizeof *e);
  if (pthread_mutex_init(&e->lock, NULL) != 0) return RR_ERR_SYSTEM;
  e->role = role;
  e->chunk_size = chunk_size;
  for (int i = 0; i < RR_BOUNCE_COUNT; i++) e->bounce_free[i] = (int16_t)i;
  e->nbounce_free = RR_BOUNCE_COUNT;
  return RR_OK;
}

void rr_engine_attach_rail(rr_engine *e, rr_rail_ep *ep) { e->rail = ep; }

void rr_engine_fini(rr_engine *e) {
  if (e->rail) e->rail->ops->destroy(e->rail);
  e->rail = NULL;
  free(e->bounce);
  e->bounce = NULL;
  pthread_mutex_destroy(&e->lock);
}

/* ---------------------------------------------------------------- sender */

static void send_req_release_if_finished(rr_engine *e, rr_send_req *r) {
  if (!r->user_done || !r->acked || r->transmitted != r->nchunks) return;
  if (r->bounce >= 0) e->bounce_free[e->nbounce_free++] = r->bounce;
  r->in_use = 0;
}

/* Retire finished sends from the head of the posting-order FIFO. */
static void fifo_retire(rr_engine *e) {
  while (e->fifo_head != e->fifo_tail) {
    rr_send_req *r = &e->sreq[e->fifo[e->fifo_head % RR_SEND_POOL]];
    if (!r->acked || r->transmitted != r->nchunks) break;
    e->fifo_head++;
    if (e->fifo_post < e->fifo_head) e->fifo_post = e->fifo_head;
    send_req_release_if_finished(e, r);
  }
}

/* Queue every chunk the rail accepts, oldest message first. */
static rr_status post_chunks(rr_engine *e) {
  while (e->fifo_post != e->fifo_tail) {
    uint16_t idx = e->fifo[e->fifo_post % RR_SEND_POOL];
    rr_send_req *r = &e->sreq[idx];
    while (r->posted < r->nchunks) {
      uint32_t k = r->posted;
      size_t off = (size_t)k * e->chunk_size;
      size_t len = r->size - off < e->chunk_size ? r->size - off : e->chunk_size;
      rr_write_wr wr = {
          .wr_id = idx,
          .local = r->data + off,
          .len = len,
          .local_mr = r->mr,
          .remote_addr = r->raddr + off,
          .rkey = r->rkey,
          .imm = imm_encode(e->epoch, r->seq % RR_NET_MAX_REQUESTS, r->sub, k + 1 == r->nchunks,
                            r->bounce < 0, k),
      };
      rr_status st = e->rail->ops->post_write(e->rail, &wr);
      if (st == RR_AGAIN) return RR_OK;
      if (st != RR_OK) return st;
      r->posted++;
    }
    e->fifo_post++;
  }
  return RR_OK;
}

static rr_status on_cts(rr_engine *e, const engine_cts *c, uint32_t len) {
  if (len < engine_cts_len(1) || c->n < 1 || c->n > RR_NET_MAX_RECVS || len != engine_cts_len(c->n))
    return engine_fail(e, RR_ERR_PROTOCOL, "malformed clear-to-send");
  engine_cts_slot *s = &e->cts[c->seq % RR_NET_MAX_REQUESTS];
  /* The receiver reuses a slot only after the previous receive in it
   * completed, which needs every one of its messages sent. */
  int in_order = s->valid ? c->seq == s->cts.seq + RR_NET_MAX_REQUESTS && s->matched == (1u << s->cts.n) - 1
                          : c->seq < RR_NET_MAX_REQUESTS;
  if (!in_order) return engine_fail(e, RR_ERR_PROTOCOL, "clear-to-send out of sequence");
  memcpy(&s->cts, c, len);
  s->matched = 0;
  s->valid = 1;
  return RR_OK;
}

static rr_status on_ack(rr_engine *e, const engine_ack *a, uint32_t len) {
  if (len != sizeof *a) return engine_fail(e, RR_ERR_PROTOCOL, "malformed acknowledgement");
  int hit = 0;
  for (uint32_t i = e->fifo_head; i != e->fifo_tail; i++) {
    rr_send_req *r = &e->sreq[e->fifo[i % RR_SEND_POOL]];
    if (r->seq == a->seq && !r->acked) {
      if (r->posted != r->nchunks) return engine_fail(e, RR_ERR_PROTOCOL, "ack for unsent data");
      r->acked = 1;
      hit = 1;
    }
  }
  if (!hit) return engine_fail(e, RR_ERR_PROTOCOL, "ack for no outstanding send");
  fifo_retire(e);
  return RR_OK;
}

static rr_status ev_write_done(void *arg, uint64_t wr_id) {
  rr_engine *e = arg;
  if (wr_id >= RR_SEND_POOL || !e->sreq[wr_id].in_use) return RR_ERR_INTERNAL;
  rr_send_req *r = &e->sreq[wr_id];
  r->transmitted++;
  if (r->acked) fifo_retire(e);
  return RR_OK;
}

static rr_status isend_locked(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                              void **request) {
  if (e->failed) return e->failed;
  engine_cts_slot *s = &e->cts[e->send_seq % RR_NET_MAX_REQUESTS];
  if (!s->valid || s->cts.seq != e->send_seq) {
    /* No clear-to-send yet: look for one, then let NCCL retry. */
    rr_status st = e->rail->ops->progress(e->rail);
    if (st != RR_OK) return engine_fail(e, st, "transport error");
    return RR_OK;
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
  size_t nchunks = size ? (size + e->chunk_size - 1) / e->chunk_size : 1;
  if (nchunks > IMM_MAX_CHUNKS) {
    RR_WARN("isend: %zu bytes need more than %u chunks of %zu", size, IMM_MAX_CHUNKS, e->chunk_size);
    return RR_ERR_INVALID;
  }
  /* A free request: the pool holds every request the protocol allows. */
  int idx = -1;
  for (int i = 0; i < RR_SEND_POOL; i++) {
    int j = (int)((e->fifo_tail + (uint32_t)i) % RR_SEND_POOL);
    if (!e->sreq[j].in_use) { idx = j; break; }
  }
  if (idx < 0 || e->fifo_tail - e->fifo_head == RR_SEND_POOL) return RR_OK;
  rr_send_req *r = &e->sreq[idx];
  *r = (rr_send_req){.kind = RR_REQ_SEND, .in_use = 1, .sub = (uint8_t)sub, .bounce = -1,
                     .engine = e, .seq = e->send_seq, .data = data, .size = size,
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
  rr_status st = post_chunks(e);
  if (st == RR_OK) st = e->rail->ops->progress(e->rail);
  if (st != RR_OK) engine_fail(e, st, "transport error");
  *request = r;
  return RR_OK;
}

static rr_status send_test(rr_send_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  rr_status st = e->failed;
  if (st == RR_OK) st = post_chunks(e);
  if (st == RR_OK) st = e->rail->ops->progress(e->rail);
  if (st != RR_OK) return engine_fail(e, st, "transport error");
  /* A bounced message's buffer is free as soon as it was copied. */
  int finished = r->bounce >= 0 || (r->acked && r->transmitted == r->nchunks);
  *done = finished;
  if (finished) {
    if (sizes) sizes[0] = r->size;
    r->user_done = 1;
    send_req_release_if_finished(e, r);
  }
  return RR_OK;
}

/* -------------------------------------------------------------- receiver */

static rr_status irecv_locked(rr_engine *e, int n, void **data, const size_t *sizes,
                              const int *tags, rr_mr **mrs, void **request) {
  if (e->failed) return e->failed;
  if (n < 1 || n > RR_NET_MAX_RECVS) {
    RR_WARN("irecv: %d grouped receives (1..%d supported)", n, RR_NET_MAX_RECVS);
    return RR_ERR_INVALID;
  }
  rr_recv_req *r = &e->rreq[e->recv_seq % RR_NET_MAX_REQUESTS];
  if (r->in_use) return RR_OK; /* every slot busy: NCCL retries */
  engine_cts c = {.type = ENGINE_CTRL_CTS, .n = (uint8_t)n, .seq = e->recv_seq};
  memset(r, 0, sizeof *r);
  r->kind = RR_REQ_RECV;
  r->engine = e;
  r->seq = e->recv_seq;
  r->n = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    r->sub[i] = (rr_recv_sub){.data = data[i], .posted_size = sizes[i]};
    const rr_rail_mr *m = mrs && mrs[i] ? mrs[i]->rail_mr : NULL;
    if (sizes[i] > 0 && !m) {
      RR_WARN("irecv: buffer %d of %zu bytes has no registration", i, sizes[i]);
      return RR_ERR_INVALID;
    }
    c.e[i] = (engine_cts_entry){.tag = tags[i], .rkey = m ? m->rkey : 0,
                                .addr = (uint64_t)(uintptr_t)data[i], .size = sizes[i]};
  }
  rr_status st = e->rail->ops->post_ctrl(e->rail, &c, engine_cts_len(n));
  if (st != RR_OK) return engine_fail(e, st, "cannot post clear-to-send");
  r->in_use = 1;
  e->recv_seq++;
  *request = r;
  return RR_OK;
}

static rr_status ev_write_recv(void *arg, uint32_t imm, uint32_t len) {
  rr_engine *e = arg;
  if (e->role != RR_ENGINE_RECV) return engine_fail(e, RR_ERR_PROTOCOL, "data on a send connection");
  rr_recv_req *r = &e->rreq[imm_slot(imm)];
  uint32_t sub = imm_sub(imm);
  if (!r->in_use || r->complete || sub >= r->n)
    return engine_fail(e, RR_ERR_PROTOCOL, "data for no posted receive");
  rr_recv_sub *s = &r->sub[sub];
  s->received++;
  if (imm_ack_now(imm)) r->ack_now = 1;
  if (imm_last(imm)) {
    s->expected = imm_chunk(imm) + 1;
    s->size = (size_t)imm_chunk(imm) * e->chunk_size + len;
    if (s->size > s->posted_size) return engine_fail(e, RR_ERR_PROTOCOL, "message larger than the receive");
  }
  if (s->expected && s->received == s->expected) {
    if (++r->subs_done == r->n) {
      r->complete = 1;
      engine_ack a = {.type = ENGINE_CTRL_ACK, .seq = r->seq};
      rr_status st = e->rail->ops->post_ctrl(e->rail, &a, sizeof a);
      if (st != RR_OK) return engine_fail(e, st, "cannot post acknowledgement");
      if (r->ack_now) e->ctrl_urgent = 1;
    }
  } else if (s->expected && s->received > s->expected) {
    return engine_fail(e, RR_ERR_PROTOCOL, "more chunks than the message has");
  }
  return RR_OK;
}

static rr_status recv_test(rr_recv_req *r, int *done, size_t *sizes) {
  rr_engine *e = r->engine;
  rr_status st = e->failed;
  if (st == RR_OK && !r->complete) st = e->rail->ops->progress(e->rail);
  /* A sender waiting for an ack to free NCCL's buffer must not wait for our
   * next call: NCCL may have nothing more to ask of this connection. */
  if (st == RR_OK && e->ctrl_urgent) {
    e->ctrl_urgent = 0;
    st = e->rail->ops->progress(e->rail);
  }
  if (st != RR_OK) return engine_fail(e, st, "transport error");
  *done = r->complete;
  if (r->complete) {
    if (sizes)
      for (int i = 0; i < r->n; i++) sizes[i] = r->sub[i].size;
    r->in_use = 0;
  }
  return RR_OK;
}

/* ---------------------------------------------------------------- common */

static rr_status ev_ctrl(void *arg, const void *msg, uint32_t len) {
  rr_engine *e = arg;
  if (len < 1) return engine_fail(e, RR_ERR_PROTOCOL, "empty control message");
  uint8_t type = *(const uint8_t *)msg;
  if (e->role == RR_ENGINE_SEND) {
    /* Copy out: the rail's buffer need not be aligned for the struct. */
    engine_cts c;
    if (type == ENGINE_CTRL_CTS && len <= sizeof c) {
      memcpy(&c, msg, len);
      return on_cts(e, &c, len);
    }
    engine_ack a;
    if (type == ENGINE_CTRL_ACK && len == sizeof a) {
      memcpy(&a, msg, len);
      return on_ack(e, &a, len);
    }
  }
  return engine_fail(e, RR_ERR_PROTOCOL, "unexpected control message");
}

const rr_rail_events rr_engine_rail_events = {
    .on_write_done = ev_write_done,
    .on_write_recv = ev_write_recv,
    .on_ctrl = ev_ctrl,
};

rr_status rr_engine_test(void *request, int *done, size_t *sizes) {
  uint8_t kind = *(const uint8_t *)request;
  rr_engine *e = kind == RR_REQ_SEND ? ((rr_send_req *)request)->engine
                 : kind == RR_REQ_RECV ? ((rr_recv_req *)request)->engine
                                       : NULL;
  if (!e) {
    RR_WARN("test: not a rerail request");
    return RR_ERR_INVALID;
  }
  pthread_mutex_lock(&e->lock);
  rr_status st = kind == RR_REQ_SEND ? send_test(request, done, sizes)
                                     : recv_test(request, done, sizes);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status rr_engine_isend(rr_engine *e, void *data, size_t size, int tag, rr_mr *mr,
                          void **request) {
  *request = NULL;
  pthread_mutex_lock(&e->lock);
  rr_status st = isend_locked(e, data, size, tag, mr, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status rr_engine_irecv(rr_engine *e, int n, void **data, const size_t *sizes,
                          const int *tags, rr_mr **mrs, void **request) {
  *request = NULL;
  pthread_mutex_lock(&e->lock);
  rr_status st = irecv_locked(e, n, data, sizes, tags, mrs, request);
  pthread_mutex_unlock(&e->lock);
  return st;
}
