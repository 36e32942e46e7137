/* Telemetry arithmetic and the data-path ring: window math, percentiles, the
 * throughput-drop detector, ring wraparound and drop counting (also under a
 * concurrent consumer), and the cost of rr_tel_record(). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "rr_clock.h"
#include "rr_tel_ring.h"
#include "rr_tel_stats.h"
#include "rr_telemetry.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define T 1000000ull /* 1 ms per request in the synthetic streams */
#define B 1000000u   /* 1 MB per request: 1 GB/s */

static void assert_near(double got, double want, double rel) {
  if (!(got >= want * (1 - rel) && got <= want * (1 + rel))) {
    fprintf(stderr, "got %.6g, want %.6g (+-%.1f%%)\n", got, want, rel * 100);
    fail();
  }
}

/* ---- window */

static void window_back_to_back(void **state) {
  (void)state;
  rr_tel_window w;
  assert_int_equal(rr_tel_window_init(&w, 8), RR_OK);
  double thr = 0;
  for (uint64_t i = 0; i < 20; i++) thr = rr_tel_window_add(&w, i * T, (i + 1) * T, B);
  assert_near(thr, 1e9, 1e-9);
  assert_true(rr_tel_window_full(&w));
  /* The spec's formula, bytes of the last W / (done newest - post oldest): */
  assert_near((double)w.sum_bytes * 1e9 / (double)(20 * T - 12 * T), thr, 1e-9);
  rr_tel_window_fini(&w);
}

/* A send queue 16 deep: every request was posted long before the wire took
 * it. The window must still read the wire's rate, not be diluted by the wait. */
static void window_deep_queue(void **state) {
  (void)state;
  rr_tel_window w;
  rr_tel_window_init(&w, 8);
  double thr = 0;
  for (uint64_t i = 0; i < 64; i++) {
    uint64_t done = (i + 1) * T;
    uint64_t post = i >= 16 ? (i - 16 + 1) * T : 0; /* posted when a slot freed */
    thr = rr_tel_window_add(&w, post, done, B);
  }
  assert_near(thr, 1e9, 1e-9);
  rr_tel_window_fini(&w);
}

/* Idle time between bursts is not rail time. */
static void window_idle_gap(void **state) {
  (void)state;
  rr_tel_window w;
  rr_tel_window_init(&w, 8);
  uint64_t t = 0;
  double thr = 0;
  for (int burst = 0; burst < 4; burst++) {
    for (int i = 0; i < 3; i++, t += T) thr = rr_tel_window_add(&w, t, t + T, B);
    t += 500 * T; /* the application computes for half a second */
  }
  assert_near(thr, 1e9, 1e-9);
  rr_tel_window_fini(&w);
}

/* A step from 1 GB/s to 0.5 GB/s: k requests into the new rate the window
 * mixes both, W requests in it shows only the new rate. */
static void window_step(void **state) {
  (void)state;
  const uint32_t W = 8;
  rr_tel_window w;
  rr_tel_window_init(&w, W);
  uint64_t t = 0;
  for (int i = 0; i < 32; i++, t += T) rr_tel_window_add(&w, t, t + T, B);
  for (uint32_t k = 1; k <= W; k++, t += 2 * T) {
    double thr = rr_tel_window_add(&w, t, t + 2 * T, B);
    double want = (double)W * B * 1e9 / ((double)(W - k) * T + (double)k * 2 * T);
    assert_near(thr, want, 1e-9);
  }
  rr_tel_window_fini(&w);
}

/* Fewer than W samples: the window covers what it has. A completion older
 * than one already seen (another connection's ring drained late) adds bytes,
 * no time. Zero time: 0, not a division by zero. */
static void window_edges(void **state) {
  (void)state;
  rr_tel_window w;
  rr_tel_window_init(&w, 8);
  assert_near(rr_tel_window_add(&w, 0, 2 * T, B), 0.5e9, 1e-9);
  assert_near(rr_tel_window_add(&w, 0, 1 * T, B), 1e9, 1e-9); /* late: 2 MB over 2 ms */
  assert_int_equal(w.n, 2);
  rr_tel_window_fini(&w);

  rr_tel_window z;
  rr_tel_window_init(&z, 4);
  assert_true(rr_tel_window_add(&z, 5, 5, B) == 0.0);
  rr_tel_window_fini(&z);

  rr_tel_window one;
  rr_tel_window_init(&one, 1); /* W=1: per request */
  rr_tel_window_add(&one, 0, T, B);
  assert_near(rr_tel_window_add(&one, T, 3 * T, B), 0.5e9, 1e-9);
  rr_tel_window_fini(&one);
}

/* ---- percentiles */

static void quantiles_exact(void **state) {
  (void)state;
  uint64_t v[100];
  for (int i = 0; i < 100; i++) v[i] = (uint64_t)i + 1;
  assert_int_equal(rr_tel_quantile_sorted(v, 100, 0.5), 50);
  assert_int_equal(rr_tel_quantile_sorted(v, 100, 0.9), 90);
  assert_int_equal(rr_tel_quantile_sorted(v, 100, 0.99), 99);
  assert_int_equal(rr_tel_quantile_sorted(v, 100, 1.0), 100);
  assert_int_equal(rr_tel_quantile_sorted(v, 100, 0.001), 1);
  assert_int_equal(rr_tel_quantile_sorted(v, 1, 0.99), 1);
  uint64_t two[2] = {10, 20};
  assert_int_equal(rr_tel_quantile_sorted(two, 2, 0.5), 10);
  assert_int_equal(rr_tel_quantile_sorted(two, 2, 0.51), 20);
  assert_int_equal(rr_tel_quantile_sorted(v, 0, 0.5), 0);

  rr_tel_reservoir r;
  rr_tel_res_init(&r, 1024, 1);
  uint64_t out[3];
  static const double q[3] = {0.5, 0.9, 0.99};
  assert_int_equal(rr_tel_res_quantiles(&r, q, 3, out), RR_AGAIN); /* empty */
  for (int i = 1000; i >= 1; i--) rr_tel_res_add(&r, (uint64_t)i); /* fits: exact */
  assert_int_equal(rr_tel_res_quantiles(&r, q, 3, out), RR_OK);
  assert_int_equal(out[0], 500);
  assert_int_equal(out[1], 900);
  assert_int_equal(out[2], 990);
  rr_tel_res_reset(&r);
  assert_int_equal(r.n, 0);
  rr_tel_res_fini(&r);
}

/* More values than room: a uniform sample, bounded memory, close quantiles. */
static void quantiles_reservoir(void **state) {
  (void)state;
  rr_tel_reservoir r;
  rr_tel_res_init(&r, 1024, 42);
  for (uint64_t i = 1; i <= 200000; i++) rr_tel_res_add(&r, (i * 7919) % 200000 + 1);
  assert_int_equal(r.n, 1024);
  assert_int_equal(r.seen, 200000);
  uint64_t out[3];
  static const double q[3] = {0.5, 0.9, 0.99};
  rr_tel_res_quantiles(&r, q, 3, out);
  assert_near((double)out[0], 100000, 0.06);
  assert_near((double)out[1], 180000, 0.03);
  assert_near((double)out[2], 198000, 0.015);
  rr_tel_res_fini(&r);
}

/* ---- drop detector */

static int feed(rr_tel_drop_detector *d, double thr, int n, double frac) {
  int fired = 0;
  for (int i = 0; i < n; i++) fired += rr_tel_drop_step(d, thr, frac, NULL);
  return fired;
}

static void drop_detector(void **state) {
  (void)state;
  const uint32_t W = 8;
  rr_tel_drop_detector d;
  rr_tel_drop_init(&d, W);
  assert_int_equal(feed(&d, 40, 4, 0.5), 0);      /* cold: no reference yet */
  assert_int_equal(feed(&d, 100, 200, 0.5), 0);   /* steady */
  assert_int_equal(feed(&d, 10, 2 * W - 1, 0.5), 0); /* one slow request stays W windows: not a drop */
  assert_int_equal(feed(&d, 100, 50, 0.5), 0);
  double avg = 0;
  int fired = 0, at = -1;
  for (int i = 0; i < 3 * (int)W; i++)
    if (rr_tel_drop_step(&d, 40, 0.5, &avg)) fired++, at = i;
  assert_int_equal(fired, 1);                      /* one drop, one report */
  assert_int_equal(at, 2 * W - 1);                 /* after 2W windows below */
  assert_near(avg, 100, 0.02);                     /* measured against what came before */
  assert_int_equal(feed(&d, 40, 400, 0.5), 0);     /* the new level becomes normal, re-arms */
  assert_int_equal(feed(&d, 10, 3 * W, 0.5), 1);   /* a second drop is reported */
  assert_int_equal(feed(&d, 1, 100, 0), 0);        /* fraction 0: off */
  rr_tel_drop_fini(&d);

  /* Windows that look absurdly fast (a send completes when the kernel takes
   * the data) or slow (a descheduled thread) must not move the reference:
   * steady 100 with one 10000 in 7 and one 30 in 11 never fires, and a real
   * drop to 40 still does. */
  rr_tel_drop_init(&d, W);
  int f = 0;
  for (int i = 0; i < 400; i++) f += rr_tel_drop_step(&d, i % 7 == 0 ? 10000 : i % 11 == 0 ? 30 : 100, 0.5, NULL);
  assert_int_equal(f, 0);
  assert_int_equal(feed(&d, 40, 3 * W, 0.5), 1);
  rr_tel_drop_fini(&d);
}

/* ---- ring */

static rr_tel_ring *ring_new(uint32_t cap, uint32_t start) {
  rr_tel_ring *r = aligned_alloc(64, (rr_tel_ring_size(cap) + 63) & ~63ul);
  assert_non_null(r);
  rr_tel_ring_init(r, cap, start);
  return r;
}

static void ring_wrap_and_drops(void **state) {
  (void)state;
  rr_tel_ring *r = ring_new(8, UINT32_MAX - 3); /* the counters wrap after 4 pushes */
  for (uint32_t i = 0; i < 8; i++) assert_int_equal(rr_tel_ring_push(r, i, i + 1, i), 1);
  assert_int_equal(rr_tel_ring_push(r, 99, 99, 99), 0); /* full: dropped, not blocked */
  assert_int_equal(rr_tel_ring_push(r, 99, 99, 99), 0);
  assert_int_equal(rr_tel_ring_drops(r), 2);
  rr_tel_sample s[16];
  assert_int_equal(rr_tel_ring_pop(r, s, 5), 5);
  for (uint32_t i = 0; i < 5; i++) assert_int_equal(s[i].bytes, i);
  for (uint32_t i = 8; i < 13; i++) assert_int_equal(rr_tel_ring_push(r, i, i + 1, i), 1);
  assert_int_equal(rr_tel_ring_push(r, 99, 99, 99), 0);
  assert_int_equal(rr_tel_ring_pop(r, s, 16), 8);
  for (uint32_t i = 0; i < 8; i++) {
    assert_int_equal(s[i].bytes, i + 5);
    assert_int_equal(s[i].post_ns, i + 5);
    assert_int_equal(s[i].done_ns, i + 6);
  }
  assert_int_equal(rr_tel_ring_pop(r, s, 16), 0);
  assert_int_equal(rr_tel_ring_drops(r), 3);
  assert_true(atomic_load(&r->head) < 16); /* went through 2^32 */
  free(r);
}

typedef struct spsc { rr_tel_ring *r; uint64_t n; _Atomic int done; } spsc;

static void *producer(void *arg) {
  spsc *p = arg;
  for (uint64_t i = 1; i <= p->n; i++) rr_tel_ring_push(p->r, i, i, (uint32_t)i);
  atomic_store(&p->done, 1);
  return NULL;
}

/* A producer and a consumer at full speed: what arrives is in order, whole
 * (post, done and bytes of one push together), and arrived + dropped = pushed. */
static void ring_concurrent(void **state) {
  (void)state;
  spsc p = {.r = ring_new(64, UINT32_MAX - 1000), .n = 2000000};
  pthread_t th;
  pthread_create(&th, NULL, producer, &p);
  uint64_t got = 0, last = 0;
  rr_tel_sample s[32];
  for (;;) {
    int fin = atomic_load(&p.done);
    uint32_t k = rr_tel_ring_pop(p.r, s, 32);
    for (uint32_t i = 0; i < k; i++) {
      assert_true(s[i].post_ns > last);
      assert_int_equal(s[i].done_ns, s[i].post_ns);
      assert_int_equal(s[i].bytes, (uint32_t)s[i].post_ns);
      last = s[i].post_ns;
    }
    got += k;
    if (fin && k == 0) break;
  }
  pthread_join(th, NULL);
  assert_int_equal(got + rr_tel_ring_drops(p.r), p.n);
  assert_true(got > 0);
  free(p.r);
}

/* ---- cost of the data-path call */

static double ns_per_call(rr_tel_rail *t, long n) {
  uint64_t t0 = rr_now_ns();
  for (long i = 0; i < n; i++) rr_tel_record(t, (uint64_t)i, (uint64_t)i + 100, 4096);
  return (double)(rr_now_ns() - t0) / (double)n;
}

/* CPU time the exporter thread ("rerail-tel") has used, ns (schedstat). */
static uint64_t exporter_cpu_ns(void) {
  char path[64], comm[32];
  for (int tid = getpid(); tid < getpid() + 64; tid++) {
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", tid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    int ok = fgets(comm, sizeof comm, f) && !strncmp(comm, "rerail-tel", 10);
    fclose(f);
    if (!ok) continue;
    snprintf(path, sizeof path, "/proc/self/task/%d/schedstat", tid);
    unsigned long long ns = 0;
    f = fopen(path, "r");
    if (f) {
      if (fscanf(f, "%llu", &ns) != 1) ns = 0;
      fclose(f);
    }
    return ns;
  }
  return 0;
}

/* The real recorder with the exporter draining it, as in the plugin; a
 * batch small enough for the ring (no drops) repeated after each drain. */
static void record_cost(void **state) {
  (void)state;
  char dir[] = "/tmp/rerail-telcost-XXXXXX";
  assert_non_null(mkdtemp(dir));
  setenv("RERAIL_TELEMETRY_DIR", dir, 1);
  setenv("RERAIL_TELEMETRY_RING", "65536", 1);
  rr_tel_rail *t = rr_tel_rail_open(0, "cost0", "10.0.0.1", 0, RR_TEL_TX);
  assert_non_null(t);
  double best = 1e9, sum = 0;
  const int rounds = 50;
  const long batch = 50000;
  for (int i = 0; i < rounds; i++) {
    double ns = ns_per_call(t, batch);
    sum += ns;
    if (ns < best) best = ns;
    rr_tel_flush();
  }
  uint64_t c0 = rr_now_ns();
  for (int i = 0; i < 1000000; i++) (void)rr_now_ns();
  double clk = (double)(rr_now_ns() - c0) / 1e6;
  rr_tel_rail_figures f;
  assert_int_equal(rr_tel_rail_figures_get("cost0", "10.0.0.1", 0, RR_TEL_TX, &f), RR_OK);
  /* The exporter's side: CPU per sample drained and digested (window,
   * reservoir, drop detector), wake-ups included; no file written meanwhile. */
  uint64_t cpu0 = exporter_cpu_ns(), base = f.requests;
  const long per = 40000, batches = 25;
  for (long b = 0; b < batches; b++) {
    ns_per_call(t, per);
    do {
      usleep(2000);
      rr_tel_rail_figures_get("cost0", "10.0.0.1", 0, RR_TEL_TX, &f);
    } while (f.requests + f.dropped < base + (uint64_t)((b + 1) * per));
  }
  uint64_t cpu1 = exporter_cpu_ns();
  printf("exporter thread: %.1f ns of CPU per sample (%ld samples)\n",
         (double)(cpu1 - cpu0) / (double)(per * batches), per * batches);
  printf("rr_tel_record(): %.2f ns/call best, %.2f ns mean over %d x %ld calls (drops %llu); "
         "for scale, rr_now_ns(): %.1f ns\n",
         best, sum / rounds, rounds, batch, (unsigned long long)f.dropped, clk);
  assert_int_equal(f.requests + f.dropped, (uint64_t)rounds * (uint64_t)batch + (uint64_t)(per * batches));
  /* A guard against a syscall or a lock creeping in, not a benchmark bound. */
  assert_true(best < 250);
  rr_tel_rail_close(t);
  assert_false(rr_tel_running());
  rr_tel_reset_for_tests();
  unsetenv("RERAIL_TELEMETRY_DIR");
  unsetenv("RERAIL_TELEMETRY_RING");
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(window_back_to_back), cmocka_unit_test(window_deep_queue),
      cmocka_unit_test(window_idle_gap),     cmocka_unit_test(window_step),
      cmocka_unit_test(window_edges),        cmocka_unit_test(quantiles_exact),
      cmocka_unit_test(quantiles_reservoir), cmocka_unit_test(drop_detector),
      cmocka_unit_test(ring_wrap_and_drops), cmocka_unit_test(ring_concurrent),
      cmocka_unit_test(record_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
