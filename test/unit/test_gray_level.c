/* What a link's windows are judged against for a demotion
 * (net_plugin/engine/gray_level.h), replayed in virtual time: a rail whose
 * completions come in bursts, as an emulated NIC's do (a 4 MiB chain at a
 * time), then restored after a heal and carrying a fraction of what it
 * carried before. The engine's window rule is replayed step by step
 * (engine_gray.c, window_close): a loaded window under DEGRADED_PCT of the
 * reference is below, at or over it good; the level follows the best
 * window and decays by RR_GRAY_DECAY per loaded window; good windows, and
 * empty ones between bursts, feed what the link sustains; a second of
 * windows below demotes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gray_level.h"

#define MS 1000000ull
#define WINDOW (100 * MS)
#define DEGRADED_PCT 20  /* RERAIL_DEGRADED_PCT's default */
#define DECAY 0.995      /* RR_GRAY_DECAY */
#define JUDGE_KEEP 0.98  /* RR_GRAY_JUDGE_KEEP */
#define RATE 45e6        /* bytes/s the lab's veth carried */

typedef struct {
  double level;
  gray_sustained sus;
  int below_run; /* windows below in a row */
  int demoted;
  int level_only; /* judge against the level alone (the rule before gray_level.h) */
} judge_sim;

static void window(judge_sim *j, double bytes) {
  double rate = bytes * 1e9 / (double)WINDOW;
  if (bytes == 0) {
    /* An empty window between two bursts: part of what the link sustains. */
    gray_sustained_add(&j->sus, JUDGE_KEEP, 0, WINDOW);
    return;
  }
  double ref = j->level_only ? j->level : gray_judge_ref(j->level, gray_sustained_rate(&j->sus));
  double frac = ref > 0 ? rate / ref : 1.0;
  if (frac * 100.0 >= DEGRADED_PCT) {
    j->below_run = 0;
    if (rate > j->level) j->level = rate;
    else j->level = j->level * DECAY + rate * (1.0 - DECAY);
    gray_sustained_add(&j->sus, JUDGE_KEEP, (uint64_t)bytes, WINDOW);
  } else if (++j->below_run >= 10) {
    j->demoted = 1;
  }
}

/* 30 s of a healthy bursty rail: per 300 ms, a window with two bursts, an
 * empty one, a window with one burst (RATE on average). */
static void healthy_bursts(judge_sim *j) {
  double burst = RATE * 0.1;
  for (int i = 0; i < 100; i++) {
    window(j, 2 * burst);
    window(j, 0);
    window(j, burst);
  }
}

/* The level reads the double burst; the sustained rate reads the rate. */
static void test_bursts_inflate_the_level_not_the_reference(void **state) {
  (void)state;
  judge_sim j = {0};
  healthy_bursts(&j);
  assert_false(j.demoted);
  assert_true(j.level > 1.8 * RATE);
  double sus = gray_sustained_rate(&j.sus);
  assert_true(sus > 0.9 * RATE && sus < 1.1 * RATE);
  assert_true(gray_judge_ref(j.level, sus) == sus);
}

/* Restored after the heal, the rail carries a third of what it carried
 * (the lab's emulated CPUs are shared with the traffic still leaving the
 * other rail): 15 % of the inflated level, 33 % of what it sustained. Judged
 * against the level alone it was demoted again within a second; against
 * what it sustains it is not. */
static void test_restored_rail_at_a_third_not_demoted_again(void **state) {
  (void)state;
  judge_sim j = {0}, old = {.level_only = 1};
  healthy_bursts(&j);
  healthy_bursts(&old);
  for (int i = 0; i < 30; i++) {
    window(&j, RATE * 0.1 / 3);
    window(&old, RATE * 0.1 / 3);
  }
  assert_true(old.demoted); /* the rule before: demoted again */
  assert_false(j.demoted);
}

/* A rail shaped to 5 % of its rate is still demoted within a second, and a
 * few seconds of it do not lower the reference enough to pass. */
static void test_shaped_rail_still_demoted(void **state) {
  (void)state;
  judge_sim j = {0};
  healthy_bursts(&j);
  for (int i = 0; i < 10; i++) window(&j, RATE * 0.1 * 0.05);
  assert_true(j.demoted);
  /* Bursty while shaped: an empty window, then a slow one, for 5 s. */
  judge_sim k = {0};
  healthy_bursts(&k);
  for (int i = 0; i < 25 && !k.demoted; i++) {
    window(&k, 0);
    window(&k, RATE * 0.2 * 0.05);
  }
  assert_true(k.demoted);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bursts_inflate_the_level_not_the_reference),
      cmocka_unit_test(test_restored_rail_at_a_third_not_demoted_again),
      cmocka_unit_test(test_shaped_rail_still_demoted),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
