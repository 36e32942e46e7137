/* What the telemetry counts of a demoted rail (rerail_rail_demotions_total,
 * rerail_rail_faults_total): the engine's health events for a rail's states,
 * fed to the exporter's tables as the exporter feeds them.
 *
 * A demoted verbs rail is invalidated and reopened (engine_gray.c): its
 * endpoint ends (DEGRADED to DEAD), a fresh one is swapped in (DOWN) and held
 * demoted (DEGRADED again). That is one demotion. The tables counted a
 * demotion per arrival into DEGRADED from another state, and a fault per
 * event naming where: two demotions and three faults, and one more of each
 * per probe that timed out (each reopens the rail). A sending engine on two
 * TCP rails over socket pairs; the reopen is replayed with the same
 * transitions the engine makes (engine_rails.c, engine_gray.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "rail_tcp.h"
#include "rr_health_bus.h"
#include "rr_tel_internal.h"
#include "tcp_pair_fixture.h"

#define MS 1000000ull
#define PEER "10.77.0.2"

static rr_engine eng, eng2; /* engines are large for a stack; eng2: a second connection */
static rr_rail_dev *dev;
static int peer_fd[6];
static rr_tel_tables tables;

static void to_tables(void *arg, const rr_health_event *ev) {
  (void)arg;
  rr_tel_events_apply(&tables, ev);
}

/* A TCP rail endpoint of engine e over a fresh socket pair (the far end kept in peer_fd[k]). */
static rr_rail_ep *tcp_ep_of(rr_engine *e, int k) {
  rr_rail_ep *ep = tcp_pair_ep(dev, e, 0, &peer_fd[k]);
  assert_non_null(ep);
  return ep;
}

static rr_rail_ep *tcp_ep(int k) { return tcp_ep_of(&eng, k); }

static int setup(void **state) {
  (void)state;
  memset(&tables, 0, sizeof tables);
  rr_engine_config cfg = {.role = RR_ENGINE_SEND, .chunk_size = 4096, .progress_timeout_ns = 1000 * MS,
                          .failback_hold_ns = 500 * MS, .failover_mode = RR_FAILOVER_CHAIN, .degraded_pct = 20,
                          .restore_pct = 50, .retrans_pct = 3, .degraded_ns = 1000 * MS};
  snprintf(cfg.peer, sizeof cfg.peer, "%s", PEER);
  assert_int_equal(rr_engine_init(&eng, &cfg), RR_OK);
  assert_int_equal(rr_engine_init(&eng2, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &dev), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(0), 1, "gray0", PEER), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng, tcp_ep(1), 1, "gray1", PEER), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng2, tcp_ep_of(&eng2, 3), 1, "gray0", PEER), RR_OK);
  assert_int_equal(rr_engine_add_rail(&eng2, tcp_ep_of(&eng2, 4), 1, "gray1", PEER), RR_OK);
  assert_int_equal(rr_health_subscribe(to_tables, NULL), RR_OK);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  rr_health_unsubscribe(to_tables, NULL);
  rr_engine_fini(&eng);
  rr_engine_fini(&eng2);
  dev->ops->dev_close(dev);
  for (int k = 0; k < 6; k++)
    if (peer_fd[k] > 0) close(peer_fd[k]), peer_fd[k] = 0;
  return 0;
}

static const rr_tel_link *link_of(const char *nic) {
  for (int i = 0; i < tables.nlinks; i++)
    if (!strcmp(tables.links[i].nic, nic)) return &tables.links[i];
  return NULL;
}

static uint64_t faults(const rr_tel_link *l) {
  uint64_t n = 0;
  for (int w = 0; w < RR_WHERE_COUNT; w++) n += l->faults[w];
  return n;
}

/* The demotion as demote() makes it, then the reopen as a verbs rail's. */
static void demote_and_reopen(int k) {
  engine_rail *rl = &eng.rails[0];
  rl->g_demoted = 1;
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "delivers 5 % of its level for 1.0 s");
  engine_rail_set_state(&eng, 0, RR_RAIL_DEAD, "cannot post a write");
  engine_rail_swap(&eng, 0, tcp_ep(k));
  assert_int_equal(rl->state, RR_RAIL_DOWN);
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "reopened, still demoted");
}

static void test_reopen_of_a_demoted_rail_is_one_demotion(void **state) {
  (void)state;
  demote_and_reopen(2);
  const char *nic = eng.rails[0].ifname;
  const rr_tel_link *l = link_of(nic);
  assert_non_null(l);
  assert_int_equal(l->state, RR_LINK_DEGRADED);
  assert_int_equal(l->demotions, 1);
  assert_int_equal(faults(l), 1);
  assert_int_equal(l->faults[RR_WHERE_PATH], 1);
  /* A hard fault on the demoted rail is a fault of its own: its link goes down. */
  engine_rail_set_state(&eng, 0, RR_RAIL_DOWN, "local link down");
  assert_int_equal(l->demotions, 1);
  assert_int_equal(faults(l), 2);
}

/* Two connections over the same link: the second follows the first one's
 * verdict after the first one's endpoint ended (the link then reads down).
 * One demotion; the tables counted two. Once the link is up again (the
 * restore), a new demotion counts. */
static void test_second_connection_follows_after_the_first_reopened(void **state) {
  (void)state;
  const char *nic = eng.rails[0].ifname;
  eng.rails[0].g_demoted = 1;
  engine_rail_set_state(&eng, 0, RR_RAIL_DEGRADED, "delivers 5 % of its level for 1.0 s");
  engine_rail_set_state(&eng, 0, RR_RAIL_DEAD, "cannot post a write");
  eng2.rails[0].g_demoted = 1;
  engine_rail_set_state(&eng2, 0, RR_RAIL_DEGRADED, "delivers 5 % of its level for 0.0 s");
  const rr_tel_link *l = link_of(nic);
  assert_non_null(l);
  assert_int_equal(l->demotions, 1);
  assert_int_equal(faults(l), 1);
  /* Restored: up again, and a later demotion is a new one. */
  eng2.rails[0].g_demoted = 0;
  engine_rail_set_state(&eng2, 0, RR_RAIL_ACTIVE, "delivers its healthy level again");
  eng2.rails[0].g_demoted = 1;
  engine_rail_set_state(&eng2, 0, RR_RAIL_DEGRADED, "delivers 5 % of its level for 1.0 s");
  assert_int_equal(l->demotions, 2);
}

/* A rail that fails and is reopened without a demotion still counts its failure. */
static void test_failure_of_an_active_rail_still_counts(void **state) {
  (void)state;
  engine_rail_set_state(&eng, 0, RR_RAIL_DOWN, "silent for 1002 ms");
  const rr_tel_link *l = link_of(eng.rails[0].ifname);
  assert_non_null(l);
  assert_int_equal(faults(l), 1);
  assert_int_equal(l->demotions, 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_reopen_of_a_demoted_rail_is_one_demotion, setup, teardown),
      cmocka_unit_test_setup_teardown(test_second_connection_follows_after_the_first_reopened, setup, teardown),
      cmocka_unit_test_setup_teardown(test_failure_of_an_active_rail_still_counts, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
