/* Faults and events of the simulation: the seed's fault schedule (kept so
 * that normal seeds always have a usable rail), the events that carry it
 * out (paths down and up, pairs breaking or going silent, stalls, flaps,
 * a peer's death, every path down), and the sender's reconnects, whose
 * receiving end the listener installs a little later. */
#include "sim.h"

#include "rr_health_bus.h"

#include <string.h>

/* ------------------------------------------------------------- events */

void sim_event_add(sim_world *w, uint64_t at, int kind, int rail, uint64_t arg, sim_ep *ep) {
  if (w->nev == SIM_MAX_EVENTS) return;
  int i = w->nev++;
  while (i > 0 && w->ev[i - 1].at > at) {
    w->ev[i] = w->ev[i - 1];
    i--;
  }
  w->ev[i] = (sim_event){.at = at, .kind = kind, .rail = rail, .arg = arg, .ep = ep};
}

void sim_nic_set(sim_world *w, int side, int rail, int down) {
  if (w->path[rail].nic_down[side] == down) return;
  w->path[rail].nic_down[side] = down;
  rr_health_nic_state((side == SIM_RECV ? SIM_DEV_BASE_RECV : 0) + rail, side == SIM_SEND ? "simS" : "simR",
                      down ? RR_LINK_DOWN : RR_LINK_UP, "sim");
}

static void path_down(sim_world *w, int r, uint64_t flags) {
  if (w->path[r].up) w->path[r].down_since = sim_now_ns;
  w->path[r].up = 0;
  if (flags & SIM_PD_NIC_SEND) sim_nic_set(w, SIM_SEND, r, 1);
  if (flags & SIM_PD_NIC_RECV) sim_nic_set(w, SIM_RECV, r, 1);
  sim_trace(w, "FAULT rail%d: path down%s%s%s", r, flags & SIM_PD_NIC_SEND ? ", sender's NIC says so" : "",
            flags & SIM_PD_NIC_RECV ? ", receiver's NIC says so" : "", flags & SIM_PD_BREAK ? ", endpoints break" : "");
  if ((flags & SIM_PD_BREAK) && w->cur[r]) sim_pair_break(w, w->cur[r], RR_ERR_RAIL, sim_now_ns, "path down");
}

static void peer_death(sim_world *w, int side) {
  w->dead[side] = 1;
  sim_trace(w, "FAULT: the %s's process dies", side == SIM_SEND ? "sender" : "receiver");
  for (sim_pair *p = w->pairs; p; p = p->next) sim_pair_close_side(w, p, side);
}

void sim_run_event(sim_world *w, const sim_event *ev) {
  int r = ev->rail;
  switch (ev->kind) {
  case SIM_EV_REPLACE:
    ev->ep->attached = 1;
    if (w->dead[SIM_RECV]) {
      ev->ep->base.ops->destroy(&ev->ep->base);
      break;
    }
    sim_trace(w, "rail%d pair%u: the receiver's listener installs the reconnected endpoint", r, ev->ep->pair->id);
    rr_engine_rail_replace(&w->eng[SIM_RECV], r, &ev->ep->base, NULL);
    break;
  case SIM_EV_PATH_DOWN:
    path_down(w, r, ev->arg);
    break;
  case SIM_EV_PATH_UP:
    if (w->all_down) break; /* for good */
    w->path[r].up = 1;
    sim_nic_set(w, SIM_SEND, r, 0);
    sim_nic_set(w, SIM_RECV, r, 0);
    sim_trace(w, "FAULT rail%d: path up", r);
    break;
  case SIM_EV_BREAK_BOTH:
    if (w->cur[r]) sim_pair_break(w, w->cur[r], RR_ERR_RAIL, sim_now_ns, "fault");
    break;
  case SIM_EV_MUTE:
    if (w->cur[r]) sim_pair_mute(w, w->cur[r], "fault");
    break;
  case SIM_EV_STALL:
    if (w->cur[r]) w->cur[r]->stall_until = sim_now_ns + ev->arg;
    sim_trace(w, "FAULT rail%d: delivers nothing for %.3f ms", r, (double)ev->arg / 1e6);
    break;
  case SIM_EV_PEER_DEATH:
    peer_death(w, (int)ev->arg);
    break;
  case SIM_EV_ALL_DOWN:
    sim_trace(w, "FAULT: every path down for good");
    w->all_down = 1;
    for (int i = 0; i < w->nrails; i++) path_down(w, i, ev->arg);
    break;
  }
}

/* --------------------------------------------------- the fault schedule */

/* Normal seeds keep a rail usable at every moment: a fault on rail r is
 * allowed when some other rail is clear of faults from its start until
 * well after its end (detection, reconnect, probation), or when it is a
 * short one with no other fault near it (the engine waits δ + 600 ms for a
 * rail to come back). Intervals are kept per rail. */
#define MAX_SPANS 48
static struct {
  uint64_t start, end;
} spans[SIM_MAX_RAILS][MAX_SPANS];
static int nspans[SIM_MAX_RAILS];
static int perm_dead[SIM_MAX_RAILS];

static int rail_clear(int r, uint64_t start, uint64_t end) {
  if (perm_dead[r]) return 0;
  for (int i = 0; i < nspans[r]; i++)
    if (spans[r][i].start < end && start < spans[r][i].end) return 0;
  return 1;
}

int sim_fault_ok(sim_world *w, int r, uint64_t start, uint64_t end, int permanent) {
  uint64_t margin = w->eng[SIM_SEND].cfg.progress_timeout_ns + 400 * SIM_MS;
  uint64_t until = permanent ? UINT64_MAX : end + margin;
  int ok = 0;
  for (int o = 0; o < w->nrails && !ok; o++)
    if (o != r && rail_clear(o, start, until)) ok = 1;
  if (!ok && !permanent && end - start <= 100 * SIM_MS) {
    ok = 1;
    for (int o = 0; o < w->nrails; o++)
      if (!rail_clear(o, start > SIM_MS * 1000 ? start - SIM_MS * 1000 : 0, end + 1000 * SIM_MS)) ok = 0;
  }
  if (!ok || nspans[r] == MAX_SPANS) return 0;
  spans[r][nspans[r]].start = start;
  spans[r][nspans[r]].end = until;
  nspans[r]++;
  if (permanent) perm_dead[r] = 1;
  return 1;
}

/* How long a break or a silent pair keeps rail r unusable. */
uint64_t sim_loss_span(sim_world *w) {
  return w->reconnect ? w->eng[SIM_SEND].cfg.progress_timeout_ns + 300 * SIM_MS : 0;
}

static void schedule_flaps(sim_world *w, int r, uint64_t t) {
  int n = (int)sim_range(&w->rng, 1, 3);
  uint64_t end = t;
  uint64_t ups[3], downs[3];
  for (int i = 0; i < n; i++) {
    downs[i] = end + sim_range(&w->rng, 0, 3 * SIM_MS);
    ups[i] = downs[i] + sim_range(&w->rng, SIM_MS / 2, 10 * SIM_MS);
    end = ups[i];
  }
  if (!sim_fault_ok(w, r, t, end, 0)) return;
  for (int i = 0; i < n; i++) {
    uint64_t flags = sim_chance(&w->rng, 300) ? SIM_PD_NIC_SEND | SIM_PD_NIC_RECV : 0;
    sim_event_add(w, downs[i], SIM_EV_PATH_DOWN, r, flags, NULL);
    sim_event_add(w, ups[i], SIM_EV_PATH_UP, r, 0, NULL);
  }
  sim_trace(w, "rail%d will flap %d time(s) from %.3f ms", r, n, (double)(t - SIM_START_NS) / 1e6);
}

void sim_schedule_faults(sim_world *w) {
  sim_rng *g = &w->rng;
  uint64_t delta = w->eng[SIM_SEND].cfg.progress_timeout_ns;
  memset(nspans, 0, sizeof nspans);
  memset(perm_dead, 0, sizeof perm_dead);
  int nf = (int)(sim_chance(g, 100) ? 0 : sim_range(g, 1, 8));
  uint64_t times[8];
  for (int i = 0; i < nf; i++) times[i] = SIM_START_NS + sim_below(g, w->chaos_end_ns - SIM_START_NS);
  for (int i = 1; i < nf; i++)
    for (int j = i; j > 0 && times[j - 1] > times[j]; j--) {
      uint64_t t = times[j];
      times[j] = times[j - 1];
      times[j - 1] = t;
    }
  for (int i = 0; i < nf; i++) {
    uint64_t t = times[i];
    int r = (int)sim_below(g, (uint64_t)w->nrails);
    unsigned kind = (unsigned)sim_below(g, 100);
    if (kind < 35) {
      uint64_t dur = sim_range(g, SIM_MS, 3 * delta);
      uint64_t flags = (sim_chance(g, 400) ? SIM_PD_NIC_SEND : 0) | (sim_chance(g, 400) ? SIM_PD_NIC_RECV : 0);
      int brk = sim_chance(g, 250);
      int perm = brk && !w->reconnect;
      if (brk) flags |= SIM_PD_BREAK;
      /* A verbs pair breaks itself when the path stays down past its retries. */
      if (w->kind[r] == SIM_VERBS && dur > w->verbs_retry_ns && !w->reconnect) perm = 1;
      if (!sim_fault_ok(w, r, t, t + dur + (brk ? sim_loss_span(w) : 0), perm)) continue;
      sim_event_add(w, t, SIM_EV_PATH_DOWN, r, flags, NULL);
      sim_event_add(w, t + dur, SIM_EV_PATH_UP, r, 0, NULL);
    } else if (kind < 55) {
      if (w->nrails == 1 && !w->reconnect) continue;
      if (!sim_fault_ok(w, r, t, t + sim_loss_span(w), !w->reconnect)) continue;
      sim_event_add(w, t, SIM_EV_BREAK_BOTH, r, 0, NULL);
    } else if (kind < 70) {
      /* Silence is noticed only by an end with work outstanding; with one
       * rail an idle sender would never learn of it. */
      if (w->nrails == 1) continue;
      if (!sim_fault_ok(w, r, t, t + delta + sim_loss_span(w), !w->reconnect)) continue;
      sim_event_add(w, t, SIM_EV_MUTE, r, 0, NULL);
    } else if (kind < 90) {
      uint64_t dur = sim_range(g, SIM_MS, 2 * delta);
      if (!sim_fault_ok(w, r, t, t + dur, 0)) continue;
      sim_event_add(w, t, SIM_EV_STALL, r, dur, NULL);
    } else {
      schedule_flaps(w, r, t);
    }
  }
  unsigned fatal = (unsigned)sim_below(g, 100);
  if (fatal < 4) {
    w->expect_error = 1;
    w->error_at_ns = SIM_START_NS + sim_below(g, w->chaos_end_ns - SIM_START_NS + 50 * SIM_MS);
    uint64_t side = sim_below(g, 2);
    sim_event_add(w, w->error_at_ns, SIM_EV_PEER_DEATH, 0, side, NULL);
    sim_trace(w, "fatal: the %s dies at %.3f ms", side == SIM_SEND ? "sender" : "receiver",
              (double)(w->error_at_ns - SIM_START_NS) / 1e6);
  } else if (fatal < 8) {
    w->expect_error = 1;
    w->error_at_ns = SIM_START_NS + sim_below(g, w->chaos_end_ns - SIM_START_NS + 50 * SIM_MS);
    uint64_t flags = (sim_chance(g, 500) ? SIM_PD_NIC_SEND : 0) | (sim_chance(g, 500) ? SIM_PD_NIC_RECV : 0);
    sim_event_add(w, w->error_at_ns, SIM_EV_ALL_DOWN, 0, flags, NULL);
    sim_trace(w, "fatal: every path goes down at %.3f ms", (double)(w->error_at_ns - SIM_START_NS) / 1e6);
  }
}

/* ------------------------------------------------------- reconnecting */

/* The sender's cfg.reconnect: a fresh pair when the path is up (after a
 * few RR_AGAIN, as a connect takes a while); the receiver's listener
 * installs its end a little later. */
rr_status sim_reconnect(void *arg, int rail, rr_rail_ep **out) {
  sim_world *w = arg;
  if (w->dead[SIM_RECV]) return RR_ERR_PEER;
  if (!w->path[rail].up) return RR_ERR_RAIL;
  if (w->reconnect_wait[rail] < 0) w->reconnect_wait[rail] = (int)sim_range(&w->rng, 0, 3);
  if (w->reconnect_wait[rail]-- > 0) return RR_AGAIN;
  w->reconnect_wait[rail] = -1;
  sim_pair *p = sim_pair_new(w, rail);
  p->ep[SIM_SEND]->attached = 1;
  sim_event_add(w, sim_now_ns + w->lat_ns[rail] + sim_range(&w->rng, 0, 2 * SIM_MS), SIM_EV_REPLACE, rail, 0,
                p->ep[SIM_RECV]);
  w->st.reconnects++;
  sim_trace(w, "rail%d pair%u: the sender reconnected", rail, p->id);
  *out = &p->ep[SIM_SEND]->base;
  return RR_OK;
}

/* After a new rollback during the chaos window, maybe flap a rail. */
void sim_maybe_flap(sim_world *w) {
  uint64_t rb = w->eng[SIM_RECV].stats.rollbacks;
  if (rb == w->last_rollbacks) return;
  w->last_rollbacks = rb;
  if (sim_now_ns < w->chaos_end_ns && sim_chance(&w->rng, 300))
    schedule_flaps(w, (int)sim_below(&w->rng, (uint64_t)w->nrails), sim_now_ns + sim_below(&w->rng, 2 * SIM_MS));
}

