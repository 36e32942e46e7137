/* rerail-sim: the real transfer engine, sender and receiver, over the
 * in-memory rail, driven by a seeded scheduler on virtual time.
 *
 * A seed chooses everything: rails (1..4, TCP-like, verbs-like or mixed,
 * latencies), engine settings (chain or balance, δ, fail-back hold,
 * reconnects), the traffic, and the faults: paths down (with or without the
 * NIC saying so, the endpoints breaking at both ends or waiting like TCP),
 * pairs going silent with everything in flight lost, stalls, flapping during
 * rollbacks, a rail failing while a write is half landed, control messages
 * delayed and duplicated across rails, and in some seeds the peer's death or
 * every path down for good. Normal seeds keep one rail usable at any time
 * (with a margin for detection and recovery); they must deliver every
 * message exactly once and intact, with no stretch of time without progress.
 * Fatal seeds must end in a clean error (peer or rail) at every end that
 * waits on the network, within the engine's bound.
 *
 *   rerail-sim [--seeds N] [--first S] [--max-failures K]
 *   rerail-sim --seed S --verbose      replay one seed with its event trace
 *   rerail-sim --seed S --expect-held  a regression seed: it must also hold
 *                                      an acked send back for an older write */
#include "sim.h"
#include "link_life.h"

#include "rr_log.h"
#include "rr_params.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t sim_now_ns;
static sim_world W;
static volatile uint64_t current_seed;


/* Whether a rail of the engine has heard its peer since it was made. */
static int sim_heard(const rr_engine *e) {
  for (int i = 0; i < e->nrails; i++)
    if (e->rails[i].heard) return 1;
  return 0;
}

/* ------------------------------------------------------------- output */

void sim_trace(sim_world *w, const char *fmt, ...) {
  if (!w->verbose) return;
  va_list ap;
  va_start(ap, fmt);
  printf("[%11.6f ms] ", (double)(sim_now_ns - SIM_START_NS) / 1e6);
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
}

void sim_fail(sim_world *w, const char *fmt, ...) {
  if (w->failed) return;
  w->failed = 1;
  va_list ap;
  va_start(ap, fmt);
  int n = snprintf(w->fail_why, sizeof w->fail_why, "at %.3f ms: ", (double)(sim_now_ns - SIM_START_NS) / 1e6);
  vsnprintf(w->fail_why + n, sizeof w->fail_why - (size_t)n, fmt, ap);
  va_end(ap);
  sim_trace(w, "FAIL: %s", w->fail_why);
}

/* The engine's own log, on the same timeline (verbose only). */
static void sim_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (!W.verbose) return;
  va_list ap;
  va_start(ap, fmt);
  printf("[%11.6f ms] %s ", (double)(sim_now_ns - SIM_START_NS) / 1e6,
         level == RR_LOG_WARN ? "WARN" : level == RR_LOG_INFO ? "INFO" : "TRACE");
  vprintf(fmt, ap);
  putchar('\n');
  va_end(ap);
}

static void say_seed(const char *what) {
  char buf[160];
  int n = snprintf(buf, sizeof buf, "\nrerail-sim: seed %llu %s; replay: rerail-sim --seed %llu --verbose\n",
                   (unsigned long long)current_seed, what, (unsigned long long)current_seed);
  if (n > 0) (void)!write(2, buf, (size_t)n);
}

static void on_signal(int sig) {
  say_seed(sig == SIGALRM ? "ran too long (wall clock)" : "crashed");
  signal(sig, SIG_DFL);
  raise(sig);
}

static void on_sanitizer_death(void) { say_seed("failed a sanitizer check"); }
extern void __asan_set_death_callback(void (*cb)(void)) __attribute__((weak));

/* ------------------------------------------------------------ one seed */

static const uint64_t DELTAS[] = {20 * SIM_MS, 50 * SIM_MS, 100 * SIM_MS, 200 * SIM_MS};
static const uint64_t HOLDS[] = {0, 5 * SIM_MS, 20 * SIM_MS, 100 * SIM_MS};
static const unsigned DUPS[] = {0, 5, 50}, DELAYS[] = {0, 20, 200}, WDELAYS[] = {0, 0, 5, 50}, SPLITS[] = {0, 50, 300},
                      MIDINVALIDATIONS[] = {0, 100, 500}, GARBLES[] = {0, 0, 0, 2, 20};
static const unsigned RECV_POSTS[] = {800, 800, 100, 20};
#define PICK(arr) (arr)[sim_below(&w->rng, sizeof(arr) / sizeof *(arr))]

static void setup(sim_world *w, uint64_t seed, int verbose) {
  memset(w, 0, sizeof *w); /* the engines too: rr_engine_init expects nothing of them */
  w->seed = seed;
  w->verbose = verbose;
  sim_rng_seed(&w->rng, seed);
  sim_now_ns = SIM_START_NS;
  /* Each world's clock starts afresh: the last world's link lives
   * (link_life.h) would read as life in this one. */
  rr_link_life_reset(&rr_link_lives);
  sim_rng *g = &w->rng;
  unsigned c = (unsigned)sim_below(g, 100);
  w->nrails = c < 15 ? 1 : c < 60 ? 2 : c < 85 ? 3 : 4;
  unsigned mix = (unsigned)sim_below(g, 100);
  for (int r = 0; r < w->nrails; r++) {
    w->kind[r] = mix < 45 ? SIM_TCP : mix < 85 ? SIM_VERBS : (int)sim_below(g, 2);
    w->nstreams[r] = w->kind[r] == SIM_TCP ? (int)sim_range(g, 1, SIM_MAX_STREAMS) : 1;
    w->lat_ns[r] = sim_range(g, 2, 100) * SIM_US;
    w->jitter_ns[r] = sim_below(g, w->lat_ns[r]);
    w->path[r].up = 1;
    w->reconnect_wait[r] = -1;
  }
  /* Verbs-like rails whose write completion means placement: all, none or
   * some of them, from a stream of its own so every other choice of the
   * seed stays what it was before the capability existed. */
  sim_rng pg;
  sim_rng_seed(&pg, seed ^ 0x706c61636564ull);
  unsigned pmode = (unsigned)sim_below(&pg, 100);
  for (int r = 0; r < w->nrails; r++)
    w->placed[r] = w->kind[r] == SIM_VERBS && (pmode < 45 ? 1 : pmode < 70 ? 0 : (int)sim_below(&pg, 2));
  static const uint64_t LAGS[] = {0, 20 * SIM_US, 200 * SIM_US, 2 * SIM_MS};
  w->rcq_lag_ns = LAGS[sim_below(&pg, 4)];
  /* Group writes on verbs-like rails (several chunks in one write, split
   * in some under adaptive routing), from a stream of their own too. */
  sim_rng gg;
  sim_rng_seed(&gg, seed ^ 0x67726f757073ull);
  static const uint32_t WMAX[] = {0, 2 * SIM_CHUNK, 5 * SIM_CHUNK, 16 * SIM_CHUNK, 100 * SIM_CHUNK};
  static const uint64_t ARTH[] = {0, SIM_CHUNK, 2 * SIM_CHUNK, 8192 * SIM_CHUNK};
  for (int r = 0; r < w->nrails; r++) {
    w->write_max[r] = w->kind[r] == SIM_VERBS ? WMAX[sim_below(&gg, 5)] : 0;
    w->ar[r] = w->kind[r] == SIM_VERBS && sim_chance(&gg, 400);
  }
  w->ar_threshold = ARTH[sim_below(&gg, 4)];
  w->sq_depth = (uint32_t)sim_range(g, 2, 64);
  w->window = (size_t)sim_range(g, 8, 128) * SIM_CHUNK;
  w->dup_pm = PICK(DUPS);
  w->garble_pm = PICK(GARBLES);
  w->delay_pm = PICK(DELAYS);
  w->wdelay_pm = PICK(WDELAYS);
  w->split_pm = PICK(SPLITS);
  w->midinvalidate_pm = PICK(MIDINVALIDATIONS);
  w->recv_post_pm = PICK(RECV_POSTS);
  /* A verbs rail marked down is invalidated, i.e. its QP is gone: without
   * reconnects it could never come back. Seeds without reconnects (the
   * listener full) are all-TCP. */
  int verbs = 0;
  for (int r = 0; r < w->nrails; r++) verbs |= w->kind[r] == SIM_VERBS;
  w->reconnect = verbs || sim_chance(g, 700);
  rr_engine_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.chunk_size = SIM_CHUNK;
  cfg.ar_threshold = w->ar_threshold;
  cfg.failover_mode = sim_chance(g, 300) ? RR_FAILOVER_BALANCE : RR_FAILOVER_CHAIN;
  cfg.progress_timeout_ns = PICK(DELTAS);
  cfg.failback_hold_ns = PICK(HOLDS);
  cfg.reopens = w->reconnect;
  /* Eager small messages on TCP rails in most worlds; some keep the
   * clear-to-send before every message. */
  cfg.eager_max = sim_chance(g, 750) ? RR_BOUNCE_SIZE : 0;
  if (getenv("RERAIL_SIM_NO_EAGER")) cfg.eager_max = 0; /* same world, eager off: to tell its bugs apart */
  w->verbs_retry_ns = sim_range(g, 5 * SIM_MS, 2 * cfg.progress_timeout_ns);
  w->delay_max_ns = cfg.progress_timeout_ns / 4 < 20 * SIM_MS ? cfg.progress_timeout_ns / 4 : 20 * SIM_MS;
  w->chaos_end_ns = SIM_START_NS + sim_range(g, 30 * SIM_MS, 1500 * SIM_MS);
  for (int side = 0; side < 2; side++) {
    rr_engine_config c2 = cfg;
    c2.role = side == SIM_SEND ? RR_ENGINE_SEND : RR_ENGINE_RECV;
    snprintf(c2.peer, sizeof c2.peer, "%s", side == SIM_SEND ? "sim-receiver" : "sim-sender");
    if (side == SIM_SEND && w->reconnect) {
      c2.reconnect = sim_reconnect;
      c2.reconnect_arg = w;
    }
    if (rr_engine_init(&w->eng[side], &c2) != RR_OK) abort();
    w->eng_live[side] = 1;
    if (atomic_load(&w->eng[side].last_progress_ns) != sim_now_ns) {
      fprintf(stderr, "rerail-sim: the engine does not run on the simulation's clock (include order)\n");
      exit(2);
    }
    for (int r = 0; r < w->nrails; r++) w->dev[side][r] = sim_dev_open(w, side, r, w->kind[r]);
  }
  for (int r = 0; r < w->nrails; r++) {
    sim_pair *p = sim_pair_new(w, r);
    int weight = (int)sim_range(g, 1, 4) * 10000;
    char ifn[16], peer[32];
    for (int side = 0; side < 2; side++) {
      snprintf(ifn, sizeof ifn, "sim%c%d", side == SIM_SEND ? 'S' : 'R', r);
      snprintf(peer, sizeof peer, "10.0.%d.%d", r, side == SIM_SEND ? 2 : 1);
      p->ep[side]->attached = 1;
      if (rr_engine_add_rail(&w->eng[side], &p->ep[side]->base, weight, ifn, peer) != RR_OK) abort();
    }
  }
  sim_traffic_init(w);
  sim_traffic_setup_mrs(w);
  if (verbose) {
    printf("seed %llu: %d rail(s):", (unsigned long long)seed, w->nrails);
    for (int r = 0; r < w->nrails; r++)
      printf(" %s/%d stream(s)/%llu us/write %u%s", w->kind[r] == SIM_TCP ? "tcp" : w->placed[r] ? "verbs-placed" : "verbs",
             w->nstreams[r], (unsigned long long)(w->lat_ns[r] / SIM_US), w->write_max[r], w->ar[r] ? " AR" : "");
    printf("; %s, delta %llu ms, hold %llu ms, reconnect %s, queue %u; per mille: dup %u, delay %u (writes %u), "
           "split %u, midinvalidate %u, garble %u; chaos until %llu ms\n",
           cfg.failover_mode == RR_FAILOVER_BALANCE ? "balance" : "chain",
           (unsigned long long)(cfg.progress_timeout_ns / SIM_MS), (unsigned long long)(cfg.failback_hold_ns / SIM_MS),
           w->reconnect ? "on" : "off", w->sq_depth, w->dup_pm, w->delay_pm, w->wdelay_pm, w->split_pm,
           w->midinvalidate_pm, w->garble_pm, (unsigned long long)((w->chaos_end_ns - SIM_START_NS) / SIM_MS));
  }
  sim_schedule_faults(w);
}

static void teardown(sim_world *w) {
  for (int side = 0; side < 2; side++) {
    w->st.violations += w->eng[side].stats.violations;
    if (w->eng_live[side]) rr_engine_fini(&w->eng[side]);
    w->eng_live[side] = 0;
  }
  w->st.rollbacks += w->eng[SIM_RECV].stats.rollbacks;
  w->st.placed_sends += w->eng[SIM_SEND].stats.placed_sends;
  w->st.claims += w->eng[SIM_RECV].stats.claims_taken;
  w->st.acks_held += w->eng[SIM_SEND].stats.acks_held;
  sim_traffic_free_mrs(w);
  sim_pairs_free(w);
  for (int side = 0; side < 2; side++)
    for (int r = 0; r < w->nrails; r++) {
      sim_nic_set(w, side, r, 0);
      sim_dev_close(w->dev[side][r]);
      w->dev[side][r] = NULL;
    }
  w->nev = 0;
}

static int any_path_up(const sim_world *w) {
  for (int r = 0; r < w->nrails; r++)
    if (w->path[r].up) return 1;
  return 0;
}

/* Whether a fatal seed has played out: every live end that waits on the
 * network either finished or got its error (an end with nothing posted
 * that only polls for a clear-to-send may wait on: NCCL would abort it
 * when the other end reports the error). */
static int fatal_settled(sim_world *w) {
  for (int side = 0; side < 2; side++) {
    if (w->dead[side] || sim_traffic_errored(w, side) || !sim_traffic_busy(w, side)) continue;
    if (sim_traffic_outstanding(w, side) > 0) return 0;
    int other = 1 - side;
    if (!w->dead[other] && !sim_traffic_errored(w, other) && sim_traffic_busy(w, other)) return 0;
  }
  return 1;
}

static void dump_engines(sim_world *w);

static void run(sim_world *w) {
  uint64_t delta = w->eng[SIM_SEND].cfg.progress_timeout_ns;
  uint64_t hang_bound = 2000 * SIM_MS + 10 * delta;
  uint64_t settle = 2 * delta + 50 * SIM_MS, settled_at = 0;
  uint64_t last_fault = SIM_START_NS;
  int idle_seen[2] = {0, 0};  /* at the fatal fault: 1 something outstanding, 2 nothing */
  uint64_t busy_from = 0;     /* when a side idle at the fault first posted after it */
  uint64_t limit = w->chaos_end_ns + 60000 * SIM_MS;
  while (!w->failed) {
    while (w->nev && w->ev[0].at <= sim_now_ns) {
      sim_event ev = w->ev[0];
      memmove(w->ev, w->ev + 1, (size_t)--w->nev * sizeof *w->ev);
      if (ev.kind != SIM_EV_REPLACE) last_fault = sim_now_ns;
      sim_run_event(w, &ev);
    }
    sim_maybe_flap(w);
    unsigned a = (unsigned)sim_below(&w->rng, 100);
    if (a < 42) sim_traffic_step(w, SIM_SEND);
    else if (a < 84) sim_traffic_step(w, SIM_RECV);
    else if (a < 92) {
      if (!w->dead[SIM_SEND]) rr_engine_background(&w->eng[SIM_SEND], sim_now_ns, 0);
    } else if (!w->dead[SIM_RECV]) {
      rr_engine_background(&w->eng[SIM_RECV], sim_now_ns, 0);
    }
    w->st.steps++;
    if (w->failed) break;
    if (sim_traffic_done(w)) {
      if (!settled_at) settled_at = sim_now_ns;
      if (sim_now_ns >= settled_at + settle) break; /* late writes had their chance to land */
    } else if (w->expect_error && sim_now_ns >= w->error_at_ns) {
      if (fatal_settled(w)) break;
      /* A side with nothing outstanding cannot notice the fault (it judges
       * silence only while it waits for something): its bound runs from
       * the first thing it posts after the fault. */
      for (int side = 0; side < 2; side++) {
        int out = sim_traffic_outstanding(w, side) > 0;
        if (!idle_seen[side]) idle_seen[side] = out ? 1 : 2;
        if (idle_seen[side] == 2 && out && !busy_from) busy_from = sim_now_ns;
      }
      uint64_t from = busy_from > w->error_at_ns ? busy_from : w->error_at_ns;
      /* Before any rail of a side heard the peer, its silence is the peer not
       * having accepted yet, and no rail is blamed for the connect timeout
       * (engine_rails.c): a fault that strikes first is found that late. */
      uint64_t bound = delta;
      uint64_t first_word = rr_params_get()->connect_timeout_ms * SIM_MS;
      if ((!sim_heard(&w->eng[SIM_SEND]) || !sim_heard(&w->eng[SIM_RECV])) && first_word > bound) bound = first_word;
      if (sim_now_ns > from + bound + 1100 * SIM_MS) {
        char s[160];
        sim_traffic_summary(w, s, sizeof s);
        sim_fail(w, "no clean error %.0f ms after the fatal fault (%s)", (double)(sim_now_ns - w->error_at_ns) / 1e6,
                 s);
      }
    } else {
      uint64_t since = sim_traffic_last_progress(w) > last_fault ? sim_traffic_last_progress(w) : last_fault;
      if (any_path_up(w) && sim_now_ns - since > hang_bound) {
        char s[160];
        sim_traffic_summary(w, s, sizeof s);
        sim_fail(w, "no progress for %.0f ms with a path up (%s)", (double)(sim_now_ns - since) / 1e6, s);
      }
    }
    if (sim_now_ns > limit) sim_fail(w, "the run did not end in virtual time");
    /* Small steps while anything moves; when nothing does, jump towards the
     * next arrival or event (the engine's ticks are 1 ms apart anyway). */
    uint64_t dt;
    if (w->activity) {
      dt = sim_range(&w->rng, 1, 30) * SIM_US;
    } else {
      uint64_t next = sim_next_arrival(w);
      if (w->nev && w->ev[0].at < next) next = w->ev[0].at;
      dt = sim_range(&w->rng, 100, 2000) * SIM_US;
      if (next > sim_now_ns && next - sim_now_ns < dt) dt = next - sim_now_ns;
      if (dt == 0) dt = SIM_US;
    }
    w->activity = 0;
    sim_now_ns += dt;
  }
  w->st.vtime_ms += (sim_now_ns - SIM_START_NS) / SIM_MS;
  /* A rollback phase change outside engine_phase.c's tables is the engine's
   * bug, whatever the run made of the connection failure it caused. */
  uint64_t bad = w->eng[0].stats.bad_transitions + w->eng[1].stats.bad_transitions;
  if (bad) sim_fail(w, "%llu rollback phase change(s) not in the tables: %s / %s", (unsigned long long)bad,
                    w->eng[SIM_SEND].failed_why, w->eng[SIM_RECV].failed_why);
  if (w->failed && w->verbose) dump_engines(w);
  if (!w->failed) {
    /* Honest peers never break the protocol: every violation must be one
     * of the frames the sim garbled. */
    uint64_t v = w->eng[0].stats.violations + w->eng[1].stats.violations;
    if (v > w->garbled)
      sim_fail(w, "honest peers broke the protocol %llu time(s) (%llu frames garbled): %s / %s", (unsigned long long)v,
               (unsigned long long)w->garbled, w->eng[SIM_SEND].violation_why, w->eng[SIM_RECV].violation_why);
  }
}

/* On a failure in verbose mode: what both engines hold, to read with the trace. */
static void dump_engines(sim_world *w) {
  for (int side = 0; side < 2; side++) {
    rr_engine *e = &w->eng[side];
    printf("%s engine: epoch %u, failed %d (%s), rollback phase %s, fail_notice_pending %d, announce_slot %u\n",
           side == SIM_SEND ? "sender" : "receiver", e->epoch, e->failed, e->failed_why,
           side == SIM_SEND ? engine_send_phase_name(engine_snd(e)->send_phase) : engine_recv_phase_name(engine_rcv(e)->recv_phase),
           e->fail_notice_pending, side == SIM_RECV ? engine_rcv(e)->announce_slot : 0);
    for (int r = 0; r < e->nrails; r++)
      printf("  rail%d: state %d need_drain %d drain_posted %u backlog %zu why '%s'\n", r, e->rails[r].state,
             e->rails[r].need_drain, e->rails[r].drain_posted, e->rails[r].ep->ops->backlog(e->rails[r].ep),
             e->rails[r].why);
    if (side == SIM_RECV) {
      for (int i = 0; i < RR_NET_MAX_REQUESTS; i++) {
        rr_recv_req *r = &engine_rcv(e)->rreq[i];
        if (!r->in_use) continue;
        printf("  recv slot %d seq %u: complete %d landed %d subs_done %d/%d:", i, r->seq, r->complete, r->landed,
               r->subs_done, r->n);
        for (int k = 0; k < r->n; k++)
          printf(" [prefix %u high %u expected %u max %u]", r->sub[k].prefix, r->sub[k].high, r->sub[k].expected,
                 r->sub[k].max_chunks);
        printf("\n");
      }
    } else {
      printf("  fifo %u..%u post %u, send_seq %u\n", engine_snd(e)->fifo_head, engine_snd(e)->fifo_tail, engine_snd(e)->fifo_post, engine_snd(e)->send_seq);
      for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
        rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
        printf("  send seq %u sub %u: nchunks %u posted %u transmitted %u placed %u%s%s acked %d done %d rail %d "
               "resumed %d/e%u\n", r->seq, r->sub, r->nchunks, r->posted, r->transmitted, r->placed,
               r->ack_only ? " ack-only" : "", r->claim_owed ? " claim-owed" : "", r->acked, r->user_done, r->rail,
               r->resumed, r->resumed_epoch);
      }
    }
  }
}

/* ----------------------------------------------------------------- main */

static void usage(void) {
  fprintf(stderr, "usage: rerail-sim [--seeds N] [--first S] [--max-failures K] [--seed S --verbose] [--expect-held]\n");
  exit(2);
}

int main(int argc, char **argv) {
  uint64_t first = 1, count = 1000;
  int verbose = 0, max_fail = 10, expect_held = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--seeds") && i + 1 < argc) count = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--first") && i + 1 < argc) first = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) first = strtoull(argv[++i], NULL, 0), count = 1;
    else if (!strcmp(argv[i], "--verbose")) verbose = 1;
    else if (!strcmp(argv[i], "--expect-held")) expect_held = 1;
    else if (!strcmp(argv[i], "--max-failures") && i + 1 < argc) max_fail = atoi(argv[++i]);
    else usage();
  }
  /* Telemetry off; the engine's log goes through the sim's logger. */
  unsetenv("RERAIL_TELEMETRY_DIR");
  /* The bound for a fault before the peer's first word (a few δ, not the
   * default 30 s, so fatal seeds end soon in virtual time). */
  setenv("RERAIL_CONNECT_TIMEOUT", "4000", 1);
  rr_params_reload();
  rr_log_set_logger(sim_logger);
  signal(SIGSEGV, on_signal);
  signal(SIGBUS, on_signal);
  signal(SIGFPE, on_signal);
  signal(SIGABRT, on_signal);
  signal(SIGALRM, on_signal);
  if (__asan_set_death_callback) __asan_set_death_callback(on_sanitizer_death);
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  sim_stats total;
  memset(&total, 0, sizeof total);
  int failures = 0;
  for (uint64_t s = first; s < first + count; s++) {
    current_seed = s;
    alarm(300);
    setup(&W, s, verbose);
    run(&W);
    teardown(&W);
    W.st.seeds++;
    if (W.failed) {
      W.st.failed++;
      failures++;
      printf("FAIL seed %llu: %s\n  replay: rerail-sim --seed %llu --verbose\n", (unsigned long long)s, W.fail_why,
             (unsigned long long)s);
      fflush(stdout);
    }
    sim_stats *a = &W.st;
    total.seeds += a->seeds, total.failed += a->failed, total.rollbacks += a->rollbacks;
    total.violations += a->violations, total.reconnects += a->reconnects, total.ctrl_dups += a->ctrl_dups;
    total.splits += a->splits, total.mid_invalidations += a->mid_invalidations, total.errors_expected += a->errors_expected;
    total.writes += a->writes, total.ctrls += a->ctrls, total.steps += a->steps, total.vtime_ms += a->vtime_ms;
    total.sink_writes += a->sink_writes;
    total.placed_sends += a->placed_sends, total.claims += a->claims, total.acks_held += a->acks_held;
    total.group_writes += a->group_writes, total.split_writes += a->split_writes;
    total.garbled += W.garbled;
    if (failures >= max_fail && s + 1 < first + count) {
      printf("rerail-sim: stopping after %d failing seeds\n", failures);
      break;
    }
  }
  alarm(0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  printf("rerail-sim: %llu seed(s) from %llu: %llu failed; %.1f s, %.0f seeds/s; virtual %.1f s; "
         "%llu writes (%llu of several chunks, %llu split for adaptive routing), %llu control messages (%llu duplicated), %llu rollbacks, %llu reconnects, "
         "%llu writes split (%llu invalidated mid-payload), %llu stale writes sunk, %llu frames garbled, %llu clean errors, "
         "%llu sends done on placement, %llu placement claims taken, %llu acked sends held for an older write\n",
         (unsigned long long)total.seeds, (unsigned long long)first, (unsigned long long)total.failed, secs,
         secs > 0 ? (double)total.seeds / secs : 0.0, (double)total.vtime_ms / 1e3, (unsigned long long)total.writes,
         (unsigned long long)total.group_writes, (unsigned long long)total.split_writes,
         (unsigned long long)total.ctrls, (unsigned long long)total.ctrl_dups, (unsigned long long)total.rollbacks,
         (unsigned long long)total.reconnects, (unsigned long long)total.splits, (unsigned long long)total.mid_invalidations,
         (unsigned long long)total.sink_writes, (unsigned long long)total.garbled,
         (unsigned long long)total.errors_expected, (unsigned long long)total.placed_sends,
         (unsigned long long)total.claims, (unsigned long long)total.acks_held);
  /* A long run that posted no group or no split write checked nothing of
   * them (the seed's choices of write_max and adaptive routing went wrong):
   * that run proves less than it says. */
  if (total.seeds >= 1000 && (!total.group_writes || !total.split_writes)) {
    printf("rerail-sim: %llu seeds posted %llu writes of several chunks, %llu split: group writes went untested\n",
           (unsigned long long)total.seeds, (unsigned long long)total.group_writes,
           (unsigned long long)total.split_writes);
    return 1;
  }
  /* A regression seed passes for nothing once other changes reshape its
   * world so that it no longer reaches the case it was kept for. */
  if (expect_held && !total.acks_held) {
    printf("rerail-sim: --expect-held, but no acked send was held for an older write: the seed no longer "
           "tests that; pick another from a scan (bench/sim_bench.sh)\n");
    return 1;
  }
  return total.failed ? 1 : 0;
}
