/* Posting on the verbs rail's endpoints, on the fake libibverbs (verbs_ep_fixture.h).
 *
 * Control messages go inline, a write's payload never does (it may be GPU memory, which the
 * CPU must not read); the writes of a pass wait on their QP's chain and go out as one call
 * (one doorbell) whose last request alone is signalled, at post_flush, at the chain's caps,
 * before any other request on the QP, or in progress; ring writes alone are signalled once
 * in SIGNAL_RUN or when long ones hold half the send slots; no NOP ever; the send queue's
 * credits stay exact up to the one kept for a signal; a QP failing mid-chain reports no
 * write of that chain done; silence is judged against when a chain's completion is due. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "rr_clock.h"
#include "rr_params.h"

#include "verbs_ep_fixture.h"

static void test_only_own_messages_inline(void **state) {
  world *w = *state;
  char msg[VERBS_MAX_INLINE - VERBS_RING_HDR - 4] = {0}; /* the longest body that goes inline with its ring header */
  assert_int_equal(post_write(w, 0, 16), RR_OK);
  assert_int_equal(post_write(w, 0, 1 << 16), RR_OK);
  assert_int_equal(w->ep[0]->ops->post_ctrl(w->ep[0], msg, sizeof msg), RR_OK);
  assert_int_equal(nposts, 3);
  assert_int_equal(ncalls, 1); /* the message took the writes ahead of it along */
  assert_int_equal(posts[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  assert_false(posts[0].flags & IBV_SEND_INLINE); /* 16 bytes of payload: still read by the NIC */
  assert_false(posts[1].flags & IBV_SEND_INLINE);
  assert_false(posts[0].flags & IBV_SEND_SIGNALED);
  assert_false(posts[1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(posts[2].opcode, IBV_WR_RDMA_WRITE); /* into the peer's ring */
  assert_true(posts[2].flags & IBV_SEND_INLINE);
  assert_true(posts[2].flags & IBV_SEND_SIGNALED); /* it ends a chain of writes */
  /* Four bytes more and the NIC reads it from its send slot. */
  char longer[sizeof msg + 4] = {0};
  assert_int_equal(w->ep[0]->ops->post_ctrl(w->ep[0], longer, sizeof longer), RR_OK);
  assert_false(posts[nposts - 1].flags & IBV_SEND_INLINE);
}

/* The calls (doorbells) and signalled requests among posts[from, nposts). */
static int signalled_since(int from) {
  int n = 0;
  for (int k = from; k < nposts; k++) n += !!(posts[k].flags & IBV_SEND_SIGNALED);
  return n;
}

/* A chain of N writes is one call, one doorbell, whose last request alone is signalled;
 * nothing is posted before the pass ends, and no NOP follows however long it stays idle. */
static void test_chain_one_doorbell_one_signal(void **state) {
  world *w = *state;
  rr_rail_ep *ep = w->ep[0];
  for (int k = 0; k < 5; k++) assert_int_equal(post_write(w, 0, 1 << 14), RR_OK);
  assert_int_equal(nposts, 0); /* queued: the pass is not over */
  assert_int_equal(flush(w, 0), RR_OK);
  assert_int_equal(ncalls, 1);
  assert_int_equal(nposts, 5);
  for (int k = 0; k < 4; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
  assert_true(posts[4].flags & IBV_SEND_SIGNALED);
  assert_int_equal(ep->cost.n[RR_TEL_COST_DOORBELLS_SEND], 1);
  assert_int_equal(ep->cost.n[RR_TEL_COST_WRS_SEND], 5);
  assert_int_equal(flush(w, 0), RR_OK); /* nothing queued: nothing rung */
  for (int k = 0; k < 3; k++) assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, 1); /* idle cycles: no NOP */
  assert_int_equal(nposts, 5);
  /* A chain rings itself at CHAIN_MAX requests, signalled at its end ... */
  for (int k = 0; k < CHAIN_MAX; k++) assert_int_equal(post_write(w, 0, 64), RR_OK);
  assert_int_equal(ncalls, 2);
  assert_int_equal(nposts, 5 + CHAIN_MAX);
  assert_int_equal(signalled_since(5), 1);
  assert_true(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  /* ... and at CHAIN_BYTES. */
  for (uint32_t k = 0; k < CHAIN_BYTES / (1u << 20); k++) assert_int_equal(post_write(w, 0, 1u << 20), RR_OK);
  assert_int_equal(ncalls, 3);
  assert_int_equal(signalled_since(5 + CHAIN_MAX), 1);
  /* A drain rings the writes ahead of it in the same call; progress rings what is left. */
  int before = nposts;
  assert_int_equal(post_write(w, 0, 64), RR_OK);
  assert_int_equal(ep->ops->post_drain(ep, 3), RR_OK);
  assert_int_equal(ncalls, 4);
  assert_int_equal(nposts, before + 2);
  assert_int_equal(posts[nposts - 1].opcode, IBV_WR_SEND);
  assert_int_equal(signalled_since(before), 1);
  assert_true(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(post_write(w, 0, 64), RR_OK);
  assert_int_equal(post_write(w, 0, 64), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, 5);
  assert_int_equal(signalled_since(before + 2), 1);
  assert_int_equal(ep->cost.n[RR_TEL_COST_DOORBELLS_SEND], 5);
  assert_int_equal(ep->cost.n[RR_TEL_COST_WRS_SEND], (uint64_t)nposts);
}

/* ---- chained posts and signalling over a loopback pair ------------------------------ */

/* Ring writes alone are signalled rarely: one in SIGNAL_RUN when they go inline (their slot
 * is free once posted), and as soon as long ones hold half the send slots. */
static void test_ring_writes_signalled_rarely(void **state) {
  world *w = *state;
  verbs_ep *ep = to_ep(w->ep[0]);
  uint32_t v = 0;
  for (int k = 0; k < SIGNAL_RUN; k++) assert_int_equal(w->ep[0]->ops->post_ctrl(w->ep[0], &v, sizeof v), RR_OK);
  assert_int_equal(ncalls, SIGNAL_RUN); /* each rung at once: it may be what the peer waits for */
  for (int k = 0; k < SIGNAL_RUN - 1; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
  assert_true(posts[SIGNAL_RUN - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(ep->nsend_free, SEND_SLOTS);
  /* Longer than inline: the NIC reads it from its slot until a signal retires it. */
  open_pair(w, "1");
  ep = to_ep(w->ep[0]);
  char big[200] = {0};
  int from = nposts;
  for (int k = 0; k < SEND_SLOTS / 2; k++) assert_int_equal(w->ep[0]->ops->post_ctrl(w->ep[0], big, sizeof big), RR_OK);
  for (int k = from; k < nposts - 1; k++) assert_false(posts[k].flags & (IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  assert_true(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(ep->nsend_free, SEND_SLOTS / 2);
}

/* The send queue's credits stay exact: writes take all but the one kept for a signal, a
 * message then waits, and that last credit carries the signal flushed() asks for behind an
 * unsignalled tail; every write completes once the completions come. */
static int dones(int ep) {
  int n = 0;
  for (int k = 0; k < nlog; k++) n += evlog[k].kind == EV_DONE && evlog[k].ep == ep;
  return n;
}

static void test_sq_credits_exact_when_nearly_full(void **state) {
  world *w = *state;
  rr_rail_ep *ep = w->ep[0];
  verbs_qp *q = &to_ep(ep)->qps[0];
  uint32_t v = 0;
  cq_gate = 0; /* every completion held back */
  int n = 0;
  while (write_imm(w, 0, (uint32_t)n) == RR_OK) n++;
  assert_int_equal(n, VERBS_SQ_DEPTH - 1);
  assert_int_equal(flush(w, 0), RR_OK);
  assert_int_equal(ncalls, (n + CHAIN_MAX - 1) / CHAIN_MAX);
  assert_int_equal(signalled_since(0), ncalls); /* each chain ends signalled */
  assert_int_equal(ep->ops->post_ctrl(ep, &v, sizeof v), RR_AGAIN);
  assert_int_equal(ep->ops->post_drain(ep, 1), RR_AGAIN);
  cq_gate = -1;
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(dones(0), n);
  assert_int_equal(ep->ops->flushed(ep), 1);
  assert_int_equal(progress(w, 1), RR_OK); /* the peer reposts the receives they used */
  /* ... in batches, holding back up to VERBS_RECV_BATCH - 1: post those too, so the
   * peer's queue holds its depth again for the next full send queue (on a NIC, a
   * shortfall is the peer's RNR retries, a delay; the fake has no RNR). */
  verbs_qp *pq = &to_ep(w->ep[1])->qps[0];
  assert_int_equal(verbs_post_recvs(to_ep(w->ep[1]), 0, pq->repost, (int)pq->nrepost), RR_OK);
  pq->nrepost = 0;
  /* Writes up to one short of that, then a ring write alone: unsignalled, it takes the
   * last credit but the one kept free. */
  cq_gate = 0;
  nlog = 0;
  for (int k = 0; k < VERBS_SQ_DEPTH - 2; k++) assert_int_equal(write_imm(w, 0, (uint32_t)k), RR_OK);
  assert_int_equal(flush(w, 0), RR_OK);
  assert_int_equal(ep->ops->post_ctrl(ep, &v, sizeof v), RR_OK);
  assert_false(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(q->sq_tail - q->sq_head, VERBS_SQ_DEPTH - 1);
  assert_int_equal(write_imm(w, 0, 0), RR_AGAIN);
  assert_int_equal(ep->ops->post_ctrl(ep, &v, sizeof v), RR_AGAIN);
  /* flushed() cannot say yes over the unsignalled tail: it asks for a signal, which the
   * next pass posts with the kept credit, filling the queue exactly. */
  assert_int_equal(ep->ops->flushed(ep), 0);
  int calls = ncalls;
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, calls + 1);
  assert_true(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(posts[nposts - 1].opcode, IBV_WR_RDMA_WRITE); /* the credit word: no receive used */
  assert_int_equal(q->sq_tail - q->sq_head, VERBS_SQ_DEPTH);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, calls + 1); /* asked once, signalled once */
  assert_int_equal(write_imm(w, 0, 0), RR_AGAIN);
  cq_gate = -1;
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(dones(0), VERBS_SQ_DEPTH - 2);
  assert_int_equal(q->sq_tail, q->sq_head);
  assert_int_equal(ep->ops->flushed(ep), 1);
  assert_int_equal(to_ep(ep)->nsend_free, SEND_SLOTS);
}

/* The QP fails in the middle of a chain: the writes ahead of the failure went (the peer has
 * them), but no signalled completion covers them, so none is reported done, and neither is
 * any behind it; only the earlier chain, whose signal completed, is. */
static void test_qp_error_mid_chain_reports_nothing_undone(void **state) {
  world *w = *state;
  for (uint32_t k = 0; k < 3; k++) assert_int_equal(write_imm(w, 0, k), RR_OK);
  assert_int_equal(flush(w, 0), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(dones(0), 3);
  fail_wr_at = loopback_wrs + 3; /* the third write of the next chain */
  for (uint32_t k = 10; k < 15; k++) assert_int_equal(write_imm(w, 0, k), RR_OK);
  assert_int_equal(flush(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  int landed = 0;
  for (int k = 0; k < nlog; k++) landed += evlog[k].kind == EV_WRITE && evlog[k].value >= 10;
  assert_int_equal(landed, 2);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(dones(0), 3);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL); /* sticky, and still nothing reported */
  assert_int_equal(dones(0), 3);
  assert_int_equal(w->ep[0]->ops->flushed(w->ep[0]), 1); /* nothing more leaves through it */
}

/* One completion per chain: silence is judged against when it is due. While a chain's
 * signal is outstanding the rail counts as alive up to the time its bytes need at the QP's
 * measured rate (before it has one, SIGNAL_BYTES per quarter of δ: 4 MiB is 4 δ), never
 * later than now, and no further: then only completions count. Completed chains give the
 * rate: never more than their bytes over the time since they were posted. */
static void test_silence_judged_at_measured_rate(void **state) {
  world *w = *state;
  rr_rail_ep *ep = w->ep[0];
  verbs_qp *q = &to_ep(ep)->qps[0];
  static char buf[128u << 10];
  static rr_rail_mr rmr = {.lkey = 7};
  uint64_t delta = rr_params_get()->progress_timeout_ms * 1000000ull;
  cq_gate = 0; /* the chain's completion held back */
  uint64_t t = rr_now_ns();
  for (uint32_t k = 0; k < 32; k++) {
    rr_write_wr wr = {.wr_id = k, .local = buf, .len = sizeof buf, .local_mr = &rmr, .remote_addr = 0x1000,
                      .rkey = 9, .imm = k, .post_ns = t};
    assert_int_equal(ep->ops->post_write(ep, &wr), RR_OK);
  }
  uint64_t before = to_ep(ep)->last_tx_ns;
  assert_true(before <= t);
  uint64_t due = t + 4 * delta;
  uint64_t alive = ep->ops->last_alive_ns(ep, due + delta); /* the floor's due time (floating point) */
  assert_true(alive + 1 >= due && alive <= due + 1);
  assert_int_equal(ep->ops->last_alive_ns(ep, t + delta), t + delta); /* not later than now */
  q->rate = 1.0; /* 1 byte per ns */
  assert_int_equal(ep->ops->last_alive_ns(ep, t + delta), t + (4u << 20));
  /* The chain completes: a completion is life itself, and the rate is measured. */
  q->rate = 0;
  cq_gate = -1;
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(dones(0), 32);
  uint64_t after = rr_now_ns();
  assert_true(q->rate > 0 && q->rate <= (double)(4u << 20) / (double)(q->done_ns - t));
  assert_true(q->done_ns >= t && q->done_ns <= after);
  assert_int_equal(ep->ops->last_alive_ns(ep, after + delta), to_ep(ep)->last_tx_ns);
  /* An unsignalled ring write (a probe) is not waited for: the last word either way
   * counts, and the engine's asking gets the write a signal, whose completion is life. */
  uint32_t v = 0;
  assert_int_equal(ep->ops->post_ctrl(ep, &v, sizeof v), RR_OK);
  assert_false(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  to_ep(ep)->last_rx_ns = after + 5;
  assert_int_equal(ep->ops->last_alive_ns(ep, after + delta), after + 5);
  int calls = ncalls;
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, calls + 1);
  assert_true(posts[nposts - 1].flags & IBV_SEND_SIGNALED);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_true(to_ep(ep)->last_tx_ns > after);
  assert_int_equal(q->sq_tail, q->sq_head);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(ncalls, calls + 1); /* covered: no second signal */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_only_own_messages_inline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chain_one_doorbell_one_signal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ring_writes_signalled_rarely, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_sq_credits_exact_when_nearly_full, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_qp_error_mid_chain_reports_nothing_undone, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_silence_judged_at_measured_rate, setup_pair, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
