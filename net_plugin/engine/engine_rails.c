/* Rail health inside a connection: the rail state machine, failure
 * detection (broken endpoints, local link state, silence followed by a
 * probe), and fail-back with hysteresis.
 *
 *   ACTIVE --(endpoint broke)-----------------------------> DEAD (final)
 *   ACTIVE --(link down | silent for δ | peer says down)--> DOWN
 *   DOWN ---(signs of life after the failure)-------------> RECOVERING
 *   RECOVERING --(alive for the hold time)----------------> ACTIVE (fail-back)
 *   RECOVERING --(silent again | link down)---------------> DOWN
 *   ACTIVE --(delivers a fraction of its level)-----------> DEGRADED (engine_gray.c)
 *   DEGRADED --(probes healthy for the hold time)---------> ACTIVE
 *   DEGRADED --(link down)--------------------------------> DOWN
 *
 * The hold time doubles with each failure of the same rail within 10 s (up
 * to 64x), so a port flapping every 200 ms never gets traffic back. */
#include "engine_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "link_life.h"
#include "rr_health_bus.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdio.h>
#include <string.h>

#define MS 1000000ull
#define FLAP_WINDOW_NS (10000 * MS)
#define RECOVERY_PROBE_NS (50 * MS)
#define PEER_CLOSE_GRACE_NS (200 * MS)

/* Time from t to now; 0 when t is later (it was stamped during this pass). */
static uint64_t since(uint64_t now, uint64_t t) { return now > t ? now - t : 0; }

static const char *const rail_state_names[RR_RAIL_NSTATES] = {
    [RR_RAIL_ACTIVE] = "active",
    [RR_RAIL_DOWN] = "down",
    [RR_RAIL_RECOVERING] = "recovering",
    [RR_RAIL_DEAD] = "dead",
    [RR_RAIL_DEGRADED] = "degraded",
};
_Static_assert(sizeof rail_state_names / sizeof *rail_state_names == RR_RAIL_NSTATES,
               "a name for every rail state");

/* How each rail state is published in the health table. */
static const rr_link_state rail_health_state[RR_RAIL_NSTATES] = {
    [RR_RAIL_ACTIVE] = RR_LINK_UP,
    [RR_RAIL_DOWN] = RR_LINK_DOWN,
    [RR_RAIL_RECOVERING] = RR_LINK_RECOVERING,
    [RR_RAIL_DEAD] = RR_LINK_DOWN,
    [RR_RAIL_DEGRADED] = RR_LINK_DEGRADED,
};

int engine_rail_usable(const rr_engine *e, int r) { return e->rails[r].state == RR_RAIL_ACTIVE; }

uint32_t engine_given_up_mask(const rr_engine *e, uint64_t now) {
  uint32_t m = 0;
  for (int i = 0; i < e->nrails; i++) {
    const engine_rail *rl = &e->rails[i];
    if (rl->state == RR_RAIL_DEAD ||
        (rl->state == RR_RAIL_DOWN && !rl->fresh && since(now, rl->swapped_ns) > e->cfg.progress_timeout_ns))
      m |= 1u << i;
  }
  return m;
}

uint32_t engine_down_mask(const rr_engine *e) {
  uint32_t m = 0;
  for (int i = 0; i < e->nrails; i++)
    if (!engine_rail_usable(e, i)) m |= 1u << i;
  return m;
}

/* An event about rail r (moving traffic from r to rail `to` when to >= 0);
 * `again` when it is no new fault (engine_gray_demotion_goes_on). */
static void report_fault(rr_engine *e, int r, rr_health_event_kind kind, int to, int again) {
  engine_rail *rl = &e->rails[r];
  rr_health_event ev = {.kind = kind, .dev = rl->ep->dev->index, .to_dev = to >= 0 ? e->rails[to].ep->dev->index : -1,
                        .state = rail_health_state[e->rails[to >= 0 ? to : r].state]};
  snprintf(ev.ifname, sizeof ev.ifname, "%s", rl->ifname);
  if (to >= 0) snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", e->rails[to].ifname);
  snprintf(ev.peer, sizeof ev.peer, "%s", e->cfg.peer);
  const engine_rail *about = to >= 0 ? &e->rails[to] : rl;
  /* A rail that just failed or was demoted says where its fault is, in the
   * event and at the end of its reason, which is what `rerail status` shows
   * of it (the health table's rows have no field for it). */
  rr_fault_where w = RR_WHERE_NONE;
  if (kind == RR_HEV_RAIL_STATE && (ev.state == RR_LINK_DOWN || ev.state == RR_LINK_DEGRADED))
    w = (rr_fault_where)about->where;
  /* A demotion going on says where it is (status shows the reason) but
   * carries no `where`: the telemetry counts a fault or demotion per event
   * that carries one, and a demoted verbs rail's reopen is two more events. */
  ev.where = again ? RR_WHERE_NONE : w;
  const char *where = rr_fault_where_str(w);
  snprintf(ev.reason, sizeof ev.reason, "%s %.32s: %.44s%s%s", engine_role_abbr(e),
           about->name, about->why, where[0] ? "; " : "", where);
  rr_health_report(&ev);
}

static void report(rr_engine *e, int r, rr_health_event_kind kind, int to) { report_fault(e, r, kind, to, 0); }

/* How long every rail closed by the peer may wait for a reopen before it
 * counts as the peer gone: PEER_CLOSE_GRACE, or δ/4 when that is shorter. */
static uint64_t peer_close_grace_ns(const rr_engine *e) {
  return e->cfg.progress_timeout_ns / 4 < PEER_CLOSE_GRACE_NS ? e->cfg.progress_timeout_ns / 4 : PEER_CLOSE_GRACE_NS;
}

/* No rail can carry traffic: fail now if none can ever come back, else give
 * them the progress timeout to heal. */
static void check_rails_left(rr_engine *e, uint64_t now) {
  if (engine_control_rail(e) >= 0) {
    e->no_rail_since_ns = 0;
    return;
  }
  if (!e->no_rail_since_ns) {
    e->no_rail_since_ns = now;
    /* When the path was last seen working: the error bound (δ + 1 s) runs
     * from the failure, which silence detection noticed up to δ late. */
    e->no_rail_life_ns = 0;
    for (int i = 0; i < e->nrails; i++)
      if (e->rails[i].last_alive_ns > e->no_rail_life_ns) e->no_rail_life_ns = e->rails[i].last_alive_ns;
    if (e->no_rail_life_ns > now) e->no_rail_life_ns = now;
  }
  int all_dead = 1, peer_closed = 1;
  uint64_t last_death = 0;
  for (int i = 0; i < e->nrails; i++) {
    all_dead &= e->rails[i].state == RR_RAIL_DEAD;
    peer_closed &= e->rails[i].state == RR_RAIL_DEAD && e->rails[i].cause == RR_ERR_PEER;
    if (e->rails[i].state_since_ns > last_death) last_death = e->rails[i].state_since_ns;
  }
  /* Rails that broke may come back (a healed link still has to resolve its
   * neighbour, reconnect and show life): they get until δ + 600 ms after the
   * path was last seen working, and at least 600 ms from now on, which keeps
   * an all-rails-down error within δ + 1 s of the failure. */
  uint64_t grace_end = e->no_rail_life_ns + e->cfg.progress_timeout_ns + 600 * MS;
  if (grace_end < e->no_rail_since_ns + 600 * MS) grace_end = e->no_rail_since_ns + 600 * MS;
  if (all_dead && peer_closed && e->peer_bye) {
    /* The peer said BYE before closing: the end of the connection. */
    engine_closed_by_peer(e);
    return;
  }
  if (all_dead && peer_closed) {
    /* The peer closes a rail's sockets when it reopens that rail (the new
     * ones may reach our listener a moment after the old ones' end), and a
     * live receiver closes a rail that broke the protocol, its only one
     * too, for the sender to reopen (busy_or_recent). So every rail closed
     * is the peer gone only when no reopen follows within the grace, and
     * none of ours to its listener is still under way (one to a dead
     * process is refused at once). */
    int attempt = 0;
    for (int i = 0; i < e->nrails; i++) attempt |= e->rails[i].reconnecting;
    if (since(now, last_death) < peer_close_grace_ns(e) || (attempt && now <= grace_end)) return;
  } else if (now <= grace_end) {
    return;
  }
  char list[200] = "";
  size_t off = 0;
  for (int i = 0; i < e->nrails && off < sizeof list; i++)
    off += (size_t)snprintf(list + off, sizeof list - off, "%s%s: %s", i ? "; " : "",
                            e->rails[i].name, e->rails[i].why);
  if (peer_closed && !engine_outstanding(e)) {
    /* The peer closing an idle connection is how connections end (a peer
     * older than BYE, or one whose close could not say it). */
    engine_closed_by_peer(e);
  } else if (peer_closed) {
    /* No reopen followed: the peer's process is gone, not a NIC or a path. */
    for (int i = 0; i < e->nrails; i++) {
      e->rails[i].where = RR_WHERE_PROCESS;
      report(e, i, RR_HEV_RAIL_STATE, -1);
    }
    engine_fail(e, RR_ERR_PEER, "the peer closed every rail (did its process die?): %s", list);
  }
  else
    engine_fail(e, RR_ERR_RAIL, "no rail left: %s", list);
}

/* Where the fault that takes rail r out of service is: what the caller
 * learned (the peer's notice), else this end's own link, else the path.
 * A NIC that fails towards every peer of the host is classified by the
 * health table's readers (rerail status), which see every connection. */
static int classify(const rr_engine *e, int r) {
  const engine_rail *rl = &e->rails[r];
  if (rl->where_hint) return rl->where_hint;
  if (rr_health_nic_get(rl->ep->dev->index) == RR_LINK_DOWN) return RR_WHERE_LOCAL;
  return RR_WHERE_PATH;
}

void engine_rail_set_state(rr_engine *e, int r, rr_rail_state st, const char *why) {
  engine_rail_set_state_seen(e, r, st, why, ENGINE_SEEN_HERE);
}

void engine_rail_set_state_seen(rr_engine *e, int r, rr_rail_state st, const char *why, engine_rail_seen seen) {
  engine_rail *rl = &e->rails[r];
  rr_rail_state old = rl->state;
  if (old == st || old == RR_RAIL_DEAD) return;
  int in_service = old == RR_RAIL_ACTIVE || old == RR_RAIL_RECOVERING || old == RR_RAIL_DEGRADED;
  if (in_service && (st == RR_RAIL_DOWN || st == RR_RAIL_DEAD || st == RR_RAIL_DEGRADED)) rl->where = classify(e, r);
  rl->where_hint = 0;
  uint64_t now = rr_now_ns();
  int prev_control = engine_control_rail(e);
  rl->state = st;
  rl->state_since_ns = now;
  snprintf(rl->why, sizeof rl->why, "%s", why);
  engine_gray_on_state(e, r, old, st, now);
  /* DEAD and DOWN look alike in the health table: the transition says which. */
  RR_INFO(RR_SUB_NET, "%s %s: %s -> %s (%s)", engine_role_abbr(e), rl->name, rail_state_names[old],
          rail_state_names[st], why);
  /* A rail that fails again while on probation is flapping as much as one
   * that fails while carrying traffic: both lengthen its next hold. */
  if ((old == RR_RAIL_ACTIVE || old == RR_RAIL_RECOVERING) && st != RR_RAIL_ACTIVE) {
    rl->recent_failures = now - rl->last_failure_ns < FLAP_WINDOW_NS ? rl->recent_failures + 1 : 1;
    rl->last_failure_ns = now;
  }
  /* A rail that carried traffic and fails, or whose endpoint broke, is
   * invalidated: nothing it carried lands after this, so it owes no drain, and
   * receives that waited only for that drain may complete. (One on
   * probation here may still carry chunks the peer sent on it: it is not
   * cut off without the rollback that only a failure from ACTIVE starts.) */
  if (((st == RR_RAIL_DOWN || st == RR_RAIL_DEGRADED) && old == RR_RAIL_ACTIVE) || st == RR_RAIL_DEAD) {
    if (!rl->invalidated) rl->ep->ops->invalidate(rl->ep), rl->invalidated = 1;
    rl->writes_cur = rl->writes_old = 0; /* an invalidated endpoint reads no source again */
    if (rl->need_drain) { /* a receiver's (engine_recv_rollback) */
      rl->need_drain = 0;
      engine_recv_check_landed(e);
    }
  }
  /* The receiver may hold a rail usable that failed here while it carried
   * no traffic (on probation, or fresh): it would keep sending its control
   * messages into it. Say so; no rollback is needed for it. */
  if (engine_is_sender(e) && old != RR_RAIL_ACTIVE && (st == RR_RAIL_DOWN || st == RR_RAIL_DEAD))
    engine_snd(e)->down_notice_pending = 1;
  /* After the peer's BYE, a rail it closes is the connection ending: there
   * is nobody to replay to or from, and a rollback would throw away what it
   * delivered before the BYE (eager messages waiting for their receives). */
  int peer_ending = e->peer_bye && st == RR_RAIL_DEAD && rl->cause == RR_ERR_PEER;
  if (old == RR_RAIL_ACTIVE && peer_ending) {
    report(e, r, RR_HEV_RAIL_STATE, -1);
  } else if (old == RR_RAIL_ACTIVE) {
    report(e, r, RR_HEV_RAIL_STATE, -1);
    if (engine_is_receiver(e)) engine_recv_rollback(e, RR_RECV_RAIL_LOST);
    else engine_send_rail_lost(e, seen);
  } else if (st == RR_RAIL_ACTIVE) {
    /* Balance: join at the others' share, not with a backlog of credit. */
    double vmin = -1;
    for (int i = 0; i < e->nrails; i++)
      if (i != r && engine_rail_usable(e, i) && (vmin < 0 || e->rails[i].vtime < vmin)) vmin = e->rails[i].vtime;
    if (vmin >= 0) rl->vtime = vmin;
    /* Traffic returns to r when it ranks before the rail in use. */
    if (prev_control > r) report(e, prev_control, RR_HEV_FAILBACK, r);
    else report(e, r, RR_HEV_RAIL_STATE, -1);
  } else {
    report_fault(e, r, RR_HEV_RAIL_STATE, -1, engine_gray_demotion_goes_on(e, r, old, st));
  }
  check_rails_left(e, now);
}

/* Install a new endpoint under rail r. A rail still in use first goes DOWN
 * (a rollback replays whatever the old endpoint had in flight); the new one
 * starts as DOWN and must show life and hold it like any healed rail. */
void engine_rail_swap(rr_engine *e, int r, rr_rail_ep *ep) {
  engine_rail *rl = &e->rails[r];
  if (rl->state == RR_RAIL_ACTIVE || rl->state == RR_RAIL_RECOVERING)
    engine_rail_set_state(e, r, RR_RAIL_DOWN, "reconnected by the peer");
  rr_rail_ep *old = rl->ep;
  ep->tel_tx = old->tel_tx;
  ep->tel_rx = old->tel_rx;
  old->tel_tx = old->tel_rx = NULL;
  old->ops->destroy(old);
  rl->ep = ep;
  ep->rail = r;
  /* A fresh endpoint carries nothing of an older epoch. */
  int owed = rl->need_drain;
  rl->need_drain = 0;
  rl->invalidated = 0;
  rl->g_reopen = 0; /* what the old endpoint held went with it */
  rl->g_reopen_since = rl->g_reopen_gave_up = 0;
  rl->g_stale_since = 0;
  rl->drain_posted = e->epoch;
  rl->writes_cur = rl->writes_old = 0; /* the old endpoint is destroyed */
  rl->cause = RR_OK;
  uint64_t now = rr_now_ns();
  rl->swapped_ns = now;
  if (owed) engine_recv_check_landed(e); /* only a receiver owes drains */
  rl->state = RR_RAIL_DOWN;
  rl->state_since_ns = now;
  rl->last_alive_ns = 0;
  rl->last_probe_ns = 0;
  rl->in = (engine_inbound){0}; /* the new endpoint has brought nothing yet */
  rl->fresh = 1; /* new sockets hold no stale bytes: any life is real */
  engine_gray_on_state(e, r, RR_RAIL_DOWN, RR_RAIL_DOWN, now);
  snprintf(rl->why, sizeof rl->why, "reconnected");
  rr_counter_inc(RR_CTR_RAIL_RECONNECTS);
  RR_INFO(RR_SUB_NET, "%s %s: reconnected", engine_role_abbr(e), rl->name);
}

/* Rail r now reaches peer_addr: its name and its link follow (the link it
 * left is given back, and freed if no other rail holds it). */
static void rail_readdress(rr_engine *e, int r, const char *peer_addr) {
  engine_rail *rl = &e->rails[r];
  if (!peer_addr || !strncmp(rl->peer_addr, peer_addr, sizeof rl->peer_addr)) return;
  snprintf(rl->peer_addr, sizeof rl->peer_addr, "%s", peer_addr);
  char name[sizeof rl->name];
  snprintf(name, sizeof name, "rail%d (%.15s -> %.40s)", r, rl->ifname, rl->peer_addr);
  memcpy(rl->name, name, sizeof name);
  rr_link_life_release(&rr_link_lives, rl->life_slot);
  rl->life_slot = rr_link_life_slot(&rr_link_lives, (int)e->cfg.role, rl->ep->dev->index, rl->peer_addr);
}

void rr_engine_rail_replace(rr_engine *e, int rail, rr_rail_ep *ep, const char *peer_addr) {
  pthread_mutex_lock(&e->lock);
  atomic_store_explicit(&e->idle_hint, 0, memory_order_relaxed); /* rr_engine_background */
  if (rail >= 0 && rail < e->nrails && !e->failed) {
    engine_rail_swap(e, rail, ep);
    rail_readdress(e, rail, peer_addr);
  } else {
    ep->ops->destroy(ep);
  }
  pthread_mutex_unlock(&e->lock);
}

/* Sender: a failed rail whose NIC is up gets a fresh transport, at most
 * once per RECONNECT_EVERY while it stays down. */
#define RECONNECT_EVERY_NS (100 * MS)
static void maybe_reconnect(rr_engine *e, int r, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  /* A connection that is ending (either end closing in order) reopens nothing. */
  if (e->closing || e->peer_bye) return;
  if (!e->cfg.reconnect || (!rl->reconnecting && since(now, rl->last_reconnect_ns) < RECONNECT_EVERY_NS))
    return;
  if (!rl->reconnecting) rl->last_reconnect_ns = now;
  rr_rail_ep *ep = NULL;
  rr_status st = e->cfg.reconnect(e->cfg.reconnect_arg, r, &ep);
  rl->reconnecting = st == RR_AGAIN;
  if (st == RR_OK) {
    engine_rail_swap(e, r, ep);
    /* Give the fresh rail a progress timeout to show life before another. */
    rl->last_reconnect_ns = now + e->cfg.progress_timeout_ns;
  }
}

static void probe(rr_engine *e, int r, uint64_t now) {
  engine_rail *rl = &e->rails[r];
  /* One probe at a time: a dead rail must not pile them up. */
  if (rl->ep->ops->backlog(rl->ep) > 0) return;
  engine_msg p = {.type = ENGINE_CTRL_PROBE, .u.probe_rail = (uint32_t)r};
  if (engine_post_msg_on(rl->ep, &p) == RR_OK) {
    rl->last_probe_ns = now;
    rr_counter_inc(RR_CTR_CONTROL_PROBES);
  }
}

uint64_t engine_rail_hold_ns(const rr_engine *e, const engine_rail *rl) {
  uint32_t shift = rl->recent_failures > 1 ? rl->recent_failures - 1 : 0;
  if (shift > 6) shift = 6;
  return e->cfg.failback_hold_ns << shift;
}


/* Reconnecting is worth it while the connection carries traffic, or for a
 * while after the rail failed (so an idle connection heals too), not forever
 * for a NIC that never comes back to an idle peer. */
static int busy_or_recent(const rr_engine *e, const engine_rail *rl, uint64_t now) {
  /* The peer closing one rail is not the peer going away (its listener
   * replaced the rail, or somebody holding the handle took it over). When
   * it closed every rail, it is gone, or it is alive and refused what a
   * rail carried (a protocol violation on a connection's only rail): while
   * traffic waits, the grace check_rails_left gives such a close is spent
   * reopening, which the peer's listener answers only if it is alive. An
   * idle connection closed on every rail is how NCCL's teardown looks. */
  if (rl->state == RR_RAIL_DEAD && rl->cause == RR_ERR_PEER) {
    int all = 1;
    for (int i = 0; i < e->nrails; i++)
      all &= e->rails[i].state == RR_RAIL_DEAD && e->rails[i].cause == RR_ERR_PEER;
    if (all) return e->busy && (rl->reconnecting || since(now, rl->state_since_ns) < peer_close_grace_ns(e));
  }
  return e->busy || since(now, rl->state_since_ns) < 60000 * MS;
}

static int any_rail_heard(const rr_engine *e) {
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].heard) return 1;
  return 0;
}

/* How long the first word from the peer may take: the connect timeout, or
 * δ when that is longer. */
static uint64_t first_word_ns(uint64_t delta) {
  uint64_t t = rr_params_get()->connect_timeout_ms * MS;
  return t > delta ? t : delta;
}

/* What the receiver says again while it may have gone unheard. The sender
 * reopens the rails it sees down; one this end saw fail that the sender
 * still trusts (our notice was lost, or it came back on the sender's side
 * first) would wait forever: say again which rails are down while any
 * waits. */
static void receiver_reminds(rr_engine *e, uint64_t now, uint64_t delta) {
  if (!e->cfg.reopens || since(now, e->down_notice_ns) <= delta) return;
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].state == RR_RAIL_DOWN && !e->rails[i].fresh && since(now, e->rails[i].state_since_ns) > delta) {
      e->fail_notice_pending = 1;
      e->down_notice_ns = now;
      break;
    }
}

/* What the sender says again. It repeats its list of rails down every δ
 * while one is: a notice lost with a rail must not leave the receiver
 * trusting it. Not before the peer has shown life on some rail: until its
 * NCCL accepts the connection its endpoints are not connected (seconds,
 * when it accepts hundreds in turn), and a message posted into one that
 * does not take it can only break the rail it goes on (a verbs queue pair
 * runs out of retries); the receiver holds the rails named for later at
 * COMMIT down already. A rollback request that got no answer is asked
 * again (it may have gone down with a rail). */
static void sender_reminds(rr_engine *e, uint64_t now, uint64_t delta) {
  if (since(now, e->down_notice_ns) > delta && engine_given_up_mask(e, now) && any_rail_heard(e)) {
    engine_snd(e)->down_notice_pending = 1;
    e->down_notice_ns = now;
  }
  if (engine_send_holding(e) && since(now, engine_snd(e)->resume_wait_since_ns) > delta / 2)
    engine_send_set_phase(e, engine_snd(e)->send_phase, RR_SEND_NO_ANSWER, now);
}

/* Does rail i of a busy connection have nothing of its own under way, so
 * that its link's life may stand for its own (link_life.h)? Not the
 * control rail (its messages are the connection's), no write of ours in
 * flight or queued on it, nothing the receiver invited due over it: a warm
 * backup in failover mode, or a rail balance leaves unused for a while. */
static int rail_idle_own(const rr_engine *e, int i) {
  const engine_rail *rl = &e->rails[i];
  if (rl->life_slot < 0 || i == engine_control_rail(e)) return 0;
  if (rl->writes_cur || rl->writes_old || rl->ep->ops->backlog(rl->ep) > 0) return 0;
  return !engine_is_receiver(e) || !engine_inbound_due(e, i, rl->last_alive_ns);
}

void engine_rails_tick(rr_engine *e, uint64_t now) {
  int busy = engine_outstanding(e);
  if (busy && !e->busy)
    for (int i = 0; i < e->nrails; i++) e->rails[i].watch_since_ns = now;
  e->busy = busy;
  uint64_t delta = e->cfg.progress_timeout_ns;
  uint64_t recovery_probe = delta / 4 < RECOVERY_PROBE_NS ? delta / 4 : RECOVERY_PROBE_NS;
  /* Life counts as fresh within a few probe intervals. */
  uint64_t fresh = 3 * recovery_probe + 20 * MS;
  for (int i = 0; i < e->nrails && !e->failed; i++) {
    engine_rail *rl = &e->rails[i];
    /* A rail that failed is reopened from the sending side once its NIC is
     * up; until the new transport shows life it stays DOWN. */
    if (engine_is_sender(e) && (rl->state == RR_RAIL_DEAD || rl->state == RR_RAIL_DOWN ||
                                         engine_gray_needs_reopen(e, i)) &&
        rr_health_nic_get(rl->ep->dev->index) != RR_LINK_DOWN && busy_or_recent(e, rl, now))
      maybe_reconnect(e, i, now);
    if (rl->state == RR_RAIL_DEAD) continue;
    if (rr_health_nic_get(rl->ep->dev->index) == RR_LINK_DOWN) {
      if (rl->state != RR_RAIL_DOWN) engine_rail_set_state(e, i, RR_RAIL_DOWN, "local link down");
      rl->g_demoted = 0; /* a hard failure: judged afresh once it is back */
      continue;
    }
    /* An idle rail of a busy connection takes its link's life as its own
     * (link_life.h); kept in last_alive_ns, so that the rail, once it
     * carries work, is judged from it and not from its last probe. */
    int shared = rl->state == RR_RAIL_ACTIVE && busy && rail_idle_own(e, i);
    if (shared) {
      uint64_t link = rr_link_life_get(&rr_link_lives, rl->life_slot);
      if (link > rl->last_alive_ns && link <= now) rl->last_alive_ns = link;
    }
    /* Asking the rail costs a system call per socket, or a signalled
     * request (verbs): only when in doubt. A receiver hears the peer's
     * writes land, and its doubt runs from when what it invited is due
     * over the rail, if that is later (engine_inbound.c: at most 3δ/8). */
    uint64_t heard_ns = rl->in.last_arrival_ns > rl->last_alive_ns ? rl->in.last_arrival_ns : rl->last_alive_ns;
    /* Whatever life the rail has, the peer's writes landing included, is
     * its link's: a link that carries traffic for some connections keeps
     * the idle rails of the others alive without a probe. */
    if (rl->state == RR_RAIL_ACTIVE && !shared) rr_link_life_saw(&rr_link_lives, rl->life_slot, heard_ns);
    uint64_t doubt_from = heard_ns;
    if (rl->state == RR_RAIL_ACTIVE && busy && since(now, doubt_from) > delta / 8) {
      uint64_t due = engine_inbound_due(e, i, rl->last_alive_ns);
      if (due > doubt_from) doubt_from = due < now ? due : now;
    }
    if (since(now, doubt_from) > delta / 8 || rl->state != RR_RAIL_ACTIVE) {
      uint64_t a = rl->ep->ops->last_alive_ns(rl->ep, now);
      /* What the rail's own transport says is its link's life too. */
      rr_link_life_saw(&rr_link_lives, rl->life_slot, a);
      /* Later than the stamp a rail is added with (0 for one added down) is life. */
      if (a > rl->last_alive_ns && rl->last_alive_ns) rl->heard = 1;
      if (a > rl->last_alive_ns) rl->last_alive_ns = a;
      if (a > heard_ns) heard_ns = a;
      if (a > doubt_from) doubt_from = a;
    }
    switch (rl->state) {
    case RR_RAIL_ACTIVE: {
      if (!busy) break; /* an idle connection is not judged */
      /* The peer's writes landing on the rail are life (engine_inbound.c
       * says what that costs when our way out fails and theirs does not). */
      uint64_t from = heard_ns > rl->watch_since_ns ? heard_ns : rl->watch_since_ns;
      uint64_t quiet = since(now, from);
      if (quiet > delta && !any_rail_heard(e) && quiet <= first_word_ns(delta)) {
        /* No rail has heard the peer since the connection was made: its
         * NCCL has not accepted it yet (a listener connects its endpoints
         * when accept() hands the connection out, and NCCL's proxy accepts
         * hundreds of connections in turn; RDMA packets to an endpoint not
         * yet connected go unanswered). That is the peer's process being
         * slow, not a rail: none is blamed before the connect timeout, the
         * bound a connector gives the peer too. Once one rail hears it,
         * the others' silence is theirs. */
        if (since(now, rl->last_probe_ns) > delta / 4) probe(e, i, now);
      } else if (quiet > delta) {
        if (engine_gray_demote_silent(e, i, now)) break;
        char why[64];
        snprintf(why, sizeof why, "silent for %llu ms", (unsigned long long)(quiet / MS));
        engine_rail_set_state(e, i, RR_RAIL_DOWN, why);
      } else if (quiet > delta / 4 && since(now, doubt_from) > delta / 4 && since(now, rl->last_probe_ns) > delta / 4 &&
                 (!shared || rr_link_life_claim_probe(&rr_link_lives, rl->life_slot, now, delta / 16))) {
        /* 5δ/8 after the rail's last life at the latest. An idle rail's
         * link, δ/4 after its last life, is probed by one of its rails per
         * δ/16 until one answers: one probe where answers are quick, and
         * where one is slow (an overloaded path) a few behind it, so that a
         * single late answer does not leave every idle rail of the link
         * unproven at δ. At most 16 per δ per link, whatever the rails. */
        probe(e, i, now);
      }
      break;
    }
    case RR_RAIL_DOWN:
      /* A reconnected rail is probed at once and often: it may be the one
       * the connection is waiting for. */
      if (since(now, rl->last_probe_ns) > (rl->fresh ? 5 * MS : recovery_probe)) probe(e, i, now);
      /* Bytes that were already on their way when the rail failed are read
       * in the first milliseconds: only later life counts. A rail that is
       * reopened waits for its fresh endpoint. */
      if ((rl->fresh || !e->cfg.reopens) &&
          rl->last_alive_ns > rl->state_since_ns + (rl->fresh ? 0 : 20 * MS)) {
        /* A demoted rail reopened comes back demoted, to be probed; the
         * receiver holds it down until the sender's notice says so. */
        if (rl->g_demoted && engine_is_receiver(e)) break;
        rl->fresh = 0;
        rl->healthy_since_ns = rl->last_alive_ns;
        if (rl->g_demoted) {
          engine_rail_set_state(e, i, RR_RAIL_DEGRADED, "reopened, still demoted");
          engine_snd(e)->down_notice_pending = 1;
        } else {
          engine_rail_set_state(e, i, RR_RAIL_RECOVERING, "signs of life");
        }
      }
      break;
    case RR_RAIL_RECOVERING:
      if (since(now, rl->last_probe_ns) > recovery_probe) probe(e, i, now);
      /* A reopened rail is on a fresh transport, probed by both ends: a gap
       * of a few probe intervals is a new outage (a flapping port), which
       * must restart the probation and lengthen the next one. An old
       * endpoint recovering after an outage has TCP's retransmission
       * backoff to live with: it gets δ/2. Traffic returns only on fresh
       * signs of life either way. */
      if (since(now, rl->last_alive_ns) > (e->cfg.reopens ? fresh : delta / 2))
        engine_rail_set_state(e, i, RR_RAIL_DOWN, "silent again while recovering");
      else if (since(now, rl->healthy_since_ns) >= engine_rail_hold_ns(e, rl) && since(now, rl->last_alive_ns) <= fresh)
        engine_rail_set_state(e, i, RR_RAIL_ACTIVE, "healthy for the hold time");
      break;
    default:
      break;
    }
    /* Measured after the checks above, which may have taken it down. */
    if (rl->state == RR_RAIL_ACTIVE || rl->state == RR_RAIL_DEGRADED) engine_gray_tick(e, i, now);
  }
  /* With no rail up, a rail on probation that is alive right now beats
   * failing the connection: the hold protects traffic from thrash, not from
   * having somewhere to go. */
  if (!e->failed && engine_control_rail(e) < 0)
    for (int i = 0; i < e->nrails; i++) {
      engine_rail *rl = &e->rails[i];
      if (rl->state == RR_RAIL_RECOVERING && since(now, rl->last_alive_ns) <= fresh) {
        engine_rail_set_state(e, i, RR_RAIL_ACTIVE, "alive, and no other rail is up");
        break;
      }
      /* A demoted rail still delivers something: better than nothing. */
      if (rl->state == RR_RAIL_DEGRADED && engine_is_sender(e) && !engine_gray_needs_reopen(e, i)) {
        rl->g_demoted = 0; /* in service again: the notices must not name it degraded */
        engine_rail_set_state(e, i, RR_RAIL_ACTIVE, "degraded, but no other rail is up");
        engine_snd(e)->down_notice_pending = 1;
        engine_snd(e)->restore_notice = 1;
        break;
      }
    }
  if (!e->failed) check_rails_left(e, now);
  if (engine_is_sender(e)) sender_reminds(e, now, delta);
  else receiver_reminds(e, now, delta);
}
