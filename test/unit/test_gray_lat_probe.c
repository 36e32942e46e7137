/* The probes of a link demoted for its latency (engine_gray_probe.c): a
 * path still delayed by the latency judge's bar or more never gives a
 * healthy probe, a healed one does.
 *
 * In the Soft-RoCE lab's latency case (netem 100 ms, 256 KiB requests;
 * bench/RESULTS.md 16c, run 15) a latency-demoted rail was restored twice
 * with the delay still on: a probe's latency was its time less its bytes
 * over the link's level, and under light traffic the level is what the
 * traffic asked for, not what an idle rail moves, so a big probe's
 * "rate-explained" time swallowed the delay; on TCP a probe was also done
 * once the kernel had sent it, before any acknowledgement. Here a sending
 * engine on two TCP rails over socket pairs; the link's level and latency
 * reference are set as its judges leave them, the transport's
 * unacknowledged bytes are made up (a socket pair acknowledges nothing),
 * and the times, passed to the ticks, are virtual: each probe ends when a
 * path of the given rate and added delay would have acknowledged it. */
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
#include "rr_counters.h"
#include "tcp_pair_fixture.h"

#define MS 1000000ull
#define PEER "10.77.0.2"
#define HOLD (500 * MS)
#define LEVEL 10e6          /* bytes/s: light traffic's level, what it asked of the link */
#define LAT_REF (2.0 * MS)  /* the healthy excess */
#define BAR (22.0 * MS)     /* the latency bar over it: max(10 x 2 ms, 2 ms + 20 ms) */

static rr_engine eng; /* engines are large for a stack */
static rr_rail_dev *dev;
static int peer_fd[2];
static int npeer;
/* A TCP rail endpoint over a fresh socket pair (the far end kept in
 * peer_fd), its send buffer as small as the kernel allows: a probe stays
 * unflushed until the far end reads it, as a verbs probe stays uncompleted
 * until the peer acknowledges it. */
static rr_rail_ep *tcp_ep(void) {
  rr_rail_ep *ep = tcp_pair_ep_stats(dev, &eng, 4096, &peer_fd[npeer]);
  assert_non_null(ep);
  npeer++;
  return ep;
}

static int setup(void **state) {
  (void)state;
  npeer = 0;
  tcp_pair_stats_reset(); /* the transport cannot say what is unacknowledged (verbs) until a test says */
  gray_nlinks = 0; /* the links are the process's: each test starts with none */
  rr_engine_config cfg = {.role = RR_ENGINE_SEND, .chunk_size = 4096, .progress_timeout_ns = 1000 * MS,
                          .failback_hold_ns = HOLD, .failover_mode = RR_FAILOVER_CHAIN, .degraded_pct = 1,
                          .restore_pct = 50, .retrans_pct = 3, .degraded_ns = 1000 * MS, .latency_x = 10,
                          .latency_min_ns = 20 * MS};
  snprintf(cfg.peer, sizeof cfg.peer, "%s", PEER);
  assert_int_equal(rr_engine_init(&eng, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &dev), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(), 1, "latp0", "10.77.0.2"), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(), 1, "latp1", "10.77.1.2"), RR_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_engine_fini(&eng);
  dev->ops->dev_close(dev);
  for (int k = 0; k < npeer; k++) close(peer_fd[k]);
  return 0;
}

/* Rail 0 demoted for its latency as demote() leaves it: its link (made by a
 * tick while active) at LEVEL with nothing sustained yet, the healthy
 * excess LAT_REF, probes shrunk to their smallest, none due before now +
 * 200 ms. */
static gray_link *demote_rail0_for_latency(uint64_t now) {
  engine_gray_tick(&eng, 0, now);
  const engine_rail *rl = &eng.rails[0];
  gray_link *l = NULL;
  for (int i = 0; i < gray_nlinks; i++)
    if (gray_links[i].dev == rl->ep->dev->index && !strcmp(gray_links[i].peer, rl->peer_addr)) l = &gray_links[i];
  assert_non_null(l);
  l->level = LEVEL;
  l->sus_bytes = l->sus_ns = 0;
  l->lat.level_ns = LAT_REF;
  assert_true(gray_lat_reference(l) == LAT_REF);
  eng.rails[0].g_demoted = 1;
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "requests take 100.0 ms more than its rate needs for 1.0 s");
  l->degraded = l->slowlat = 1;
  gray_ok_reset(&l->ok);
  l->restored = 0;
  l->probe_shrink = RR_GRAY_PROBE_SHRINK_MAX;
  l->probe_done_ns = eng.rails[0].probe_done_ns = now;
  return l;
}

/* The kernel takes everything the probe in flight on rail 0 posted (the
 * far end reads it all). */
static void send_probe(void) {
  rr_rail_ep *ep = eng.rails[0].ep;
  char buf[1 << 16];
  for (int i = 0; i < 100000 && !ep->ops->flushed(ep); i++) {
    while (read(peer_fd[0], buf, sizeof buf) > 0) {
    }
    assert_int_equal(ep->ops->progress(ep), RR_OK);
  }
  assert_true(ep->ops->flushed(ep));
}

/* Probe rail 0 from `from` for `for_ns` of virtual time over a path that
 * moves rate_bps and adds delay_ns to each probe: each probe is posted at
 * a tick and ended by a tick when such a path has acknowledged it. Until
 * then it is not done: a transport that cannot say what is unacknowledged
 * (verbs) has not completed it (the far end has not read it), one that can
 * (TCP) has sent it and holds it unacknowledged. Returns the time probing
 * stopped: the rail restored, or for_ns gone. */
static uint64_t probe_path(uint64_t from, uint64_t for_ns, double rate_bps, double delay_ns) {
  uint64_t t = from;
  while (t - from < for_ns && eng.rails[0].state == RR_RAIL_DEGRADED) {
    engine_gray_tick(&eng, 0, t);
    uint64_t start = eng.rails[0].probe_start_ns;
    if (!start) {
      t += 10 * MS; /* not due yet, or restored at this tick */
      continue;
    }
    assert_int_equal(start, t);
    uint64_t bytes = eng.rails[0].probe_bytes;
    uint64_t acked = t + (uint64_t)((double)bytes * 1e9 / rate_bps + delay_ns);
    if (tcp_pair_stats.known) send_probe(), tcp_pair_stats.unacked = 8;
    engine_gray_tick(&eng, 0, t + 1 * MS);
    assert_int_equal(eng.rails[0].probe_start_ns, t); /* in flight: not judged */
    if (!tcp_pair_stats.known) send_probe();
    tcp_pair_stats.unacked = 0;
    engine_gray_tick(&eng, 0, acked);
    assert_int_equal(eng.rails[0].probe_start_ns, 0); /* judged */
    t = acked + 1 * MS;
  }
  return t;
}

/* A path delayed by delay_ns whose idle rail moves bytes four times as fast
 * as the light traffic's level: a probe's time less its bytes over the
 * level took that for the delay. Not one probe counts as healthy in 4 s,
 * and the rail stays demoted. */
static void delayed_path_never_gives_a_healthy_probe(double delay_ns) {
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0_for_latency(t);
  uint64_t healthy = rr_counter_get(RR_CTR_PROBES_HEALTHY), slow = rr_counter_get(RR_CTR_PROBES_SLOW);
  probe_path(t + 200 * MS, 4000 * MS, 4 * LEVEL, delay_ns);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_int_equal(rr_counter_get(RR_CTR_PROBES_HEALTHY), healthy);
  assert_true(rr_counter_get(RR_CTR_PROBES_SLOW) >= slow + 10); /* probed all along, every probe bad */
  assert_int_equal(l->ok.probes, 0);
  assert_int_equal(l->slowlat, 1);
}

/* Delayed by the bar itself, and by the lab's 100 ms, on a transport that
 * completes a probe once the peer acknowledged it (verbs). */
static void test_path_delayed_by_the_bar_is_not_restored(void **state) {
  (void)state;
  delayed_path_never_gives_a_healthy_probe(BAR);
}

static void test_path_delayed_100ms_is_not_restored(void **state) {
  (void)state;
  delayed_path_never_gives_a_healthy_probe(100.0 * MS);
}

/* On TCP the kernel takes a probe long before the peer acknowledges it: a
 * probe of a link held to the latency bar is done only once acknowledged,
 * so a path that acknowledges 100 ms late gives slow probes, not healthy
 * ones sent in a millisecond. */
static void test_tcp_probe_waits_for_the_acknowledgement(void **state) {
  (void)state;
  tcp_pair_stats.known = 1;
  delayed_path_never_gives_a_healthy_probe(100.0 * MS);
}

/* The delay gone: a path at the link's level, the healthy excess added.
 * Its probes are healthy and the rail is restored within a second and a
 * half (the hold is 500 ms, a probe every 200 ms or so), on either kind of
 * transport. */
static void healed_path_is_restored(void) {
  uint64_t t = rr_now_ns();
  gray_link *l = demote_rail0_for_latency(t);
  uint64_t healthy = rr_counter_get(RR_CTR_PROBES_HEALTHY);
  uint64_t end = probe_path(t + 200 * MS, 1500 * MS, LEVEL, LAT_REF);
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE);
  assert_true(end - t <= 1700 * MS);
  assert_true(rr_counter_get(RR_CTR_PROBES_HEALTHY) >= healthy + 2);
  assert_int_equal(l->slowlat, 0);
  assert_int_equal(l->restored, 1);
}

static void test_healed_path_is_restored(void **state) {
  (void)state;
  healed_path_is_restored();
}

static void test_healed_tcp_path_is_restored(void **state) {
  (void)state;
  tcp_pair_stats.known = 1;
  healed_path_is_restored();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_path_delayed_by_the_bar_is_not_restored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_path_delayed_100ms_is_not_restored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_tcp_probe_waits_for_the_acknowledgement, setup, teardown),
      cmocka_unit_test_setup_teardown(test_healed_path_is_restored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_healed_tcp_path_is_restored, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
