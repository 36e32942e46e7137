/* The verbs rail's endpoints on any host: a device whose libibverbs is a table of fakes (its
 * QPs, CQ and async event queue are plain structs, posts are recorded) so that a QP fatal, a
 * CQ error or a fatal device can be raised at will and what is posted can be read back.
 *
 * Async events: the event names the endpoint it concerns and that endpoint alone fails
 * (progress and posts return RR_ERR_RAIL, the rail failure the engine handles), a CQ or
 * device error fails every endpoint of the device and is reported as a fatal device event, a
 * port event still reads as before, and every event is acknowledged (libibverbs' destroy_qp
 * waits for that).
 *
 * Posting: small writes and control messages go inline, large writes do not; a write is
 * signalled every 16 requests or every quarter MiB; unsignalled writes get a signalled NOP
 * behind them once a progress cycle passes with nothing posted, not while the owner is
 * still posting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rail_verbs.h"

/* ---- a fake device ------------------------------------------------------------ */

#define FAKE_QPS 4
#define FAKE_EVENTS 8

static struct ibv_context fake_ctx;
static struct ibv_pd fake_pd;
static struct ibv_cq fake_cq;
static struct ibv_mr fake_mr;
static struct ibv_qp fake_qps[FAKE_QPS];
static int nqps;
static struct ibv_async_event events[FAKE_EVENTS];
static int nevents, next_event, nacked;

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  (void)qp, (void)wr, (void)bad;
  return 0;
}
#define MAX_POSTS 64
static struct {
  enum ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t len;
} posts[MAX_POSTS];
static int nposts;

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  (void)qp, (void)bad;
  if (nposts == MAX_POSTS) return ENOMEM;
  posts[nposts].opcode = wr->opcode;
  posts[nposts].flags = wr->send_flags;
  posts[nposts].len = wr->num_sge ? wr->sg_list[0].length : 0;
  nposts++;
  return 0;
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  (void)cq, (void)n, (void)wc;
  return 0;
}
static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)pd, (void)addr, (void)len, (void)access;
  return &fake_mr;
}
static int f_dereg_mr(struct ibv_mr *mr) {
  (void)mr;
  return 0;
}
static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  (void)pd, (void)attr;
  if (nqps == FAKE_QPS) return NULL;
  struct ibv_qp *q = &fake_qps[nqps];
  memset(q, 0, sizeof *q);
  q->context = &fake_ctx;
  q->qp_num = 0x100u + (uint32_t)nqps++;
  return q;
}
static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  (void)qp, (void)attr, (void)mask;
  return 0;
}
static int f_destroy_qp(struct ibv_qp *qp) {
  (void)qp;
  return 0;
}
static int f_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
  (void)ctx;
  if (next_event == nevents) {
    errno = EAGAIN;
    return -1;
  }
  *ev = events[next_event++];
  return 0;
}
static void f_ack_async_event(struct ibv_async_event *ev) {
  (void)ev;
  nacked++;
}
static const char *f_event_type_str(enum ibv_event_type t) {
  (void)t;
  return "fake event";
}
static const char *f_wc_status_str(enum ibv_wc_status s) {
  (void)s;
  return "fake status";
}

static const rr_ibv_api fake_api = {
    .reg_mr = f_reg_mr,
    .dereg_mr = f_dereg_mr,
    .create_qp = f_create_qp,
    .modify_qp = f_modify_qp,
    .destroy_qp = f_destroy_qp,
    .get_async_event = f_get_async_event,
    .ack_async_event = f_ack_async_event,
    .event_type_str = f_event_type_str,
    .wc_status_str = f_wc_status_str,
};

static const rr_rail_events no_events; /* nothing completes on a fake CQ */

typedef struct world {
  verbs_hca *h;
  rr_rail_ep *ep[2];
} world;

static void qp_event(enum ibv_event_type t, int qp) {
  events[nevents].event_type = t;
  events[nevents].element.qp = &fake_qps[qp];
  nevents++;
}

static void dev_event(enum ibv_event_type t) {
  events[nevents].event_type = t;
  events[nevents].element.port_num = 1;
  nevents++;
}

static rr_status progress(world *w, int i) { return w->ep[i]->ops->progress(w->ep[i]); }

static int setup(void **state) {
  memset(&fake_ctx, 0, sizeof fake_ctx);
  fake_ctx.ops.post_recv = f_post_recv;
  fake_ctx.ops.poll_cq = f_poll_cq;
  fake_ctx.ops.post_send = f_post_send;
  nposts = 0;
  fake_cq.context = &fake_ctx;
  fake_cq.cqe = 1 << 15;
  nqps = nevents = next_event = nacked = 0;
  world *w = calloc(1, sizeof *w);
  w->h = calloc(1, sizeof *w->h);
  verbs_hca *h = w->h;
  pthread_mutex_init(&h->lock, NULL);
  h->api = &fake_api;
  h->base.ops = &rr_verbs_rail_ops;
  h->ctx = &fake_ctx;
  h->pd = &fake_pd;
  h->cq = &fake_cq;
  snprintf(h->port.dev_name, sizeof h->port.dev_name, "fake0");
  h->port.port = 1;
  h->port.link_layer = IBV_LINK_LAYER_ETHERNET;
  h->port.gid_index = 1;
  h->port.active_mtu = IBV_MTU_1024;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &w->ep[i]), RR_OK);
    rr_verbs_addr peer = {.qpn = 0x900u + (uint32_t)i, .psn = 1, .mtu = IBV_MTU_1024,
                          .link_layer = IBV_LINK_LAYER_ETHERNET};
    uint8_t blob[RR_VERBS_ADDR_LEN];
    rr_verbs_addr_encode(&peer, blob);
    rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
    assert_int_equal(rr_verbs_rail_ops.ep_connect(w->ep[i], &a), RR_OK);
    assert_int_equal(progress(w, i), RR_OK);
  }
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  for (int i = 0; i < 2; i++) rr_verbs_rail_ops.destroy(w->ep[i]);
  pthread_mutex_destroy(&w->h->lock);
  free(w->h->eps);
  free(w->h);
  free(w);
  return 0;
}

static rr_rail_dev_event_kind read_events(world *w) {
  rr_rail_dev_event ev;
  return rr_verbs_rail_ops.dev_event(&w->h->base, &ev);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_qp_fatal_fails_its_endpoint_only(void **state) {
  world *w = *state;
  qp_event(IBV_EVENT_QP_FATAL, 1);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE); /* not a device matter */
  assert_int_equal(nacked, 1);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
  /* Posts on the failed endpoint are refused; the other one still takes them. */
  char msg[8] = {0};
  assert_int_equal(w->ep[1]->ops->post_ctrl(w->ep[1], msg, sizeof msg), RR_ERR_RAIL);
  assert_int_equal(progress(w, 0), RR_OK);
}

static void test_qp_request_and_access_errors(void **state) {
  world *w = *state;
  qp_event(IBV_EVENT_QP_REQ_ERR, 0);
  read_events(w);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_OK);
  qp_event(IBV_EVENT_QP_ACCESS_ERR, 1);
  read_events(w);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
  assert_int_equal(nacked, 2);
}

static void test_cq_error_fails_every_endpoint(void **state) {
  world *w = *state;
  events[nevents].event_type = IBV_EVENT_CQ_ERR;
  events[nevents].element.cq = &fake_cq;
  nevents++;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_FATAL);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
}

static void test_device_fatal_fails_every_endpoint(void **state) {
  world *w = *state;
  dev_event(IBV_EVENT_DEVICE_FATAL);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_FATAL);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
}

static void test_port_events_fail_no_endpoint(void **state) {
  world *w = *state;
  dev_event(IBV_EVENT_PORT_ERR);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_PORT_DOWN);
  dev_event(IBV_EVENT_PORT_ACTIVE);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_PORT_UP);
  /* The engine decides what a port going down means for its endpoints. */
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nacked, 2);
}

static void test_event_for_unknown_qp_is_ignored(void **state) {
  world *w = *state;
  static struct ibv_qp stranger = {.qp_num = 0x7777};
  events[nevents].event_type = IBV_EVENT_QP_FATAL;
  events[nevents].element.qp = &stranger; /* a QP of an endpoint already gone */
  nevents++;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(nacked, 1);
}

static rr_status post_write(world *w, int i, size_t len) {
  static char buf[1 << 16];
  static rr_rail_mr rmr = {.lkey = 7};
  rr_write_wr wr = {.wr_id = 1, .local = buf, .len = len, .local_mr = &rmr, .remote_addr = 0x1000, .rkey = 9};
  return w->ep[i]->ops->post_write(w->ep[i], &wr);
}

static void test_small_requests_inline(void **state) {
  world *w = *state;
  char msg[40] = {0};
  assert_int_equal(post_write(w, 0, 16), RR_OK);
  assert_int_equal(post_write(w, 0, 1 << 16), RR_OK);
  assert_int_equal(w->ep[0]->ops->post_ctrl(w->ep[0], msg, sizeof msg), RR_OK);
  assert_int_equal(nposts, 3);
  assert_int_equal(posts[0].opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
  assert_true(posts[0].flags & IBV_SEND_INLINE);
  assert_false(posts[1].flags & IBV_SEND_INLINE);
  assert_int_equal(posts[2].opcode, IBV_WR_SEND);
  assert_true(posts[2].flags & IBV_SEND_INLINE);
  assert_true(posts[2].flags & IBV_SEND_SIGNALED); /* its slot comes back with its completion */
}

static void test_nop_after_an_idle_cycle_only(void **state) {
  world *w = *state;
  /* A burst of unsignalled writes, then progress while the owner still
   * posts: no NOP. */
  for (int k = 0; k < 3; k++) assert_int_equal(post_write(w, 0, 1 << 14), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(post_write(w, 0, 1 << 14), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nposts, 4);
  for (int k = 0; k < 4; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
  /* A cycle with nothing posted: one signalled NOP behind the writes, and
   * no second one while nothing new sits unsignalled. */
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nposts, 5);
  assert_int_equal(posts[4].opcode, IBV_WR_SEND);
  assert_true(posts[4].flags & IBV_SEND_SIGNALED);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nposts, 5);
}

static void test_signalled_by_count_and_by_bytes(void **state) {
  world *w = *state;
  /* Small writes: every 16th is signalled. */
  for (int k = 0; k < 16; k++) assert_int_equal(post_write(w, 0, 64), RR_OK);
  for (int k = 0; k < 15; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
  assert_true(posts[15].flags & IBV_SEND_SIGNALED);
  /* Large ones: no more than a quarter MiB goes unsignalled, so completions
   * (the sender's proof of life) keep coming on a slow path. */
  for (int k = 0; k < 4; k++) assert_int_equal(post_write(w, 1, 1 << 16), RR_OK);
  for (int k = 16; k < 19; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
  assert_true(posts[19].flags & IBV_SEND_SIGNALED);
  for (int k = 0; k < 3; k++) assert_int_equal(post_write(w, 1, 1 << 16), RR_OK);
  for (int k = 20; k < 23; k++) assert_false(posts[k].flags & IBV_SEND_SIGNALED);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_qp_fatal_fails_its_endpoint_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_qp_request_and_access_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cq_error_fails_every_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_fatal_fails_every_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_port_events_fail_no_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_event_for_unknown_qp_is_ignored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_requests_inline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_nop_after_an_idle_cycle_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_signalled_by_count_and_by_bytes, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
