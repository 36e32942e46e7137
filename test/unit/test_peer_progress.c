/* Progress shared by the connections to one peer process
 * (net_plugin/core/peer_progress.c), fed to the setup clock as connect()
 * feeds it: a live peer that answers some of its connections keeps all of
 * them alive, a peer that stops answering still fails every one within one
 * timeout, and the table stays bounded. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "connect_plan.h"
#include "peer_progress.h"

#define SEC 1000000000ull
#define LIMIT (30 * SEC) /* the default RERAIL_CONNECT_TIMEOUT */

static const uint8_t peer_p[RR_HANDLE_PROCESS_LEN] = {1, 2, 3, 4, 5, 6};
static const uint8_t peer_q[RR_HANDLE_PROCESS_LEN] = {6, 5, 4, 3, 2, 1};

/* A pending connection as connect() holds it: its own progress counter,
 * its peer's slot, its clock. */
typedef struct conn {
  uint64_t own;
  int slot;
  rr_setup_clock clock;
} conn;

static void conn_start(rr_peer_table *t, conn *c, const uint8_t *id, uint64_t now) {
  c->own = 0;
  c->slot = rr_peer_table_ref(t, id);
  rr_setup_clock_start(&c->clock, rr_peer_table_progress(t, c->slot, c->own), now);
}

static int conn_expired(const rr_peer_table *t, conn *c, uint64_t now) {
  return rr_setup_clock_expired(&c->clock, rr_peer_table_progress(t, c->slot, c->own), now, LIMIT);
}

/* An authenticated answer on c: its own socket advanced, and its peer answered. */
static void conn_answered(rr_peer_table *t, conn *c) {
  c->own++;
  rr_peer_table_answered(t, c->slot);
}

/* Two pending connections to one peer; the peer answers only the first
 * (the second waits for its turn in the peer's accept() sweep) for four
 * timeouts: neither times out, where the second's own progress alone would
 * have failed it after one. Then the peer stops answering: both fail
 * within one timeout of its last answer. */
static void test_answers_to_one_keep_all_alive(void **state) {
  (void)state;
  rr_peer_table *t = calloc(1, sizeof *t);
  assert_non_null(t);
  conn a, b;
  conn_start(t, &a, peer_p, 0);
  conn_start(t, &b, peer_p, 0);
  assert_true(a.slot >= 0);
  assert_int_equal(a.slot, b.slot);
  rr_setup_clock old_rule; /* b's clock fed its own progress only */
  rr_setup_clock_start(&old_rule, b.own, 0);
  uint64_t now = 0;
  for (; now <= 4 * LIMIT; now += 10 * SEC) {
    conn_answered(t, &a);
    assert_false(conn_expired(t, &a, now));
    assert_false(conn_expired(t, &b, now));
  }
  assert_true(rr_setup_clock_expired(&old_rule, b.own, now, LIMIT));
  uint64_t last = now - 10 * SEC; /* the peer's last answer */
  assert_false(conn_expired(t, &a, last + LIMIT));
  assert_false(conn_expired(t, &b, last + LIMIT));
  assert_true(conn_expired(t, &a, last + LIMIT + 1));
  assert_true(conn_expired(t, &b, last + LIMIT + 1));
  free(t);
}

/* A peer that never answers fails all its connections after one timeout;
 * another peer's answers do not keep them alive. */
static void test_silent_peer_fails_all(void **state) {
  (void)state;
  rr_peer_table *t = calloc(1, sizeof *t);
  assert_non_null(t);
  conn a, b, other;
  conn_start(t, &a, peer_p, 0);
  conn_start(t, &b, peer_p, 0);
  conn_start(t, &other, peer_q, 0);
  assert_int_not_equal(other.slot, a.slot);
  for (uint64_t now = 0; now <= LIMIT; now += SEC) {
    conn_answered(t, &other);
    assert_false(conn_expired(t, &a, now));
    assert_false(conn_expired(t, &b, now));
  }
  assert_true(conn_expired(t, &a, LIMIT + 1));
  assert_true(conn_expired(t, &b, LIMIT + 1));
  assert_false(conn_expired(t, &other, LIMIT + 1));
  free(t);
}

/* An entry lives while a connection refers to it, is reused once none
 * does, and the table never grows past its bound: a connection that finds
 * it full keeps its own progress alone. */
static void test_table_bounded_and_released(void **state) {
  (void)state;
  rr_peer_table *t = calloc(1, sizeof *t);
  assert_non_null(t);
  int a = rr_peer_table_ref(t, peer_p);
  int b = rr_peer_table_ref(t, peer_p);
  rr_peer_table_answered(t, a);
  rr_peer_table_unref(t, a);
  assert_int_equal(rr_peer_table_progress(t, b, 5), 6); /* still referred to: kept */
  rr_peer_table_unref(t, b);
  assert_int_equal(t->e[b].refs, 0);
  /* fill it with distinct peers */
  for (int i = 0; i < RR_PEER_TABLE_MAX; i++) {
    uint8_t id[RR_HANDLE_PROCESS_LEN] = {0xee, (uint8_t)(i >> 8), (uint8_t)i};
    assert_int_equal(rr_peer_table_ref(t, id), i); /* b's freed entry is the first reused */
  }
  assert_int_equal(rr_peer_table_ref(t, peer_q), -1);
  assert_int_equal(rr_peer_table_progress(t, -1, 7), 7);
  rr_peer_table_answered(t, -1);   /* no entry: nothing to count */
  rr_peer_table_unref(t, -1);
  rr_peer_table_unref(t, 17);
  int q = rr_peer_table_ref(t, peer_q);
  assert_int_equal(q, 17);
  assert_int_equal(rr_peer_table_progress(t, q, 0), 0); /* a reused entry starts from nothing */
  free(t);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_answers_to_one_keep_all_alive),
      cmocka_unit_test(test_silent_peer_fails_all),
      cmocka_unit_test(test_table_bounded_and_released),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
