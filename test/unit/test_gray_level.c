/* What a run of slow windows is held against for a demotion
 * (net_plugin/engine/gray_level.h), replayed in virtual time: a rail whose
 * completions come in bursts, as an emulated NIC's do (a chain at a time),
 * healthy, then restored after a heal and carrying a fraction of what it
 * carried, then shaped to 5 %. The engine's window rule is replayed step by
 * step (engine_gray.c, window_close): a loaded window under DEGRADED_PCT of
 * the level is below, at or over it good; the level follows the best window
 * and decays by RR_GRAY_DECAY per loaded window; good windows, and empty
 * ones between bursts, feed what the link sustains; empty windows within a
 * run are slow ones; a second of windows below demotes, and now only if the
 * run as a whole delivered under DEGRADED_PCT of the sustained rate. */
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
#define BURST (RATE * 0.1)

typedef struct {
  double level;
  gray_sustained sus;
  int run, run_below;  /* windows in the run (0: none), how many below */
  uint64_t run_bytes, run_ns;
  int demoted;
  int windows_only;    /* the rule before gray_level.h: the windows alone decide */
} judge_sim;

static void judge(judge_sim *j) {
  if (j->run < 10 || j->run_below * 10 < j->run * 6) return;
  if (j->windows_only || gray_run_slow(j->run_bytes, j->run_ns, gray_judge_ref(j->level, gray_sustained_rate(&j->sus)),
                                       DEGRADED_PCT))
    j->demoted = 1;
}

static void window(judge_sim *j, double bytes) {
  if (bytes == 0) {
    if (j->run) { /* within a run: a slow window */
      j->run++, j->run_below++, j->run_ns += WINDOW;
      judge(j);
    } else { /* between two bursts of a healthy rail */
      gray_sustained_add(&j->sus, JUDGE_KEEP, 0, WINDOW);
    }
    return;
  }
  double rate = bytes * 1e9 / (double)WINDOW;
  double frac = j->level > 0 ? rate / j->level : 1.0;
  if (frac * 100.0 >= DEGRADED_PCT) {
    j->run = j->run_below = 0;
    if (rate > j->level) j->level = rate;
    else j->level = j->level * DECAY + rate * (1.0 - DECAY);
    gray_sustained_add(&j->sus, JUDGE_KEEP, (uint64_t)bytes, WINDOW);
    return;
  }
  if (!j->run) j->run_bytes = j->run_ns = 0;
  j->run++, j->run_below++;
  j->run_bytes += (uint64_t)bytes, j->run_ns += WINDOW;
  judge(j);
}

/* 30 s of a healthy bursty rail: per 300 ms, a window with two bursts, an
 * empty one, a window with one burst (RATE on average). */
static void healthy_bursts(judge_sim *j) {
  for (int i = 0; i < 100; i++) {
    window(j, 2 * BURST);
    window(j, 0);
    window(j, BURST);
  }
}

/* The level reads the double burst; the sustained rate reads the rate. */
static void test_bursts_inflate_the_level_not_the_sustained_rate(void **state) {
  (void)state;
  judge_sim j = {0};
  healthy_bursts(&j);
  assert_false(j.demoted);
  assert_true(j.level > 1.8 * RATE);
  double sus = gray_sustained_rate(&j.sus);
  assert_true(sus > 0.9 * RATE && sus < 1.1 * RATE);
  assert_true(gray_judge_ref(j.level, sus) == sus);
}

/* Restored after the heal, the rail carries about a third of its old rate
 * in bursts of a third (the lab's emulated CPUs are shared with the
 * traffic still leaving the other rail): each window is under a fifth of
 * the inflated level, the run a third of what the link sustained. The
 * windows alone demoted it again within a second; the run does not. */
static void test_restored_rail_at_a_third_not_demoted_again(void **state) {
  (void)state;
  judge_sim j = {0}, old = {.windows_only = 1};
  healthy_bursts(&j);
  healthy_bursts(&old);
  for (int i = 0; i < 30; i++) {
    window(&j, BURST / 3);
    window(&old, BURST / 3);
  }
  assert_true(old.demoted); /* the rule before: demoted again */
  assert_false(j.demoted);
}

/* A rail shaped to 5 % is still demoted within a second or so: steadily,
 * or in bursts with empty windows between them. */
static void test_shaped_rail_still_demoted(void **state) {
  (void)state;
  judge_sim j = {0};
  healthy_bursts(&j);
  for (int i = 0; i < 10; i++) window(&j, BURST * 0.05);
  assert_true(j.demoted);
  judge_sim k = {0};
  healthy_bursts(&k);
  for (int i = 0; i < 8 && !k.demoted; i++) {
    window(&k, BURST * 0.1);
    window(&k, 0);
  }
  assert_true(k.demoted);
}

/* No reference learnt yet: the windows decide, as before. */
static void test_no_reference_leaves_the_windows_verdict(void **state) {
  (void)state;
  assert_true(gray_run_slow(1000, WINDOW, 0, DEGRADED_PCT));
  assert_false(gray_run_slow(0, 0, RATE, DEGRADED_PCT));
  assert_true(gray_run_slow((uint64_t)(BURST * 0.1), WINDOW, RATE, DEGRADED_PCT));
  assert_false(gray_run_slow((uint64_t)(BURST * 0.3), WINDOW, RATE, DEGRADED_PCT));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bursts_inflate_the_level_not_the_sustained_rate),
      cmocka_unit_test(test_restored_rail_at_a_third_not_demoted_again),
      cmocka_unit_test(test_shaped_rail_still_demoted),
      cmocka_unit_test(test_no_reference_leaves_the_windows_verdict),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
