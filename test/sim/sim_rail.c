/* The in-memory rail: rr_rail_ops over endpoint pairs whose items travel in
 * per-stream FIFOs with a per-rail latency, so order holds within a stream
 * (as on a real rail) and nothing is ordered across rails.
 *
 * Two kinds, chosen per rail by the seed:
 *   TCP-like   (RR_RAIL_CAP_WRITE_BEGIN, INVALIDATE_KEEPS_EP, EPOCH_TAG, EAGER):
 *              one or two streams; control on stream 0, writes on any, a
 *              drain marker on every stream and delivered once all carried it. A write asks on_write_begin
 *              where it goes. invalidate() drops what is queued and sinks the
 *              rest of a write landing; what is on the wire still arrives.
 *   verbs-like (RR_RAIL_CAP_EP_ORDERED): one FIFO. A write lands at the
 *              writer's (rkey, raddr) after the key and range are checked
 *              against the receiver's registrations on that device, then
 *              on_write_recv reports it; the writer's completion follows the
 *              landing. invalidate() kills the endpoint for good (a QP in error):
 *              nothing issued before lands on either side, and the peer's
 *              endpoint breaks a little later (retries exhausted).
 *
 * Every landing is checked against the receives the traffic posted: a byte
 * written anywhere else fails the seed. */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

struct sim_item {
  sim_item *next;
  uint8_t type; /* 'W' write, 'C' control, 'D' drain */
  uint8_t stream;
  uint32_t len;
  uint64_t arrive;
  rr_write_hdr hdr;
  uint64_t wr_id;
  const char *local; /* write: the source until it is transmitted */
  int msg;           /* write: the message whose send buffer is the source, -1 a bounce copy */
  uint32_t epoch;    /* drain */
  char data[];       /* control message, or the write's payload once transmitted */
};

#define CTRL_SLOTS 96

static sim_world *ep_world(const sim_ep *e) { return ((const sim_dev *)e->base.dev)->w; }
static sim_ep *to_ep(rr_rail_ep *ep) { return rr_container_of(ep, sim_ep, base); }

#define ITEM_HDR 32 /* what an item costs on the wire besides its payload */

static void q_push(sim_queue *q, sim_item *it) {
  it->next = NULL;
  q->bytes += it->len + ITEM_HDR;
  if (q->tail) q->tail->next = it;
  else q->head = it;
  q->tail = it;
  q->n++;
}

static sim_item *q_pop(sim_queue *q) {
  sim_item *it = q->head;
  if (!it) return NULL;
  q->head = it->next;
  if (!q->head) q->tail = NULL;
  q->n--;
  q->bytes -= it->len + ITEM_HDR;
  return it;
}

static void q_free(sim_queue *q) {
  sim_item *it;
  while ((it = q_pop(q))) free(it);
}

static sim_item *item_new(uint8_t type, uint32_t len) {
  sim_item *it = calloc(1, sizeof *it + len);
  if (!it) abort();
  it->type = type;
  it->len = len;
  return it;
}

static sim_item *item_clone(const sim_item *src) {
  sim_item *it = item_new(src->type, src->len);
  memcpy(it, src, sizeof *it + src->len);
  it->next = NULL;
  return it;
}

/* What the endpoint answers now: its breakage once it took effect. */
static rr_status ep_status(const sim_ep *e) {
  if (e->broken != RR_OK && sim_now_ns >= e->broken_at) return e->broken;
  if (e->invalidated) return RR_ERR_RAIL;
  return RR_OK;
}

static void ep_break(sim_ep *e, rr_status st, uint64_t at) {
  if (e->broken == RR_OK || at < e->broken_at) {
    e->broken = st;
    e->broken_at = at;
  }
}

/* ------------------------------------------------------------ devices */

static uint32_t fresh_key(sim_world *w) {
  uint32_t k = 0;
  while (k == 0) k = (uint32_t)sim_next(&w->rng);
  return k;
}

static rr_status sim_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                            uint64_t dmabuf_offset, rr_rail_mr **out) {
  (void)dmabuf_fd;
  (void)dmabuf_offset;
  sim_dev *d = (sim_dev *)dev;
  if (!(kind & RR_MEM_HOST)) return RR_ERR_UNSUPPORTED;
  sim_mr *m = calloc(1, sizeof *m);
  if (!m) return RR_ERR_NOMEM;
  m->base = (rr_rail_mr){.dev = dev, .base = base, .len = len, .lkey = fresh_key(d->w), .rkey = fresh_key(d->w)};
  m->next = d->mrs;
  d->mrs = m;
  *out = &m->base;
  return RR_OK;
}

static void sim_dereg_mr(rr_rail_mr *mr) {
  if (!mr) return;
  sim_dev *d = (sim_dev *)mr->dev;
  for (sim_mr **pp = &d->mrs; *pp; pp = &(*pp)->next)
    if (&(*pp)->base == mr) {
      sim_mr *m = *pp;
      *pp = m->next;
      free(m);
      return;
    }
}

static rr_status sim_dev_progress(rr_rail_dev *dev) {
  (void)dev;
  return RR_OK;
}

static rr_rail_dev_event_kind sim_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev) {
  (void)dev;
  ev->kind = RR_RAIL_DEV_EV_NONE;
  return RR_RAIL_DEV_EV_NONE;
}

static void sim_dev_close_op(rr_rail_dev *dev) { sim_dev_close((sim_dev *)dev); }

sim_dev *sim_dev_open(sim_world *w, int side, int rail, int kind) {
  sim_dev *d = calloc(1, sizeof *d);
  if (!d) abort();
  d->w = w;
  d->kind = kind;
  d->side = side;
  d->rail = rail;
  d->base.ops = kind == SIM_TCP ? &sim_rail_ops_tcp : &sim_rail_ops_verbs;
  d->base.index = (side == SIM_RECV ? SIM_DEV_BASE_RECV : 0) + rail;
  uint32_t caps = kind == SIM_TCP ? RR_RAIL_CAP_WRITE_BEGIN | RR_RAIL_CAP_INVALIDATE_KEEPS_EP | RR_RAIL_CAP_EPOCH_TAG | RR_RAIL_CAP_EAGER
                                  : RR_RAIL_CAP_EP_ORDERED;
  if (kind == SIM_VERBS && w->placed[rail]) caps |= RR_RAIL_CAP_WRITE_DONE_PLACED;
  if (kind == SIM_VERBS && w->ar[rail]) caps |= RR_RAIL_CAP_ADAPTIVE_ROUTING;
  d->base.attr = (rr_rail_dev_attr){.caps = caps, .mem_kinds = RR_MEM_HOST, .write_max = w->write_max[rail]};
  return d;
}

void sim_dev_close(sim_dev *d) {
  if (!d) return;
  while (d->mrs) {
    sim_mr *m = d->mrs;
    d->mrs = m->next;
    free(m);
  }
  free(d);
}

/* ---------------------------------------------------------- endpoints */

static rr_status sim_ep_open(rr_rail_dev *dev, const rr_rail_events *events, void *arg, rr_rail_ep **out) {
  sim_ep *e = calloc(1, sizeof *e);
  if (!e) return RR_ERR_NOMEM;
  e->base.ops = dev->ops;
  e->base.dev = dev;
  e->base.events = events;
  e->base.events_arg = arg;
  *out = &e->base;
  return RR_OK;
}

static rr_status sim_ep_addr(rr_rail_ep *ep, void *blob, uint32_t *len) {
  (void)ep;
  (void)blob;
  *len = 0;
  return RR_OK;
}

static rr_status sim_ep_connect(rr_rail_ep *ep, const rr_rail_connect_args *args) {
  (void)ep;
  (void)args;
  return RR_OK;
}

/* Queue a write whose header h the writer filled: what post_write and
 * post_eager share once each checked its own request. */
static rr_status queue_write(sim_ep *e, const rr_write_hdr *h, uint64_t wr_id, const void *local, size_t len,
                             size_t bulk, const rr_rail_mr *local_mr) {
  sim_world *w = ep_world(e);
  rr_rail_ep *rep = &e->base;
  /* A write carries one chunk, or a group of them up to what the device
   * says one write may carry; only a rail with adaptive routing carries a
   * split one (its bulk as a plain write). */
  size_t chunk = w->eng[SIM_SEND].cfg.chunk_size, wmax = rep->dev->attr.write_max;
  if (len > (wmax > chunk ? wmax : chunk) || bulk > len ||
      (bulk && !(rep->dev->attr.caps & RR_RAIL_CAP_ADAPTIVE_ROUTING))) {
    sim_fail(w, "rail %d: the engine posted a write of %zu bytes, %zu of them bulk (chunks are %zu, writes at most %zu)",
             e->pair->rail, len, bulk, chunk, wmax);
    return RR_ERR_INVALID;
  }
  if (e->pair->kind == SIM_VERBS && len > 0) {
    /* A NIC reads the source through a local key of its own device. */
    const rr_rail_mr *m = local_mr;
    if (!m || m->dev != rep->dev || (const char *)local < (const char *)m->base ||
        (const char *)local + len > (const char *)m->base + m->len) {
      sim_fail(w, "rail %d: the engine posted a write without a local key covering its source", e->pair->rail);
      return RR_ERR_INVALID;
    }
  }
  sim_item *it = item_new('W', (uint32_t)len);
  /* A split write lands whole, and its arrival reports what came with the
   * immediate (the bulk before it has no arrival of its own). */
  if (bulk) w->st.split_writes++;
  if (len > chunk) w->st.group_writes++;
  it->hdr = *h;
  it->wr_id = wr_id;
  it->local = local;
  it->msg = len ? sim_traffic_source_msg(w, local) : -1;
  it->stream = (uint8_t)(e->pair->nstreams > 1 ? sim_below(&w->rng, (uint64_t)e->pair->nstreams) : 0);
  q_push(&e->sq, it);
  if (w->verbose) {
    char b[96];
    sim_trace(w, "rail%d pair%u: post write %s", e->pair->rail, e->pair->id, sim_imm_str(b, sizeof b, &it->hdr));
  }
  e->sq_writes++;
  e->sq_bytes += len + 32;
  w->st.writes++;
  return RR_OK;
}

static rr_status sim_post_write(rr_rail_ep *rep, const rr_write_wr *wr) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  rr_status st = ep_status(e);
  if (st != RR_OK) return st;
  if (e->sq_writes >= w->sq_depth) return RR_AGAIN;
  /* A send NCCL was told is done has its buffer back: writing from it
   * again would replay a completed send (invariant 8). */
  if (e->side == SIM_SEND && wr->wr_id != ENGINE_PROBE_WR_ID) {
    uint32_t idx = (uint32_t)(wr->wr_id & 0xffff);
    const rr_send_req *sr = idx < engine_snd(&w->eng[SIM_SEND])->sreq_cap ? engine_sreq(&w->eng[SIM_SEND], idx) : NULL;
    if (!sr || (sr->user_done && sr->bounce < 0) || !sim_traffic_source_ok(w, wr->local, wr->len)) {
      sim_fail(w, "rail %d: a write (imm 0x%08x) of a send NCCL already got back: a completed send replayed",
               e->pair->rail, wr->imm);
      return RR_ERR_INVALID;
    }
  }
  rr_write_hdr h = {.imm = wr->imm,
                    .len = (uint32_t)(wr->len - wr->bulk),
                    .rkey = wr->rkey,
                    .raddr = wr->remote_addr,
                    .epoch_tag = e->pair->kind == SIM_TCP ? wr->epoch_tag : 0,
                    .flags = wr->flags};
  return queue_write(e, &h, wr->wr_id, wr->local, wr->len, wr->bulk, wr->local_mr);
}

/* The TCP-like kind only (RR_RAIL_CAP_EAGER): a write naming its receive,
 * from the engine's own copy (never a send NCCL may have back). */
static rr_status sim_post_eager(rr_rail_ep *rep, const rr_eager_wr *wr) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  rr_status st = ep_status(e);
  if (st != RR_OK) return st;
  if (e->sq_writes >= w->sq_depth) return RR_AGAIN;
  rr_write_hdr h = {.imm = wr->imm, .len = (uint32_t)wr->len, .epoch_tag = wr->epoch_tag, .flags = RR_WRITE_EAGER,
                    .eager = wr->name};
  return queue_write(e, &h, wr->wr_id, wr->local, wr->len, 0, wr->local_mr);
}

static rr_status sim_post_ctrl(rr_rail_ep *rep, const void *msg, uint32_t len) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  rr_status st = ep_status(e);
  if (st != RR_OK) return st;
  if (len > RR_RAIL_CTRL_MAX) return RR_ERR_INVALID;
  if (e->sq_ctrl >= CTRL_SLOTS) return RR_AGAIN;
  sim_item *it = item_new('C', len);
  memcpy(it->data, msg, len);
  q_push(&e->sq, it);
  if (w->verbose) {
    char b[96];
    sim_trace(w, "rail%d pair%u: %s posts %s", e->pair->rail, e->pair->id, e->side == SIM_SEND ? "sender" : "receiver",
              sim_ctrl_str(b, sizeof b, msg, len));
  }
  e->sq_ctrl++;
  e->sq_bytes += len + 32;
  w->st.ctrls++;
  return RR_OK;
}

static rr_status sim_post_drain(rr_rail_ep *rep, uint32_t epoch) {
  sim_ep *e = to_ep(rep);
  rr_status st = ep_status(e);
  if (st != RR_OK) return st;
  sim_trace(ep_world(e), "rail%d pair%u: %s posts a drain barrier of e%u", e->pair->rail, e->pair->id,
            e->side == SIM_SEND ? "sender" : "receiver", epoch);
  for (int s = 0; s < e->pair->nstreams; s++) {
    sim_item *it = item_new('D', 0);
    it->epoch = epoch;
    it->stream = (uint8_t)s;
    q_push(&e->sq, it);
    e->sq_bytes += 32;
  }
  return RR_OK;
}

/* Queue a copy of control message `it` behind whatever another (or the same)
 * rail of this side has on its wire: the peer resending it, maybe late. */
static void duplicate_ctrl(sim_world *w, sim_ep *e, const sim_item *it) {
  int r = (int)sim_below(&w->rng, (uint64_t)w->nrails);
  sim_pair *p = w->cur[r];
  if (!p || p->mute || !p->ep[e->side] || ep_status(p->ep[e->side]) != RR_OK) return;
  sim_item *c = item_clone(it);
  c->stream = 0;
  uint64_t at = sim_now_ns + w->lat_ns[r] + sim_range(&w->rng, 0, 5 * SIM_MS);
  uint64_t *last = &p->last_arrive[e->side][0];
  c->arrive = at > *last ? at : *last;
  *last = c->arrive;
  q_push(&p->wire[e->side][0], c);
  w->st.ctrl_dups++;
  sim_trace(w, "rail%d pair%u: control message (type %u) duplicated onto rail%d", e->pair->rail, e->pair->id,
            (unsigned)(uint8_t)it->data[0], r);
}

static rr_status transmit(sim_ep *e) {
  sim_world *w = ep_world(e);
  sim_pair *p = e->pair;
  int r = p->rail;
  for (uint64_t budget = sim_range(&w->rng, 1, 16); budget > 0 && e->sq.head; budget--) {
    /* Flow control: a stream whose peer has not read a window's worth
     * takes nothing more (TCP's receive window, verbs' credits); what waits
     * stays queued here, in the backlog. */
    const sim_queue *wq = &p->wire[e->side][e->sq.head->stream];
    if (wq->head && wq->bytes + e->sq.head->len + ITEM_HDR > w->window) break;
    sim_item *it = q_pop(&e->sq);
    e->sq_bytes -= it->len + 32;
    if (it->type == 'W') {
      e->sq_writes--;
      /* The source is read now: a write queued before its send completed
       * must not read the buffer NCCL got back (invariant 8: such a send
       * completes only on the ack, and only once no endpoint the sender
       * left uninvalidated holds an older write of it, rule e). */
      if (it->msg >= 0 && !sim_traffic_send_live(w, it->msg))
        sim_fail(w, "rail %d: a write (imm 0x%08x) read its send buffer after the send completed", r, it->hdr.imm);
      if (it->len) memcpy(it->data, it->local, it->len);
    } else if (it->type == 'C') {
      e->sq_ctrl--;
    }
    w->activity = 1;
    uint64_t wr_id = it->wr_id;
    int is_write = it->type == 'W';
    if (p->mute) {
      free(it); /* into the black hole */
    } else {
      uint64_t at = sim_now_ns + w->lat_ns[r] + sim_below(&w->rng, w->jitter_ns[r] + 1);
      /* Delayed, but not so long that the rail looks dead (that is a fault of its own). */
      if (it->type != 'D' && sim_chance(&w->rng, it->type == 'C' ? w->delay_pm : w->wdelay_pm))
        at += sim_below(&w->rng, w->delay_max_ns + 1);
      uint64_t *last = &p->last_arrive[e->side][it->stream];
      it->arrive = at > *last ? at : *last;
      *last = it->arrive;
      if (it->type == 'C' && sim_chance(&w->rng, w->dup_pm)) duplicate_ctrl(w, e, it);
      /* A garbled frame: a reserved header byte set, which no decoder may
       * take for a valid message. It must cost that rail, never the job. */
      if (it->type == 'C' && it->len > 1 && w->nrails > 1 && !w->expect_error && sim_chance(&w->rng, w->garble_pm) &&
          sim_fault_ok(w, r, sim_now_ns, sim_now_ns + sim_loss_span(w), !w->reconnect)) {
        it->data[1] = (char)0xa5;
        w->garbled++;
        sim_trace(w, "rail%d pair%u: control message garbled in flight", r, p->id);
      }
      q_push(&p->wire[e->side][it->stream], it);
    }
    /* TCP: the kernel took the bytes; the buffer is reusable now. */
    if (is_write && p->kind == SIM_TCP) {
      rr_status st = e->base.events->on_write_done(&e->base, wr_id);
      if (st != RR_OK) {
        ep_break(e, st, sim_now_ns);
        return st;
      }
      if ((st = ep_status(e)) != RR_OK) return st;
    }
  }
  return RR_OK;
}

static void complete_to_writer(sim_pair *p, int writer, uint64_t wr_id) {
  sim_ep *we = p->ep[writer];
  if (!we || p->kind != SIM_VERBS) return;
  if (we->cq_n == we->cq_cap) {
    we->cq_cap = we->cq_cap ? 2 * we->cq_cap : 16;
    we->cq = realloc(we->cq, we->cq_cap * sizeof *we->cq);
    if (!we->cq) abort();
  }
  we->cq[we->cq_n++] = wr_id;
}

/* Land bytes [from, to) of write `it` at dst. */
static int land(sim_world *w, sim_ep *e, sim_item *it, char *dst, uint32_t from, uint32_t to) {
  if (to <= from) return 1;
  if (w->verbose) {
    char b[128];
    sim_traffic_where(w, dst + from, b, sizeof b);
    sim_trace(w, "rail%d pair%u: bytes %u..%u land at %s", e->pair->rail, e->pair->id, from, to, b);
  }
  if (!sim_traffic_landing_ok(w, dst + from, to - from)) {
    sim_fail(w, "rail%d pair%u: a write (imm 0x%08x, %u bytes, epoch tag %u) landed outside every posted receive",
             e->pair->rail, e->pair->id, it->hdr.imm, it->hdr.len, it->hdr.epoch_tag);
    return 0;
  }
  memcpy(dst + from, it->data + from, to - from);
  return 1;
}

/* Finish write `it` (all of it landed at dst, or dst is NULL: sunk). On a
 * rail whose completion means placement the writer's completion comes
 * first, and this end learns of the write only when it polls its queue
 * (rcq_deliver), if the endpoint lives that long. */
static rr_status write_landed(sim_ep *e, sim_item *it, char *dst) {
  sim_pair *p = e->pair;
  rr_status st = RR_OK;
  if (dst && p->kind == SIM_VERBS && ep_world(e)->placed[p->rail]) {
    complete_to_writer(p, 1 - e->side, it->wr_id);
    if (e->rcq_n == e->rcq_cap) {
      e->rcq_cap = e->rcq_cap ? 2 * e->rcq_cap : 16;
      e->rcq = realloc(e->rcq, e->rcq_cap * sizeof *e->rcq);
      if (!e->rcq) abort();
    }
    sim_world *w = ep_world(e);
    uint64_t at = sim_now_ns + sim_below(&w->rng, w->rcq_lag_ns + 1);
    if (e->rcq_n && at < e->rcq[e->rcq_n - 1].at) at = e->rcq[e->rcq_n - 1].at;
    e->rcq[e->rcq_n].hdr = it->hdr;
    e->rcq[e->rcq_n++].at = at;
  } else if (dst) {
    st = e->base.events->on_write_recv(&e->base, &it->hdr);
    complete_to_writer(p, 1 - e->side, it->wr_id);
  }
  free(it);
  return st;
}

/* Poll the arrivals of placed writes that are visible by now, in order. */
static rr_status rcq_deliver(sim_world *w, sim_ep *e) {
  uint32_t i = 0;
  rr_status st = RR_OK;
  for (; i < e->rcq_n && e->rcq[i].at <= sim_now_ns && st == RR_OK; i++) {
    w->activity = 1;
    st = e->base.events->on_write_recv(&e->base, &e->rcq[i].hdr);
    if (st == RR_OK) st = ep_status(e);
  }
  if (st != RR_OK) i = e->rcq_n; /* the endpoint failed: the rest is lost with it */
  if (i == 0) return st; /* rcq may still be NULL: memmove must not see it */
  memmove(e->rcq, e->rcq + i, (e->rcq_n - i) * sizeof *e->rcq);
  e->rcq_n -= i;
  return st;
}

/* Maybe stop half way through a write: the rest lands on a later progress
 * call, unless an invalidation comes first. Sometimes the invalidation is provoked: another
 * rail fails at both ends right now. */
static int split_write(sim_world *w, sim_ep *e, int s, sim_item *it, char *dst) {
  if (it->len < 2 || !sim_chance(&w->rng, w->split_pm)) return 0;
  uint32_t first = (uint32_t)sim_range(&w->rng, 1, it->len - 1);
  if (dst && !land(w, e, it, dst, 0, first)) {
    free(it);
    return 1;
  }
  e->rx[s].cur = it;
  e->rx[s].done = first;
  e->rx[s].dst = dst;
  w->st.splits++;
  if (w->nrails > 1 && sim_now_ns < w->chaos_end_ns && sim_chance(&w->rng, w->midinvalidate_pm)) {
    int r = (e->pair->rail + 1 + (int)sim_below(&w->rng, (uint64_t)w->nrails - 1)) % w->nrails;
    if (w->expect_error || !w->cur[r] || w->cur[r]->mute || !sim_fault_ok(w, r, sim_now_ns, sim_now_ns + sim_loss_span(w), !w->reconnect)) return 1;
    sim_event_add(w, sim_now_ns, SIM_EV_BREAK_BOTH, r, 0, NULL);
    w->st.mid_invalidations++;
    sim_trace(w, "rail%d: write imm 0x%08x half landed; rail%d fails now", e->pair->rail, it->hdr.imm, r);
  }
  return 1;
}

static rr_status deliver_write(sim_world *w, sim_ep *e, int s, sim_item *it) {
  sim_pair *p = e->pair;
  char *dst = NULL;
  if (w->verbose) {
    char b[96];
    sim_trace(w, "rail%d pair%u: write arrives: %s", p->rail, p->id, sim_imm_str(b, sizeof b, &it->hdr));
  }
  if (p->kind == SIM_TCP) {
    void *d = NULL;
    rr_status st = e->base.events->on_write_begin(&e->base, &it->hdr, &d);
    if (st != RR_OK) {
      free(it);
      return st;
    }
    dst = d;
    if (!dst) {
      w->st.sink_writes++;
      sim_trace(w, "rail%d pair%u: the engine sinks it", p->rail, p->id);
    }
  } else if (it->len > 0) {
    /* The NIC checks the key and range against this device's registrations. */
    const sim_mr *m = ((sim_dev *)e->base.dev)->mrs;
    for (; m; m = m->next)
      if (m->base.rkey == it->hdr.rkey) break;
    if (!m || it->hdr.raddr < (uint64_t)(uintptr_t)m->base.base ||
        it->hdr.raddr + it->len > (uint64_t)(uintptr_t)m->base.base + m->base.len) {
      sim_fail(w, "rail%d pair%u: remote access error: write imm 0x%08x names key 0x%08x at 0x%llx (+%u)",
               p->rail, p->id, it->hdr.imm, it->hdr.rkey, (unsigned long long)it->hdr.raddr, it->len);
      free(it);
      sim_pair_break(w, p, RR_ERR_RAIL, sim_now_ns, "remote access error");
      return RR_ERR_RAIL;
    }
    dst = (char *)(uintptr_t)it->hdr.raddr;
  } else {
    dst = (char *)(uintptr_t)it->hdr.raddr; /* a zero-length write carries its immediate only */
  }
  if (!dst && p->kind == SIM_TCP) {
    if (split_write(w, e, s, it, NULL)) return RR_OK;
    free(it);
    return RR_OK;
  }
  if (split_write(w, e, s, it, dst)) return RR_OK;
  if (!land(w, e, it, dst, 0, it->len)) {
    free(it);
    return RR_OK;
  }
  return write_landed(e, it, dst);
}

static rr_status deliver_drain(sim_ep *e, int s, uint32_t epoch) {
  sim_pair *p = e->pair;
  sim_trace(ep_world(e), "rail%d pair%u: drain barrier of e%u arrives on stream %d", p->rail, p->id, epoch, s);
  if (p->kind == SIM_TCP) {
    e->rx[s].drain_seen = 1;
    e->rx[s].drain_epoch = epoch;
    for (int i = 0; i < p->nstreams; i++)
      if (!e->rx[i].drain_seen || e->rx[i].drain_epoch != epoch) return RR_OK;
  }
  return e->base.events->on_drain(&e->base, epoch);
}

/* Whether items of this pair move at all now. */
static int pair_flows(const sim_world *w, const sim_pair *p) {
  return !p->mute && w->path[p->rail].up && sim_now_ns >= p->stall_until;
}

static rr_status deliver_stream(sim_world *w, sim_ep *e, int s) {
  sim_pair *p = e->pair;
  int from = 1 - e->side;
  sim_rx *rx = &e->rx[s];
  if (rx->cur) {
    if (!sim_chance(&w->rng, 500)) return RR_OK; /* the rest is still on its way */
    sim_item *it = rx->cur;
    rx->cur = NULL;
    w->activity = 1;
    e->last_rx_ns = sim_now_ns;
    if (rx->dst && !land(w, e, it, rx->dst, rx->done, it->len)) {
      free(it);
      return RR_OK;
    }
    rr_status st = write_landed(e, it, rx->dst);
    if (st != RR_OK) return st;
    if ((st = ep_status(e)) != RR_OK) return st;
  }
  sim_queue *q = &p->wire[from][s];
  for (uint64_t budget = sim_range(&w->rng, 1, 8); budget > 0 && q->head && q->head->arrive <= sim_now_ns;
       budget--) {
    if (q->head->type != 'W' && e->rcq_n) return RR_OK; /* the writes before it are reported first */
    sim_item *it = q_pop(q);
    e->last_rx_ns = sim_now_ns;
    if (p->ep[from] && p->ep[from]->last_ack_ns < it->arrive) p->ep[from]->last_ack_ns = it->arrive;
    w->activity = 1;
    rr_status st = RR_OK;
    if (it->type == 'C') {
      if (w->verbose) {
        char b[96];
        sim_trace(w, "rail%d pair%u: %s gets %s", p->rail, p->id, e->side == SIM_SEND ? "sender" : "receiver",
                  sim_ctrl_str(b, sizeof b, it->data, it->len));
      }
      st = e->base.events->on_ctrl(&e->base, it->data, it->len);
      free(it);
    } else if (it->type == 'D') {
      uint32_t epoch = it->epoch;
      free(it);
      st = deliver_drain(e, s, epoch);
    } else {
      st = deliver_write(w, e, s, it);
    }
    if (st != RR_OK) return st;
    if ((st = ep_status(e)) != RR_OK) return st;
    if (rx->cur || w->failed) return RR_OK;
  }
  return RR_OK;
}

static int pair_has_traffic(const sim_pair *p) {
  for (int side = 0; side < 2; side++)
    for (int s = 0; s < p->nstreams; s++)
      if (p->wire[side][s].head) return 1;
  return 0;
}

static rr_status sim_progress(rr_rail_ep *rep) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  sim_pair *p = e->pair;
  int from = 1 - e->side;
  /* An invalidated QP reports nothing more (its flushed requests are the engine's
   * to replay); only posting on it fails. */
  if (e->invalidated && (e->broken == RR_OK || sim_now_ns < e->broken_at)) return RR_OK;
  rr_status st = ep_status(e);
  if (st != RR_OK) return st;
  /* A verbs path down past the retry limit with something in flight: the
   * QPs at both ends go to the error state. */
  if (p->kind == SIM_VERBS && !w->path[p->rail].up &&
      sim_now_ns - w->path[p->rail].down_since > w->verbs_retry_ns && (pair_has_traffic(p) || e->sq.head)) {
    sim_pair_break(w, p, RR_ERR_RAIL, sim_now_ns, "retries exhausted while the path was down");
    return ep_status(e);
  }
  while (e->cq_n) {
    uint64_t id = e->cq[0];
    memmove(e->cq, e->cq + 1, --e->cq_n * sizeof *e->cq);
    w->activity = 1;
    if ((st = e->base.events->on_write_done(&e->base, id)) != RR_OK) {
      ep_break(e, st, sim_now_ns);
      return st;
    }
    if ((st = ep_status(e)) != RR_OK) return st;
  }
  if ((st = transmit(e)) != RR_OK) return st;
  /* Our own completion queue is polled whatever the path does now. */
  if ((st = rcq_deliver(w, e)) != RR_OK) {
    ep_break(e, st, sim_now_ns);
    return st;
  }
  if (pair_flows(w, p)) {
    int start = (int)sim_below(&w->rng, (uint64_t)p->nstreams);
    for (int i = 0; i < p->nstreams && !w->failed; i++) {
      st = deliver_stream(w, e, (start + i) % p->nstreams);
      if (st != RR_OK) {
        ep_break(e, st, sim_now_ns);
        return st;
      }
      if ((st = ep_status(e)) != RR_OK) return st;
    }
  }
  /* The peer closed its end and everything it sent before is in. */
  if (p->closed_at[from]) {
    int busy = 0;
    for (int s = 0; s < p->nstreams; s++) busy |= p->wire[from][s].head != NULL;
    for (int s = 0; s < p->nstreams; s++) busy |= e->rx[s].cur != NULL;
    busy |= e->rcq_n != 0;
    if (!busy) {
      if (p->kind == SIM_TCP) ep_break(e, RR_ERR_PEER, sim_now_ns);
      else ep_break(e, RR_ERR_RAIL, p->closed_at[from] + w->verbs_retry_ns);
      return ep_status(e);
    }
  }
  return RR_OK;
}

static void rx_drop(sim_ep *e) {
  for (int s = 0; s < SIM_MAX_STREAMS; s++) {
    free(e->rx[s].cur);
    e->rx[s].cur = NULL;
  }
}

static void sim_invalidate(rr_rail_ep *rep) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  sim_pair *p = e->pair;
  q_free(&e->sq);
  e->sq_bytes = 0;
  e->sq_writes = e->sq_ctrl = 0;
  if (p->kind == SIM_TCP) {
    for (int s = 0; s < p->nstreams; s++) e->rx[s].dst = NULL; /* the rest of a write is sunk */
    sim_trace(w, "rail%d pair%u: %s end invalidated", p->rail, p->id, e->side == SIM_SEND ? "send" : "recv");
    return;
  }
  /* A QP in the error state: nothing issued before lands on either side,
   * and nothing more is reported (arrivals not polled yet are lost). */
  e->invalidated = 1;
  rx_drop(e);
  e->cq_n = 0;
  e->rcq_n = 0;
  for (int side = 0; side < 2; side++)
    for (int s = 0; s < p->nstreams; s++) q_free(&p->wire[side][s]);
  sim_ep *peer = p->ep[1 - e->side];
  if (peer) ep_break(peer, RR_ERR_RAIL, sim_now_ns + sim_range(&w->rng, SIM_MS, w->verbs_retry_ns));
  sim_trace(w, "rail%d pair%u: %s end invalidated (QP to error)", p->rail, p->id, e->side == SIM_SEND ? "send" : "recv");
}

static size_t sim_backlog(rr_rail_ep *rep) { return to_ep(rep)->sq_bytes; }

/* Flushed once nothing waits to leave and nothing of ours is still on the
 * wire (it has reached the peer's host). */
static int sim_flushed(rr_rail_ep *rep) {
  sim_ep *e = to_ep(rep);
  if (e->broken || e->invalidated || !e->pair) return 1;
  if (e->sq_bytes) return 0;
  for (int s = 0; s < e->pair->nstreams; s++)
    if (e->pair->wire[e->side][s].head) return 0;
  return 1;
}

/* Bytes we sent count as acknowledged once they reached the peer's host,
 * whether or not its process read them yet (a kernel's ack). While some of
 * ours wait unacknowledged only acknowledgements count. */
static uint64_t sim_last_alive(rr_rail_ep *rep, uint64_t now_ns) {
  sim_ep *e = to_ep(rep);
  sim_world *w = ep_world(e);
  sim_pair *p = e->pair;
  uint64_t ack = e->last_ack_ns;
  int unacked = 0;
  /* A closed peer's host answers with resets, not acknowledgements; a
   * broken peer endpoint is read no more, so its window soon closes. */
  uint64_t gone = p->closed_at[1 - e->side] ? p->closed_at[1 - e->side] : UINT64_MAX;
  const sim_ep *peer = p->ep[1 - e->side];
  if (peer && peer->broken != RR_OK && peer->broken_at < gone) gone = peer->broken_at;
  if (peer && peer->invalidated && now_ns < gone) gone = now_ns;
  for (int s = 0; s < p->nstreams; s++)
    for (const sim_item *it = p->wire[e->side][s].head; it; it = it->next) {
      if (it->arrive <= now_ns && pair_flows(w, p) && it->arrive < gone) {
        if (it->arrive > ack) ack = it->arrive;
      } else {
        unacked = 1;
        break;
      }
    }
  if (unacked) return ack;
  return ack > e->last_rx_ns ? ack : e->last_rx_ns;
}

static void sim_destroy(rr_rail_ep *rep) {
  sim_ep *e = to_ep(rep);
  sim_pair *p = e->pair;
  q_free(&e->sq);
  rx_drop(e);
  free(e->cq);
  free(e->rcq);
  if (p) {
    p->ep[e->side] = NULL;
    if (!p->closed_at[e->side]) p->closed_at[e->side] = sim_now_ns ? sim_now_ns : 1;
    /* A destroyed QP sends nothing more; closed sockets still deliver. */
    if (p->kind == SIM_VERBS)
      for (int s = 0; s < p->nstreams; s++) q_free(&p->wire[e->side][s]);
  }
  free(e);
}

/* The two kinds share every op but post_eager: only the TCP-like one
 * carries eager writes (RR_RAIL_CAP_EAGER). */
#define SIM_RAIL_OPS(eager_op)                      \
  {                                                 \
    .name = "sim",                                  \
    .reg_mr = sim_reg_mr,                           \
    .dereg_mr = sim_dereg_mr,                       \
    .dev_progress = sim_dev_progress,               \
    .dev_event = sim_dev_event,                     \
    .dev_close = sim_dev_close_op,                  \
    .ep_open = sim_ep_open,                         \
    .ep_addr = sim_ep_addr,                         \
    .ep_connect = sim_ep_connect,                   \
    .post_write = sim_post_write,                   \
    .post_eager = (eager_op),                       \
    .post_flush = NULL, /* in flight once posted */ \
    .post_ctrl = sim_post_ctrl,                     \
    .post_drain = sim_post_drain,                   \
    .progress = sim_progress,                       \
    .invalidate = sim_invalidate,                   \
    .backlog = sim_backlog,                         \
    .flushed = sim_flushed,                         \
    .last_alive_ns = sim_last_alive,                \
    .destroy = sim_destroy,                         \
  }
const rr_rail_ops sim_rail_ops_tcp = SIM_RAIL_OPS(sim_post_eager);
const rr_rail_ops sim_rail_ops_verbs = SIM_RAIL_OPS(NULL);

/* -------------------------------------------------------------- pairs */

sim_pair *sim_pair_new(sim_world *w, int rail) {
  sim_pair *p = calloc(1, sizeof *p);
  if (!p) abort();
  p->rail = rail;
  p->kind = w->kind[rail];
  p->nstreams = w->nstreams[rail];
  p->id = w->next_pair_id++;
  for (int side = 0; side < 2; side++) {
    rr_rail_ep *ep = NULL;
    if (sim_ep_open(&w->dev[side][rail]->base, &rr_engine_rail_events, &w->eng[side], &ep) != RR_OK) abort();
    sim_ep *e = to_ep(ep);
    e->pair = p;
    e->side = side;
    e->last_rx_ns = e->last_ack_ns = sim_now_ns;
    p->ep[side] = e;
  }
  p->next = w->pairs;
  w->pairs = p;
  w->cur[rail] = p;
  return p;
}

void sim_pair_break(sim_world *w, sim_pair *p, rr_status st, uint64_t at, const char *why) {
  for (int side = 0; side < 2; side++) {
    if (p->ep[side]) ep_break(p->ep[side], st, at);
    for (int s = 0; s < p->nstreams; s++) q_free(&p->wire[side][s]);
  }
  p->mute = 1;
  sim_trace(w, "rail%d pair%u: broken at both ends (%s)", p->rail, p->id, why);
}

void sim_pair_mute(sim_world *w, sim_pair *p, const char *why) {
  p->mute = 1;
  for (int side = 0; side < 2; side++)
    for (int s = 0; s < p->nstreams; s++) q_free(&p->wire[side][s]);
  sim_trace(w, "rail%d pair%u: silent for good, everything in flight lost (%s)", p->rail, p->id, why);
}

void sim_pair_close_side(sim_world *w, sim_pair *p, int side) {
  if (!p->closed_at[side]) p->closed_at[side] = sim_now_ns;
  if (p->kind == SIM_VERBS)
    for (int s = 0; s < p->nstreams; s++) q_free(&p->wire[side][s]);
  (void)w;
}

int sim_pair_quiet(const sim_pair *p) { return !pair_has_traffic(p); }

uint64_t sim_next_arrival(sim_world *w) {
  uint64_t best = UINT64_MAX;
  for (sim_pair *p = w->pairs; p; p = p->next) {
    for (int side = 0; side < 2; side++) {
      sim_ep *e = p->ep[side];
      if (e && e->attached && e->cq_n) best = sim_now_ns;
      if (e && e->attached && e->rcq_n && e->rcq[0].at < best) best = e->rcq[0].at < sim_now_ns ? sim_now_ns : e->rcq[0].at;
      for (int s = 0; s < p->nstreams; s++) {
        if (e && e->rx[s].cur) best = sim_now_ns;
        const sim_item *h = p->wire[1 - side][s].head;
        if (h && e && e->attached && pair_flows(w, p) && h->arrive < best) best = h->arrive;
      }
    }
    if (p->stall_until > sim_now_ns && pair_has_traffic(p) && p->stall_until < best) best = p->stall_until;
  }
  return best;
}

void sim_pairs_free(sim_world *w) {
  while (w->pairs) {
    sim_pair *p = w->pairs;
    w->pairs = p->next;
    for (int side = 0; side < 2; side++) {
      for (int s = 0; s < SIM_MAX_STREAMS; s++) q_free(&p->wire[side][s]);
      if (p->ep[side]) {
        p->ep[side]->pair = NULL;
        sim_destroy(&p->ep[side]->base);
      }
    }
    free(p);
  }
  for (int r = 0; r < SIM_MAX_RAILS; r++) w->cur[r] = NULL;
}
