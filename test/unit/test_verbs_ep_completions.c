/* Completions on the verbs rail's endpoints, on the fake libibverbs (verbs_ep_fixture.h):
 * arrivals over two QPs delivered in the writer's order, an error completion on either QP
 * failing the endpoint (classified: a rail failure, the peer's protocol matter, or our bug),
 * and a completion that names none of the endpoint's QPs counted, never failing anything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "rr_counters.h"

#include "verbs_ep_fixture.h"

static void release_late(void) {
  late_qpn = 0;
  for (unsigned k = 0; k < nlate; k++) push_wc(late[k]);
  nlate = 0;
}

/* Writes alternate between the QPs; the second QP's write arriving first waits for the
 * first's, and a control message and a drain keep their places among them. */
static void test_two_qps_global_order(void **state) {
  world *w = *state;
  late_qpn = 0x102; /* ep1's first QP: what ep0 sends on its first QP is late */
  assert_int_equal(write_imm(w, 0, 1), RR_OK);    /* ordered request 0: QP 0 (late) */
  assert_int_equal(write_imm(w, 0, 2), RR_OK);    /* 1: QP 1 */
  assert_int_equal(ctrl(w, 0, 0xc0), RR_OK);      /* written on QP 0, behind request 1 */
  assert_int_equal(w->ep[0]->ops->post_drain(w->ep[0], 9), RR_OK); /* 2: QP 0 (late) */
  assert_int_equal(write_imm(w, 0, 3), RR_OK);    /* 3: QP 1 */
  assert_int_equal(w->ep[0]->ops->post_flush(w->ep[0]), RR_OK); /* QP 1's chain: requests 1 and 3 */
  assert_int_equal(nlate, 2); /* requests 0 and 2 went on QP 0 */
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, 0); /* requests 1 and 3 arrived, 0 has not: nothing is due */
  release_late();
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nlog, 5);
  expect(0, 1, EV_WRITE, 1);
  expect(1, 1, EV_WRITE, 2);
  expect(2, 1, EV_CTRL, 0xc0);
  expect(3, 1, EV_DRAIN, 9);
  expect(4, 1, EV_WRITE, 3);
  /* Both QPs' writes complete at the writer (each QP's chain ended signalled). */
  nlog = 0;
  for (int k = 0; k < 3; k++) assert_int_equal(progress(w, 0), RR_OK);
  int done = 0;
  for (int k = 0; k < nlog; k++) done += evlog[k].kind == EV_DONE && evlog[k].ep == 0;
  assert_int_equal(done, 3);
}

/* An error completion on either QP fails the endpoint; an invalidation puts both in error. */
static void test_two_qps_fail_and_invalidate(void **state) {
  world *w = *state;
  push_wc((struct ibv_wc){.wr_id = 0, .status = IBV_WC_RETRY_EXC_ERR, .qp_num = 0x101});
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_OK);
  w->ep[1]->ops->invalidate(w->ep[1]);
  assert_int_equal(write_imm(w, 1, 1), RR_ERR_RAIL);
}

/* A failed work completion: transport errors fail the rail over (RR_ERR_RAIL), the peer
 * refusing what we named is a protocol matter of that rail (RR_ERR_PROTOCOL), and a local
 * protection, length or operation error on our own send is a bug: RR_ERR_INTERNAL, which
 * fails the connection instead of replaying elsewhere. A receive's length error is the
 * peer's oversized SEND. */
static void test_completion_errors_classified(void **state) {
  (void)state;
  static const struct {
    enum ibv_wc_status status;
    int recv;
    rr_status want;
  } cases[] = {
      {IBV_WC_RETRY_EXC_ERR, 0, RR_ERR_RAIL},       {IBV_WC_RNR_RETRY_EXC_ERR, 0, RR_ERR_RAIL},
      {IBV_WC_WR_FLUSH_ERR, 0, RR_ERR_RAIL},        {IBV_WC_REM_ACCESS_ERR, 0, RR_ERR_PROTOCOL},
      {IBV_WC_REM_INV_REQ_ERR, 0, RR_ERR_PROTOCOL}, {IBV_WC_LOC_LEN_ERR, 1, RR_ERR_PROTOCOL},
      {IBV_WC_LOC_PROT_ERR, 0, RR_ERR_INTERNAL},    {IBV_WC_LOC_LEN_ERR, 0, RR_ERR_INTERNAL},
      {IBV_WC_LOC_QP_OP_ERR, 0, RR_ERR_RAIL},   {IBV_WC_MW_BIND_ERR, 0, RR_ERR_INTERNAL},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    void *st = NULL;
    assert_int_equal(setup_pair2(&st), 0);
    world *w = st;
    push_wc((struct ibv_wc){.wr_id = cases[i].recv ? RECV_TAG : 0, .status = cases[i].status, .qp_num = 0x101});
    assert_int_equal(progress(w, 0), cases[i].want);
    assert_int_equal(progress(w, 0), cases[i].want); /* sticky */
    assert_int_equal(progress(w, 1), RR_OK);          /* the other endpoint is untouched */
    teardown(&st);
  }
}

/* A completion on an endpoint's CQ that names none of its QPs is counted (and warned
 * about), never silently dropped, and fails nothing. */
static void test_stray_completion_counted(void **state) {
  world *w = *state;
  uint64_t before = rr_counter_get(RR_CTR_VERBS_STRAY_COMPLETIONS);
  struct ibv_wc wc = {.wr_id = 5, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND, .qp_num = 0x7777};
  push_wc_to(fake_qps[0].send_cq, wc);
  push_wc_to(fake_qps[0].send_cq, wc);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_STRAY_COMPLETIONS), before + 2);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_STRAY_COMPLETIONS), before + 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_two_qps_global_order, setup_pair2, teardown),
      cmocka_unit_test_setup_teardown(test_two_qps_fail_and_invalidate, setup_pair2, teardown),
      cmocka_unit_test(test_completion_errors_classified),
      cmocka_unit_test_setup_teardown(test_stray_completion_counted, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
