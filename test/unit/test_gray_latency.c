/* The latency criterion of gray failures (net_plugin/engine/gray_latency.h):
 * a rail whose requests gain latency while its rate stays what it was is
 * judged degraded after RERAIL_DEGRADED_MS; a healthy rail with a busy
 * host's noise never is. Samples are made up as the engine takes them: a
 * burst of `bytes` posted onto an idle rail, timed to its acknowledgement. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "gray_latency.h"

#define MS 1000000ull
#define US 1000ull
#define RATE 1e9 /* bytes/s: the rail's healthy rate, the same before and after */

/* The engine's defaults (rr_params.c). */
static const gray_lat_cfg CFG = {.x = 10, .min_ns = 20 * MS, .degraded_ns = 1000 * MS};

/* A small deterministic generator: the noise is the same on every run. */
static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return rng;
}

/* One sample of a request of `bytes` at RATE, plus path latency lat_ns. */
static int feed(gray_lat *g, uint64_t bytes, uint64_t lat_ns, double ref_ns, uint64_t now) {
  uint64_t dur = (uint64_t)((double)bytes * 1e9 / RATE) + lat_ns;
  return gray_lat_sample(g, &CFG, gray_lat_excess(dur, bytes, RATE), ref_ns, now);
}

/* What the engine passes as the reference: the link's own level (no
 * sibling has carried traffic in chain mode). */
static double own(const gray_lat *g) { return g->level_ns; }

/* 30 ms more per request, the rate unchanged: degraded once the run is
 * RERAIL_DEGRADED_MS long, not before; message sizes vary (the rate's share
 * of each sample is taken out). */
static void added_latency_equal_rate(void **state) {
  (void)state;
  gray_lat g = {0};
  uint64_t now = 1000 * MS;
  for (int i = 0; i < 200; i++, now += 10 * MS) /* 2 s healthy: 80-120 us of path */
    assert_int_equal(feed(&g, (uint64_t)(4096 << (i % 10)), 80 * US + next_rand() % (40 * US), own(&g), now), 0);
  assert_true(g.level_ns > 0 && g.level_ns < 200 * US);
  uint64_t change = now, verdict = 0;
  for (int i = 0; i < 300 && !verdict; i++, now += 10 * MS)
    if (feed(&g, (uint64_t)(4096 << (i % 10)), 30 * MS + 100 * US, own(&g), now)) verdict = now;
  assert_true(verdict != 0);
  assert_true(verdict - change >= CFG.degraded_ns);
  assert_true(verdict - change <= CFG.degraded_ns + 50 * MS);
  /* The rate criterion's view of the same samples: every one delivered its
   * bytes at RATE (the excess is the added latency alone). */
  assert_true(g.last_ns >= 30 * MS && g.last_ns < 31 * MS);
}

/* A healthy rail on a busy host: a fifth of the samples 10-100 times the
 * usual (a late tick), one in twenty a 15 ms stall, bursts of stalls: for
 * 20 s, never degraded. */
static void noise_never_demotes(void **state) {
  (void)state;
  gray_lat g = {0};
  uint64_t now = 1000 * MS;
  for (int i = 0; i < 2000; i++, now += 10 * MS) {
    uint64_t r = next_rand() % 100, lat = 100 * US;
    if (r < 20) lat *= 10 + next_rand() % 90;
    else if (r < 25) lat = 15 * MS;
    if (i % 500 >= 490) lat = 18 * MS; /* a burst: ten stalls in a row */
    assert_int_equal(feed(&g, 65536, lat, own(&g), now), 0);
  }
}

/* A rail slow from its first request is judged against its siblings: a
 * reference of 100 us from the other links to the same peer. */
static void judged_against_siblings(void **state) {
  (void)state;
  gray_lat g = {0};
  uint64_t now = 1000 * MS, verdict = 0;
  for (int i = 0; i < 300 && !verdict; i++, now += 10 * MS) {
    double ref = g.level_ns > 0 && g.level_ns < 100 * US ? g.level_ns : 100 * US;
    if (feed(&g, 65536, 40 * MS, ref, now)) verdict = now;
  }
  assert_true(verdict != 0);
  /* Against its own level alone it would never be: that level is 40 ms. */
  gray_lat h = {0};
  now = 1000 * MS;
  for (int i = 0; i < 300; i++, now += 10 * MS) assert_int_equal(feed(&h, 65536, 40 * MS, own(&h), now), 0);
}

/* Short runs: bad samples broken by clearly good ones never add up. */
static void interrupted_runs(void **state) {
  (void)state;
  gray_lat g = {0};
  uint64_t now = 1000 * MS;
  for (int i = 0; i < 50; i++, now += 10 * MS) feed(&g, 65536, 100 * US, own(&g), now);
  for (int i = 0; i < 1000; i++, now += 10 * MS)
    assert_int_equal(feed(&g, 65536, i % 50 == 49 ? 100 * US : 30 * MS, own(&g), now), 0);
}

/* Off (x = 0), and a reset forgets the run and the verdict but not the level. */
static void off_and_reset(void **state) {
  (void)state;
  gray_lat_cfg off = CFG;
  off.x = 0;
  assert_int_equal(gray_lat_bad(&off, 1e9, 1e3), 0);
  assert_int_equal(gray_lat_bad(&CFG, 1e9, 0), 0); /* nothing to compare with */
  gray_lat g = {0};
  uint64_t now = 1000 * MS;
  for (int i = 0; i < 50; i++, now += 10 * MS) feed(&g, 65536, 100 * US, own(&g), now);
  int v = 0;
  for (int i = 0; i < 200 && !v; i++, now += 10 * MS) v = feed(&g, 65536, 30 * MS, own(&g), now);
  assert_int_equal(v, 1);
  double level = g.level_ns;
  gray_lat_reset(&g);
  assert_int_equal(g.degraded, 0);
  assert_int_equal(g.run_since, 0);
  assert_true(g.level_ns == level);
  assert_true(gray_lat_excess(1000, 1000000, RATE) == 0); /* faster than its rate: no excess */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(added_latency_equal_rate), cmocka_unit_test(noise_never_demotes),
      cmocka_unit_test(judged_against_siblings), cmocka_unit_test(interrupted_runs),
      cmocka_unit_test(off_and_reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
