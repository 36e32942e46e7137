/* What the receiving side saw over time: the stall report (--stall-report)
 * and the throughput timeline (--timeline FILE).
 *
 * Every receive op that test() reports done is a completion. The stall
 * report keeps, per connection and across all of them, the longest gap
 * between consecutive completions and when it happened: a failover shows up
 * as the longest gap of the run. The timeline adds the bytes of each
 * completion to its 50 ms bucket. Times are kept on CLOCK_MONOTONIC and
 * printed relative to the start of traffic and as wall-clock (epoch)
 * seconds, so that a script can line them up with the faults it injected.
 * --completion-log FILE keeps every completion (time, bytes, connection) for
 * scripts that need more than the longest gaps.
 * The time of the first error is kept too (for "how long until the error"). */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUCKET_NS (H_TIMELINE_BUCKET_MS * 1000000ull)
#define TOP_GAPS 16

static pthread_mutex_t rep_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint64_t t0_ns;          /* traffic start (first h_report_start) */
static _Atomic uint64_t first_error_ns; /* 0 = none */
static int64_t wall_offset_ns;          /* realtime - monotonic, taken once */

/* overall stall tracking (rep_lock) */
static uint64_t last_ns, first_cmpl_ns, completions;
static h_gap top[TOP_GAPS];             /* longest first */
static int ntop;

/* --completion-log: every completion (rep_lock) */
typedef struct cmpl_rec {
  uint64_t ns, bytes;
  int conn;
} cmpl_rec;
static cmpl_rec *clog;
static size_t clog_n, clog_cap;

/* timeline */
static _Atomic uint64_t *buckets;
static size_t nbuckets;
static _Atomic uint64_t beyond_bytes;   /* completions past the last bucket */
static _Atomic size_t used_buckets;

int h_report_receives;                  /* this process has receive connections */

static double rel_s(uint64_t ns) {
  uint64_t t0 = atomic_load(&t0_ns);
  return t0 && ns >= t0 ? (double)(ns - t0) * 1e-9 : 0.0;
}

static double wall_s(uint64_t ns) { return (double)((int64_t)ns + wall_offset_ns) * 1e-9; }

void h_report_init(void) {
  struct timespec rt;
  uint64_t m0 = h_now_ns();
  clock_gettime(CLOCK_REALTIME, &rt);
  uint64_t m1 = h_now_ns();
  wall_offset_ns = ((int64_t)rt.tv_sec * 1000000000ll + rt.tv_nsec) - (int64_t)(m0 / 2 + m1 / 2);
  if (!g_opt.timeline) return;
  /* The watchdog ends the process at --timeout; without one, size for the
   * planned duration plus slack, or an hour. */
  double span = g_opt.timeout > 0 ? g_opt.timeout + 10 : g_opt.duration > 0 ? g_opt.duration + 600 : 3600;
  nbuckets = (size_t)(span * 1000.0 / H_TIMELINE_BUCKET_MS) + 1;
  buckets = calloc(nbuckets, sizeof *buckets);
  if (!buckets) nbuckets = 0;
}

void h_report_start(void) {
  uint64_t zero = 0, now = h_now_ns();
  if (!atomic_compare_exchange_strong(&t0_ns, &zero, now)) return;
  /* "<role>.traffic" holds the wall-clock start: scripts that inject faults
   * wait for it rather than guess how long setup takes. */
  if (g_opt.rdv && g_opt.role >= 0) {
    char t[64];
    snprintf(t, sizeof t, "%.6f\n", wall_s(now));
    h_rdv_put_flag(g_opt.role, "traffic", t);
  }
}

void h_report_error(void) {
  uint64_t zero = 0;
  atomic_compare_exchange_strong(&first_error_ns, &zero, h_now_ns());
}

static void top_insert(const h_gap *g) {
  int i;
  if (ntop < TOP_GAPS) i = ntop++;
  else if (top[TOP_GAPS - 1].len_ns >= g->len_ns) return;
  else i = TOP_GAPS - 1;
  while (i > 0 && top[i - 1].len_ns < g->len_ns) {
    top[i] = top[i - 1];
    i--;
  }
  top[i] = *g;
}

void h_report_completion(h_conn *c, uint64_t now, uint64_t bytes) {
  if (g_opt.completion_log) {
    pthread_mutex_lock(&rep_lock);
    if (clog_n == clog_cap) {
      size_t cap = clog_cap ? clog_cap * 2 : 65536;
      cmpl_rec *n = realloc(clog, cap * sizeof *n);
      if (n) clog = n, clog_cap = cap;
    }
    if (clog_n < clog_cap) clog[clog_n++] = (cmpl_rec){.ns = now, .bytes = bytes, .conn = c->idx};
    pthread_mutex_unlock(&rep_lock);
  }
  if (g_opt.stall_report) {
    /* per connection: only its own thread touches it */
    if (c->cmpl_last_ns && now > c->cmpl_last_ns && now - c->cmpl_last_ns > c->gap.len_ns) {
      c->gap.len_ns = now - c->cmpl_last_ns;
      c->gap.start_ns = c->cmpl_last_ns;
      c->gap.end_ns = now;
      c->gap.conn = c->idx;
    }
    if (now > c->cmpl_last_ns) c->cmpl_last_ns = now;
    c->completions++;
    pthread_mutex_lock(&rep_lock);
    if (last_ns && now > last_ns) {
      h_gap g = {.len_ns = now - last_ns, .start_ns = last_ns, .end_ns = now, .conn = c->idx};
      top_insert(&g);
    }
    if (!first_cmpl_ns) first_cmpl_ns = now;
    if (now > last_ns) last_ns = now;
    completions++;
    pthread_mutex_unlock(&rep_lock);
  }
  if (buckets) {
    uint64_t t0 = atomic_load(&t0_ns);
    size_t b = now > t0 ? (size_t)((now - t0) / BUCKET_NS) : 0;
    if (b < nbuckets) {
      atomic_fetch_add_explicit(&buckets[b], bytes, memory_order_relaxed);
      size_t u = atomic_load_explicit(&used_buckets, memory_order_relaxed);
      while (b + 1 > u && !atomic_compare_exchange_weak(&used_buckets, &u, b + 1)) {
      }
    } else {
      atomic_fetch_add_explicit(&beyond_bytes, bytes, memory_order_relaxed);
    }
  }
}

int h_report_write_timeline(void) {
  if (!g_opt.timeline || !h_report_receives) return 0;
  FILE *f = fopen(g_opt.timeline, "w");
  if (!f) {
    h_error("cannot write the timeline to %s", g_opt.timeline);
    return -1;
  }
  size_t n = atomic_load(&used_buckets);
  fprintf(f, "# rerail-harness %s timeline: received bytes per %d ms bucket (t_ms = bucket start since "
          "traffic start)\n# t0_wall %.6f\n",
          h_role_name(g_opt.role), H_TIMELINE_BUCKET_MS, wall_s(atomic_load(&t0_ns)));
  for (size_t i = 0; i < n; i++)
    fprintf(f, "%zu %llu\n", i * H_TIMELINE_BUCKET_MS, (unsigned long long)atomic_load(&buckets[i]));
  if (atomic_load(&beyond_bytes))
    fprintf(f, "# %llu bytes completed after the last bucket\n", (unsigned long long)atomic_load(&beyond_bytes));
  int rc = fclose(f) ? -1 : 0;
  if (rc) h_error("cannot write the timeline to %s", g_opt.timeline);
  return rc;
}

int h_report_write_completions(void) {
  if (!g_opt.completion_log || !h_report_receives) return 0;
  FILE *f = fopen(g_opt.completion_log, "w");
  if (!f) {
    h_error("cannot write the completion log to %s", g_opt.completion_log);
    return -1;
  }
  fprintf(f, "# rerail-harness %s completions: wall-clock time (epoch s), bytes, connection\n",
          h_role_name(g_opt.role));
  pthread_mutex_lock(&rep_lock);
  for (size_t i = 0; i < clog_n; i++)
    fprintf(f, "%.6f %llu %d\n", wall_s(clog[i].ns), (unsigned long long)clog[i].bytes, clog[i].conn);
  pthread_mutex_unlock(&rep_lock);
  int rc = fclose(f) ? -1 : 0;
  if (rc) h_error("cannot write the completion log to %s", g_opt.completion_log);
  return rc;
}

/* The longest gap of one connection and overall. */
static const h_gap *overall(void) { return ntop ? &top[0] : NULL; }

void h_report_print_text(h_conn *recv, int nrecv) {
  uint64_t err = atomic_load(&first_error_ns);
  if (g_opt.stall_report && nrecv) {
    const h_gap *g = overall();
    if (!g) {
      printf("  stall report: fewer than two completions (%llu), no gap to report\n",
             (unsigned long long)completions);
    } else {
      printf("  stall report: longest gap between completions %.3f ms (all connections), from +%.3f s "
             "to +%.3f s (wall %.6f .. %.6f), ended by conn %d; %llu completions\n",
             (double)g->len_ns * 1e-6, rel_s(g->start_ns), rel_s(g->end_ns), wall_s(g->start_ns),
             wall_s(g->end_ns), g->conn, (unsigned long long)completions);
      printf("    next longest:");
      for (int i = 1; i < ntop && i < 5; i++) printf(" %.3f ms at +%.3f s;", (double)top[i].len_ns * 1e-6, rel_s(top[i].start_ns));
      printf("%s\n", ntop > 1 ? "" : " none");
    }
    for (int i = 0; i < nrecv; i++) {
      const h_conn *c = &recv[i];
      if (c->completions < 2) {
        printf("    conn %d: %llu completion(s), no gap\n", c->idx, (unsigned long long)c->completions);
        continue;
      }
      printf("    conn %d: longest gap %.3f ms from +%.3f s to +%.3f s (wall %.6f); %llu completions\n", c->idx,
             (double)c->gap.len_ns * 1e-6, rel_s(c->gap.start_ns), rel_s(c->gap.end_ns),
             wall_s(c->gap.start_ns), (unsigned long long)c->completions);
    }
  }
  if (g_opt.timeline && nrecv)
    printf("  timeline: %zu buckets of %d ms written to %s (t0 wall %.6f)\n", atomic_load(&used_buckets),
           H_TIMELINE_BUCKET_MS, g_opt.timeline, wall_s(atomic_load(&t0_ns)));
  if (err)
    printf("  first error at +%.3f s (wall %.6f)\n", rel_s(err), wall_s(err));
}

static void json_gap(const char *name, const h_gap *g) {
  printf("\"%s\":{\"ms\":%.3f,\"start_s\":%.6f,\"end_s\":%.6f,\"start_wall\":%.6f,\"end_wall\":%.6f,"
         "\"conn\":%d}",
         name, (double)g->len_ns * 1e-6, rel_s(g->start_ns), rel_s(g->end_ns), wall_s(g->start_ns),
         wall_s(g->end_ns), g->conn);
}

void h_report_print_json(h_conn *recv, int nrecv) {
  uint64_t t0 = atomic_load(&t0_ns), err = atomic_load(&first_error_ns);
  printf("\"t0_wall\":%.6f,", t0 ? wall_s(t0) : 0.0);
  if (err) printf("\"first_error\":{\"s\":%.6f,\"wall\":%.6f},", rel_s(err), wall_s(err));
  else printf("\"first_error\":null,");
  if (g_opt.stall_report && nrecv) {
    printf("\"stall\":{\"completions\":%llu,", (unsigned long long)completions);
    const h_gap *g = overall();
    if (g) json_gap("longest", g);
    else printf("\"longest\":null");
    printf(",\"top\":[");
    for (int i = 0; i < ntop; i++) {
      printf("%s{\"ms\":%.3f,\"start_s\":%.6f,\"start_wall\":%.6f,\"end_wall\":%.6f,\"conn\":%d}", i ? "," : "",
             (double)top[i].len_ns * 1e-6, rel_s(top[i].start_ns), wall_s(top[i].start_ns),
             wall_s(top[i].end_ns), top[i].conn);
    }
    printf("],\"per_conn\":[");
    for (int i = 0; i < nrecv; i++) {
      const h_conn *c = &recv[i];
      printf("%s{\"conn\":%d,\"completions\":%llu,", i ? "," : "", c->idx, (unsigned long long)c->completions);
      if (c->completions >= 2) json_gap("longest", &c->gap);
      else printf("\"longest\":null");
      printf("}");
    }
    printf("]},");
  }
  if (g_opt.timeline && nrecv) {
    size_t n = atomic_load(&used_buckets);
    printf("\"timeline\":{\"file\":\"%s\",\"bucket_ms\":%d,\"bytes\":[", g_opt.timeline, H_TIMELINE_BUCKET_MS);
    for (size_t i = 0; i < n; i++)
      printf("%s%llu", i ? "," : "", (unsigned long long)atomic_load(&buckets[i]));
    printf("]},");
  }
}
