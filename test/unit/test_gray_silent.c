/* Silence against a latency verdict under way (engine_gray_demote_silent).
 *
 * The failure detector judges an ACTIVE rail silent δ after its last life.
 * On a path with added delay a single request can outlast δ (the Soft-RoCE
 * lab's netem case at 1 MiB: up to 0.9 s more per request), so silence can
 * come before the latency judge has its degraded_ns of bad samples; the
 * rail was then failed (DOWN, reopened, failed back onto the delay, silent
 * again) instead of demoted. A rail whose link is in a run of bad latency
 * samples (two, the last within δ + 500 ms; or one during the silence, from
 * another connection over the same NIC and peer) is slow, not dead: it is
 * demoted. One without such samples lately still fails.
 *
 * A sending engine on two TCP rails over socket pairs, each to its own peer
 * address (two links to one peer host). The link's latency state is made
 * by the judge's own arithmetic (gray_lat_sample) at virtual times; the
 * silence verdict is replayed as engine_rails.c makes it: demoted, or else
 * failed as silent. The health events go into the telemetry's tables: a
 * demotion leaves the link DEGRADED and counts in its demotions, a failure
 * leaves it DOWN and counts none. */
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
#include "rr_health_bus.h"
#include "rr_tel_internal.h"
#include "tcp_pair_fixture.h"

#define MS 1000000ull
#define PEER "10.77.0.2"
#define DELTA_NS (1000 * MS)

static rr_engine eng; /* engines are large for a stack */
static rr_rail_dev *dev;
static int peer_fd[2];
static rr_tel_tables tables;
static uint64_t t0; /* the virtual times below count from here */

static void to_tables(void *arg, const rr_health_event *ev) {
  (void)arg;
  rr_tel_events_apply(&tables, ev);
}

/* A TCP rail endpoint over a fresh socket pair (the far end kept in peer_fd[k]). */
static rr_rail_ep *tcp_ep(int k) {
  rr_rail_ep *ep = tcp_pair_ep(dev, &eng, 0, &peer_fd[k]);
  assert_non_null(ep);
  return ep;
}

static int setup(void **state) {
  (void)state;
  memset(&tables, 0, sizeof tables);
  gray_nlinks = 0; /* the links are the process's: each test starts with none */
  rr_engine_config cfg = {.role = RR_ENGINE_SEND, .chunk_size = 4096, .progress_timeout_ns = DELTA_NS,
                          .failback_hold_ns = 500 * MS, .failover_mode = RR_FAILOVER_CHAIN, .degraded_pct = 20,
                          .restore_pct = 50, .retrans_pct = 3, .degraded_ns = 1000 * MS, .latency_x = 10,
                          .latency_min_ns = 20 * MS};
  snprintf(cfg.peer, sizeof cfg.peer, "%s", PEER);
  assert_int_equal(rr_engine_init(&eng, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &dev), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(0), 1, "gray0", "10.77.0.2"), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(1), 1, "gray1", "10.77.1.2"), RR_OK);
  assert_int_equal(eng.rails[0].state, RR_RAIL_ACTIVE);
  assert_int_equal(rr_health_subscribe(to_tables, NULL), RR_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_health_unsubscribe(to_tables, NULL);
  rr_engine_fini(&eng);
  dev->ops->dev_close(dev);
  for (int k = 0; k < 2; k++)
    if (peer_fd[k] > 0) close(peer_fd[k]), peer_fd[k] = 0;
  return 0;
}

/* Rail 0's link as the engine keeps it (made by its first tick). */
static gray_link *link0(void) {
  t0 = rr_now_ns();
  engine_gray_tick(&eng, 0, t0);
  for (int i = 0; i < gray_nlinks; i++)
    if (gray_links[i].dev == eng.rails[0].ep->dev->index && !strcmp(gray_links[i].peer, eng.rails[0].peer_addr))
      return &gray_links[i];
  fail_msg("rail 0 has no link after a tick");
  return NULL;
}

/* A latency sample on l at t0 + at_ms: excess_ms over what its rate needs. */
static void sample(gray_link *l, uint64_t at_ms, double excess_ms) {
  gray_lat_cfg c = gray_lat_cfg_of(&eng);
  gray_lat_sample(&l->lat, &c, excess_ms * MS, gray_lat_reference(l), t0 + at_ms * MS);
}

/* A healthy path's requests (1 ms over their bytes' time: the reference),
 * then the delay: two requests 400 ms late, the second at +700 ms. The
 * judge has no verdict yet: the run spans 400 ms of its 1 s. */
static void delayed_run(gray_link *l) {
  sample(l, 0, 1.0);
  sample(l, 100, 1.0);
  sample(l, 300, 400.0);
  sample(l, 700, 400.0);
  assert_int_not_equal(l->lat.run_since, 0);
  assert_int_equal(l->lat.degraded, 0);
}

/* What engine_rails.c does when rail r has been silent for δ. */
static void silent(int r, uint64_t now) {
  if (engine_gray_demote_silent(&eng, r, now)) return;
  engine_rail_set_state(&eng, r, RR_RAIL_DOWN, "silent for 1100 ms");
}

static const rr_tel_link *tel_link(const char *nic) {
  for (int i = 0; i < tables.nlinks; i++)
    if (!strcmp(tables.links[i].nic, nic)) return &tables.links[i];
  return NULL;
}

static uint64_t faults(const rr_tel_link *l) {
  uint64_t n = 0;
  for (int w = 0; w < RR_WHERE_COUNT; w++) n += l->faults[w];
  return n;
}

/* The delayed rail: silent 1.1 s after its last (late) request, in a run of
 * bad samples: demoted for its latency, not failed. */
static void test_latency_run_under_way_is_demoted(void **state) {
  (void)state;
  gray_link *l = link0();
  delayed_run(l);
  uint64_t ctr = rr_counter_get(RR_CTR_DEMOTIONS);
  silent(0, t0 + 700 * MS + DELTA_NS + 100 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_int_equal(eng.rails[0].g_demoted, 1);
  assert_int_equal(eng.stats.demotions, 1);
  assert_int_equal(rr_counter_get(RR_CTR_DEMOTIONS), ctr + 1);
  /* The verdict is the latency's: a restore must show the delay gone. */
  assert_int_equal(l->degraded, 1);
  assert_int_equal(l->slowlat, 1);
  const rr_tel_link *tl = tel_link(eng.rails[0].ifname);
  assert_non_null(tl);
  assert_int_equal(tl->state, RR_LINK_DEGRADED);
  assert_int_equal(tl->demotions, 1);
  assert_int_equal(faults(tl), 1); /* the telemetry's faults count demotions too */
}

/* The same run, but nothing acknowledged since for more than δ + 500 ms:
 * the path died after it was slow. Failed. */
static void test_latency_run_without_a_sample_lately_fails(void **state) {
  (void)state;
  gray_link *l = link0();
  delayed_run(l);
  silent(0, t0 + 700 * MS + DELTA_NS + 600 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DOWN);
  assert_int_equal(eng.stats.demotions, 0);
  const rr_tel_link *tl = tel_link(eng.rails[0].ifname);
  assert_non_null(tl);
  assert_int_equal(tl->state, RR_LINK_DOWN);
  assert_int_equal(tl->demotions, 0);
  assert_int_equal(faults(tl), 1);
}

/* A rail that delivered nothing judged (no samples, no windows) and falls
 * silent is dead: failed. */
static void test_silent_rail_without_deliveries_fails(void **state) {
  (void)state;
  gray_link *l = link0();
  assert_int_equal(l->lat.run_since, 0);
  silent(0, t0 + DELTA_NS + 100 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DOWN);
  assert_int_equal(eng.stats.demotions, 0);
  assert_int_equal(l->degraded, 0);
}

/* One late request of another connection over the same NIC and peer,
 * acknowledged 100 ms before this rail's silence verdict (its own last life
 * is δ old): the path delivers, late. Demoted (the lab at netem 150 ms:
 * the silence came with one bad sample, 112 ms old). */
static void test_late_sample_during_the_silence_is_demoted(void **state) {
  (void)state;
  gray_link *l = link0();
  sample(l, 0, 1.0);
  sample(l, 100, 1.0);
  sample(l, 1000, 400.0);
  silent(0, t0 + 1100 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DEGRADED);
  assert_int_equal(eng.stats.demotions, 1);
  assert_int_equal(l->slowlat, 1);
}

/* One late acknowledgement as old as the silence (the rail's own last
 * request before it fell silent) is noise, not a run: failed. */
static void test_one_late_sample_is_no_run(void **state) {
  (void)state;
  gray_link *l = link0();
  sample(l, 0, 1.0);
  sample(l, 100, 1.0);
  sample(l, 700, 400.0);
  silent(0, t0 + 700 * MS + DELTA_NS + 100 * MS);
  assert_int_equal(eng.rails[0].state, RR_RAIL_DOWN);
  assert_int_equal(eng.stats.demotions, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_latency_run_under_way_is_demoted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_latency_run_without_a_sample_lately_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_silent_rail_without_deliveries_fails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_late_sample_during_the_silence_is_demoted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_one_late_sample_is_no_run, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
