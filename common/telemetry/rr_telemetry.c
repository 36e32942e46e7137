/* Telemetry recorder: open/close, the data-path record, and the lifetime of
 * the exporter thread (rr_tel_exporter.c).
 *
 * The exporter starts with the first recorder opened while
 * RERAIL_TELEMETRY_DIR is set, and is joined when the last one closes and in
 * the library destructor: NCCL dlclose()s the plugin, and a thread left
 * running in unmapped code would crash the job.
 *
 * Cost of rr_tel_record(): one function call and a ring push, no system
 * call, no lock, no allocation; measured ~3 ns per call (best batch), ~5.5 ns
 * mean, on the development VM with the exporter draining concurrently
 * (test_tel_stats's record_cost prints it; docs/telemetry.md). */
#include "rr_telemetry.h"
#include "rr_log.h"
#include "rr_params.h"
#include "rr_tel_format.h"
#include "rr_tel_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

rr_tel_global rr_tel_g = {
    .life = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .flushed = PTHREAD_COND_INITIALIZER,
};

rr_status rr_tel_config_read(rr_tel_config *c) {
  const char *dir = getenv("RERAIL_TELEMETRY_DIR");
  if (!dir || !*dir) return RR_ERR_UNSUPPORTED;
  memset(c, 0, sizeof *c);
  if (strlen(dir) >= sizeof c->dir) {
    RR_WARN("RERAIL_TELEMETRY_DIR is longer than %zu characters; telemetry stays off", sizeof c->dir - 1);
    return RR_ERR_UNSUPPORTED;
  }
  strcpy(c->dir, dir);
  c->interval_ms = rr_param_parse_u64("RERAIL_TELEMETRY_INTERVAL", getenv("RERAIL_TELEMETRY_INTERVAL"),
                                      1000, 10, 3600000);
  c->window = (uint32_t)rr_param_parse_u64("RERAIL_TELEMETRY_WINDOW", getenv("RERAIL_TELEMETRY_WINDOW"),
                                           8, 1, 1024);
  uint64_t ring = rr_param_parse_u64("RERAIL_TELEMETRY_RING", getenv("RERAIL_TELEMETRY_RING"), 8192, 64,
                                     65536);
  c->ring_slots = 64;
  while (c->ring_slots < ring) c->ring_slots *= 2; /* a power of two: the ring masks */
  c->anomaly_fraction = (double)rr_param_parse_u64("RERAIL_TELEMETRY_ANOMALY",
                                                   getenv("RERAIL_TELEMETRY_ANOMALY"), 50, 0, 100) / 100.0;
  c->events_max = rr_param_parse_u64("RERAIL_TELEMETRY_EVENTS_MAX", getenv("RERAIL_TELEMETRY_EVENTS_MAX"),
                                     4u << 20, 1024, 1ull << 30);
  c->trace = (int)rr_param_parse_u64("RERAIL_TELEMETRY_TRACE", getenv("RERAIL_TELEMETRY_TRACE"), 0, 0, 1);
  c->keep = (int)rr_param_parse_u64("RERAIL_TELEMETRY_KEEP", getenv("RERAIL_TELEMETRY_KEEP"), 0, 0, 1);
  rr_tel_hostname(c->host, sizeof c->host);
  c->pid = (int)getpid();
  return RR_OK;
}

/* life held. */
static rr_status exporter_start(rr_tel_global *g, const rr_tel_config *cfg) {
  pthread_mutex_lock(&g->lock);
  g->cfg = *cfg;
  g->stop = 0;
  pthread_mutex_unlock(&g->lock);
  /* Subscribed before the thread runs, so no event reported after open()
   * returns is missed; unsubscribed after the join (exporter_stop). */
  if (rr_health_subscribe(rr_tel_health_sink, NULL) != RR_OK)
    RR_WARN("telemetry: no room for another health sink; events are not logged");
  /* The thread takes no signal meant for the application. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&g->thread, NULL, rr_tel_exporter_main, g);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) {
    rr_health_unsubscribe(rr_tel_health_sink, NULL);
    RR_WARN("telemetry: cannot start the exporter thread (error %d); telemetry stays off", rc);
    return RR_ERR_SYSTEM;
  }
  pthread_setname_np(g->thread, "rerail-tel");
  g->running = 1;
  RR_INFO(RR_SUB_NET, "telemetry: writing to %s every %llu ms, window %u requests", cfg->dir,
          (unsigned long long)cfg->interval_ms, cfg->window);
  return RR_OK;
}

/* life held. The exporter's last cycle drains every ring, frees the closed
 * recorders and writes the files once more. */
static void exporter_stop(rr_tel_global *g) {
  if (!g->running) return;
  pthread_mutex_lock(&g->lock);
  g->stop = 1;
  pthread_cond_broadcast(&g->wake);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->thread, NULL);
  /* Events that race with this stay queued for the next exporter. */
  rr_health_unsubscribe(rr_tel_health_sink, NULL);
  g->running = 0;
}

rr_tel_rail *rr_tel_rail_open(int dev, const char *ifname, const char *peer, int rail, int dir) {
  rr_tel_global *g = &rr_tel_g;
  rr_tel_rail *t = NULL;
  pthread_mutex_lock(&g->life);
  if (g->shutdown) goto out;
  if (!g->running) {
    rr_tel_config cfg;
    if (rr_tel_config_read(&cfg) != RR_OK || exporter_start(g, &cfg) != RR_OK) goto out;
  }
  uint32_t slots = g->cfg.ring_slots;
  size_t size = offsetof(rr_tel_rail, ring) + rr_tel_ring_size(slots);
  size = (size + 63) & ~(size_t)63;
  t = aligned_alloc(64, size);
  if (!t) goto out_idle;
  memset(t, 0, offsetof(rr_tel_rail, ring));
  rr_tel_ring_init(&t->ring, slots, 0);
  pthread_mutex_lock(&g->lock);
  rr_tel_series *s = rr_tel_series_get(g, dev, ifname ? ifname : "?", peer ? peer : "?", rail,
                                       dir == RR_TEL_RX ? RR_TEL_RX : RR_TEL_TX);
  if (s) {
    t->series = s;
    t->next = s->recs;
    s->recs = t;
    s->nrec++;
  }
  pthread_mutex_unlock(&g->lock);
  if (!s) {
    free(t);
    t = NULL;
    goto out_idle;
  }
  g->refs++;
  goto out;
out_idle:
  if (g->refs == 0) exporter_stop(g);
out:
  pthread_mutex_unlock(&g->life);
  return t;
}

void rr_tel_conn_rail_add(const char *ifname, const char *peer) {
  rr_tel_global *g = &rr_tel_g;
  pthread_mutex_lock(&g->life);
  if (g->running) { /* else telemetry is off: nothing to export */
    pthread_mutex_lock(&g->lock);
    rr_tel_tables_conn_rail(&g->t, ifname && ifname[0] ? ifname : "?", peer ? peer : "");
    pthread_mutex_unlock(&g->lock);
  }
  pthread_mutex_unlock(&g->life);
}

void rr_tel_cost_publish_slow(rr_tel_rail *t, const rr_tel_cost *total, rr_tel_cost *published) {
  for (int k = 0; k < RR_TEL_COST_COUNT; k++) {
    uint64_t d = total->n[k] - published->n[k];
    if (!d) continue;
    /* One writer (the endpoint's owner): load and store, no locked add. */
    uint64_t v = atomic_load_explicit(&t->cost[k], memory_order_relaxed);
    atomic_store_explicit(&t->cost[k], v + d, memory_order_relaxed);
    published->n[k] = total->n[k];
  }
}

void rr_tel_message_slow(rr_tel_rail *t) {
  /* One writer (the recorder's data-path thread): load and store. */
  uint64_t v = atomic_load_explicit(&t->messages, memory_order_relaxed);
  atomic_store_explicit(&t->messages, v + 1, memory_order_relaxed);
}

void rr_tel_rail_close(rr_tel_rail *t) {
  if (!t) return;
  rr_tel_global *g = &rr_tel_g;
  pthread_mutex_lock(&g->life);
  pthread_mutex_lock(&g->lock);
  t->closed = 1; /* the exporter frees it after draining what is left */
  pthread_mutex_unlock(&g->lock);
  if (--g->refs == 0) exporter_stop(g);
  pthread_mutex_unlock(&g->life);
}

rr_status rr_tel_retain(void) {
  rr_tel_global *g = &rr_tel_g;
  rr_status rc = RR_ERR_UNSUPPORTED;
  pthread_mutex_lock(&g->life);
  if (!g->shutdown) {
    rr_tel_config cfg;
    rc = g->running ? RR_OK : rr_tel_config_read(&cfg);
    if (rc == RR_OK && !g->running) rc = exporter_start(g, &cfg);
    if (rc == RR_OK) g->refs++;
  }
  pthread_mutex_unlock(&g->life);
  return rc;
}

void rr_tel_release(void) {
  rr_tel_global *g = &rr_tel_g;
  pthread_mutex_lock(&g->life);
  if (g->refs > 0 && --g->refs == 0) exporter_stop(g);
  pthread_mutex_unlock(&g->life);
}

void rr_tel_record_slow(rr_tel_rail *t, uint64_t post_ns, uint64_t done_ns, uint32_t bytes) {
  rr_tel_ring_push(&t->ring, post_ns, done_ns, bytes);
}

rr_status rr_tel_flush(void) {
  rr_tel_global *g = &rr_tel_g;
  rr_status rc = RR_ERR_UNSUPPORTED;
  pthread_mutex_lock(&g->life);
  if (g->running) {
    pthread_mutex_lock(&g->lock);
    uint64_t req = ++g->flush_req;
    pthread_cond_broadcast(&g->wake);
    while (g->flush_done < req) pthread_cond_wait(&g->flushed, &g->lock);
    pthread_mutex_unlock(&g->lock);
    rc = RR_OK;
  }
  pthread_mutex_unlock(&g->life);
  return rc;
}

int rr_tel_running(void) {
  pthread_mutex_lock(&rr_tel_g.life);
  int r = rr_tel_g.running;
  pthread_mutex_unlock(&rr_tel_g.life);
  return r;
}

rr_status rr_tel_rail_figures_get(const char *nic, const char *peer, int rail, int dir, rr_tel_rail_figures *out) {
  rr_tel_global *g = &rr_tel_g;
  rr_status rc = RR_ERR_INVALID;
  pthread_mutex_lock(&g->lock);
  for (int i = 0; i < g->nseries; i++) {
    const rr_tel_series *s = g->series[i];
    if (s->rail != rail || s->dir != dir || strcmp(s->nic, nic) || strcmp(s->peer, peer)) continue;
    memset(out, 0, sizeof *out);
    out->requests = s->requests;
    out->bytes = s->bytes;
    out->dropped = s->drops;
    out->anomalies = s->anomalies;
    out->throughput = s->thr;
    out->have_latency = s->have_q;
    out->p50_ns = s->q_ns[0];
    out->p90_ns = s->q_ns[1];
    out->p99_ns = s->q_ns[2];
    out->cost = s->cost;
    out->messages = s->messages;
    rc = RR_OK;
    break;
  }
  pthread_mutex_unlock(&g->lock);
  return rc;
}

/* Stop for good: the library is going away (or a test says so). Recorders
 * still open are left allocated, and so is what they point to: a thread of
 * the application may still be inside rr_tel_record() while the process
 * exits. */
void rr_tel_shutdown(void) {
  rr_tel_global *g = &rr_tel_g;
  pthread_mutex_lock(&g->life);
  g->shutdown = 1;
  exporter_stop(g);
  if (g->refs == 0) {
    /* Nothing can record any more: give the memory back (after dlclose()
     * nothing would point to it and a leak checker would say so). */
    pthread_mutex_lock(&g->lock);
    rr_tel_series_free_all(g);
    pthread_mutex_unlock(&g->lock);
  }
  if (g->cfg.dir[0] && !g->cfg.keep) { /* an exporter ran in this process */
    /* This process's metrics stop being true now: take them out of the
     * scrape. The event log and anomaly snapshots stay. With
     * RERAIL_TELEMETRY_KEEP a benchmark reads the finished run's totals from
     * it instead (the exporter's last cycle, in exporter_stop, wrote them). */
    char name[256], path[2048];
    rr_tel_prom_name(&g->cfg, name, sizeof name);
    if ((size_t)snprintf(path, sizeof path, "%s/%s", g->cfg.dir, name) < sizeof path) unlink(path);
  }
  pthread_mutex_unlock(&g->life);
}

void rr_tel_reset_for_tests(void) {
  rr_tel_global *g = &rr_tel_g;
  pthread_mutex_lock(&g->life);
  exporter_stop(g);
  pthread_mutex_lock(&g->lock);
  rr_tel_series_free_all(g);
  memset(&g->t, 0, sizeof g->t);
  memset(&g->cfg, 0, sizeof g->cfg);
  g->refs = 0;
  g->shutdown = 0;
  g->warned_series_full = 0;
  pthread_mutex_unlock(&g->lock);
  uint64_t dropped;
  rr_health_event ev;
  while (rr_tel_events_take(&ev, 1, &dropped) == 1) {
  }
  pthread_mutex_unlock(&g->life);
}

__attribute__((destructor)) static void rr_tel_unload(void) { rr_tel_shutdown(); }
