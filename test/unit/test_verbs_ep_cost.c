/* The host's work per message on the verbs rail (rr_rail_ep.cost), over a loopback pair of
 * the fake libibverbs (verbs_ep_fixture.h): doorbells, work requests and completions per
 * message at each size, receives reposted in batches, and a write split for adaptive
 * routing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>



#include "verbs_ep_fixture.h"

/* Counts since `before`, per endpoint. */
static uint64_t cost_since(world *w, int i, const rr_tel_cost *before, int k) {
  return w->ep[i]->cost.n[k] - before[i].n[k];
}

/* One message as the engine moves it, at the rail: the receiver (ep1)
 * grants it with a clear-to-send, the sender (ep0) writes its 128 KiB chunks
 * as groups of up to VERBS_WRITE_MAX bytes (the device's write_max: the
 * whole message at these sizes), each a write with immediate, and the
 * receiver acknowledges it. The counts are exact. */
#define COST_CHUNK (128u << 10)
static void one_message(world *w, size_t bytes, rr_tel_cost *before) {
  static char src[VERBS_WRITE_MAX];
  static rr_rail_mr src_mr = {.lkey = 7};
  for (int i = 0; i < 2; i++) before[i] = w->ep[i]->cost;
  assert_int_equal(ctrl(w, 1, 0xc75), RR_OK);            /* clear-to-send */
  assert_int_equal(progress(w, 0), RR_OK);
  for (size_t off = 0, k = 0; off < bytes; off += VERBS_WRITE_MAX, k++) {
    size_t len = bytes - off < VERBS_WRITE_MAX ? bytes - off : VERBS_WRITE_MAX;
    rr_write_wr wr = {.wr_id = k, .local = src, .len = len, .local_mr = &src_mr,
                      .remote_addr = 0x1000 + off, .rkey = 9, .imm = (uint32_t)(off / COST_CHUNK)};
    assert_int_equal(w->ep[0]->ops->post_write(w->ep[0], &wr), RR_OK);
  }
  assert_int_equal(w->ep[0]->ops->post_flush(w->ep[0]), RR_OK); /* the engine's pass ends */
  assert_int_equal(progress(w, 1), RR_OK);               /* the writes land */
  assert_int_equal(ctrl(w, 1, 0xac4), RR_OK);            /* acknowledgement */
  /* Every completion polled, and passes with nothing to do. */
  for (int k = 0; k < 3; k++) {
    assert_int_equal(progress(w, 0), RR_OK);
    assert_int_equal(progress(w, 1), RR_OK);
  }
  int writes = 0, ctrls = 0;
  for (int k = 0; k < nlog; k++) writes += evlog[k].kind == EV_WRITE, ctrls += evlog[k].kind == EV_CTRL;
  assert_int_equal(writes, (int)((bytes + VERBS_WRITE_MAX - 1) / VERBS_WRITE_MAX));
  assert_int_equal(ctrls, 2);
}

static void test_cost_per_message(void **state) {
  world *w = *state;
  /* Connect posted the receive queue in chains of VERBS_RECV_CHAIN. */
  assert_int_equal(w->ep[0]->cost.n[RR_TEL_COST_DOORBELLS_RECV],
                   (VERBS_RQ_DEPTH + VERBS_RECV_CHAIN - 1) / VERBS_RECV_CHAIN);
  assert_int_equal(w->ep[0]->cost.n[RR_TEL_COST_WRS_RECV], VERBS_RQ_DEPTH);
  static const size_t sizes[] = {64u << 10, 512u << 10, 4u << 20};
  for (unsigned z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
    rr_tel_cost b[2];
    nlog = 0;
    uint32_t held = to_ep(w->ep[1])->qps[0].nrepost; /* consumed receives not posted again yet */
    one_message(w, sizes[z], b);
    /* Sender: one write per message (a group of all its chunks), rung as a
     * chain of one when the engine's pass ends (post_flush): one doorbell,
     * signalled (a chain that holds a write ends signalled). No NOP. */
    assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_DOORBELLS_SEND), 1);
    assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_WRS_SEND), 1);
    assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_CQES_SEND), 1);
    assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_DOORBELLS_RECV), 0);
    assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_CQES_RECV), 0);
    /* Receiver: two ring writes (clear-to-send, ack), a doorbell each and
     * unsignalled (one in SIGNAL_RUN is; these three messages make six); one
     * receive completion for the write; receives posted again
     * VERBS_RECV_BATCH at a time. */
    uint64_t consumed = 1;
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_DOORBELLS_SEND), 2);
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_WRS_SEND), 2);
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_CQES_SEND), 0);
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_CQES_RECV), consumed);
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_DOORBELLS_RECV), (held + consumed) / VERBS_RECV_BATCH);
    assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_WRS_RECV),
                     (held + consumed) / VERBS_RECV_BATCH * VERBS_RECV_BATCH);
    print_message("cost per %zu KiB message: sender 1 doorbell, 1 work request, 1 send completion; receiver 2 "
                  "send doorbells, 0 send + %llu recv completions\n",
                  sizes[z] >> 10, (unsigned long long)consumed);
  }
}

/* Receives consumed are posted again in chained batches: VERBS_RECV_BATCH
 * writes cost the receiver one receive doorbell, and the queue refills to
 * its depth. */
static void test_receives_reposted_in_batches(void **state) {
  world *w = *state;
  rr_tel_cost b[2] = {w->ep[0]->cost, w->ep[1]->cost};
  uint32_t n = 2 * VERBS_RECV_BATCH + 3;
  for (uint32_t k = 0; k < n; k++) assert_int_equal(write_imm(w, 0, k), RR_OK);
  assert_int_equal(flush(w, 0), RR_OK); /* the engine's pass ends: the chain goes out */
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_CQES_RECV), n);
  assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_DOORBELLS_RECV), 2);
  assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_WRS_RECV), 2 * VERBS_RECV_BATCH);
  assert_int_equal(to_ep(w->ep[1])->qps[0].nrepost, 3);
  /* What the NIC holds: the depth, less the three held back. */
  assert_int_equal(lb[1].rq_tail - lb[1].rq_head, VERBS_RQ_DEPTH - 3);
}

/* Adaptive routing: a split write is a plain RDMA WRITE of the bulk and a
 * write with immediate of the rest behind it on the same QP; the receiver
 * sees one arrival, of the rest's length, and every byte landed. */
static void test_split_write(void **state) {
  world *w = *state;
  static char src[3 * COST_CHUNK + 100], dst[3 * COST_CHUNK + 100];
  for (size_t i = 0; i < sizeof src; i++) src[i] = (char)(i * 7 + 1);
  static rr_rail_mr src_mr = {.lkey = 7};
  rr_tel_cost b[2] = {w->ep[0]->cost, w->ep[1]->cost};
  nlog = 0;
  rr_write_wr wr = {.wr_id = 5, .local = src, .len = sizeof src, .local_mr = &src_mr,
                    .remote_addr = (uintptr_t)dst, .rkey = 9, .imm = 0x77, .bulk = 3 * COST_CHUNK};
  assert_int_equal(w->ep[0]->ops->post_write(w->ep[0], &wr), RR_OK);
  assert_int_equal(w->ep[0]->ops->post_flush(w->ep[0]), RR_OK);
  assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_WRS_SEND), 2);
  assert_int_equal(cost_since(w, 0, b, RR_TEL_COST_DOORBELLS_SEND), 1); /* one chain */
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(cost_since(w, 1, b, RR_TEL_COST_CQES_RECV), 1);
  assert_int_equal(nlog, 1);
  assert_int_equal(evlog[0].kind, EV_WRITE);
  assert_int_equal(evlog[0].value, 0x77);
  assert_int_equal(evlog[0].len, 100);
  assert_memory_equal(dst, src, 3 * COST_CHUNK); /* the bulk (the fake copies plain writes only) */
  /* Its completion at the writer is the write's, once (the bulk's own
   * completion, if signalled, reports nothing). */
  nlog = 0;
  for (int k = 0; k < 3; k++) assert_int_equal(progress(w, 0), RR_OK);
  int done = 0;
  for (int k = 0; k < nlog; k++) done += evlog[k].kind == EV_DONE && evlog[k].ep == 0;
  assert_int_equal(done, 1);
  /* A bulk longer than the write is refused. */
  wr.bulk = wr.len + 1;
  assert_int_equal(w->ep[0]->ops->post_write(w->ep[0], &wr), RR_ERR_INVALID);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_cost_per_message, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_receives_reposted_in_batches, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_split_write, setup_pair, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
