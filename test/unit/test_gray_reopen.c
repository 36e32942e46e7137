/* A demoted TCP rail whose sockets hold what the loss left behind gets fresh
 * ones (engine_gray_probe.c, engine_gray_needs_reopen), as a verbs rail gets
 * a fresh queue pair.
 *
 * In the network lab's lossy case (bench/RESULTS.md 16c, 16d) traffic came
 * back late after the heal where a demoted rail's socket still held a
 * probe's bytes behind a retransmission timeout the loss left long:
 * the rail waited for the timer to be restored or probed again. Here a
 * sending engine on two TCP rails over socket pairs; the transport's
 * unacknowledged bytes are made up (a socket pair acknowledges nothing),
 * and so is the time, passed to the ticks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "gray_link.h"
#include "rail_tcp.h"
#include "rr_clock.h"
#include "tcp_pair_fixture.h"

#define MS 1000000ull
#define PEER "10.77.0.2"
#define HOLD (500 * MS)

static rr_engine eng; /* engines are large for a stack */
static rr_rail_dev *dev;
static int peer_fd[8];
static int npeer;
static int reconnects;
static int reconnect_never; /* cfg.reconnect never gets there: RR_AGAIN on every call */

/* A TCP rail endpoint over a fresh socket pair (the far end kept, never read). */
static rr_rail_ep *tcp_ep(void) {
  rr_rail_ep *ep = tcp_pair_ep_stats(dev, &eng, 0, &peer_fd[npeer]);
  assert_non_null(ep);
  npeer++;
  return ep;
}

/* cfg.reconnect: the fresh endpoint at once. */
static rr_status reconnect(void *arg, int rail, rr_rail_ep **out) {
  (void)arg;
  (void)rail;
  reconnects++;
  if (reconnect_never) return RR_AGAIN;
  *out = tcp_ep();
  return RR_OK;
}

static int setup(void **state) {
  (void)state;
  npeer = 0;
  reconnects = 0;
  reconnect_never = 0;
  tcp_pair_stats_reset();
  tcp_pair_stats.known = 1; /* TCP says what it has unacknowledged */
  rr_engine_config cfg = {.role = RR_ENGINE_SEND, .chunk_size = 4096, .progress_timeout_ns = 1000 * MS,
                          .failback_hold_ns = HOLD, .failover_mode = RR_FAILOVER_CHAIN, .degraded_pct = 20,
                          .restore_pct = 50, .retrans_pct = 3, .degraded_ns = 1000 * MS,
                          .reconnect = reconnect, .reopens = 1};
  snprintf(cfg.peer, sizeof cfg.peer, "%s", PEER);
  assert_int_equal(rr_engine_init(&eng, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &dev), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(), 1, "reopen0", PEER), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(), 1, "reopen1", PEER), RR_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_engine_fini(&eng);
  dev->ops->dev_close(dev);
  for (int k = 0; k < npeer; k++) close(peer_fd[k]);
  return 0;
}

static gray_link *link_of_rail0(void) {
  const engine_rail *rl = &eng.rails[0];
  for (int i = 0; i < gray_nlinks; i++)
    if (gray_links[i].dev == rl->ep->dev->index && !strcmp(gray_links[i].peer, rl->peer_addr))
      return &gray_links[i];
  return NULL;
}

/* Rail 0 demoted as demote() leaves it, its link in the table (a tick while
 * it was active makes the entry), no probe due before now + 200 ms. */
static gray_link *demote_rail0(uint64_t now) {
  engine_gray_tick(&eng, 0, now);
  gray_link *l = link_of_rail0();
  assert_non_null(l);
  eng.rails[0].g_demoted = 1;
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "retransmits 9 % of its bytes for 0.4 s");
  l->degraded = l->lossy = 1;
  gray_ok_reset(&l->ok); /* a new verdict (the table outlives each test's engine) */
  l->probe_done_ns = eng.rails[0].probe_done_ns = now;
  return l;
}

/* The link's probes healthy for the hold, as gray_probe_and_restore judges them. */
static void healthy_for_the_hold(gray_link *l, uint64_t now) {
  gray_ok_reset(&l->ok);
  gray_ok_judge(&l->ok, 1, 0, now - HOLD - 100 * MS, now - HOLD - 90 * MS);
  gray_ok_judge(&l->ok, 1, 0, now - 20 * MS, now - 10 * MS);
  assert_true(gray_ok_covers(&l->ok, HOLD));
}

/* The link's probes say healthy, but this rail's socket holds bytes that
 * stay unacknowledged: not restored onto it; reopened, and restored on the
 * fresh endpoint right after, the link's healthy run kept across the swap. */
static void test_unacknowledged_bytes_at_the_restore_reopen_the_rail(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0(t);
  healthy_for_the_hold(l, t + 1 * MS);
  tcp_pair_stats.unacked = 45;
  engine_gray_tick(&eng, 0, t + 1 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED); /* not onto a stuck socket */
  assert_false(engine_gray_needs_reopen(&eng, 0));        /* a healthy path acknowledges soon */
  engine_gray_tick(&eng, 0, t + 50 * MS);
  assert_false(engine_gray_needs_reopen(&eng, 0)); /* a delayed ACK's 40 ms is soon too */
  engine_gray_tick(&eng, 0, t + 110 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_true(engine_gray_needs_reopen(&eng, 0));
  /* The rails' tick reopens it (cfg.reconnect), as a failed rail. */
  engine_rails_tick(&eng, rr_now_ns());
  assert_int_equal(reconnects, 1);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DOWN);
  assert_true(eng.rails[0].g_demoted);
  assert_true(gray_ok_covers(&l->ok, HOLD)); /* the verdict stays with the link */
  /* Alive on the fresh sockets: back demoted (engine_rails.c), then restored at once. */
  tcp_pair_stats.unacked = 0;
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "reopened, still demoted");
  assert_int_equal(eng.rails[0].ep->ops->progress(eng.rails[0].ep), RR_OK); /* its control probe leaves */
  engine_gray_tick(&eng, 0, t + 120 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE);
}

/* The same with everything acknowledged: restored on its own sockets, no reopen. */
static void test_acknowledged_rail_is_restored_as_it_is(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0(t);
  healthy_for_the_hold(l, t + 1 * MS);
  engine_gray_tick(&eng, 0, t + 1 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE);
  assert_int_equal(reconnects, 0);
}

/* A probe that times out leaves its bytes in the sockets: the rail is
 * reopened before it is probed again, not left to wait for them. */
static void test_timed_out_probe_reopens_the_rail(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  demote_rail0(t);
  engine_gray_tick(&eng, 0, t + 300 * MS); /* 8 MiB into a socket pair nobody reads */
  assert_true(eng.rails[0].probe_start_ns != 0);
  assert_false(engine_gray_needs_reopen(&eng, 0));
  engine_gray_tick(&eng, 0, t + 1400 * MS); /* past its second */
  assert_int_equal(eng.rails[0].probe_start_ns, 0);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_true(engine_gray_needs_reopen(&eng, 0));
}

/* A reopen that never gets there (every attempt of it fails over the lossy
 * path itself, or the peer never answers) must not keep the rail waiting:
 * neither probed nor restored while it waits, it stayed off its healed link
 * for good (one connection of four, in one CI run). After
 * RR_GRAY_REOPEN_WAIT_NS (500 ms) it is given up, and the rail is restored
 * on the sockets it has. */
static void test_reopen_that_never_completes_is_given_up(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0(t);
  healthy_for_the_hold(l, t + 1 * MS);
  tcp_pair_stats.unacked = 45;
  reconnect_never = 1;
  engine_gray_tick(&eng, 0, t + 1 * MS);
  engine_gray_tick(&eng, 0, t + 110 * MS);
  assert_true(engine_gray_needs_reopen(&eng, 0));
  engine_rails_tick(&eng, t + 120 * MS); /* the attempt starts, and does not finish */
  assert_true(reconnects >= 1);
  engine_gray_tick(&eng, 0, t + 400 * MS);
  assert_true(engine_gray_needs_reopen(&eng, 0)); /* still worth waiting for */
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  engine_rails_tick(&eng, t + 450 * MS);
  engine_gray_tick(&eng, 0, t + 650 * MS);
  assert_false(engine_gray_needs_reopen(&eng, 0));
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE); /* on its own sockets, the unacknowledged bytes with it */
}

/* A reopen given up is asked again only after a rest on the old endpoint:
 * a rail whose reopens never get there alternates, and is never held off
 * for good. */
static void test_reopen_given_up_is_asked_again_after_a_rest(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  demote_rail0(t);
  reconnect_never = 1;
  engine_gray_tick(&eng, 0, t + 300 * MS); /* 8 MiB into a socket pair nobody reads */
  assert_true(eng.rails[0].probe_start_ns != 0);
  engine_gray_tick(&eng, 0, t + 1400 * MS); /* timed out: reopen */
  assert_true(engine_gray_needs_reopen(&eng, 0));
  engine_gray_tick(&eng, 0, t + 1950 * MS); /* given up */
  assert_false(engine_gray_needs_reopen(&eng, 0));
  /* The rail's bytes are still unsent and the link's probes now healthy:
   * no reopen asked during the rest ... */
  gray_link *l = link_of_rail0();
  healthy_for_the_hold(l, t + 2000 * MS);
  engine_gray_tick(&eng, 0, t + 2000 * MS);
  engine_gray_tick(&eng, 0, t + 2100 * MS);
  assert_false(engine_gray_needs_reopen(&eng, 0));
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED); /* not flushed: cannot be restored as it is */
  /* ... and one after it. */
  engine_gray_tick(&eng, 0, t + 2460 * MS);
  engine_gray_tick(&eng, 0, t + 2490 * MS);
  assert_true(engine_gray_needs_reopen(&eng, 0));
}

/* The link's probes say healthy, and this rail's socket still holds bytes
 * it has not even sent (the demotion's, or a probe's, behind a long
 * retransmission timeout): reopened too. Before, such a rail was neither
 * probed (a probe waits for flushed) nor restored nor reopened until TCP
 * sent them. */
static void test_unsent_bytes_at_the_restore_reopen_the_rail(void **state) {
  (void)state;
  static const char filler[1u << 20];
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0(t);
  rr_write_wr wr = {.wr_id = ENGINE_PROBE_WR_ID, .local = filler, .len = sizeof filler, .post_ns = t,
                    .flags = RR_WRITE_PROBE};
  assert_int_equal(eng.rails[0].ep->ops->post_write(eng.rails[0].ep, &wr), RR_OK);
  assert_false(eng.rails[0].ep->ops->flushed(eng.rails[0].ep));
  healthy_for_the_hold(l, t + 1 * MS);
  engine_gray_tick(&eng, 0, t + 1 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_false(engine_gray_needs_reopen(&eng, 0));
  engine_gray_tick(&eng, 0, t + 110 * MS);
  assert_true(engine_gray_needs_reopen(&eng, 0));
  engine_rails_tick(&eng, t + 120 * MS);
  assert_int_equal(reconnects, 1);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DOWN); /* fresh sockets, back demoted once alive */
}

/* A rail whose link's probes already cover its hold is restored, not probed
 * again first: a probe would hold the restore back until it ended. */
static void test_covered_rail_is_not_probed_again(void **state) {
  (void)state;
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0(t);
  healthy_for_the_hold(l, t + 300 * MS);
  tcp_pair_stats.unacked = 45; /* not restorable yet */
  engine_gray_tick(&eng, 0, t + 300 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_int_equal(eng.rails[0].probe_start_ns, 0);
  tcp_pair_stats.unacked = 0;
  engine_gray_tick(&eng, 0, t + 310 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unacknowledged_bytes_at_the_restore_reopen_the_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_acknowledged_rail_is_restored_as_it_is, setup, teardown),
      cmocka_unit_test_setup_teardown(test_timed_out_probe_reopens_the_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopen_that_never_completes_is_given_up, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopen_given_up_is_asked_again_after_a_rest, setup, teardown),
      cmocka_unit_test_setup_teardown(test_unsent_bytes_at_the_restore_reopen_the_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_covered_rail_is_not_probed_again, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
