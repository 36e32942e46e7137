/* What connect() does with its planned rails (net_plugin/core/connect_plan.c):
 * it never fails nor waits for a rail whose NIC is down while another rail
 * works, keeps the first plan's unreachable rails for later, and plans more
 * backups when those planned are down. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "connect_plan.h"

#define V(st, f, b) ((rr_connect_rail_view){.status = (st), .failed = (f), .base = (b)})

/* Nothing up yet: wait (the caller's connect timeout bounds it) while any
 * rail may still come; fail only when none can. */
static void test_nothing_up(void **state) {
  (void)state;
  uint32_t later, dropped;
  rr_connect_rail_view v[3] = {V(RAIL_PENDING, 1, 1), V(RAIL_PENDING, 1, 1), V(RAIL_FAILED, 0, 1)};
  assert_int_equal(rr_connect_decide(v, 3, 1, 1, &later, &dropped), RR_CONNECT_WAIT);
  v[0] = V(RAIL_FAILED, 0, 1);
  v[1] = V(RAIL_FAILED, 0, 1);
  assert_int_equal(rr_connect_decide(v, 3, 1, 1, &later, &dropped), RR_CONNECT_FAIL);
}

/* The primary's NIC is down (its attempts fail), a backup is up: go on at
 * once, the primary kept for later; nothing dropped. */
static void test_primary_down_backup_up(void **state) {
  (void)state;
  uint32_t later, dropped;
  rr_connect_rail_view v[2] = {V(RAIL_PENDING, 1, 1), V(RAIL_READY, 0, 1)};
  assert_int_equal(rr_connect_decide(v, 2, 0, 0, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0x1);
  assert_int_equal(dropped, 0);
}

/* A rail that has not failed may be about to come up: it gets the settle
 * time, then is kept for later. */
static void test_slow_rail_gets_settle_time(void **state) {
  (void)state;
  uint32_t later, dropped;
  rr_connect_rail_view v[3] = {V(RAIL_READY, 0, 1), V(RAIL_PENDING, 0, 1), V(RAIL_READY, 0, 1)};
  assert_int_equal(rr_connect_decide(v, 3, 0, 0, &later, &dropped), RR_CONNECT_WAIT);
  assert_int_equal(rr_connect_decide(v, 3, 1, 1, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0x2);
}

/* A backup whose listener answers (the handshake is under way, the peer is
 * merely slow) is not given up after the settle time, even after an earlier
 * attempt of it failed: it gets the patience bound, then is kept for later;
 * meanwhile no replacement is planned for it. */
static void test_answered_rail_gets_patience(void **state) {
  (void)state;
  uint32_t later, dropped;
  rr_connect_rail_view v[2] = {V(RAIL_READY, 0, 1), V(RAIL_PENDING, 1, 1)};
  v[1].answered = 1;
  assert_int_equal(rr_connect_decide(v, 2, 0, 0, &later, &dropped), RR_CONNECT_WAIT);
  assert_int_equal(rr_connect_decide(v, 2, 1, 0, &later, &dropped), RR_CONNECT_WAIT);
  assert_int_equal(rr_connect_backups_short(v, 2, 1), 0);
  assert_int_equal(rr_connect_decide(v, 2, 1, 1, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0x2);
  assert_int_equal(dropped, 0);
  /* Unanswered, the same rail is down now: no wait, and a replacement is due. */
  v[1].answered = 0;
  assert_int_equal(rr_connect_decide(v, 2, 0, 0, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0x2);
  assert_int_equal(rr_connect_backups_short(v, 2, 1), 1);
}

/* A rail added to replace a backup joins only if it is up; the backups of
 * the first plan stay (for later) whatever happens. */
static void test_replacement_joins_only_when_up(void **state) {
  (void)state;
  uint32_t later, dropped;
  rr_connect_rail_view v[4] = {V(RAIL_READY, 0, 1), V(RAIL_PENDING, 1, 1), V(RAIL_PENDING, 1, 0),
                               V(RAIL_READY, 0, 0)};
  assert_int_equal(rr_connect_decide(v, 4, 0, 0, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0x2);
  assert_int_equal(dropped, 0x4);
  /* A backup that failed its listener's proof is neither. */
  v[1] = V(RAIL_FAILED, 0, 1);
  assert_int_equal(rr_connect_decide(v, 4, 0, 0, &later, &dropped), RR_CONNECT_COMMIT);
  assert_int_equal(later, 0);
  assert_int_equal(dropped, 0x4);
}

/* Backups are short when those planned are down (or not ours): plan more;
 * a healthy plan asks for nothing, nor does the primary count. */
static void test_backups_short(void **state) {
  (void)state;
  rr_connect_rail_view v[4] = {V(RAIL_PENDING, 1, 1), V(RAIL_PENDING, 0, 1), V(RAIL_READY, 0, 1),
                               V(RAIL_PENDING, 1, 1)};
  assert_int_equal(rr_connect_backups_short(v, 2, 1), 0);  /* pending, not failed: hoped for */
  v[1] = V(RAIL_PENDING, 1, 1);
  assert_int_equal(rr_connect_backups_short(v, 2, 1), 1);  /* failed: plan another */
  v[1] = V(RAIL_FAILED, 0, 1);
  assert_int_equal(rr_connect_backups_short(v, 2, 1), 1);
  assert_int_equal(rr_connect_backups_short(v, 4, 1), 0);  /* rail 2 is up */
  assert_int_equal(rr_connect_backups_short(v, 4, 3), 2);
  assert_int_equal(rr_connect_backups_short(v, 4, 0), 0);  /* RERAIL_BACKUPS=0, a rail up */
  v[0] = V(RAIL_READY, 0, 1);
  assert_int_equal(rr_connect_backups_short(v, 1, 1), 1);  /* no backup planned at all */
  /* RERAIL_BACKUPS=0: nothing more while the primary may work; one other
   * NIC once it failed and nothing else is up or hoped for. */
  assert_int_equal(rr_connect_backups_short(v, 1, 0), 0);
  v[0] = V(RAIL_PENDING, 0, 1);
  assert_int_equal(rr_connect_backups_short(v, 1, 0), 0);
  v[0] = V(RAIL_PENDING, 1, 1);
  assert_int_equal(rr_connect_backups_short(v, 1, 0), 1);
  v[1] = V(RAIL_PENDING, 0, 0);
  assert_int_equal(rr_connect_backups_short(v, 2, 0), 0);  /* the one planned is still hoped for */
}

/* The listener has a first connection's COMMIT: every rail it names whose
 * sockets are all here connects; one whose sockets it saw end since (a
 * backup, or the primary) joins as a failed rail, at once, instead of the
 * connection waiting for sockets that never come back; with none left the
 * connection is over at once. A rail whose last PROOF has not come yet (the
 * COMMIT came early, behind the first) is waited for. */
static void test_commit_with_a_rail_lost(void **state) {
  (void)state;
  uint32_t up, lost;
  assert_int_equal(rr_commit_resolve(0x3, 0x3, 0, &up, &lost), RR_COMMIT_GO);
  assert_int_equal(up, 0x3);
  assert_int_equal(lost, 0);
  /* The backup closed between its ACCEPT and the COMMIT. */
  assert_int_equal(rr_commit_resolve(0x3, 0x1, 0x2, &up, &lost), RR_COMMIT_GO);
  assert_int_equal(up, 0x1);
  assert_int_equal(lost, 0x2);
  /* The primary did: the next rail carries the connection. */
  assert_int_equal(rr_commit_resolve(0x3, 0x2, 0x1, &up, &lost), RR_COMMIT_GO);
  assert_int_equal(up, 0x2);
  assert_int_equal(lost, 0x1);
  /* Rails here that the COMMIT does not name (left out, or lost) are neither. */
  assert_int_equal(rr_commit_resolve(0x2, 0x7, 0x8, &up, &lost), RR_COMMIT_GO);
  assert_int_equal(up, 0x2);
  assert_int_equal(lost, 0);
  assert_int_equal(rr_commit_resolve(0x3, 0x4, 0x3, &up, &lost), RR_COMMIT_DROP);
  /* An early COMMIT: rail 1's last PROOF is still on its way. */
  assert_int_equal(rr_commit_resolve(0x3, 0x1, 0, &up, &lost), RR_COMMIT_WAIT);
  assert_int_equal(rr_commit_resolve(0x1, 0x0, 0, &up, &lost), RR_COMMIT_WAIT);
  /* ... and rail 0 was lost meanwhile: rail 1 is still awaited. */
  assert_int_equal(rr_commit_resolve(0x3, 0x0, 0x1, &up, &lost), RR_COMMIT_WAIT);
}

/* connect()'s deadline counts from the latest progress: a connection whose
 * every call makes progress is never failed, though its calls span many
 * timeouts (NCCL's turns over hundreds of connections: ~35 s each against
 * a 30 s timeout); one with no progress fails once the timeout passed. */
#define S 1000000000ull
static void test_setup_clock_progress(void **state) {
  (void)state;
  rr_setup_clock k;
  uint64_t limit = 30 * S, progress = 0;
  rr_setup_clock_start(&k, progress, 0);
  for (uint64_t t = 35 * S; t <= 350 * S; t += 35 * S)
    assert_false(rr_setup_clock_expired(&k, ++progress, t, limit));
  /* Calls without progress: the clock runs from the last that made some. */
  assert_false(rr_setup_clock_expired(&k, progress, 360 * S, limit));
  assert_false(rr_setup_clock_expired(&k, progress, 380 * S, limit));
  assert_true(rr_setup_clock_expired(&k, progress, 380 * S + 1, limit));
}

static void test_setup_clock_no_progress(void **state) {
  (void)state;
  rr_setup_clock k;
  uint64_t limit = 30 * S;
  rr_setup_clock_start(&k, 7, 5 * S);
  for (uint64_t t = 5 * S; t <= 35 * S; t += S / 10) assert_false(rr_setup_clock_expired(&k, 7, t, limit));
  assert_true(rr_setup_clock_expired(&k, 7, 35 * S + 1, limit));
}

/* The listener keeps an authenticated group while the connector holds its
 * sockets open (between ACCEPT and COMMIT nothing travels for a whole turn),
 * up to the cap; one whose sockets ended goes a timeout after its last
 * progress; one that progresses is never dropped. */
static void test_group_stale(void **state) {
  (void)state;
  uint64_t t = 30 * S;
  assert_false(rr_group_stale(2 * t, 2 * t, 1, t));
  assert_false(rr_group_stale(RR_SETUP_CAP_TIMEOUTS * t, 2 * t, 1, t));
  assert_true(rr_group_stale(RR_SETUP_CAP_TIMEOUTS * t + 1, 2 * t, 1, t));
  assert_false(rr_group_stale(t, t, 0, t));
  assert_true(rr_group_stale(t + 1, t + 1, 0, t));
  assert_false(rr_group_stale(100 * t, t, 0, t));
  assert_false(rr_group_stale(100 * t, t / 2, 1, t));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_nothing_up),
      cmocka_unit_test(test_primary_down_backup_up),
      cmocka_unit_test(test_slow_rail_gets_settle_time),
      cmocka_unit_test(test_answered_rail_gets_patience),
      cmocka_unit_test(test_replacement_joins_only_when_up),
      cmocka_unit_test(test_backups_short),
      cmocka_unit_test(test_commit_with_a_rail_lost),
      cmocka_unit_test(test_setup_clock_progress),
      cmocka_unit_test(test_setup_clock_no_progress),
      cmocka_unit_test(test_group_stale),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
