/* The exporter thread: one per process while any recorder is open.
 *
 * Every RR_TEL_DRAIN_MS (sooner while rings fill fast: next_drain_ns) it
 * empties the recorders' rings into the series
 * (samples of a rail's connections merged in completion order) and takes the
 * queued health events; every RERAIL_TELEMETRY_INTERVAL ms, on a flush and
 * when asked to stop, it also closes the interval and writes the files.
 * Arithmetic runs under rr_tel_g.lock, file writes after it is released, so
 * open() and close() never wait on a disk. A failing write is warned about
 * once (rr_tel_io_result) and retried at the next interval. */
#include "rr_clock.h"
#include "rr_health_bus.h"
#include "rr_log.h"
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct exporter {
  rr_tel_global *g;
  rr_tel_cycle cy;
  rr_tel_sample *scratch;
  size_t scratch_cap;
  rr_health_event evs[RR_TEL_EVQ];
  int nevs;
  rr_tel_buf evjson, prom;
  rr_tel_evfile evfile;
  rr_tel_io_state prom_io, snap_io, trace_io, dir_io;
  int trace_fd;
  off_t trace_size;
  int trace_full;
  struct { int dev, dir; double thr; uint64_t p50, p99; } figs[2 * RR_TEL_MAX_NICS];
  int nfigs;
  double max_fill; /* the fullest ring of this drain, as a fraction of its slots */
} exporter;

static int cmp_done(const void *a, const void *b) {
  uint64_t x = ((const rr_tel_sample *)a)->done_ns, y = ((const rr_tel_sample *)b)->done_ns;
  return x < y ? -1 : x > y;
}

static int scratch_reserve(exporter *x, size_t n) {
  if (n <= x->scratch_cap) return 0;
  size_t cap = x->scratch_cap ? x->scratch_cap : 4096;
  while (cap < n) cap *= 2;
  rr_tel_sample *p = realloc(x->scratch, cap * sizeof *p);
  if (!p) return -1;
  x->scratch = p;
  x->scratch_cap = cap;
  return 0;
}

/* Empty the rings of one series; free its closed recorders afterwards. */
static void drain_series(exporter *x, rr_tel_series *s) {
  rr_tel_global *g = x->g;
  size_t n = 0;
  int sources = 0;
  for (rr_tel_rail *r = s->recs; r; r = r->next) {
    uint64_t d = rr_tel_ring_drops(&r->ring);
    s->drops += d - r->drops_seen;
    r->drops_seen = d;
    for (int k = 0; k < RR_TEL_COST_COUNT; k++) {
      uint64_t c = atomic_load_explicit(&r->cost[k], memory_order_relaxed);
      s->cost.n[k] += c - r->cost_seen[k];
      r->cost_seen[k] = c;
    }
    uint64_t m = atomic_load_explicit(&r->messages, memory_order_relaxed);
    s->messages += m - r->messages_seen;
    r->messages_seen = m;
    uint32_t avail = atomic_load_explicit(&r->ring.head, memory_order_acquire) -
                     atomic_load_explicit(&r->ring.tail, memory_order_relaxed);
    if (!avail) continue;
    double fill = (double)avail / ((double)r->ring.mask + 1);
    if (fill > x->max_fill) x->max_fill = fill;
    if (scratch_reserve(x, n + avail)) {
      /* No memory for the merge: feed this ring on its own. */
      rr_tel_sample tmp[64];
      uint32_t k;
      while ((k = rr_tel_ring_pop(&r->ring, tmp, 64)) > 0)
        for (uint32_t i = 0; i < k; i++) rr_tel_series_feed(g, s, &tmp[i], &x->cy);
      continue;
    }
    n += rr_tel_ring_pop(&r->ring, x->scratch + n, avail);
    sources++;
  }
  /* One connection's samples are already in completion order; several are merged. */
  if (sources > 1) qsort(x->scratch, n, sizeof *x->scratch, cmp_done);
  for (size_t i = 0; i < n; i++) rr_tel_series_feed(g, s, &x->scratch[i], &x->cy);

  for (rr_tel_rail **pp = &s->recs; *pp;) {
    rr_tel_rail *r = *pp;
    if (r->closed) {
      *pp = r->next;
      s->nrec--;
      free(r);
    } else {
      pp = &r->next;
    }
  }
}

static void cycle_reset(exporter *x) {
  x->cy.trace_on = x->g->cfg.trace && !x->trace_full;
  rr_tel_buf_reset(&x->cy.trace);
  x->cy.nnotes = 0;
  x->cy.nsnaps = 0;
  rr_tel_buf_reset(&x->evjson);
  rr_tel_buf_reset(&x->prom);
  x->nevs = 0;
  x->nfigs = 0;
  x->max_fill = 0;
}

/* The next drain period: RR_TEL_DRAIN_FILL of the fullest ring's slots at
 * the rate it filled during the `elapsed` ns since the last drain. */
static uint64_t next_drain_ns(const exporter *x, uint64_t elapsed, uint64_t longest) {
  uint64_t shortest = RR_TEL_DRAIN_MIN_MS * 1000000ull;
  if (shortest > longest) shortest = longest;
  if (x->max_fill <= 0) return longest;
  double want = (double)elapsed * RR_TEL_DRAIN_FILL / x->max_fill;
  if (want >= (double)longest) return longest;
  return want <= (double)shortest ? shortest : (uint64_t)want;
}

/* Under the lock: everything in memory. */
static void compute(exporter *x, int do_export, uint64_t wall) {
  rr_tel_global *g = x->g;
  for (int i = 0; i < g->nseries; i++) drain_series(x, g->series[i]);

  uint64_t lost = 0;
  x->nevs = rr_tel_events_take(x->evs, RR_TEL_EVQ, &lost);
  g->t.events_dropped += lost;
  for (int i = 0; i < x->nevs; i++) {
    rr_tel_events_apply(&g->t, &x->evs[i]);
    rr_tel_event_json(&x->evjson, &g->cfg, &x->evs[i]);
  }
  if (!do_export) return;

  for (int i = 0; i < g->ndevagg; i++) {
    g->devagg[i].thr = 0;
    g->devagg[i].active = 0;
  }
  for (int i = 0; i < g->nseries; i++) {
    rr_tel_series *s = g->series[i];
    rr_tel_series_interval(g, s, &x->cy);
    if (s->active && s->agg) {
      s->agg->thr += s->thr;
      s->agg->active = 1;
    }
  }
  static const double q[2] = {0.5, 0.99};
  for (int i = 0; i < g->ndevagg; i++) {
    rr_tel_devagg *a = &g->devagg[i];
    uint64_t v[2];
    if (a->active && rr_tel_res_quantiles(&a->res, q, 2, v) == RR_OK) {
      x->figs[x->nfigs].dev = a->dev;
      x->figs[x->nfigs].dir = a->dir;
      x->figs[x->nfigs].thr = a->thr;
      x->figs[x->nfigs].p50 = v[0];
      x->figs[x->nfigs].p99 = v[1];
      x->nfigs++;
    }
    rr_tel_res_reset(&a->res);
  }
  /* Every pooled NIC has a state from the first export: a healthy one too. */
  rr_tel_tables_pooled_nics(&g->t);
  rr_tel_prom_render(&x->prom, &g->cfg, g->series, g->nseries, &g->t, wall);
}

static void write_trace(exporter *x, const rr_tel_config *cfg) {
  if (!x->cy.trace.len) return;
  char path[2048];
  snprintf(path, sizeof path, "%s/" RR_TEL_TRACE_PREFIX "%s-%d.csv", cfg->dir, cfg->host, cfg->pid);
  if (x->trace_fd < 0 && x->trace_size == 0) {
    /* A new trace: the header first (an existing file keeps its own). */
    static const char hdr[] = "wall_ns,done_ns,post_ns,nic,peer,rail,direction,bytes,latency_ns,"
                              "window_bytes_per_s,window_n\n";
    if (access(path, F_OK) != 0) rr_tel_append(&x->trace_fd, path, hdr, sizeof hdr - 1, &x->trace_size, NULL);
  }
  int err;
  rr_tel_append(&x->trace_fd, path, x->cy.trace.p, x->cy.trace.len, &x->trace_size, &err);
  rr_tel_io_result(&x->trace_io, err, "trace", path);
  if ((uint64_t)x->trace_size >= RR_TEL_TRACE_MAX) {
    RR_WARN("telemetry: the trace %s reached %llu MiB; tracing stops", path,
            (unsigned long long)(RR_TEL_TRACE_MAX >> 20));
    x->trace_full = 1;
  }
}

/* After the lock: files, the health table, anomaly events. */
static void publish(exporter *x, int do_export) {
  const rr_tel_config *cfg = &x->g->cfg;
  int dir_err;
  rr_status dir_st = rr_tel_ensure_dir(cfg->dir, &dir_err);
  rr_tel_io_result(&x->dir_io, dir_err, "telemetry directory", cfg->dir);
  rr_status ev_st = dir_st;
  if (dir_st == RR_OK) {
    write_trace(x, cfg);
    if (x->evjson.len) ev_st = rr_tel_evfile_write(&x->evfile, cfg, x->evjson.p, x->evjson.len);
    for (int i = 0; i < x->cy.nsnaps; i++)
      rr_tel_anomaly_write(cfg, x->cy.snaps[i].seq, &x->cy.snaps[i].json, &x->snap_io);
    if (do_export) {
      char name[256], path[2048];
      rr_tel_prom_name(cfg, name, sizeof name);
      snprintf(path, sizeof path, "%s/%s", cfg->dir, name);
      int err = ENOMEM;
      if (!x->prom.oom) rr_tel_write_atomic(cfg->dir, name, x->prom.p, x->prom.len, &err);
      rr_tel_io_result(&x->prom_io, err, "metrics file", path);
    }
  }
  if (ev_st != RR_OK && x->nevs) {
    /* Counted, so the metrics say that the log misses some. */
    pthread_mutex_lock(&x->g->lock);
    x->g->t.events_dropped += (uint64_t)x->nevs;
    pthread_mutex_unlock(&x->g->lock);
  }
  for (int i = 0; i < x->nfigs; i++)
    rr_tel_feed_health_table(x->figs[i].dev, x->figs[i].dir, x->figs[i].thr, x->figs[i].p50, x->figs[i].p99);
  for (int i = 0; i < x->cy.nnotes; i++) rr_health_report(&x->cy.notes[i].ev);
}

/* .prom files of processes of this host that died without unloading the
 * plugin would be scraped forever: remove them. */
static void remove_stale(const rr_tel_config *cfg) {
  DIR *d = opendir(cfg->dir);
  if (!d) return;
  char prefix[128];
  int plen = snprintf(prefix, sizeof prefix, RR_TEL_PROM_PREFIX "%s-", cfg->host);
  struct dirent *e;
  while ((e = readdir(d))) {
    const char *n = e->d_name;
    const char *base = n[0] == '.' ? n + 1 : n;   /* leftover temporaries too */
    if (strncmp(base, prefix, (size_t)plen)) continue;
    char *end;
    long pid = strtol(base + plen, &end, 10);
    if (end == base + plen || pid <= 0 || pid == cfg->pid) continue;
    if (strcmp(end, RR_TEL_PROM_SUFFIX) && strcmp(end, RR_TEL_PROM_SUFFIX ".tmp")) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", cfg->dir, n);
    if (unlink(path) == 0) RR_INFO(RR_SUB_NET, "telemetry: removed %s (process %ld is gone)", path, pid);
  }
  closedir(d);
}

void *rr_tel_exporter_main(void *arg) {
  exporter *x = calloc(1, sizeof *x);
  rr_tel_global *g = arg;
  if (!x) {
    /* Keep the thread joinable and the recorders draining nowhere: drops are counted. */
    RR_WARN("telemetry: out of memory; the exporter does not run");
    pthread_mutex_lock(&g->lock);
    while (!g->stop) pthread_cond_wait(&g->wake, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return NULL;
  }
  x->g = g;
  x->trace_fd = -1;
  rr_tel_evfile_init(&x->evfile);
  if (rr_tel_ensure_dir(g->cfg.dir, NULL) == RR_OK) remove_stale(&g->cfg);

  /* Lowest CPU weight: the ranks' progress threads spin on every core NCCL
   * gives them, and statistics must never slow the data down. */
  setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19);
  uint64_t interval = g->cfg.interval_ms * 1000000ull;
  uint64_t longest_drain = (interval < RR_TEL_DRAIN_MS * 1000000ull ? interval : RR_TEL_DRAIN_MS * 1000000ull);
  uint64_t drain = longest_drain;
  uint64_t next_export = rr_now_ns() + interval;
  uint64_t last_drain = rr_now_ns();
  pthread_mutex_lock(&g->lock);
  for (;;) {
    int stopping = g->stop;
    uint64_t flush_req = g->flush_req;
    uint64_t now = rr_now_ns();
    int do_export = stopping || flush_req != g->flush_done || now >= next_export;
    if (do_export) {
      next_export += interval;
      if (next_export <= now) next_export = now + interval; /* a slow disk: skip, do not bunch up */
    }
    uint64_t wall = rr_tel_wall_ns();
    cycle_reset(x);
    x->cy.wall_off = wall - now;
    compute(x, do_export, wall);
    drain = next_drain_ns(x, now - last_drain, longest_drain);
    last_drain = now;
    pthread_mutex_unlock(&g->lock);
    publish(x, do_export);
    pthread_mutex_lock(&g->lock);
    if (flush_req != g->flush_done) {
      g->flush_done = flush_req;
      pthread_cond_broadcast(&g->flushed);
    }
    if (stopping) break;
    if (g->stop || g->flush_req != g->flush_done) continue;
    uint64_t until = now + drain < next_export ? now + drain : next_export;
    /* The condition variable waits on CLOCK_REALTIME: convert the deadline. */
    uint64_t rel = until > rr_now_ns() ? until - rr_now_ns() : 0;
    uint64_t abs_ns = rr_tel_wall_ns() + rel;
    struct timespec ts = {.tv_sec = (time_t)(abs_ns / 1000000000ull), .tv_nsec = (long)(abs_ns % 1000000000ull)};
    pthread_cond_timedwait(&g->wake, &g->lock, &ts);
  }
  pthread_mutex_unlock(&g->lock);

  rr_tel_evfile_close(&x->evfile);
  if (x->trace_fd >= 0) close(x->trace_fd);
  rr_tel_buf_free(&x->cy.trace);
  for (int i = 0; i < RR_TEL_MAX_SNAPS; i++) rr_tel_buf_free(&x->cy.snaps[i].json);
  rr_tel_buf_free(&x->evjson);
  rr_tel_buf_free(&x->prom);
  free(x->scratch);
  free(x);
  return NULL;
}
