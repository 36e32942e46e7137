/* Per-rail series: what the exporter keeps for each (nic, peer, rail,
 * direction) and how one completed request updates it. Exporter thread and
 * open(), always under rr_tel_g.lock. */
#include "rr_log.h"
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *rr_tel_dir_str(int dir) { return dir == RR_TEL_RX ? "rx" : "tx"; }

/* Raw samples kept for anomaly snapshots: several windows before the drop. */
static uint32_t raw_keep(uint32_t w) {
  uint32_t n = 4 * w;
  return n < 64 ? 64 : n > 1024 ? 1024 : n;
}

static void series_free_stats(rr_tel_series *s) {
  rr_tel_window_fini(&s->win);
  rr_tel_drop_fini(&s->det);
  free(s->raw);
  free(s->cap);
  s->raw = NULL;
  s->cap = NULL;
}

/* (Re)build what depends on W; counters stay. */
static int series_init_stats(rr_tel_series *s, uint32_t w) {
  series_free_stats(s);
  s->raw_cap = raw_keep(w);
  s->raw_n = s->raw_pos = 0;
  s->raw = calloc(s->raw_cap, sizeof *s->raw);
  if (!s->raw || rr_tel_window_init(&s->win, w) != RR_OK || rr_tel_drop_init(&s->det, w) != RR_OK) {
    series_free_stats(s);
    return -1;
  }
  return 0;
}

static rr_tel_devagg *devagg_get(rr_tel_global *g, int dev, int dir) {
  if (dev < 0) return NULL;
  for (int i = 0; i < g->ndevagg; i++)
    if (g->devagg[i].dev == dev && g->devagg[i].dir == dir) return &g->devagg[i];
  if (g->ndevagg == (int)(sizeof g->devagg / sizeof g->devagg[0])) return NULL;
  rr_tel_devagg *a = &g->devagg[g->ndevagg];
  memset(a, 0, sizeof *a);
  if (rr_tel_res_init(&a->res, RR_TEL_RESERVOIR, 0x5eed0000u + (uint64_t)g->ndevagg) != RR_OK) return NULL;
  a->dev = dev;
  a->dir = dir;
  g->ndevagg++;
  return a;
}

rr_tel_series *rr_tel_series_get(rr_tel_global *g, int dev, const char *nic, const char *peer,
                                 int rail, int dir) {
  for (int i = 0; i < g->nseries; i++) {
    rr_tel_series *s = g->series[i];
    if (s->rail == rail && s->dir == dir && !strcmp(s->nic, nic) && !strcmp(s->peer, peer)) {
      /* The exporter restarted with another W: the window starts over. */
      if (s->win.w != g->cfg.window && !s->recs && series_init_stats(s, g->cfg.window)) return NULL;
      return s;
    }
  }
  if (g->nseries == RR_TEL_MAX_SERIES) {
    if (!g->warned_series_full)
      RR_WARN("telemetry: more than %d rails to record; new ones go unrecorded", RR_TEL_MAX_SERIES);
    g->warned_series_full = 1;
    return NULL;
  }
  if (g->nseries == g->series_cap) {
    int cap = g->series_cap ? 2 * g->series_cap : 64;
    rr_tel_series **p = realloc(g->series, (size_t)cap * sizeof *p);
    if (!p) return NULL;
    g->series = p;
    g->series_cap = cap;
  }
  rr_tel_series *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->dev = dev;
  s->rail = rail;
  s->dir = dir;
  snprintf(s->nic, sizeof s->nic, "%s", nic);
  snprintf(s->peer, sizeof s->peer, "%s", peer);
  if (series_init_stats(s, g->cfg.window) ||
      rr_tel_res_init(&s->res, RR_TEL_RESERVOIR, 0x1234567ull + (uint64_t)g->nseries) != RR_OK) {
    series_free_stats(s);
    free(s);
    return NULL;
  }
  s->agg = devagg_get(g, dev, dir);
  g->series[g->nseries++] = s;
  return s;
}

void rr_tel_series_free_all(rr_tel_global *g) {
  for (int i = 0; i < g->nseries; i++) {
    rr_tel_series *s = g->series[i];
    for (rr_tel_rail *r = s->recs, *next; r; r = next) {
      next = r->next;
      free(r);
    }
    series_free_stats(s);
    rr_tel_res_fini(&s->res);
    free(s);
  }
  free(g->series);
  g->series = NULL;
  g->nseries = g->series_cap = 0;
  for (int i = 0; i < g->ndevagg; i++) rr_tel_res_fini(&g->devagg[i].res);
  g->ndevagg = 0;
}

/* ---- anomaly capture */

static void capture_finish(rr_tel_global *g, rr_tel_series *s, rr_tel_cycle *cy) {
  rr_tel_capture *c = s->cap;
  s->cap = NULL;
  if (cy->nsnaps == RR_TEL_MAX_SNAPS) {
    cy->snaps_lost++;
    free(c);
    return;
  }
  rr_tel_buf *b = &cy->snaps[cy->nsnaps].json;
  rr_tel_buf_reset(b);
  rr_tel_anomaly_json(b, &g->cfg, s, c, cy->wall_off);
  cy->snaps[cy->nsnaps].seq = c->seq;
  cy->nsnaps++;
  free(c);
}

static void capture_start(rr_tel_global *g, rr_tel_series *s, rr_tel_cycle *cy, const rr_tel_sample *x,
                          double avg) {
  uint32_t before = s->raw_n, after = s->raw_cap / 2;
  rr_tel_capture *c = malloc(sizeof *c + (size_t)(before + after) * sizeof(rr_tel_sample));
  if (!c) return;
  c->seq = ++g->anomaly_seq;
  c->mono_ns = x->done_ns;
  c->wall_ns = x->done_ns + cy->wall_off;
  c->thr = s->thr;
  c->avg = avg;
  c->before = before;
  c->want_after = after;
  c->after = 0;
  /* Oldest first. */
  uint32_t first = (s->raw_pos + s->raw_cap - s->raw_n) % s->raw_cap;
  for (uint32_t i = 0; i < before; i++) c->s[i] = s->raw[(first + i) % s->raw_cap];
  s->cap = c;
  s->anomalies++;
  if (cy->nnotes < RR_TEL_MAX_NOTES) {
    rr_health_event *ev = &cy->notes[cy->nnotes++].ev;
    memset(ev, 0, sizeof *ev);
    ev->kind = RR_HEV_ANOMALY;
    ev->dev = s->dev;
    ev->to_dev = -1;
    ev->state = RR_LINK_DEGRADED;
    snprintf(ev->ifname, sizeof ev->ifname, "%s", s->nic);
    snprintf(ev->peer, sizeof ev->peer, "%s", s->peer);
    snprintf(ev->reason, sizeof ev->reason, "rail%d %s %.1f MB/s < %.0f%% of %.1f MB/s; %s%d-%llu.json",
             s->rail, rr_tel_dir_str(s->dir), s->thr / 1e6, g->cfg.anomaly_fraction * 100, avg / 1e6,
             RR_TEL_ANOMALY_PREFIX, g->cfg.pid, (unsigned long long)c->seq);
  }
}

/* ---- the per-request update */

void rr_tel_series_feed(rr_tel_global *g, rr_tel_series *s, const rr_tel_sample *x, rr_tel_cycle *cy) {
  uint64_t lat = x->done_ns > x->post_ns ? x->done_ns - x->post_ns : 0;
  s->requests++;
  s->bytes += x->bytes;
  s->lat_sum_ns += lat;
  rr_tel_res_add(&s->res, lat);
  if (s->agg) rr_tel_res_add(&s->agg->res, lat);
  s->thr = rr_tel_window_add(&s->win, x->post_ns, x->done_ns, x->bytes);

  s->raw[s->raw_pos] = *x;
  s->raw_pos = (s->raw_pos + 1) % s->raw_cap;
  if (s->raw_n < s->raw_cap) s->raw_n++;

  if (s->cap) {
    rr_tel_capture *c = s->cap;
    c->s[c->before + c->after++] = *x;
    if (c->after == c->want_after) capture_finish(g, s, cy);
  }
  if (x->bytes > s->max_bytes) s->max_bytes = x->bytes;
  /* Drops are judged on bulk transfer only: a window of small requests is
   * slow because each one costs a round of latency, not because the rail
   * degraded. Bulk = requests of at least half the largest one on average
   * (the chunk size: big messages are cut into full chunks). */
  if (rr_tel_window_full(&s->win) && 2 * s->win.sum_bytes >= (uint64_t)s->max_bytes * s->win.n) {
    double avg = 0;
    /* Snapshots are for post-mortems: one per rail per quiet period is
     * enough, and a noisy rail must not flood the disk or the event log. */
    if (rr_tel_drop_step(&s->det, s->thr, g->cfg.anomaly_fraction, &avg) && !s->cap &&
        (!s->last_anomaly_ns || x->done_ns - s->last_anomaly_ns >= RR_TEL_ANOMALY_QUIET_NS)) {
      s->last_anomaly_ns = x->done_ns;
      capture_start(g, s, cy, x, avg);
    }
  }
  if (cy->trace_on)
    rr_tel_buf_printf(&cy->trace, "%llu,%llu,%llu,%s,%s,%d,%s,%u,%llu,%.0f,%u\n",
                      (unsigned long long)(x->done_ns + cy->wall_off), (unsigned long long)x->done_ns,
                      (unsigned long long)x->post_ns, s->nic, s->peer, s->rail, rr_tel_dir_str(s->dir),
                      x->bytes, (unsigned long long)lat, s->thr, s->win.n);
}

void rr_tel_series_interval(rr_tel_global *g, rr_tel_series *s, rr_tel_cycle *cy) {
  static const double q[3] = {0.5, 0.9, 0.99};
  if (rr_tel_res_quantiles(&s->res, q, 3, s->q_ns) == RR_OK) s->have_q = 1;
  rr_tel_res_reset(&s->res);
  s->active = s->requests != s->requests_at_export;
  s->requests_at_export = s->requests;
  /* A capture whose rail went quiet is written with what it has. */
  if (s->cap && s->requests == s->requests_at_cap_check) capture_finish(g, s, cy);
  s->requests_at_cap_check = s->requests;
}
