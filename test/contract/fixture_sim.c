/* The simulation's rail (test/sim/sim_rail.c) under the contract, on its
 * virtual clock: one pair of endpoints on one simulated path, in either of
 * its kinds (RC_SIM_KIND: the TCP-like one with two streams, or the
 * verbs-like ordered one whose completions mean placement), with latency
 * and jitter but no faults. sim_rail.c is linked alone: the simulation's
 * traffic and fault modules are replaced below by what the rail asks of
 * them, and its checkers by ones that record what they caught.
 *
 * The writer (side 0) is the simulation's receiver end: the sim checks every
 * write its sender end posts against the engine's send requests, which the
 * contract's writes are not. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rail_contract.h"
#include "sim.h"

uint64_t sim_now_ns;

typedef struct sim_fx {
  sim_world w;
} sim_fx;

/* ---- what sim_rail.c asks of the rest of the simulation ---- */

void sim_trace(sim_world *w, const char *fmt, ...) {
  if (!w->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

void sim_fail(sim_world *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(w->fail_why, sizeof w->fail_why, fmt, ap);
  va_end(ap);
}

/* No faults are scheduled: the rail's fault hooks find none allowed. */
void sim_event_add(sim_world *w, uint64_t at, int kind, int rail, uint64_t arg, sim_ep *ep) {
  (void)at, (void)kind, (void)rail, (void)arg, (void)ep;
  sim_fail(w, "a fault was scheduled in a run without faults");
}
int sim_fault_ok(sim_world *w, int r, uint64_t start, uint64_t end, int permanent) {
  (void)w, (void)r, (void)start, (void)end, (void)permanent;
  return 0;
}
uint64_t sim_loss_span(sim_world *w) { return w->verbs_retry_ns; }

/* Sources are the contract's own buffer, never an NCCL send's. */
int sim_traffic_source_ok(sim_world *w, const void *p, size_t len) {
  (void)w, (void)p, (void)len;
  return 1;
}
int sim_traffic_source_msg(sim_world *w, const void *p) {
  (void)w, (void)p;
  return -1;
}
int sim_traffic_send_live(sim_world *w, int mi) {
  (void)w, (void)mi;
  return 1;
}
/* A landing is fine inside a registration of the side it lands on. */
int sim_traffic_landing_ok(sim_world *w, const void *p, size_t len) {
  for (int side = 0; side < 2; side++)
    for (const sim_mr *m = w->dev[side][0]->mrs; m; m = m->next)
      if ((const char *)p >= (const char *)m->base.base &&
          (const char *)p + len <= (const char *)m->base.base + m->base.len)
        return 1;
  return 0;
}
void sim_traffic_where(sim_world *w, const void *p, char *buf, size_t len) {
  (void)w;
  snprintf(buf, len, "%p", p);
}
/* sim_pair_new hands the endpoints to the engine's events; the fixture
 * points them at the contract's before anything moves. */
const rr_rail_events rr_engine_rail_events;

/* ---- the fixture ---- */

static rr_status sim_open(rc_env *env) {
  sim_fx *f = calloc(1, sizeof *f);
  if (!f) return RR_ERR_NOMEM;
  env->fx_state = f;
  sim_world *w = &f->w;
  const char *kind = getenv("RC_SIM_KIND");
  int verbs = kind && !strcmp(kind, "verbs");
  sim_rng_seed(&w->rng, 27);
  w->verbose = getenv("RC_SIM_VERBOSE") != NULL;
  w->nrails = 1;
  w->kind[0] = verbs ? SIM_VERBS : SIM_TCP;
  w->nstreams[0] = verbs ? 1 : SIM_MAX_STREAMS;
  w->placed[0] = verbs;
  w->ar[0] = verbs; /* split writes: the bulk lands, the arrival reports the rest */
  w->rcq_lag_ns = 20 * SIM_US;
  w->lat_ns[0] = 10 * SIM_US;
  w->jitter_ns[0] = 30 * SIM_US; /* streams overtake each other */
  w->sq_depth = 64;
  w->window = 4u << 20;
  w->verbs_retry_ns = 5 * SIM_MS;
  w->path[0].up = 1;
  w->eng[SIM_SEND].cfg.chunk_size = RC_BUF_BYTES; /* the rail refuses writes larger than the engine's chunk */
  sim_now_ns = SIM_START_NS;
  int sim_side[2] = {SIM_RECV, SIM_SEND};
  for (int i = 0; i < 2; i++) w->dev[sim_side[i]][0] = sim_dev_open(w, sim_side[i], 0, w->kind[0]);
  sim_pair *p = sim_pair_new(w, 0);
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    s->dev = &w->dev[sim_side[i]][0]->base;
    s->ep = &p->ep[sim_side[i]]->base;
    s->ep->events = &rc_events;
    s->ep->events_arg = s;
  }
  return RR_OK;
}

static void sim_tick(rc_env *env) {
  (void)env;
  sim_now_ns += 2 * SIM_US;
}

static const char *sim_violation(rc_env *env) {
  sim_fx *f = env->fx_state;
  return f->w.failed ? f->w.fail_why : NULL;
}

static void sim_close(rc_env *env) {
  sim_fx *f = env->fx_state;
  if (!f) return;
  sim_pairs_free(&f->w);
  for (int side = 0; side < 2; side++) sim_dev_close(f->w.dev[side][0]);
  free(f);
}

const rc_fixture rc_fixture_under_test = {
    .name = "rail_contract_sim", .open = sim_open, .tick = sim_tick, .violation = sim_violation, .close = sim_close};
