/* When a demoted rail comes back (net_plugin/engine/gray_restore.h): the
 * false restore of a rail shaped to 5 % in the Soft-RoCE lab, replayed in
 * virtual time. The link sustained REF when healthy; under load the other
 * rail's rate fell to about what the shaped rail delivers; one probe at
 * 5 % took 0.8 s, and the hold (500 ms) was timed from its start with
 * nothing else judged. The engine's rule is replayed here step by step:
 * a probe's rate is judged against the reference at restore_pct (healthy)
 * and degraded_pct (bad), then fed to the run, then the run is asked
 * whether it covers the hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gray_restore.h"

#define MS 1000000ull
#define REF 45e6            /* bytes/s the link sustained healthy (the lab's veth) */
#define RESTORE_PCT 25      /* the lab's RERAIL_DEGRADED_RESTORE_PCT */
#define DEGRADED_PCT 20     /* RERAIL_DEGRADED_PCT (its default) */
#define HOLD (500 * MS)     /* RERAIL_FAILBACK_HOLD_MS */

typedef struct {
  gray_ok_run run;
  uint64_t now;
} link_sim;

/* One probe of `bytes` at `rate` bytes/s, judged against the reference the
 * engine would use with the sibling at `sibling` bytes/s, then a 200 ms gap
 * (RR_GRAY_PROBE_GAP_NS). Returns whether the rail is restored after it. */
static int probe(link_sim *s, double bytes, double rate, double sibling) {
  uint64_t start = s->now;
  s->now += (uint64_t)(bytes / rate * 1e9);
  double ref = gray_restore_ref(REF, sibling);
  int ok = rate * 100.0 >= RESTORE_PCT * ref;
  int bad = rate * 100.0 < DEGRADED_PCT * ref;
  gray_ok_judge(&s->run, ok, bad, start, s->now);
  int restored = gray_ok_covers(&s->run, HOLD);
  s->now += 200 * MS;
  return restored;
}

/* The lab's case: 1 MiB at 5 % of REF while the sibling, loaded, delivers
 * about as much. The old bar (the lesser of the two) passed it, and the old
 * hold (500 ms from its start, checked after it) restored it. Neither may. */
static void test_one_probe_while_sibling_slow_does_not_restore(void **state) {
  (void)state;
  link_sim s = {.now = 1000 * MS};
  double shaped = 0.05 * REF;
  /* The bar does not follow the sibling down to the shaped rail's rate. */
  assert_true(gray_restore_ref(REF, shaped) >= REF / 2);
  assert_false(probe(&s, 1 << 20, shaped, shaped));
  assert_int_equal(s.run.probes, 0);
  /* Even a probe that passes a low bar alone does not cover the hold:
   * one healthy probe longer than the hold is still one. */
  link_sim one = {.now = 1000 * MS};
  gray_ok_judge(&one.run, 1, 0, one.now, one.now + 800 * MS);
  assert_int_equal(one.run.probes, 1);
  assert_false(gray_ok_covers(&one.run, HOLD));
}

/* The limit went: probes at the healthy rate. The first does not restore;
 * the run restores once a later healthy probe ends a hold after the first
 * began, whatever the sibling's load. */
static void test_healthy_probes_covering_the_hold_restore(void **state) {
  (void)state;
  link_sim s = {.now = 1000 * MS};
  double shaped = 0.05 * REF;
  int restored = 0, probes = 0;
  uint64_t first = s.now;
  /* Sizes as probe_size() grows them: 1 MiB after a demotion, doubling. */
  for (double bytes = 1 << 20; !restored && probes < 10; bytes = bytes < (8 << 20) ? 2 * bytes : bytes) {
    restored = probe(&s, bytes, REF, shaped);
    probes++;
    if (probes == 1) assert_false(restored);
  }
  assert_true(restored);
  assert_true(probes >= 2);
  assert_true(s.run.until - first >= HOLD);
}

/* After the heal, about half of the lab's probes were still under the bar
 * (an emulated NIC's probe competes for the CPUs with the other rail's
 * traffic). A bad probe between healthy ones counts against the run rather
 * than restarting it: healthy, slow, healthy covering the hold restores
 * (the old rule restarted the run at each slow probe and needed three
 * healthy ones in a row). */
static void test_bad_probe_counts_against_the_run(void **state) {
  (void)state;
  link_sim s = {.now = 1000 * MS};
  uint64_t first = s.now;
  assert_false(probe(&s, 4 << 20, REF, 0));
  assert_false(probe(&s, 1 << 20, 0.15 * REF, 0)); /* bad: under DEGRADED_PCT */
  assert_int_equal(s.run.probes, 1);
  assert_int_equal(s.run.since, first);
  assert_true(probe(&s, 4 << 20, REF, 0));
  /* One between the bars neither starts, extends nor counts against it. */
  link_sim b = {.now = 1000 * MS};
  assert_false(probe(&b, 4 << 20, REF, 0));
  assert_false(probe(&b, 1 << 20, 0.22 * REF, 0));
  assert_int_equal(b.run.probes, 1);
  assert_int_equal(b.run.bad, 0);
}

/* The majority, and the latest word: a run whose bad probes outnumber its
 * healthy ones is over; one whose latest probe was bad waits for a healthy
 * one; one with as many bad as healthy probes does not restore. */
static void test_majority_and_latest_verdict(void **state) {
  (void)state;
  link_sim s = {.now = 1000 * MS};
  double slow = 0.15 * REF;
  assert_false(probe(&s, 4 << 20, REF, 0));
  assert_false(probe(&s, 1 << 20, slow, 0));
  assert_false(probe(&s, 1 << 20, slow, 0)); /* two bad against one healthy: over */
  assert_int_equal(s.run.probes, 0);
  /* Healthy, healthy (covering the hold only with the third), slow, slow:
   * as many bad as healthy, the latest bad: no restore at any step. */
  link_sim t = {.now = 1000 * MS};
  assert_false(probe(&t, 1 << 20, REF, 0));
  assert_false(probe(&t, 1 << 20, REF, 0)); /* 2 healthy, but 200 ms + 2 x 23 ms < the hold */
  assert_false(probe(&t, 1 << 20, slow, 0));
  assert_false(probe(&t, 1 << 20, slow, 0));
  assert_int_equal(t.run.probes, 2);
  assert_int_equal(t.run.bad, 2);
  /* The next healthy one makes the majority and the latest word, and the run
   * now reaches a hold past its first probe. */
  assert_true(probe(&t, 1 << 20, REF, 0));
}

/* A rail still shaped gives no healthy majority, however long it is probed
 * and however slow the sibling is: 30 probes at 5 %, none restores. */
static void test_shaped_rail_never_restored(void **state) {
  (void)state;
  link_sim s = {.now = 1000 * MS};
  double shaped = 0.05 * REF;
  for (int i = 0; i < 30; i++) assert_false(probe(&s, 1 << 20, shaped, shaped));
  assert_int_equal(s.run.probes, 0);
}

/* The sibling may still lower the bar (a host slower for every rail makes
 * no rail the slow one), but not under half of the link's own reference. */
static void test_sibling_lowers_the_bar_to_half_at_most(void **state) {
  (void)state;
  assert_true(gray_restore_ref(REF, 0) == REF);
  assert_true(gray_restore_ref(REF, 2 * REF) == REF);
  assert_true(gray_restore_ref(REF, 0.6 * REF) == 0.6 * REF);
  assert_true(gray_restore_ref(REF, 0.05 * REF) == REF / 2);
  assert_true(gray_restore_ref(0, 0.05 * REF) == 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_one_probe_while_sibling_slow_does_not_restore),
      cmocka_unit_test(test_healthy_probes_covering_the_hold_restore),
      cmocka_unit_test(test_bad_probe_counts_against_the_run),
      cmocka_unit_test(test_majority_and_latest_verdict),
      cmocka_unit_test(test_shaped_rail_never_restored),
      cmocka_unit_test(test_sibling_lowers_the_bar_to_half_at_most),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
