/* rerail ring-order's algorithms (tools/ring_order.h) on topologies whose
 * best order is known: racks interleaved, a planted fast ring, a ring fast
 * in one direction only, and random matrices checked against brute force;
 * plus every parse error with its line. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ring_order.h"

static char err[512];

static uint32_t rng_state = 12345;
static uint32_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 17;
  rng_state ^= rng_state << 5;
  return rng_state;
}

static void make_hosts(rr_ring_hosts *h, int n) {
  memset(h, 0, sizeof(*h));
  h->n = n;
  h->name = calloc((size_t)n, sizeof(*h->name));
  h->tor = calloc((size_t)n, sizeof(*h->tor));
  h->bw = calloc((size_t)n * n, sizeof(double));
  for (int i = 0; i < n; i++) snprintf(h->name[i], RR_RING_NAME, "h%d", i);
}

static void set_bw(rr_ring_hosts *h, int i, int j, double v) { h->bw[(size_t)i * h->n + j] = v; }

/* Is order a rotation of ring (same direction)? */
static int is_rotation(const int *order, const int *ring, int n) {
  int k = 0;
  while (k < n && ring[k] != order[0]) k++;
  if (k == n) return 0;
  for (int i = 0; i < n; i++)
    if (order[i] != ring[(k + i) % n]) return 0;
  return 1;
}

static void shuffle(int *a, int n) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd() % (uint32_t)(i + 1)), t = a[i];
    a[i] = a[j];
    a[j] = t;
  }
}

static void test_tor_grouping(void **state) {
  (void)state;
  /* 12 hosts dealt round-robin over 3 racks: the input ring leaves a rack
   * at every hop; grouped it leaves each rack once. */
  const char *text = "# host tor\n"
                     "a0 r0\na1 r1\na2 r2\nb0 r0\nb1 r1\nb2 r2\n"
                     "c0 r0\nc1 r1\nc2 r2\nd0 r0\nd1 r1\nd2 r2\n";
  rr_ring_hosts h;
  assert_int_equal(rr_ring_parse_hosts(text, "hosts", &h, err, sizeof(err)), 0);
  assert_int_equal(h.n, 12);
  int order[12], input[12];
  for (int i = 0; i < 12; i++) input[i] = i;
  rr_ring_order_tor(&h, order);
  const char *want[] = {"a0", "b0", "c0", "d0", "a1", "b1", "c1", "d1", "a2", "b2", "c2", "d2"};
  for (int i = 0; i < 12; i++) assert_string_equal(h.name[order[i]], want[i]);
  /* 100 GB/s uplinks, 50 GB/s NICs: interleaved, 4 hops share each uplink. */
  assert_true(fabs(rr_ring_tor_bottleneck(&h, input, 50.0, 100.0) - 25.0) < 1e-9);
  assert_true(fabs(rr_ring_tor_bottleneck(&h, order, 50.0, 100.0) - 50.0) < 1e-9);
  rr_ring_hosts_free(&h);

  /* No labels: the input order stays. */
  assert_int_equal(rr_ring_parse_hosts("x\ny\nz\n", "h", &h, err, sizeof(err)), 0);
  rr_ring_order_tor(&h, order);
  assert_int_equal(order[0], 0);
  assert_int_equal(order[2], 2);
  rr_ring_hosts_free(&h);
}

/* A fast ring hidden in a slow matrix: exact (n <= 13) and heuristic. */
static void planted(int n, int expect_exact) {
  rr_ring_hosts h;
  make_hosts(&h, n);
  int ring[64];
  for (int i = 0; i < n; i++) ring[i] = i;
  shuffle(ring, n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j) set_bw(&h, i, j, 1.0 + rnd() % 60);
  for (int i = 0; i < n; i++) set_bw(&h, ring[i], ring[(i + 1) % n], 100.0);
  int order[64];
  assert_int_equal(rr_ring_order_bw(&h, order), expect_exact);
  assert_true(rr_ring_bottleneck(&h, order) == 100.0);
  assert_true(is_rotation(order, ring, n));
  rr_ring_hosts_free(&h);
}

static void test_planted_ring_exact(void **state) {
  (void)state;
  for (int t = 0; t < 5; t++) planted(9 + t, 1);
}

static void test_planted_ring_heuristic(void **state) {
  (void)state;
  planted(40, 0);
  planted(17, 0);
}

/* Fast one way round, slow the other: the answer must go the fast way. */
static void test_asymmetric_direction(void **state) {
  (void)state;
  for (int n = 5; n <= 20; n += 15) {
    rr_ring_hosts h;
    make_hosts(&h, n);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        if (i != j) set_bw(&h, i, j, 5.0);
    int ring[32];
    for (int i = 0; i < n; i++) {
      ring[i] = i;
      set_bw(&h, i, (i + 1) % n, 100.0);
      set_bw(&h, (i + 1) % n, i, 10.0);
    }
    int order[32];
    rr_ring_order_bw(&h, order);
    assert_true(is_rotation(order, ring, n));
    rr_ring_hosts_free(&h);
  }
}

/* Exact answers equal brute force on random matrices (n = 7: 720 rings). */
static double brute(const rr_ring_hosts *h, double *best_sum) {
  int n = h->n, p[16];
  for (int i = 0; i < n; i++) p[i] = i;
  double best_bn = -1.0;
  *best_sum = INFINITY;
  /* permutations of p[1..n-1] (host 0 fixed first) */
  int c[16] = {0}, i = 1;
  for (;;) {
    double bn = rr_ring_bottleneck(h, p), s = rr_ring_inv_sum(h, p);
    if (bn > best_bn || (bn == best_bn && s < *best_sum)) {
      best_bn = bn;
      *best_sum = s;
    }
    while (i < n - 1 && c[i] >= i) c[i++] = 0;
    if (i >= n - 1) break;
    int a = (i % 2) ? 1 + c[i] : 1;
    int t = p[a];
    p[a] = p[i + 1];
    p[i + 1] = t;
    c[i]++;
    i = 1;
  }
  return best_bn;
}

static void test_exact_matches_brute_force(void **state) {
  (void)state;
  for (int trial = 0; trial < 30; trial++) {
    int n = 4 + trial % 4;
    rr_ring_hosts h;
    make_hosts(&h, n);
    for (int i = 0; i < n; i++)
      for (int j = 0; j < n; j++)
        if (i != j) set_bw(&h, i, j, (double)(1 + rnd() % 8)); /* many ties */
    int order[16];
    assert_int_equal(rr_ring_order_bw(&h, order), 1);
    double want_sum, want_bn = brute(&h, &want_sum);
    assert_true(rr_ring_bottleneck(&h, order) == want_bn);
    assert_true(fabs(rr_ring_inv_sum(&h, order) - want_sum) < 1e-9);
    /* a permutation of all hosts */
    int seen[16] = {0};
    for (int i = 0; i < n; i++) seen[order[i]]++;
    for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
    rr_ring_hosts_free(&h);
  }
}

static void test_no_ring(void **state) {
  (void)state;
  rr_ring_hosts h;
  make_hosts(&h, 4);
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++)
      if (i != j && j != 2) set_bw(&h, i, j, 10.0); /* nobody can send to host 2 */
  int order[4];
  assert_int_equal(rr_ring_order_bw(&h, order), -1);
  rr_ring_hosts_free(&h);
}

static void test_matrix_parse(void **state) {
  (void)state;
  rr_ring_hosts h;
  const char *ok = "# measured GB/s\nn1, n2, n3\n0 10 20\n30,0,40\n50 60 0 # row n3\n";
  assert_int_equal(rr_ring_parse_matrix(ok, "m", &h, err, sizeof(err)), 0);
  assert_int_equal(h.n, 3);
  assert_true(h.bw[1 * 3 + 2] == 40.0);
  rr_ring_hosts_free(&h);

  static const struct {
    const char *text, *want;
  } bad[] = {
      {"", "m:0: empty"},
      {"a\n", "m:1: fewer than 2 hosts"},
      {"a a\n0 1\n1 0\n", "m:1: host 'a' listed twice"},
      {"a b$\n", "m:1: bad host name 'b$'"},
      {"a b\n0 1\n", "m:2: 1 rows, expected 2"},
      {"a b\n0 1 2\n", "m:2: row 1 has more than 2 values"},
      {"a b\n0\n", "m:2: row 1 has 1 values, expected 2"},
      {"a b\n0 1\n1 x\n", "m:3: row 2 column 2: 'x' is not a bandwidth"},
      {"a b\n0 1\n1 -4\n", "m:3: row 2 column 2: '-4'"},
      {"a b\n0 1\n1 inf\n", "m:3: row 2 column 2: 'inf'"},
      {"a b\n0 1\n1 0\n1 1\n", "m:4: more than 2 rows"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    int rc = rr_ring_parse_matrix(bad[i].text, "m", &h, err, sizeof(err));
    if (rc != -1 || strstr(err, bad[i].want) == NULL)
      fail_msg("matrix case %zu: rc %d, '%s', wanted '%s'", i, rc, err, bad[i].want);
    rr_ring_hosts_free(&h);
  }
}

static void test_hosts_parse(void **state) {
  (void)state;
  rr_ring_hosts h;
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"a r1\n", "h:1: fewer than 2 hosts"},
      {"a r1\nb r2 extra\n", "h:2: expected 'host [tor]'"},
      {"a r1\na r2\n", "h:2: host 'a' listed twice"},
      {"a r1\nb r/2\n", "h:2: bad ToR label 'r/2'"},
      {"a\nb;c\n", "h:2: bad host name 'b;c'"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    err[0] = '\0';
    int rc = rr_ring_parse_hosts(bad[i].text, "h", &h, err, sizeof(err));
    if (rc != -1 || strstr(err, bad[i].want) == NULL)
      fail_msg("hosts case %zu: rc %d, '%s', wanted '%s'", i, rc, err, bad[i].want);
    rr_ring_hosts_free(&h);
  }
  char longline[1200];
  memset(longline, 'a', sizeof(longline) - 1);
  longline[sizeof(longline) - 1] = '\0';
  assert_int_equal(rr_ring_parse_hosts(longline, "h", &h, err, sizeof(err)), -1);
  assert_non_null(strstr(err, "h:1: line too long"));
  rr_ring_hosts_free(&h);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tor_grouping),
      cmocka_unit_test(test_planted_ring_exact),
      cmocka_unit_test(test_planted_ring_heuristic),
      cmocka_unit_test(test_asymmetric_direction),
      cmocka_unit_test(test_exact_matches_brute_force),
      cmocka_unit_test(test_no_ring),
      cmocka_unit_test(test_matrix_parse),
      cmocka_unit_test(test_hosts_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
