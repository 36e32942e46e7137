/* The verbs rail's control ring over a loopback pair of the fake libibverbs
 * (verbs_ep_fixture.h): control messages travel both ways as RDMA WRITEs; one posted behind
 * a write (or a drain) is held until that write's completion is delivered, even though it is
 * in memory first; credits stop a writer at a full ring and come back when the reader
 * consumes; a forged slot (a bad length, stamp or count) fails the endpoint it was written
 * to and no other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "verbs_ep_fixture.h"

/* Our ring, as the peer names it (from our address blob). */
static uint8_t *ring_of(world *w, int i) {
  uint8_t blob[RR_RAIL_ADDR_MAX];
  uint32_t len = 0;
  rr_verbs_addr a;
  assert_int_equal(rr_verbs_rail_ops.ep_addr(w->ep[i], blob, &len), RR_OK);
  assert_int_equal(rr_verbs_addr_decode(blob, len, &a), RR_OK);
  assert_int_equal(a.ring_slots, VERBS_RING_SLOTS);
  return (uint8_t *)(uintptr_t)a.ring_addr;
}

static void test_ring_ctrl_both_ways(void **state) {
  world *w = *state;
  assert_int_equal(ctrl(w, 0, 0xa1), RR_OK);
  assert_int_equal(ctrl(w, 1, 0xb1), RR_OK);
  assert_int_equal(ctrl(w, 0, 0xa2), RR_OK);
  /* No receive was consumed: nothing but the writer's own completions is on the CQ. */
  for (unsigned k = cq_head; k != cq_tail; k++)
    if (cq_of[k % FAKE_CQ]) assert_int_equal(cq[k % FAKE_CQ].opcode, IBV_WC_RDMA_WRITE);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nlog, 3);
  expect(0, 1, EV_CTRL, 0xa1);
  expect(1, 1, EV_CTRL, 0xa2);
  expect(2, 0, EV_CTRL, 0xb1);
  /* Consumed slots are empty again. */
  verbs_ring_msg m;
  assert_int_equal(verbs_ring_peek(ring_of(w, 1), 0, &m), VERBS_RING_EMPTY);
}

/* A control message lands in memory before the completion of the write posted ahead of it
 * is polled: it waits for that write, and a drain and a later message keep their places. */
static void test_ring_ctrl_held_behind_write(void **state) {
  world *w = *state;
  static char buf[64];
  static rr_rail_mr rmr = {.lkey = 7};
  rr_write_wr wr = {.wr_id = 11, .local = buf, .len = sizeof buf, .local_mr = &rmr, .remote_addr = 0x1000,
                    .rkey = 9, .imm = 0x77};
  cq_gate = 0;
  assert_int_equal(ctrl(w, 0, 0xc0), RR_OK);
  assert_int_equal(w->ep[0]->ops->post_write(w->ep[0], &wr), RR_OK);
  assert_int_equal(ctrl(w, 0, 0xc1), RR_OK);
  assert_int_equal(w->ep[0]->ops->post_drain(w->ep[0], 5), RR_OK);
  assert_int_equal(ctrl(w, 0, 0xc2), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, 1); /* the first message (nothing ahead of it), not the second */
  expect(0, 1, EV_CTRL, 0xc0);
  cq_gate = 1; /* the write's receive completion (on ep1's own CQ) */
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, 3);
  expect(1, 1, EV_WRITE, 0x77);
  expect(2, 1, EV_CTRL, 0xc1);
  cq_gate = -1;
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, 5);
  expect(3, 1, EV_DRAIN, 5);
  expect(4, 1, EV_CTRL, 0xc2);
}

/* Post until refused: exactly a ring's worth goes out while the reader reads nothing, and
 * the ring holds every one of them (an overwritten slot would fail the reader). */
static uint32_t fill(world *w, uint32_t first) {
  uint32_t n = 0;
  for (;;) {
    rr_status st = ctrl(w, 0, first + n);
    if (st == RR_AGAIN) {
      assert_int_equal(progress(w, 0), RR_OK); /* send slots back from completions */
      st = ctrl(w, 0, first + n);
    }
    if (st == RR_AGAIN) return n;
    assert_int_equal(st, RR_OK);
    n++;
  }
}

static void test_ring_credits_never_overrun(void **state) {
  world *w = *state;
  assert_int_equal(fill(w, 0), VERBS_RING_SLOTS);
  assert_int_equal(progress(w, 1), RR_OK); /* consumes all, returns credits by the credit word */
  assert_int_equal(nlog, VERBS_RING_SLOTS);
  for (uint32_t k = 0; k < VERBS_RING_SLOTS; k++) expect((int)k, 1, EV_CTRL, k);
  assert_int_equal(fill(w, 1000), VERBS_RING_SLOTS);
  /* This time credits come back on a message of the reader's own. */
  nlog = 0;
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, VERBS_RING_SLOTS);
  for (uint32_t k = 0; k < VERBS_RING_SLOTS; k++) expect((int)k, 1, EV_CTRL, 1000 + k);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(fill(w, 2000), VERBS_RING_SLOTS);
}

static void test_ring_credits_back_on_the_readers_message(void **state) {
  world *w = *state;
  for (uint32_t k = 0; k < VERBS_RING_SLOTS / 2 - 1; k++) assert_int_equal(ctrl(w, 0, k), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK); /* under half the ring: no credit write */
  assert_int_equal(ctrl(w, 1, 0xee), RR_OK); /* the count travels in its header */
  assert_int_equal(progress(w, 0), RR_OK);
  expect(nlog - 1, 0, EV_CTRL, 0xee);
  assert_int_equal(fill(w, 0), VERBS_RING_SLOTS);
}

/* The NIC places a write while the reader polls, and need not store a 4-byte field at once:
 * Soft-RoCE copies a write's bytes with the kernel's memcpy, one byte at a time where that is
 * `rep movsb` under an emulated CPU. From message 256 on a stamp has two bytes that are not 0
 * (message 256's is 0x101), and a poll between them read 0x001: neither empty nor the stamp.
 * Landed here a byte at a time, in order, with a poll after each byte: no failure, nothing
 * delivered until its trailer reads the stamp, then exactly the message, once. Every byte of a leading
 * stamp that has only partly landed is 0 or the stamp's own. */
static void test_ring_stamp_landing_byte_by_byte(void **state) {
  world *w = *state;
  const uint32_t due = 256; /* the first message whose stamp has two bytes that are not 0 */
  for (uint32_t k = 0; k < due; k++) {
    assert_int_equal(ctrl(w, 0, k), RR_OK);
    assert_int_equal(progress(w, 1), RR_OK); /* consumed: its slot is empty for the next lap */
    assert_int_equal(progress(w, 0), RR_OK); /* send slots and credits back */
  }
  assert_int_equal(nlog, (int)due);
  assert_int_equal(ctrl(w, 0, 0xfeed), RR_OK); /* message 256, copied whole by the fake */
  uint8_t *slot = ring_of(w, 1) + verbs_ring_slot_off(due);
  uint8_t landed[VERBS_RING_SLOT_BYTES];
  uint32_t bytes = verbs_ring_trailer_off(sizeof(uint32_t)) + 4;
  memcpy(landed, slot, bytes);
  assert_int_equal(landed[0], 0x01); /* stamp 0x101, little-endian */
  assert_int_equal(landed[1], 0x01);
  memset(slot, 0, bytes);            /* as before the NIC placed it: a cleared slot */
  /* Whole once the trailer's last byte that is not 0 is in (its high bytes are 0 already). */
  uint32_t whole = bytes - 1;
  while (!landed[whole]) whole--;
  assert_true(whole >= verbs_ring_trailer_off(sizeof(uint32_t)));
  for (uint32_t b = 0; b < bytes; b++) {
    slot[b] = landed[b];
    assert_int_equal(progress(w, 1), RR_OK);
    assert_int_equal(nlog, (int)due + (b >= whole));
  }
  expect((int)due, 1, EV_CTRL, 0xfeed);
  verbs_ring_msg m;
  assert_int_equal(verbs_ring_peek(slot, due + VERBS_RING_SLOTS, &m), VERBS_RING_EMPTY);
}

/* Forge message number 0 into endpoint i's ring, as a hostile peer could. */
static void forge(world *w, int i, uint64_t n, uint32_t ops, uint32_t credit, uint32_t len_field) {
  uint8_t *slot = ring_of(w, i);
  uint32_t body = 0x55;
  verbs_ring_encode(slot, n, ops, credit, &body, sizeof body);
  if (len_field != sizeof body) memcpy(slot + 4, &len_field, 4);
}

static void forged_fails_only(world *w, int i) {
  assert_int_equal(progress(w, i), RR_ERR_PROTOCOL);
  assert_int_equal(progress(w, !i), RR_OK);
  assert_int_equal(ctrl(w, !i, 1), RR_OK);
  assert_int_equal(nlog, 0); /* nothing of the forged slot reached the engine */
}

static void test_ring_forged_length(void **state) {
  forge(*state, 1, 0, 0, 0, RR_RAIL_CTRL_MAX + 1);
  forged_fails_only(*state, 1);
}
static void test_ring_forged_stamp(void **state) {
  forge(*state, 0, 7, 0, 0, 4); /* the stamp of message 7 where message 0 is due */
  forged_fails_only(*state, 0);
}
static void test_ring_forged_count_ahead(void **state) {
  forge(*state, 1, 0, 100000, 0, 4); /* claims writes no queue could hold */
  forged_fails_only(*state, 1);
}
static void test_ring_forged_credit(void **state) {
  forge(*state, 1, 0, 0, 3, 4); /* credit for messages never sent */
  forged_fails_only(*state, 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_ring_ctrl_both_ways, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_ctrl_held_behind_write, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_credits_never_overrun, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_credits_back_on_the_readers_message, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_stamp_landing_byte_by_byte, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_length, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_stamp, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_count_ahead, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_credit, setup_pair, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
