/* Life shared by the idle rails of one link (net_plugin/engine/link_life.h):
 * one entry per (role, NIC, peer address), life that only moves forward,
 * and one probe per link and interval however many rails ask. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>

#include "link_life.h"

#define MS 1000000ull

static rr_link_table t; /* large for a stack */

static int reset(void **state) {
  (void)state;
  rr_link_life_reset(&t);
  return 0;
}

/* The rails of one link share an entry; another role, NIC or peer address
 * is another link. */
static void test_one_entry_per_link(void **state) {
  (void)state;
  int a = rr_link_life_slot(&t, 1, 0, "10.55.1.2");
  assert_true(a >= 0);
  assert_int_equal(rr_link_life_slot(&t, 1, 0, "10.55.1.2"), a);
  int others[] = {rr_link_life_slot(&t, 2, 0, "10.55.1.2"), rr_link_life_slot(&t, 1, 1, "10.55.1.2"),
                  rr_link_life_slot(&t, 1, 0, "10.55.1.3")};
  for (int i = 0; i < 3; i++) {
    assert_true(others[i] >= 0);
    assert_int_not_equal(others[i], a);
    for (int j = 0; j < i; j++) assert_int_not_equal(others[i], others[j]);
  }
}

/* Life moves forward only: an older reading (a rail that asked late) does
 * not take the link's life back. */
static void test_life_only_moves_forward(void **state) {
  (void)state;
  int s = rr_link_life_slot(&t, 1, 0, "p");
  assert_int_equal(rr_link_life_get(&t, s), 0);
  rr_link_life_saw(&t, s, 500 * MS);
  rr_link_life_saw(&t, s, 300 * MS);
  assert_int_equal(rr_link_life_get(&t, s), 500 * MS);
  rr_link_life_saw(&t, s, 700 * MS);
  assert_int_equal(rr_link_life_get(&t, s), 700 * MS);
  /* Another link's life is its own. */
  int o = rr_link_life_slot(&t, 1, 1, "p");
  assert_int_equal(rr_link_life_get(&t, o), 0);
}

/* 1,024 idle rails of one link in doubt at once: one probe per interval,
 * the next one an interval after the last claim. */
static void test_one_probe_per_link_and_interval(void **state) {
  (void)state;
  int s = rr_link_life_slot(&t, 2, 1, "10.56.0.2");
  const uint64_t every = 250 * MS, t0 = 10000 * MS;
  int claims = 0;
  for (int rail = 0; rail < 1024; rail++) claims += rr_link_life_claim_probe(&t, s, t0 + (uint64_t)rail * 10000, every);
  assert_int_equal(claims, 1);
  assert_false(rr_link_life_claim_probe(&t, s, t0 + every - 1, every));
  assert_true(rr_link_life_claim_probe(&t, s, t0 + every, every));
  assert_false(rr_link_life_claim_probe(&t, s, t0 + every + 1, every));
  /* Another link is claimed apart. */
  assert_true(rr_link_life_claim_probe(&t, rr_link_life_slot(&t, 2, 0, "10.55.0.2"), t0 + every + 1, every));
  /* A claim stamped later than now (another clock's) does not hold off. */
  int c = rr_link_life_slot(&t, 1, 3, "q");
  assert_true(rr_link_life_claim_probe(&t, c, 900 * MS, every));
  assert_true(rr_link_life_claim_probe(&t, c, 100 * MS, every));
}

/* A full table: the rail gets no slot and keeps the per-rail rule (it may
 * always probe, it shares nothing). */
static void test_full_table_keeps_per_rail_rule(void **state) {
  (void)state;
  char peer[32];
  for (int i = 0; i < RR_LINK_LIFE_MAX; i++) {
    snprintf(peer, sizeof peer, "10.%d.%d.2", i / 256, i % 256);
    assert_true(rr_link_life_slot(&t, 1, 0, peer) >= 0);
  }
  assert_int_equal(rr_link_life_slot(&t, 1, 0, "192.168.0.1"), -1);
  assert_int_equal(rr_link_life_get(&t, -1), 0);
  rr_link_life_saw(&t, -1, 5 * MS);
  assert_int_equal(rr_link_life_get(&t, -1), 0);
  assert_true(rr_link_life_claim_probe(&t, -1, 5 * MS, 250 * MS));
  assert_true(rr_link_life_claim_probe(&t, -1, 5 * MS, 250 * MS));
  /* Known links are still found. */
  assert_true(rr_link_life_slot(&t, 1, 0, "10.0.7.2") >= 0);
}

/* Entries go with the last rail of their link: four tables' worth of links
 * opened and closed, each link by two rails, and every one finds room; an
 * entry refilled holds nothing of the link before it; a link still held
 * by one rail keeps its entry and its life. */
static void test_entries_go_with_their_last_rail(void **state) {
  (void)state;
  char peer[32];
  int kept = rr_link_life_slot(&t, 2, 5, "10.99.0.2");
  rr_link_life_saw(&t, kept, 42 * MS);
  for (int i = 0; i < 4 * RR_LINK_LIFE_MAX; i++) {
    snprintf(peer, sizeof peer, "10.%d.%d.2", i / 256, i % 256);
    int a = rr_link_life_slot(&t, 1, 0, peer), b = rr_link_life_slot(&t, 1, 0, peer);
    assert_true(a >= 0);
    assert_int_equal(b, a);
    assert_int_not_equal(a, kept);
    assert_int_equal(rr_link_life_get(&t, a), 0);
    rr_link_life_saw(&t, a, (uint64_t)(i + 1) * MS);
    assert_int_equal(rr_link_life_used(&t), 2);
    rr_link_life_release(&t, a);
    assert_int_equal(rr_link_life_used(&t), 2); /* its other rail holds it */
    rr_link_life_release(&t, b);
    assert_int_equal(rr_link_life_used(&t), 1);
  }
  assert_int_equal(rr_link_life_slot(&t, 2, 5, "10.99.0.2"), kept);
  assert_int_equal(rr_link_life_get(&t, kept), 42 * MS);
  /* A full table has room again once a link's rails are gone. */
  int slot[RR_LINK_LIFE_MAX - 1];
  for (int i = 0; i < RR_LINK_LIFE_MAX - 1; i++) {
    snprintf(peer, sizeof peer, "10.%d.%d.3", i / 256, i % 256);
    assert_true((slot[i] = rr_link_life_slot(&t, 1, 0, peer)) >= 0);
  }
  assert_int_equal(rr_link_life_slot(&t, 1, 0, "192.168.0.1"), -1);
  rr_link_life_release(&t, slot[7]);
  int again = rr_link_life_slot(&t, 1, 0, "192.168.0.1");
  assert_int_equal(again, slot[7]);
  rr_link_life_release(&t, -1); /* a rail that found the table full holds nothing */
  assert_int_equal(rr_link_life_used(&t), RR_LINK_LIFE_MAX);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_one_entry_per_link, reset),
      cmocka_unit_test_setup(test_life_only_moves_forward, reset),
      cmocka_unit_test_setup(test_one_probe_per_link_and_interval, reset),
      cmocka_unit_test_setup(test_full_table_keeps_per_rail_rule, reset),
      cmocka_unit_test_setup(test_entries_go_with_their_last_rail, reset),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
