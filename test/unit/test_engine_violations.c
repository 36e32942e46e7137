/* Protocol violations are counted by kind: a forged write or eager message
 * from the peer, through the real TCP rail into a real receiving engine,
 * raises exactly the member of protocol_violations_total{kind} that names the
 * check that refused it, and no other (an operator, or a test, learns which
 * check fired without reading the log). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine_internal.h" /* the engine by value, and its statistics */
#include "engine_wire.h"
#include "rail_tcp.h"
#include "rr_counters.h"
#include "tcp_frame.h"

#define BUF_BYTES 16384

typedef struct recv_end {
  rr_engine e;
  rr_rail_dev *dev;
  rr_mr mr;
  void *buf;
  void *req;
  int peer_fd; /* the forging peer's end of the rail's socket */
} recv_end;

/* A receiving engine on one TCP rail with one 16 KiB receive (tag 1) posted. */
static void recv_end_open(recv_end *r) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  rr_engine_config cfg = {.role = RR_ENGINE_RECV, .chunk_size = 4096, .progress_timeout_ns = 1000000000ull,
                          .failback_hold_ns = 500000000ull};
  assert_int_equal(rr_engine_init(&r->e, &cfg), RR_OK);
  assert_int_equal(rr_tcp_dev_open(0, &r->dev), RR_OK);
  rr_rail_ep *ep = NULL;
  assert_int_equal(r->dev->ops->ep_open(r->dev, &rr_engine_rail_events, &r->e, &ep), RR_OK);
  int fds[1] = {sv[0]};
  rr_rail_connect_args args = {.fds = fds, .nfds = 1};
  assert_int_equal(ep->ops->ep_connect(ep, &args), RR_OK);
  assert_int_equal(rr_engine_add_rail(&r->e, ep, 1, "viol0", "peer"), RR_OK);
  r->peer_fd = sv[1];
  r->buf = calloc(1, BUF_BYTES);
  assert_non_null(r->buf);
  r->mr = (rr_mr){.base = r->buf, .size = BUF_BYTES, .type = RR_PTR_HOST};
  assert_int_equal(r->dev->ops->reg_mr(r->dev, r->buf, BUF_BYTES, RR_MEM_HOST, -1, 0, &r->mr.reg[0]), RR_OK);
  void *bufs[1] = {r->buf};
  size_t sizes[1] = {BUF_BYTES};
  int tags[1] = {1};
  rr_mr *mrs[1] = {&r->mr};
  assert_int_equal(rr_engine_irecv(&r->e, 1, bufs, sizes, tags, mrs, NULL, &r->req), RR_OK);
  assert_non_null(r->req);
}

static void recv_end_close(recv_end *r) {
  rr_engine_fini(&r->e);
  r->dev->ops->dereg_mr(r->mr.reg[0]);
  r->dev->ops->dev_close(r->dev);
  close(r->peer_fd);
  free(r->buf);
}

static uint64_t violations_total(void) {
  uint64_t n = 0;
  for (int c = RR_CTR_VIOL_NO_RECEIVE; c <= RR_CTR_VIOL_OVERFLOW; c++) n += rr_counter_get((rr_counter)c);
  return n;
}

/* The peer sends one header-only write frame h (naming the engine's current
 * epoch); the engine progresses until it refused it. Returns by how much
 * each violation kind grew in `grew`. */
static void forge(tcp_frame_hdr h, uint64_t grew[RR_CTR_COUNT]) {
  static recv_end r; /* an engine is large for a stack */
  recv_end_open(&r);
  uint64_t before[RR_CTR_COUNT], total = violations_total();
  for (int c = 0; c < RR_CTR_COUNT; c++) before[c] = rr_counter_get((rr_counter)c);
  h.type = TCP_FRAME_WRITE;
  h.epoch_tag = (uint16_t)r.e.epoch;
  h.imm = (h.imm & ~(0xfu << 28)) | (r.e.epoch & 0xf) << 28;
  uint8_t frame[TCP_FRAME_BYTES];
  tcp_frame_encode(&h, frame);
  assert_int_equal(write(r.peer_fd, frame, sizeof frame), (ssize_t)sizeof frame);
  /* The frame is in the socket already: each test progresses the engine,
   * which reads it; the bound only stops a broken engine from hanging. */
  for (int i = 0; i < 1000 && violations_total() == total; i++) {
    int done = 0;
    size_t got[1];
    rr_engine_test(r.req, &done, got);
    char sink[4096];
    while (read(r.peer_fd, sink, sizeof sink) > 0) {
    } /* the engine's clear-to-sends */
  }
  for (int c = 0; c < RR_CTR_COUNT; c++) grew[c] = rr_counter_get((rr_counter)c) - before[c];
  assert_int_equal(r.e.stats.violations, 1);
  recv_end_close(&r);
}

static void assert_only(const uint64_t grew[RR_CTR_COUNT], rr_counter kind) {
  for (int c = RR_CTR_VIOL_NO_RECEIVE; c <= RR_CTR_VIOL_OVERFLOW; c++)
    assert_int_equal(grew[c], c == (int)kind ? 1 : 0);
}

/* A chunk index far past the posted 16 KiB (four 4 KiB chunks). */
static void test_chunk_outside_the_receive(void **state) {
  (void)state;
  uint64_t grew[RR_CTR_COUNT];
  forge((tcp_frame_hdr){.imm = imm_encode(0, 0, 0, 1, 0, 1000)}, grew);
  assert_only(grew, RR_CTR_VIOL_CHUNK_INDEX);
}

/* Chunk 0 of the posted receive, with a key the receive was not given. */
static void test_write_with_a_foreign_key(void **state) {
  (void)state;
  uint64_t grew[RR_CTR_COUNT];
  forge((tcp_frame_hdr){.imm = imm_encode(0, 0, 0, 1, 0, 0), .rkey = 0x5eed}, grew);
  assert_only(grew, RR_CTR_VIOL_KEY);
}

/* A write for a slot where nothing is posted (slot 7; receive 0 is in 0). */
static void test_write_for_no_receive(void **state) {
  (void)state;
  uint64_t grew[RR_CTR_COUNT];
  forge((tcp_frame_hdr){.imm = imm_encode(0, 7, 0, 1, 0, 0)}, grew);
  assert_only(grew, RR_CTR_VIOL_NO_RECEIVE);
}

/* An eager write assuming receive 0 while naming receive 3200: the sender
 * can never be that far ahead of what it knows, so it does not decode. */
static void test_eager_write_beyond_any_assumption(void **state) {
  (void)state;
  uint64_t grew[RR_CTR_COUNT];
  forge((tcp_frame_hdr){.flags = TCP_FRAME_F_EAGER, .imm = imm_encode(0, 3200 % 32, 0, 1, 0, 0), .raddr = 3200},
        grew);
  assert_only(grew, RR_CTR_VIOL_MALFORMED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chunk_outside_the_receive),
      cmocka_unit_test(test_write_with_a_foreign_key),
      cmocka_unit_test(test_write_for_no_receive),
      cmocka_unit_test(test_eager_write_beyond_any_assumption),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
