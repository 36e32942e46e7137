/* Connection-setup messages (net_plugin/core/setup_wire.c): byte-exact
 * layout, every decoder's refusals, and the keyed hashes (a wrong secret, a
 * changed field or a proof replayed as another message never verifies). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "handle.h"
#include "setup_wire.h"

static rr_hs_hello sample_hello(void) {
  rr_hs_hello h = {.conn_id = 0x0102030405060708ull, .rail = 1, .stream = 2, .nstreams = 4,
                   .flags = RR_HS_FLAG_RECONNECT, .chunk_size = 128 << 10, .generation = 7, .dev = 9};
  for (int i = 0; i < RR_HS_NONCE_LEN; i++) h.nonce[i] = (uint8_t)(0xa0 + i);
  return h;
}

static void test_hello_layout_and_round_trip(void **state) {
  (void)state;
  rr_hs_hello h = sample_hello(), d;
  uint8_t b[RR_HS_HELLO_LEN];
  assert_int_equal(rr_hs_hello_encode(&h, b), RR_HS_HELLO_LEN);
  /* little-endian, whatever the host */
  static const uint8_t head[] = {'R', 'R', 'C', '3', RR_HS_VERSION, 0, RR_HS_HELLO, 0, 8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 4, 1};
  assert_memory_equal(b, head, sizeof head);
  assert_int_equal(b[24], 9); /* the listener's device */
  assert_int_equal(b[28], 7);
  size_t need = 0;
  const char *why = NULL;
  for (size_t len = 0; len < RR_HS_HELLO_LEN; len++) {
    assert_int_equal(rr_hs_hello_decode(b, len, &d, &need, &why), RR_AGAIN);
    assert_true(need > len && need <= RR_HS_HELLO_LEN);
  }
  assert_int_equal(rr_hs_hello_decode(b, sizeof b, &d, &need, &why), RR_OK);
  assert_memory_equal(&d.nonce, &h.nonce, RR_HS_NONCE_LEN);
  assert_true(d.conn_id == h.conn_id && d.rail == 1 && d.stream == 2 && d.nstreams == 4 && d.generation == 7 &&
              d.dev == 9);
}

static void test_hello_refusals(void **state) {
  (void)state;
  rr_hs_hello h = sample_hello(), d;
  uint8_t b[RR_HS_HELLO_LEN];
  size_t need;
  const char *why;
  struct { int off; uint8_t val; rr_status want; } cases[] = {
      {0, 'X', RR_ERR_PROTOCOL},          /* magic */
      {4, 3, RR_ERR_UNSUPPORTED},         /* the old protocol (token in clear) */
      {6, RR_HS_PROOF, RR_ERR_PROTOCOL},  /* type */
      {7, 1, RR_ERR_PROTOCOL},            /* reserved */
      {16, RR_HS_MAX_RAILS, RR_ERR_PROTOCOL},
      {17, 4, RR_ERR_PROTOCOL},           /* stream >= nstreams */
      {18, 0, RR_ERR_PROTOCOL},
      {18, RR_HS_MAX_STREAMS + 1, RR_ERR_PROTOCOL},
      {19, 0x80, RR_ERR_PROTOCOL},        /* unknown flag */
      {23, 0x10, RR_ERR_PROTOCOL},        /* chunk size over 256 MiB */
      {24, RR_HS_MAX_DEVS, RR_ERR_PROTOCOL}, /* no listener has that device */
      {25, 1, RR_ERR_PROTOCOL},           /* reserved */
      {27, 1, RR_ERR_PROTOCOL},           /* reserved */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rr_hs_hello_encode(&h, b);
    b[cases[i].off] = cases[i].val;
    why = NULL;
    assert_int_equal(rr_hs_hello_decode(b, sizeof b, &d, &need, &why), cases[i].want);
    assert_non_null(why);
  }
  h.flags = 0; /* a first connection has no generation */
  rr_hs_hello_encode(&h, b);
  assert_int_equal(rr_hs_hello_decode(b, sizeof b, &d, &need, &why), RR_ERR_PROTOCOL);
}

static void test_proof_blob_bounds(void **state) {
  (void)state;
  rr_hs_proof p = {.blob_len = 5}, d;
  memcpy(p.blob, "abcde", 5);
  memset(p.mac, 0x33, sizeof p.mac);
  uint8_t b[RR_HS_MAX_LEN];
  size_t n = rr_hs_proof_encode(RR_HS_PROOF, &p, b), need;
  const char *why;
  assert_int_equal(n, RR_HS_PROOF_FIXED + 5);
  assert_int_equal(rr_hs_proof_decode(RR_HS_PROOF, b, RR_HS_PROOF_FIXED, &d, &need, &why), RR_AGAIN);
  assert_int_equal(need, n);
  assert_int_equal(rr_hs_proof_decode(RR_HS_PROOF, b, n, &d, &need, &why), RR_OK);
  assert_int_equal(d.blob_len, 5);
  assert_memory_equal(d.blob, "abcde", 5);
  /* an ACCEPT is not a PROOF */
  assert_int_equal(rr_hs_proof_decode(RR_HS_ACCEPT, b, n, &d, &need, &why), RR_ERR_PROTOCOL);
  b[40] = RR_HS_BLOB_MAX + 1; /* a blob longer than any rail's */
  assert_int_equal(rr_hs_proof_decode(RR_HS_PROOF, b, sizeof b, &d, &need, &why), RR_ERR_PROTOCOL);
  b[40] = 0xff, b[41] = 0xff;
  assert_int_equal(rr_hs_proof_decode(RR_HS_PROOF, b, sizeof b, &d, &need, &why), RR_ERR_PROTOCOL);
}

static void test_commit(void **state) {
  (void)state;
  uint8_t b[RR_HS_COMMIT_LEN];
  rr_hs_commit c = {.rails = 0x5}, d;
  size_t need;
  const char *why;
  rr_hs_commit_encode(&c, b);
  assert_int_equal(rr_hs_commit_decode(b, sizeof b, &d, &need, &why), RR_OK);
  assert_int_equal(d.rails, 0x5);
  assert_int_equal(d.later, 0);
  c.rails = 0;
  rr_hs_commit_encode(&c, b);
  assert_int_equal(rr_hs_commit_decode(b, sizeof b, &d, &need, &why), RR_ERR_PROTOCOL);
  c.rails = 1u << RR_HS_MAX_RAILS;
  rr_hs_commit_encode(&c, b);
  assert_int_equal(rr_hs_commit_decode(b, sizeof b, &d, &need, &why), RR_ERR_PROTOCOL);
}

/* Rails to reopen later: one nibble per rail, 1 + the handle address it
 * reaches; round trip, byte layout, and what a peer could get wrong. */
static void test_commit_later(void **state) {
  (void)state;
  uint8_t b[RR_HS_COMMIT_LEN];
  rr_hs_commit c = {.rails = 0x2, .later = 0x81}, d;
  c.later_addr[0] = 0;
  c.later_addr[7] = RR_HS_MAX_ADDRS - 1;
  size_t need;
  const char *why;
  assert_int_equal(rr_hs_commit_encode(&c, b), RR_HS_COMMIT_LEN);
  assert_int_equal(b[8], 0x2);
  assert_int_equal(b[12], 0x01);                       /* rail 0: address 0 */
  assert_int_equal(b[15], (uint8_t)(RR_HS_MAX_ADDRS << 4)); /* rail 7: the last address */
  assert_int_equal(rr_hs_commit_decode(b, sizeof b, &d, &need, &why), RR_OK);
  assert_int_equal(d.rails, 0x2);
  assert_int_equal(d.later, 0x81);
  assert_int_equal(d.later_addr[0], 0);
  assert_int_equal(d.later_addr[7], RR_HS_MAX_ADDRS - 1);
  /* A rail both up and for later, or an address index past the handle's. */
  uint8_t bad[RR_HS_COMMIT_LEN];
  memcpy(bad, b, sizeof bad);
  bad[12] = 0x10; /* rail 1 (up) named for later too */
  assert_int_equal(rr_hs_commit_decode(bad, sizeof bad, &d, &need, &why), RR_ERR_PROTOCOL);
  memcpy(bad, b, sizeof bad);
  bad[12] = RR_HS_MAX_ADDRS + 1;
  assert_int_equal(rr_hs_commit_decode(bad, sizeof bad, &d, &need, &why), RR_ERR_PROTOCOL);
  assert_non_null(why);
  /* Short input asks for the rest. */
  assert_int_equal(rr_hs_commit_decode(b, RR_HS_COMMIT_LEN - 1, &d, &need, &why), RR_AGAIN);
  assert_int_equal(need, RR_HS_COMMIT_LEN);
}

static void test_macs(void **state) {
  (void)state;
  uint8_t secret[RR_HS_SECRET_LEN], other[RR_HS_SECRET_LEN], snonce[RR_HS_NONCE_LEN];
  assert_int_equal(rr_hs_random(secret, sizeof secret), RR_OK);
  memcpy(other, secret, sizeof other);
  other[31] ^= 1;
  memset(snonce, 0x77, sizeof snonce);
  rr_hs_hello h = sample_hello();
  uint8_t hello[RR_HS_HELLO_LEN];
  rr_hs_hello_encode(&h, hello);
  uint8_t a[32], b[32], c[32], e[32];
  rr_hs_mac_challenge(secret, hello, snonce, 3, a);
  rr_hs_mac_challenge(secret, hello, snonce, 3, b);
  assert_true(rr_hs_mac_equal(a, b));
  rr_hs_mac_challenge(other, hello, snonce, 3, b);   /* wrong secret */
  assert_false(rr_hs_mac_equal(a, b));
  rr_hs_mac_challenge(secret, hello, snonce, 4, b);  /* another floor */
  assert_false(rr_hs_mac_equal(a, b));
  snonce[0] ^= 1;                                     /* another nonce: no replay */
  rr_hs_mac_challenge(secret, hello, snonce, 3, b);
  assert_false(rr_hs_mac_equal(a, b));
  snonce[0] ^= 1;
  /* the three roles never share a value */
  rr_hs_mac_blob(RR_HS_PROOF, secret, hello, snonce, NULL, 0, c);
  rr_hs_mac_blob(RR_HS_ACCEPT, secret, hello, snonce, NULL, 0, e);
  assert_false(rr_hs_mac_equal(a, c));
  assert_false(rr_hs_mac_equal(c, e));
  uint8_t blob[2] = {1, 2};
  rr_hs_mac_blob(RR_HS_PROOF, secret, hello, snonce, blob, 2, e); /* the blob is covered */
  assert_false(rr_hs_mac_equal(c, e));
  hello[20] ^= 1; /* so is every hello field */
  rr_hs_mac_blob(RR_HS_PROOF, secret, hello, snonce, NULL, 0, e);
  assert_false(rr_hs_mac_equal(c, e));
}

static struct sockaddr_storage v4(uint32_t host_order) {
  struct sockaddr_storage a;
  memset(&a, 0, sizeof a);
  ((struct sockaddr_in *)&a)->sin_family = AF_INET;
  ((struct sockaddr_in *)&a)->sin_addr.s_addr = htonl(host_order);
  return a;
}

static void test_handle(void **state) {
  (void)state;
  rr_handle_entry e[2] = {{.addr = v4(0x0a4d0001u), .dev = 0, .own_ip = 1},
                          {.addr = v4(0x0a4d0101u), .dev = 3, .own_ip = 1}};
  uint8_t secret[RR_HS_SECRET_LEN];
  memset(secret, 0xab, sizeof secret);
  const uint8_t process[RR_HANDLE_PROCESS_LEN] = {9, 8, 7, 6, 5, 4};
  uint8_t h[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_handle_encode(e, 2, 4242, secret, process, h), RR_OK);
  rr_peer_addrs p;
  const char *why;
  assert_int_equal(rr_handle_parse(h, &p, &why), RR_OK);
  assert_int_equal(p.naddrs, 2);
  assert_memory_equal(p.secret, secret, sizeof secret);
  assert_memory_equal(p.process, process, sizeof process);
  assert_int_equal(ntohs(((struct sockaddr_in *)&p.addrs[1])->sin_port), 4242);
  assert_int_equal(ntohl(((struct sockaddr_in *)&p.addrs[1])->sin_addr.s_addr), 0x0a4d0101u);
  assert_int_equal(p.dev[1], 3);
  assert_int_equal(p.own_ip[1], 1);
  uint8_t bad[RR_NET_HANDLE_SIZE];
  int offs[] = {0, 3, 4, 5, 6, 7, 7, 106, 107, 110};
  uint8_t vals[] = {'X', '2', 3, 9, 5, 0, 5, 2, RR_HS_MAX_DEVS, 1};
  for (size_t i = 0; i < sizeof offs / sizeof offs[0]; i++) {
    memcpy(bad, h, sizeof bad);
    bad[offs[i]] = vals[i];
    why = NULL;
    assert_int_equal(rr_handle_parse(bad, &p, &why), RR_ERR_INVALID);
    assert_non_null(why);
  }
  memcpy(bad, h, sizeof bad);
  bad[40] = bad[41] = 0; /* port 0 */
  assert_int_equal(rr_handle_parse(bad, &p, &why), RR_ERR_INVALID);
  /* a handle that names no listening process is refused, and none is written */
  memcpy(bad, h, sizeof bad);
  memset(bad + 122, 0, RR_HANDLE_PROCESS_LEN);
  assert_int_equal(rr_handle_parse(bad, &p, &why), RR_ERR_INVALID);
  const uint8_t none[RR_HANDLE_PROCESS_LEN] = {0};
  assert_int_equal(rr_handle_encode(e, 2, 4242, secret, none, h), RR_ERR_INVALID);
}

/* RDMA devices set up out of band: their entries share one address, each
 * naming its device; a TCP device keeps its own. Eight entries, at most
 * four distinct addresses. */
static void test_handle_out_of_band(void **state) {
  (void)state;
  rr_handle_entry e[RR_HANDLE_MAX_ADDRS];
  for (int i = 0; i < RR_HANDLE_MAX_ADDRS; i++)
    e[i] = (rr_handle_entry){.addr = v4(0xc0a80005u), .dev = (uint8_t)(7 - i), .own_ip = 0};
  e[5] = (rr_handle_entry){.addr = v4(0x0a000001u), .dev = 20, .own_ip = 1};
  uint8_t secret[RR_HS_SECRET_LEN] = {1};
  const uint8_t process[RR_HANDLE_PROCESS_LEN] = {1};
  uint8_t h[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_handle_encode(e, RR_HANDLE_MAX_ADDRS, 5000, secret, process, h), RR_OK);
  assert_int_equal(h[7], 2); /* two distinct addresses */
  rr_peer_addrs p;
  const char *why = NULL;
  assert_int_equal(rr_handle_parse(h, &p, &why), RR_OK);
  assert_int_equal(p.naddrs, RR_HANDLE_MAX_ADDRS);
  for (int i = 0; i < RR_HANDLE_MAX_ADDRS; i++) {
    assert_int_equal(p.dev[i], e[i].dev);
    assert_int_equal(p.own_ip[i], e[i].own_ip);
    assert_int_equal(ntohl(((struct sockaddr_in *)&p.addrs[i])->sin_addr.s_addr), i == 5 ? 0x0a000001u : 0xc0a80005u);
  }
  /* five distinct addresses do not fit */
  for (int i = 0; i < 5; i++) e[i].addr = v4(0x0a000010u + (uint32_t)i);
  assert_int_equal(rr_handle_encode(e, 5, 5000, secret, process, h), RR_ERR_INVALID);
  /* the version before out-of-band setup is refused with a reason, never misread */
  assert_int_equal(rr_handle_encode(e, 4, 5000, secret, process, h), RR_OK);
  h[3] = '2';
  h[4] = 2;
  why = NULL;
  assert_int_equal(rr_handle_parse(h, &p, &why), RR_ERR_INVALID);
  assert_non_null(strstr(why, "version"));
}

/* A reconnect's generation against the listener's floor: older is refused,
 * equal is the attempt's own other stream seen first (once the connector
 * gave the whole attempt up on it, and over a lossy path kept doing so),
 * too far ahead is a runaway. */
static void test_reconnect_window(void **state) {
  (void)state;
  assert_true(rr_hs_reconnect_in_window(5, 4));
  assert_true(rr_hs_reconnect_in_window(5, 5));
  assert_false(rr_hs_reconnect_in_window(4, 5));
  assert_true(rr_hs_reconnect_in_window(4 + RR_HS_GEN_WINDOW, 4));
  assert_false(rr_hs_reconnect_in_window(5 + RR_HS_GEN_WINDOW, 4));
  assert_false(rr_hs_reconnect_in_window(0, UINT32_MAX)); /* no wrap-around */
  assert_true(rr_hs_reconnect_in_window(1, 0));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_layout_and_round_trip),
      cmocka_unit_test(test_hello_refusals),
      cmocka_unit_test(test_proof_blob_bounds),
      cmocka_unit_test(test_commit),
      cmocka_unit_test(test_commit_later),
      cmocka_unit_test(test_reconnect_window),
      cmocka_unit_test(test_macs),
      cmocka_unit_test(test_handle),
      cmocka_unit_test(test_handle_out_of_band),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
