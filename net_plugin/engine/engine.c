/* Transfer engine: lifecycle, the progress loop, control-message routing
 * and NCCL's test(). Sending, receiving and rail health live in
 * engine_send.c, engine_recv.c and engine_rails.c. */
#include "engine_internal.h"
#include "link_life.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rr_status engine_fail(rr_engine *e, rr_status st, const char *fmt, ...) {
  if (e->failed == RR_OK) {
    e->failed = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->failed_why, sizeof e->failed_why, fmt, ap);
    va_end(ap);
    RR_WARN("%s connection to %s failed: %s (%s)", engine_role_word(e), e->cfg.peer, e->failed_why,
            rr_status_str(st));
    rr_health_event ev = {.kind = RR_HEV_ERROR, .dev = e->nrails ? e->rails[0].ep->dev->index : -1,
                          .to_dev = -1, .state = RR_LINK_DOWN};
    snprintf(ev.peer, sizeof ev.peer, "%s", e->cfg.peer);
    snprintf(ev.reason, sizeof ev.reason, "%.95s", e->failed_why);
    rr_health_report(&ev);
  }
  return e->failed;
}

/* Each kind's member of the protocol_violations_total family. */
static const rr_counter violation_counter[ENGINE_VIOL_KINDS] = {
    [ENGINE_VIOL_NO_RECEIVE] = RR_CTR_VIOL_NO_RECEIVE, [ENGINE_VIOL_CHUNK_INDEX] = RR_CTR_VIOL_CHUNK_INDEX,
    [ENGINE_VIOL_LENGTH] = RR_CTR_VIOL_LENGTH,         [ENGINE_VIOL_DUPLICATE] = RR_CTR_VIOL_DUPLICATE,
    [ENGINE_VIOL_KEY] = RR_CTR_VIOL_KEY,               [ENGINE_VIOL_ADDRESS] = RR_CTR_VIOL_ADDRESS,
    [ENGINE_VIOL_MALFORMED] = RR_CTR_VIOL_MALFORMED,   [ENGINE_VIOL_WINDOW] = RR_CTR_VIOL_WINDOW,
    [ENGINE_VIOL_CLAIM] = RR_CTR_VIOL_CLAIM,           [ENGINE_VIOL_DIRECTION] = RR_CTR_VIOL_DIRECTION,
    [ENGINE_VIOL_EPOCH] = RR_CTR_VIOL_EPOCH,           [ENGINE_VIOL_OVERFLOW] = RR_CTR_VIOL_OVERFLOW,
};
_Static_assert(sizeof violation_counter / sizeof violation_counter[0] == ENGINE_VIOL_KINDS,
               "one counter per violation kind");

rr_status engine_violation(rr_engine *e, int rail, engine_violation_kind kind, const char *fmt, ...) {
  char why[96];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, sizeof why, fmt, ap);
  va_end(ap);
  e->stats.violations++;
  rr_counter_inc((unsigned)kind < ENGINE_VIOL_KINDS ? violation_counter[kind] : RR_CTR_VIOL_MALFORMED);
  /* Logged once per connection: a hostile peer must not flood the log. */
  if (e->stats.violations == 1) {
    snprintf(e->violation_why, sizeof e->violation_why, "%s", why);
    RR_WARN("%s connection to %s: rail %d broke the protocol (%s): failing that rail over; "
            "further violations on this connection are counted, not logged",
            engine_role_word(e), e->cfg.peer, rail, why);
  } else {
    RR_TRACE("%s: rail %d: protocol violation %llu: %s", e->cfg.peer, rail,
             (unsigned long long)e->stats.violations, why);
  }
  return RR_ERR_PROTOCOL;
}

int engine_rail_invalidate_cheap(const rr_engine *e, int r) {
  return (e->rails[r].ep->dev->attr.caps & RR_RAIL_CAP_INVALIDATE_KEEPS_EP) != 0;
}

rr_status engine_sreq_grow(rr_engine *e) {
  if (engine_snd(e)->sreq_cap >= RR_SEND_POOL) return RR_ERR_INTERNAL;
  rr_send_req *c = calloc(RR_SEND_CHUNK, sizeof *c);
  if (!c) return RR_ERR_NOMEM;
  engine_snd(e)->sreq_chunk[engine_snd(e)->sreq_cap / RR_SEND_CHUNK] = c;
  engine_snd(e)->sreq_cap += RR_SEND_CHUNK;
  return RR_OK;
}

/* The request pools of the engine's role (engine_internal.h), and the
 * sender's free list of bounce buffers (their arena comes on first use). */
static rr_status engine_pools_alloc(rr_engine *e) {
  if (engine_is_sender(e)) {
    engine_sender *snd = engine_snd(e);
    snd->cts = calloc(RR_NET_MAX_REQUESTS, sizeof *snd->cts);
    snd->fifo = calloc(RR_SEND_POOL, sizeof *snd->fifo);
    for (int i = 0; i < RR_BOUNCE_COUNT; i++) snd->bounce_free[i] = (int16_t)i;
    snd->nbounce_free = RR_BOUNCE_COUNT;
    return snd->cts && snd->fifo ? engine_sreq_grow(e) : RR_ERR_NOMEM;
  }
  if (engine_is_receiver(e)) {
    engine_receiver *rcv = engine_rcv(e);
    rcv->rreq = calloc(RR_NET_MAX_REQUESTS, sizeof *rcv->rreq);
    return rcv->rreq ? RR_OK : RR_ERR_NOMEM;
  }
  return RR_ERR_INVALID;
}

/* The pools and what hangs off them: a receive slot keeps its chunk
 * bitmaps across receives (engine_recv.c, sub_prepare), the early buffer
 * is made on the first eager message, the bounce arena on the first
 * small send. */
static void engine_pools_free(rr_engine *e) {
  if (engine_is_sender(e)) {
    engine_sender *snd = engine_snd(e);
    free(snd->cts);
    for (uint32_t i = 0; i < snd->sreq_cap / RR_SEND_CHUNK; i++) free(snd->sreq_chunk[i]);
    free(snd->fifo);
    free(snd->bounce);
    snd->cts = NULL, snd->fifo = NULL, snd->bounce = NULL, snd->sreq_cap = 0;
  } else if (engine_is_receiver(e)) {
    engine_receiver *rcv = engine_rcv(e);
    for (int i = 0; rcv->rreq && i < RR_NET_MAX_REQUESTS; i++)
      for (int k = 0; k < RR_NET_MAX_RECVS; k++) free(rcv->rreq[i].sub[k].seen);
    free(rcv->rreq);
    free(rcv->early_buf);
    rcv->rreq = NULL, rcv->early_buf = NULL;
  }
}

rr_status rr_engine_init(rr_engine *e, const rr_engine_config *cfg) {
  memset(e, 0, sizeof *e);
  e->cfg = *cfg;
  rr_status st = engine_pools_alloc(e);
  if (st != RR_OK) {
    engine_pools_free(e);
    return st;
  }
  if (pthread_mutex_init(&e->lock, NULL) != 0) {
    engine_pools_free(e);
    return RR_ERR_SYSTEM;
  }
  atomic_store_explicit(&e->last_progress_ns, rr_now_ns(), memory_order_relaxed);
  return RR_OK;
}

rr_status rr_engine_add_rail(rr_engine *e, rr_rail_ep *ep, int weight, const char *ifname,
                             const char *peer_addr) {
  if (e->nrails == RR_MAX_RAILS || (engine_is_receiver(e) && engine_rcv(e)->recv_seq != 0)) return RR_ERR_INVALID;
  int idx = e->nrails++;
  engine_rail *r = &e->rails[idx];
  memset(r, 0, sizeof *r);
  r->ep = ep;
  ep->rail = idx;
  r->state = RR_RAIL_ACTIVE;
  r->weight = weight > 0 ? weight : 1;
  r->state_since_ns = r->watch_since_ns = r->last_alive_ns = rr_now_ns();
  snprintf(r->ifname, sizeof r->ifname, "%s", ifname ? ifname : "?");
  snprintf(r->name, sizeof r->name, "rail%d (%.15s -> %.40s)", idx, ifname ? ifname : "?", peer_addr ? peer_addr : "?");
  snprintf(r->why, sizeof r->why, "up");
  snprintf(r->peer_addr, sizeof r->peer_addr, "%s", peer_addr ? peer_addr : "?");
  r->life_slot = rr_link_life_slot(&rr_link_lives, (int)e->cfg.role, ep->dev->index, r->peer_addr);
  /* A sender's rails record what they send, a receiver's what lands. */
  int tx = engine_is_sender(e);
  rr_tel_rail *t = rr_tel_rail_open(ep->dev->index, ifname, peer_addr, idx, tx ? RR_TEL_TX : RR_TEL_RX);
  if (tx) ep->tel_tx = t;
  else ep->tel_rx = t;
  /* Dashboards see the rail's state and counters from the first export. */
  rr_tel_conn_rail_add(r->ifname, e->cfg.peer);
  return RR_OK;
}

rr_status rr_engine_add_rail_later(rr_engine *e, rr_rail_ep *ep, int weight, const char *ifname,
                                   const char *peer_addr, const char *why) {
  rr_status st = rr_engine_add_rail(e, ep, weight, ifname, peer_addr);
  if (st != RR_OK) return st;
  engine_rail *rl = &e->rails[e->nrails - 1];
  /* DEAD: the engine neither posts to nor polls its endpoint, never invalidates
   * it, and reopens it (sender) or takes a reopened one (receiver) like any
   * broken rail's. It never lived: no life to count in any grace. */
  rl->state = RR_RAIL_DEAD;
  rl->cause = RR_ERR_PEER; /* neutral in "did the peer close every rail?": see engine.h */
  rl->invalidated = 1;
  rl->last_alive_ns = 0;
  snprintf(rl->why, sizeof rl->why, "not connected at setup: %.38s", why ? why : "unreachable");
  /* Dashboards and the health table see the rail down from the start. */
  rr_health_event ev = {.kind = RR_HEV_RAIL_STATE, .dev = ep->dev->index, .to_dev = -1, .state = RR_LINK_DOWN};
  snprintf(ev.ifname, sizeof ev.ifname, "%s", rl->ifname);
  snprintf(ev.peer, sizeof ev.peer, "%s", e->cfg.peer);
  snprintf(ev.reason, sizeof ev.reason, "%s %.40s: %.40s", engine_role_abbr(e), rl->name, rl->why);
  rr_health_report(&ev);
  return RR_OK;
}

void rr_engine_fini(rr_engine *e) {
  for (int i = 0; i < e->nrails; i++) {
    rr_link_life_release(&rr_link_lives, e->rails[i].life_slot); /* its entry goes with its last rail */
    e->rails[i].life_slot = -1;
    rr_rail_ep *ep = e->rails[i].ep;
    if (!ep) continue;
    if (engine_is_sender(e) && engine_snd(e)->bounce_reg[i]) ep->ops->dereg_mr(engine_snd(e)->bounce_reg[i]);
    rr_tel_rail *tx = ep->tel_tx, *rx = ep->tel_rx;
    ep->ops->destroy(ep);
    rr_tel_rail_close(tx);
    rr_tel_rail_close(rx);
  }
  e->nrails = 0;
  engine_pools_free(e);
  pthread_mutex_destroy(&e->lock);
}

int engine_outstanding(const rr_engine *e) {
  if (engine_is_sender(e)) return engine_snd(e)->fifo_head != engine_snd(e)->fifo_tail || engine_snd(e)->cts_wanted;
  for (int i = 0; i < RR_NET_MAX_REQUESTS; i++)
    if (engine_rcv(e)->rreq[i].in_use && !engine_rcv(e)->rreq[i].complete) return 1;
  return 0;
}

int engine_control_rail(const rr_engine *e) {
  for (int i = 0; i < e->nrails; i++)
    if (engine_rail_usable(e, i)) return i;
  return -1;
}

rr_status engine_post_msg_on(rr_rail_ep *ep, const engine_msg *m) {
  uint8_t buf[RR_RAIL_CTRL_MAX];
  uint32_t len = engine_msg_encode(m, buf, sizeof buf);
  if (!len) return RR_ERR_INTERNAL;
  return ep->ops->post_ctrl(ep, buf, len);
}

rr_status engine_post_msg(rr_engine *e, const engine_msg *m) {
  int r = engine_control_rail(e);
  if (r < 0) return RR_AGAIN;
  rr_status st = engine_post_msg_on(e->rails[r].ep, m);
  if (st == RR_ERR_INTERNAL) return st;
  if (st != RR_OK && st != RR_AGAIN) {
    e->rails[r].cause = st;
    engine_rail_set_state(e, r, RR_RAIL_DEAD, rr_status_str(st));
    return RR_AGAIN;
  }
  return st;
}

/* Progress rail i's endpoint. A broken endpoint fails only this rail; the
 * cause, not the text, decides what follows (a peer that closed every rail
 * is gone; a garbled rail is reopened). A peer closing in order sent its BYE
 * on the control rail before it closed any rail, and the other rails may
 * still hold it unread: when rail i reports the peer's close, they are read
 * first (look_around), so that close is taken as the end it is. */
static void rail_progress(rr_engine *e, int i, int look_around) {
  engine_rail *r = &e->rails[i];
  if (r->state == RR_RAIL_DEAD || e->failed) return;
  rr_status st = r->ep->ops->progress(r->ep);
  if (st == RR_OK) return;
  if (st == RR_ERR_INTERNAL) {
    engine_fail(e, st, "%s: %s", r->name, rr_status_str(st));
    return;
  }
  if (st == RR_ERR_PEER && look_around && !e->peer_bye)
    for (int j = 0; j < e->nrails; j++)
      if (j != i) rail_progress(e, j, 0);
  if (e->failed || r->state == RR_RAIL_DEAD) return;
  r->cause = st;
  engine_rail_set_state(e, i, RR_RAIL_DEAD,
                        st == RR_ERR_PEER       ? "connection closed by the peer"
                        : st == RR_ERR_PROTOCOL ? "protocol violation"
                                                : "connection broken");
}

rr_status engine_progress(rr_engine *e) {
  if (e->failed) return e->failed;
  /* NCCL polls test() in a loop, and most polls find nothing to do: they
   * read only the coarse clock. The precise one is read where a time is
   * stamped (a posted write, a completion) and once per health tick. */
  uint64_t coarse = rr_now_coarse_ns();
  atomic_store_explicit(&e->last_progress_ns, coarse, memory_order_relaxed);
  if (engine_is_sender(e)) {
    rr_status st = engine_send_post(e, 0);
    if (st != RR_OK) return engine_fail(e, st, "posting chunks failed");
  } else {
    engine_rcv(e)->ctrl_queued = 0; /* the rails' progress below hands them over */
  }
  for (int i = 0; i < e->nrails && !e->failed; i++) rail_progress(e, i, 1);
  if (e->failed) return e->failed;
  if (coarse - e->last_tick_ns >= 1000000 || coarse < e->last_tick_ns) {
    e->last_tick_ns = coarse;
    engine_rails_tick(e, rr_now_ns());
  }
  if (e->failed) return e->failed;
  if (engine_is_receiver(e)) {
    rr_status st = engine_recv_outbox(e);
    if (st != RR_OK) return engine_fail(e, st, "control messages failed");
  } else {
    /* The rails' progress took a while: a fresh clock for what is posted now. */
    rr_status st = engine_send_post(e, 0);
    if (st != RR_OK) return engine_fail(e, st, "posting chunks failed");
  }
  /* For the background's idle cadence: judged last, after everything this
   * drive queued (rr_engine_idle_background). */
  if (e->busy || e->peer_spoke) e->last_work_ns = coarse, e->peer_spoke = 0;
  atomic_store_explicit(&e->idle_hint, rr_engine_idle_background(e, coarse), memory_order_relaxed);
  return e->failed;
}

/* An idle connection still has its rails read and its health ticked by the
 * background, only less often. Each drive of a TCP connection costs about
 * eight system calls (a read and TCP_INFO per stream, and on the sender the
 * gray detector's unsent-bytes check per stream), and a job holds thousands
 * of connections, most of them idle at any moment: at every 10 ms, holding
 * 2,048 idle connections cost a process 0.4 CPU-seconds a second
 * (bench/RESULTS.md §10.2). What an idle connection loses is latency in
 * noticing what nobody waits for: a socket that broke or a peer that
 * closed (its rail is reopened up to the idle cadence later, while
 * busy_or_recent still holds). Anything that could be waiting is not idle:
 * work outstanding, or within the last second; a word from the peer
 * within the last second (it may be starting a rollback or a close); a
 * rail not ACTIVE (failed, on probation, demoted, being reopened or
 * drained) or with bytes queued; a notice, acknowledgement, clear-to-send
 * or rollback phase owed; a close under way; a gray-failure latency sample
 * or probe in flight. Link changes wake idle engines at once (the caller's
 * wake_idle), so a NIC going down is still seen within a millisecond. */
int rr_engine_idle_background(const rr_engine *e, uint64_t now_ns) {
  if (e->last_work_ns && now_ns - e->last_work_ns < RR_ENGINE_IDLE_AFTER_NS) return 0;
  if (e->busy || e->peer_spoke || e->closing || e->peer_bye || e->fail_notice_pending) return 0;
  if (engine_is_sender(e)) {
    const engine_sender *snd = engine_snd(e);
    if (snd->send_phase != RR_SEND_STREAMING || snd->claims_owed || snd->nparked || snd->no_carrier_since_ns ||
        snd->down_notice_pending || snd->restore_notice)
      return 0;
  } else {
    const engine_receiver *rcv = engine_rcv(e);
    if (rcv->recv_phase != RR_RECV_STREAMING || rcv->ack_pending || rcv->cts_held || rcv->urgent || rcv->ctrl_queued)
      return 0;
  }
  for (int i = 0; i < e->nrails; i++) {
    const engine_rail *rl = &e->rails[i];
    if (rl->state != RR_RAIL_ACTIVE || rl->g_demoted || rl->fresh || rl->reconnecting || rl->need_drain ||
        rl->g_lat_t0 || rl->probe_start_ns || rl->ep->ops->backlog(rl->ep))
      return 0;
  }
  return !engine_outstanding(e); /* last: a receiver's scans its request slots */
}

void rr_engine_background(rr_engine *e, uint64_t now_ns, int wake_idle) {
  /* NCCL drives a connection in use far more often than this; stepping in
   * sooner would only contend for the lock. */
  uint64_t last = atomic_load_explicit(&e->last_progress_ns, memory_order_relaxed);
  if (now_ns - last < RR_ENGINE_BACKGROUND_NS) return;
  /* The verdict of the last drive, unlocked: evaluating it afresh would
   * take the lock and read the rails of thousands of idle engines every
   * round, to skip them nineteen times in twenty. */
  if (!wake_idle && now_ns - last < RR_ENGINE_IDLE_BACKGROUND_NS &&
      atomic_load_explicit(&e->idle_hint, memory_order_relaxed))
    return;
  if (pthread_mutex_trylock(&e->lock) != 0) return;
  if (!e->failed) {
    engine_progress(e);
    rr_counter_inc(RR_CTR_BACKGROUND_DRIVES);
  }
  pthread_mutex_unlock(&e->lock);
}

/* ---------------------------------------------------------- rail events */

static rr_engine *ep_engine(rr_rail_ep *ep) { return ep->events_arg; }

/* A well-formed frame from the peer on a rail is its process talking: its
 * NCCL has accepted the connection. Polling last_alive_ns alone can miss
 * it: a message read before the first poll is hidden from every later one
 * once our own bytes wait unacknowledged (a path that fails right after
 * the peer's first clear-to-send), and the rails would then be spared as
 * "not accepted yet" for the whole connect timeout instead of δ. */
static void peer_heard(rr_engine *e, const rr_rail_ep *ep) {
  if (ep->rail >= 0 && ep->rail < e->nrails) e->rails[ep->rail].heard = 1;
  e->peer_spoke = 1;
}

static rr_status ev_write_done(rr_rail_ep *ep, uint64_t wr_id) {
  /* A receiver posts no writes: its (empty) pool of sends owns none. */
  if (!engine_is_sender(ep_engine(ep))) return wr_id == ENGINE_PROBE_WR_ID ? RR_OK : RR_ERR_INTERNAL;
  int placed = (ep->dev->attr.caps & RR_RAIL_CAP_WRITE_DONE_PLACED) != 0;
  return engine_send_on_write_done(ep_engine(ep), ep->rail, wr_id, placed);
}

static rr_status ev_write_begin(rr_rail_ep *ep, rr_write_hdr *h, void **dst) {
  rr_engine *e = ep_engine(ep);
  *dst = NULL;
  if (!engine_is_receiver(e)) return engine_violation(e, ep->rail, ENGINE_VIOL_DIRECTION, "data arrived on a send connection");
  peer_heard(e, ep);
  return engine_recv_write_begin(e, ep->rail, h, dst);
}

static rr_status ev_write_recv(rr_rail_ep *ep, const rr_write_hdr *h) {
  rr_engine *e = ep_engine(ep);
  if (!engine_is_receiver(e)) return engine_violation(e, ep->rail, ENGINE_VIOL_DIRECTION, "data arrived on a send connection");
  return engine_recv_write(e, ep->rail, h);
}

static rr_status ev_drain(rr_rail_ep *ep, uint32_t epoch) {
  rr_engine *e = ep_engine(ep);
  return engine_is_receiver(e) ? engine_recv_on_drain(e, ep->rail, epoch) : RR_OK;
}

static rr_status ev_ctrl(rr_rail_ep *ep, const void *msg, uint32_t len) {
  rr_engine *e = ep_engine(ep);
  engine_msg m;
  const char *why = NULL;
  if (engine_msg_decode(msg, len, e->nrails, &m, &why) != RR_OK)
    return engine_violation(e, ep->rail, ENGINE_VIOL_MALFORMED, "%s (%u bytes)", why, len);
  peer_heard(e, ep);
  if (m.type == ENGINE_CTRL_PROBE) return RR_OK; /* its arrival was the point */
  if (m.type == ENGINE_CTRL_BYE) return engine_on_bye(e, &m);
  return engine_is_sender(e) ? engine_send_on_msg(e, ep->rail, &m)
                                       : engine_recv_on_msg(e, ep->rail, &m);
}

const rr_rail_events rr_engine_rail_events = {
    .on_write_done = ev_write_done,
    .on_write_begin = ev_write_begin,
    .on_write_recv = ev_write_recv,
    .on_ctrl = ev_ctrl,
    .on_drain = ev_drain,
};

/* ----------------------------------------------------------------- test */

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
  rr_status st = kind == RR_REQ_SEND ? engine_send_test(request, done, sizes)
                                     : engine_recv_test(request, done, sizes);
  pthread_mutex_unlock(&e->lock);
  return st;
}
