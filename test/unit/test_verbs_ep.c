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
 * Posting: control messages go inline, a write's payload never does (it may be GPU memory,
 * which the CPU must not read); the writes of a pass wait on their QP's chain and go out as
 * one call (one doorbell) whose last request alone is signalled, at post_flush, at the
 * chain's caps, before any other request on the QP, or in progress; ring writes alone are
 * signalled once in SIGNAL_RUN or when long ones hold half the send slots; no NOP ever; the
 * send queue's credits stay exact up to the one kept for a signal; a QP failing mid-chain
 * reports no write of that chain done.
 *
 * Control ring (a loopback fake: two endpoints connected to each other, RDMA WRITEs copied
 * into the peer's memory at once, writes with immediate and SENDs completed on the peer's
 * receive queue through a CQ the test can hold back): control messages travel both ways as
 * RDMA WRITEs; one posted behind a write (or a drain) is held until that write's completion is
 * delivered, even though it is in memory first; credits stop a writer at a full ring and come
 * back when the reader consumes; a forged slot (a bad length, stamp or count) fails the
 * endpoint it was written to and no other. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "rail_verbs.h"
#include "verbs_ep.h" /* RECV_TAG: a receive completion's wr_id */
#include "rr_counters.h"
#include "rr_health_bus.h"
#include "rr_clock.h"
#include "rr_params.h"
#include "verbs_ring.h"

/* ---- a fake device ------------------------------------------------------------ */

#define FAKE_QPS 4
#define FAKE_EVENTS 8

static struct ibv_context fake_ctx;
static struct ibv_pd fake_pd;
/* Each endpoint's own CQ: one of these, named by its index. */
#define FAKE_CQS 8
static struct ibv_cq fake_cqs[FAKE_CQS];
static int ncqs;
static struct ibv_mr fake_mr;
static struct ibv_qp fake_qps[FAKE_QPS];
static int nqps;
static struct ibv_async_event events[FAKE_EVENTS];
static int nevents, next_event, nacked;

/* Loopback: each QP's posted receives (a FIFO) and a CQ whose entries the test may hold. */
#define FAKE_RQ 1024
#define FAKE_CQ 4096
static int loopback;
static struct {
  uint32_t dest_qpn;
  uint64_t rq_id[FAKE_RQ];
  uint64_t rq_addr[FAKE_RQ];
  unsigned rq_head, rq_tail;
} lb[FAKE_QPS];
/* Every CQ's completions in one list, each with the CQ it is on (poll_cq takes only its
 * own), in the order they were made. */
static struct ibv_wc cq[FAKE_CQ];
static struct ibv_cq *cq_of[FAKE_CQ]; /* NULL once polled */
static unsigned cq_head, cq_tail;
static int cq_gate = -1; /* completions poll_cq may still return; -1: no limit */
/* Completions of this QP number wait aside (its packets are late) until released. */
static uint32_t late_qpn;
static struct ibv_wc late[FAKE_CQ];
static unsigned nlate;

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  (void)bad;
  int q = (int)(qp - fake_qps);
  for (; wr; wr = wr->next) { /* a chain: one call, every request of it */
    if (lb[q].rq_tail - lb[q].rq_head == FAKE_RQ) return ENOMEM;
    lb[q].rq_id[lb[q].rq_tail % FAKE_RQ] = wr->wr_id;
    lb[q].rq_addr[lb[q].rq_tail % FAKE_RQ] = wr->sg_list[0].addr;
    lb[q].rq_tail++;
  }
  return 0;
}

static void push_wc_to(struct ibv_cq *c, struct ibv_wc wc) {
  assert_true(cq_tail - cq_head < FAKE_CQ);
  cq_of[cq_tail % FAKE_CQ] = c;
  cq[cq_tail++ % FAKE_CQ] = wc;
}

/* A completion goes to the CQ of the QP it names. */
static void push_wc(struct ibv_wc wc) {
  if (late_qpn && wc.qp_num == late_qpn) {
    assert_true(nlate < FAKE_CQ);
    late[nlate++] = wc;
    return;
  }
  int q = (int)(wc.qp_num - 0x100u);
  assert_true(q >= 0 && q < nqps);
  push_wc_to(fake_qps[q].send_cq, wc);
}

/* A request the NIC fails, counted from 1 over every request the loopback carries (0:
 * none): it completes with a transport error, and every request behind it in its call with a
 * flush error, signalled or not, as a QP in error completes what it holds. */
static unsigned fail_wr_at, loopback_wrs;

/* What the peer's NIC does with a request, at once. */
static int loopback_send(struct ibv_qp *qp, struct ibv_send_wr *wr) {
  int q = (int)(qp - fake_qps), d = (int)(lb[q].dest_qpn - 0x100u);
  if (d < 0 || d >= nqps) return EINVAL;
  if (fail_wr_at && ++loopback_wrs >= fail_wr_at) {
    push_wc((struct ibv_wc){.wr_id = wr->wr_id, .qp_num = qp->qp_num, .opcode = IBV_WC_RDMA_WRITE,
                            .status = loopback_wrs == fail_wr_at ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR});
    return 0;
  }
  uint32_t len = wr->num_sge ? wr->sg_list[0].length : 0;
  const void *src = wr->num_sge ? (const void *)(uintptr_t)wr->sg_list[0].addr : NULL;
  if (wr->opcode == IBV_WR_RDMA_WRITE && len) memcpy((void *)(uintptr_t)wr->wr.rdma.remote_addr, src, len);
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_SEND) {
    if (lb[d].rq_head == lb[d].rq_tail) return ENOMEM; /* the fake never runs out: a test bug */
    unsigned r = lb[d].rq_head++ % FAKE_RQ;
    struct ibv_wc wc = {.wr_id = lb[d].rq_id[r], .status = IBV_WC_SUCCESS, .byte_len = len, .qp_num = fake_qps[d].qp_num};
    if (wr->opcode == IBV_WR_SEND) {
      wc.opcode = IBV_WC_RECV;
      memcpy((void *)(uintptr_t)lb[d].rq_addr[r], src, len);
    } else {
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.imm_data = wr->imm_data;
      wc.wc_flags = IBV_WC_WITH_IMM;
    }
    push_wc(wc);
  }
  if (wr->send_flags & IBV_SEND_SIGNALED)
    push_wc((struct ibv_wc){.wr_id = wr->wr_id, .status = IBV_WC_SUCCESS, .qp_num = qp->qp_num,
                            .opcode = wr->opcode == IBV_WR_SEND ? IBV_WC_SEND : IBV_WC_RDMA_WRITE});
  return 0;
}
/* Every request posted, in order, with the call (the doorbell) that carried it. */
#define MAX_POSTS 1024
static struct {
  enum ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t len;
  int call;
} posts[MAX_POSTS];
static int nposts, ncalls;

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  ncalls++;
  for (; wr; wr = wr->next) {
    if (nposts == MAX_POSTS) {
      *bad = wr;
      return ENOMEM;
    }
    posts[nposts].opcode = wr->opcode;
    posts[nposts].flags = wr->send_flags;
    posts[nposts].len = wr->num_sge ? wr->sg_list[0].length : 0;
    posts[nposts].call = ncalls;
    nposts++;
    int rc = loopback ? loopback_send(qp, wr) : 0;
    if (rc) {
      *bad = wr;
      return rc;
    }
  }
  return 0;
}

static int f_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc) {
  int k = 0;
  for (unsigned i = cq_head; i != cq_tail && k < n && cq_gate != 0; i++)
    if (cq_of[i % FAKE_CQ] == c) {
      wc[k++] = cq[i % FAKE_CQ];
      cq_of[i % FAKE_CQ] = NULL;
      if (cq_gate > 0) cq_gate--;
    }
  while (cq_head != cq_tail && !cq_of[cq_head % FAKE_CQ]) cq_head++;
  return k;
}
static struct ibv_cq *f_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *ch,
                                  int vec) {
  (void)ch, (void)vec;
  if (ncqs == FAKE_CQS) return NULL;
  struct ibv_cq *c = &fake_cqs[ncqs++];
  memset(c, 0, sizeof *c);
  c->context = ctx;
  c->cqe = cqe;
  c->cq_context = cq_context;
  return c;
}
static int f_destroy_cq(struct ibv_cq *c) {
  (void)c;
  return 0;
}
/* NCCL's buffers of the registration tests: each ibv_reg_mr of one gets an MR of its own
 * (lkey = the call's number), and the first may be made to block until released. The
 * endpoints' own buffers get fake_mr. */
static char user_buf[3][4096];
static struct ibv_mr user_mrs[8];
static int user_regs, user_deregs;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
static int reg_block_first, reg_inside, reg_release;

static int is_user_buf(const void *p) {
  return (const char *)p >= user_buf[0] && (const char *)p < user_buf[0] + sizeof user_buf;
}
static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)pd, (void)len, (void)access;
  if (!is_user_buf(addr)) return &fake_mr;
  pthread_mutex_lock(&reg_mu);
  int nth = user_regs++;
  if (nth == 0 && reg_block_first) {
    reg_inside = 1;
    pthread_cond_broadcast(&reg_cv);
    while (!reg_release) pthread_cond_wait(&reg_cv, &reg_mu);
    reg_inside = 0;
  }
  pthread_mutex_unlock(&reg_mu);
  struct ibv_mr *m = &user_mrs[nth];
  memset(m, 0, sizeof *m);
  m->addr = addr;
  m->lkey = m->rkey = (uint32_t)nth + 1;
  return m;
}
static int f_dereg_mr(struct ibv_mr *mr) {
  if (mr != &fake_mr) {
    pthread_mutex_lock(&reg_mu);
    user_deregs++;
    pthread_mutex_unlock(&reg_mu);
  }
  return 0;
}
static struct ibv_qp_cap last_qp_cap; /* what the last QP was created with */
static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  (void)pd;
  if (nqps == FAKE_QPS) return NULL;
  last_qp_cap = attr->cap;
  struct ibv_qp *q = &fake_qps[nqps];
  memset(q, 0, sizeof *q);
  q->context = &fake_ctx;
  q->qp_context = attr->qp_context;
  q->send_cq = attr->send_cq;
  q->recv_cq = attr->recv_cq;
  q->qp_num = 0x100u + (uint32_t)nqps++;
  return q;
}
static struct ibv_ah_attr last_av; /* the address vector of the last QP moved to RTR */
static struct ibv_ah_attr rtr_av[FAKE_QPS]; /* ... and of each QP */
static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  if (mask & IBV_QP_DEST_QPN) lb[qp - fake_qps].dest_qpn = attr->dest_qp_num;
  if (mask & IBV_QP_AV) last_av = rtr_av[qp - fake_qps] = attr->ah_attr;
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

/* The device as libibverbs lists it, for a reset (verbs_reset.c): gone while device_listed
 * is 0, back (opened as fake_ctx2, a new context) when 1, with the port in fake_port_state. */
static struct ibv_context fake_ctx2;
static struct ibv_pd fake_pd2;
static struct ibv_device *fake_dev_list[2] = {(struct ibv_device *)&fake_ctx2, NULL};
static int device_listed, fake_port_state = IBV_PORT_ACTIVE;
static int ctx_opens, ctx_closes, pd_allocs, pd_deallocs;
static struct ibv_device **f_get_device_list(int *n) {
  *n = device_listed;
  return fake_dev_list;
}
static void f_free_device_list(struct ibv_device **l) { (void)l; }
static const char *f_get_device_name(struct ibv_device *d) {
  (void)d;
  return "fake0";
}
static struct ibv_context *f_open_device(struct ibv_device *d) {
  (void)d;
  ctx_opens++;
  return &fake_ctx2;
}
static int f_close_device(struct ibv_context *c) {
  (void)c;
  ctx_closes++;
  return 0;
}
static struct ibv_pd *f_alloc_pd(struct ibv_context *c) {
  (void)c;
  pd_allocs++;
  return &fake_pd2;
}
static int f_dealloc_pd(struct ibv_pd *pd) {
  (void)pd;
  pd_deallocs++;
  return 0;
}

/* The port's GID table as libibverbs gives it (no sysfs tree names a device "fake0", so
 * the GID is chosen from this table, as in a container with a partial /sys). */
#define FAKE_GIDS 4
static union ibv_gid gids[FAKE_GIDS];
static int fake_link_layer = IBV_LINK_LAYER_ETHERNET;
static int f_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
  (void)ctx;
  if (port != 1 || index < 0 || index >= FAKE_GIDS) return EINVAL;
  *gid = gids[index];
  return 0;
}
static int f_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr) {
  (void)ctx;
  if (port != 1) return EINVAL;
  /* rr_ibv_query_port hands over a whole struct ibv_port_attr. */
  struct ibv_port_attr *pa = (struct ibv_port_attr *)(void *)attr;
  pa->state = (enum ibv_port_state)fake_port_state;
  pa->link_layer = (uint8_t)fake_link_layer;
  pa->gid_tbl_len = FAKE_GIDS;
  return 0;
}

static const rr_ibv_api fake_api = {
    .get_device_list = f_get_device_list,
    .free_device_list = f_free_device_list,
    .get_device_name = f_get_device_name,
    .open_device = f_open_device,
    .close_device = f_close_device,
    .alloc_pd = f_alloc_pd,
    .dealloc_pd = f_dealloc_pd,
    .query_port_compat = f_query_port,
    .query_gid = f_query_gid,
    .reg_mr = f_reg_mr,
    .dereg_mr = f_dereg_mr,
    .create_cq = f_create_cq,
    .destroy_cq = f_destroy_cq,
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

static void fake_reset(void) {
  memset(&fake_ctx, 0, sizeof fake_ctx);
  memset(lb, 0, sizeof lb);
  cq_head = cq_tail = 0;
  memset(cq_of, 0, sizeof cq_of);
  ncqs = 0;
  cq_gate = -1;
  late_qpn = 0, nlate = 0;
  loopback = 0;
  nposts = ncalls = 0;
  fail_wr_at = loopback_wrs = 0;
}

static int setup(void **state) {
  fake_reset();
  fake_ctx.ops.post_recv = f_post_recv;
  fake_ctx.ops.poll_cq = f_poll_cq;
  fake_ctx.ops.post_send = f_post_send;
  nposts = 0;
  nqps = nevents = next_event = nacked = 0;
  world *w = calloc(1, sizeof *w);
  w->h = calloc(1, sizeof *w->h);
  verbs_hca *h = w->h;
  pthread_mutex_init(&h->lock, NULL);
  pthread_mutex_init(&h->flush_lock, NULL);
  pthread_rwlock_init(&h->gen_lock, NULL);
  h->api = &fake_api;
  h->base.ops = &rr_verbs_rail_ops;
  h->ctx = &fake_ctx;
  h->pd = &fake_pd;
  assert_int_equal(verbs_mr_cache_create(&h->mrs), RR_OK);
  snprintf(h->port.dev_name, sizeof h->port.dev_name, "fake0");
  h->port.port = 1;
  h->port.link_layer = IBV_LINK_LAYER_ETHERNET;
  h->port.gid_index = 1;
  h->port.active_mtu = IBV_MTU_1024;
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &w->ep[i]), RR_OK);
    rr_verbs_addr peer = {.qpn = {0x900u + (uint32_t)i}, .nqps = 1, .psn = 1, .mtu = IBV_MTU_1024,
                          .link_layer = IBV_LINK_LAYER_ETHERNET, .ring_slots = VERBS_RING_SLOTS};
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
  assert_null(w->h->eps); /* every endpoint detached itself */
  verbs_mr_cache_destroy(w->h->mrs, &fake_api);
  pthread_mutex_destroy(&w->h->lock);
  pthread_mutex_destroy(&w->h->flush_lock);
  pthread_rwlock_destroy(&w->h->gen_lock);
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

/* Each endpoint has its own CQ: one in error (an overrun, which cannot happen as they are
 * sized, or a provider's failure) fails that endpoint alone, and the device stays. */
static void test_cq_error_fails_its_endpoint_only(void **state) {
  world *w = *state;
  events[nevents].event_type = IBV_EVENT_CQ_ERR;
  events[nevents].element.cq = fake_qps[1].send_cq;
  nevents++;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
  assert_ptr_not_equal(fake_qps[0].send_cq, fake_qps[1].send_cq);
  assert_int_equal(nacked, 1);
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

static rr_status flush(world *w, int i) { return w->ep[i]->ops->post_flush(w->ep[i]); }

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

static int one_under_pow2(uint32_t n) { return ((n + 1) & n) == 0; }

/* Memory per endpoint (docs/memory_per_connection.md): what the endpoints
 * opened asked for is what the accounting says, the queues keep the
 * protocol's invariants, and the totals stay within budgets that put a
 * connection with a warm backup (two endpoints per side) within 2x NCCL's
 * IB transport (measured on rxe: 156-160 KiB registered, 630-650 KiB
 * resident per side, ~430 KiB of it its QP and CQ). A change that breaks a
 * budget must argue with it here. */
static void test_endpoint_footprint_within_budget(void **state) {
  world *w = *state;
  verbs_ep_footprint f;
  verbs_ep_footprint_of(1, &f);
  assert_int_equal(last_qp_cap.max_send_wr, f.sq_depth);
  assert_int_equal(last_qp_cap.max_recv_wr, f.rq_depth);
  assert_int_equal(last_qp_cap.max_inline_data, f.max_inline);
  assert_int_equal(to_ep(w->ep[1])->cq->cqe, (int)f.cq_depth);
  /* Every queue full fits the CQ; every request that consumes a receive
   * of ours fits our receive queue while it is in the peer's send queue. */
  assert_true(f.cq_depth >= f.sq_depth + f.rq_depth);
  assert_true(f.rq_depth >= f.sq_depth);
  /* Providers round n + 1 up to a power of two: nothing asked for is wasted. */
  assert_true(one_under_pow2(f.sq_depth) && one_under_pow2(f.rq_depth));
  assert_true(one_under_pow2(f.cq_depth + 1) || one_under_pow2(f.cq_depth));
  /* The ring holds what our send slots can have in flight towards it. */
  assert_true(SEND_SLOTS <= VERBS_RING_SLOTS);
  /* An ack and a probe go inline, with their ring header and trailer; no more than fits
   * rxe's 256 B send WQE slot with its 208 B header (64 B of inline made every slot 512 B). */
  assert_true(f.max_inline >= VERBS_RING_HDR + 12 + 4);
  assert_true(f.max_inline <= 256 - 208);
  assert_true(f.registered <= 64u << 10);
  assert_true(f.host <= 16u << 10);
  verbs_ep_footprint f2;
  verbs_ep_footprint_of(2, &f2); /* a QP more costs its queues, not another ring */
  assert_true(f2.registered - f.registered <= 4096 && f2.host - f.host == sizeof(verbs_qp));
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

/* ---- the control ring, over a loopback pair ------------------------------------------ */

/* What the engines of the pair were told, in order. */
enum { EV_DONE = 1, EV_WRITE, EV_CTRL, EV_DRAIN };
#define MAX_LOG 1024
static struct {
  int ep, kind;
  uint32_t value;          /* imm, epoch, or the first 4 bytes of a control message */
  uint32_t len;            /* a write's length as the arrival reports it */
} evlog[MAX_LOG];
static int nlog;
static world *pair_world;

static int ep_index(rr_rail_ep *ep) { return ep == pair_world->ep[0] ? 0 : 1; }
static void log_ev(rr_rail_ep *ep, int kind, uint32_t v) {
  assert_true(nlog < MAX_LOG);
  evlog[nlog].ep = ep_index(ep), evlog[nlog].kind = kind, evlog[nlog].value = v;
  nlog++;
}
static rr_status rec_done(rr_rail_ep *ep, uint64_t wr_id) {
  log_ev(ep, EV_DONE, (uint32_t)wr_id);
  return RR_OK;
}
static rr_status rec_write(rr_rail_ep *ep, const rr_write_hdr *h) {
  log_ev(ep, EV_WRITE, h->imm);
  evlog[nlog - 1].len = h->len;
  return RR_OK;
}
static rr_status rec_ctrl(rr_rail_ep *ep, const void *msg, uint32_t len) {
  uint32_t v = 0;
  memcpy(&v, msg, len < 4 ? len : 4);
  log_ev(ep, EV_CTRL, v);
  return RR_OK;
}
static rr_status rec_drain(rr_rail_ep *ep, uint32_t epoch) {
  log_ev(ep, EV_DRAIN, epoch);
  return RR_OK;
}
static const rr_rail_events rec_events = {.on_write_done = rec_done, .on_write_recv = rec_write,
                                          .on_ctrl = rec_ctrl, .on_drain = rec_drain};

static void set_qps(const char *n) {
  setenv("RERAIL_IB_QPS_PER_RAIL", n, 1);
  rr_params_reload();
}

/* The world's endpoints replaced by two of one fake device, opened with
 * `qps` QPs each and connected to each other (connect reads the knob again:
 * 1 there checks that both ends keep what they agreed at open). */
static void open_pair(world *w, const char *qps) {
  for (int i = 0; i < 2; i++) rr_verbs_rail_ops.destroy(w->ep[i]);
  fake_reset();
  fake_ctx.ops.post_recv = f_post_recv;
  fake_ctx.ops.poll_cq = f_poll_cq;
  fake_ctx.ops.post_send = f_post_send;
  loopback = 1;
  nqps = 0, nlog = 0;
  pair_world = w;
  set_qps(qps);
  uint8_t blob[2][RR_RAIL_ADDR_MAX];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rr_verbs_rail_ops.ep_open(&w->h->base, &rec_events, NULL, &w->ep[i]), RR_OK);
    uint32_t len = 0;
    assert_int_equal(rr_verbs_rail_ops.ep_addr(w->ep[i], blob[i], &len), RR_OK);
    assert_int_equal(len, RR_VERBS_ADDR_LEN);
  }
  set_qps("1");
  for (int i = 0; i < 2; i++) {
    rr_rail_connect_args a = {.peer_addr = blob[!i], .peer_addr_len = RR_VERBS_ADDR_LEN};
    assert_int_equal(rr_verbs_rail_ops.ep_connect(w->ep[i], &a), RR_OK);
  }
}

/* Two endpoints of one fake device, each connected to the other. */
static int setup_pair(void **state) {
  set_qps("1");
  int rc = setup(state);
  open_pair(*state, "1");
  return rc;
}

static rr_status ctrl(world *w, int i, uint32_t v) { return w->ep[i]->ops->post_ctrl(w->ep[i], &v, sizeof v); }

static void expect(int k, int ep, int kind, uint32_t value) {
  assert_true(k < nlog);
  assert_int_equal(evlog[k].ep, ep);
  assert_int_equal(evlog[k].kind, kind);
  assert_int_equal(evlog[k].value, value);
}

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

/* The same with two QPs per endpoint (ep0: QPs 0x100, 0x101; ep1: 0x102, 0x103). */
static int setup_pair2(void **state) {
  set_qps("1");
  int rc = setup(state);
  uint64_t eps = rr_counter_get(RR_CTR_VERBS_ENDPOINTS_CONNECTED), qps = rr_counter_get(RR_CTR_VERBS_QPS_CONNECTED);
  open_pair(*state, "2");
  assert_int_equal(nqps, 4);
  /* The counters the lab decides on (and an operator reads) say the same: two endpoints, two QPs each. */
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_ENDPOINTS_CONNECTED) - eps, 2);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_QPS_CONNECTED) - qps, 4);
  return rc;
}

static rr_status write_imm(world *w, int i, uint32_t imm) {
  static char buf[64];
  static rr_rail_mr rmr = {.lkey = 7};
  rr_write_wr wr = {.wr_id = imm, .local = buf, .len = sizeof buf, .local_mr = &rmr, .remote_addr = 0x1000,
                    .rkey = 9, .imm = imm};
  return w->ep[i]->ops->post_write(w->ep[i], &wr);
}

static void release_late(void) {
  late_qpn = 0;
  for (unsigned k = 0; k < nlate; k++) push_wc(late[k]);
  nlate = 0;
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

/* ---- the host's work per message (rr_rail_ep.cost) ----------------------------------- */

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

/* An error completion on either QP fails the endpoint; a fence puts both in error. */
static void test_two_qps_fail_and_fence(void **state) {
  world *w = *state;
  push_wc((struct ibv_wc){.wr_id = 0, .status = IBV_WC_RETRY_EXC_ERR, .qp_num = 0x101});
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_OK);
  w->ep[1]->ops->fence(w->ep[1]);
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

/* The fabric's QoS reaches every QP's address vector: RERAIL_IB_TC / RERAIL_IB_SL, else
 * NCCL_IB_TC / NCCL_IB_SL, else 0. */
static uint8_t connect_one(world *w, uint8_t *sl) {
  rr_rail_ep *ep;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&w->h->base, &no_events, NULL, &ep), RR_OK);
  rr_verbs_addr peer = {.qpn = {0x901}, .nqps = 1, .psn = 1, .mtu = IBV_MTU_1024,
                        .link_layer = IBV_LINK_LAYER_ETHERNET, .ring_slots = VERBS_RING_SLOTS};
  uint8_t blob[RR_VERBS_ADDR_LEN];
  rr_verbs_addr_encode(&peer, blob);
  rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
  memset(&last_av, 0xee, sizeof last_av);
  assert_int_equal(rr_verbs_rail_ops.ep_connect(ep, &a), RR_OK);
  rr_verbs_rail_ops.destroy(ep);
  assert_int_equal(last_av.is_global, 1);
  *sl = last_av.sl;
  return last_av.grh.traffic_class;
}

static void test_traffic_class_and_sl(void **state) {
  world *w = *state;
  uint8_t sl;
  unsetenv("RERAIL_IB_TC"), unsetenv("RERAIL_IB_SL");
  setenv("NCCL_IB_TC", "106", 1), setenv("NCCL_IB_SL", "3", 1);
  rr_params_reload();
  assert_int_equal(connect_one(w, &sl), 106); /* DSCP 26 on RoCE */
  assert_int_equal(sl, 3);
  /* Ours win over NCCL's; out of range is unset (the device's default, 0). */
  setenv("RERAIL_IB_TC", "0x20", 1), setenv("RERAIL_IB_SL", "5", 1);
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_tc, 0x20);
  assert_int_equal(rr_params_get()->ib_sl, 5);
  setenv("RERAIL_IB_TC", "256", 1), setenv("RERAIL_IB_SL", "16", 1);
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_tc, -1);
  assert_int_equal(rr_params_get()->ib_sl, -1);
  unsetenv("RERAIL_IB_TC"), unsetenv("RERAIL_IB_SL"), unsetenv("NCCL_IB_TC"), unsetenv("NCCL_IB_SL");
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_tc, -1);
}

/* Adaptive routing's knobs: NCCL's variables are honoured, ours win, and a
 * bad value falls back to the default (NCCL's 8192; the port's rule). */
static void test_adaptive_routing_params(void **state) {
  (void)state;
  unsetenv("RERAIL_IB_AR_THRESHOLD"), unsetenv("RERAIL_IB_ADAPTIVE_ROUTING");
  unsetenv("NCCL_IB_AR_THRESHOLD"), unsetenv("NCCL_IB_ADAPTIVE_ROUTING");
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_ar_threshold, 8192);
  assert_int_equal(rr_params_get()->ib_adaptive_routing, -1);
  setenv("NCCL_IB_AR_THRESHOLD", "65536", 1), setenv("NCCL_IB_ADAPTIVE_ROUTING", "1", 1);
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_ar_threshold, 65536);
  assert_int_equal(rr_params_get()->ib_adaptive_routing, 1);
  setenv("RERAIL_IB_AR_THRESHOLD", "0", 1), setenv("RERAIL_IB_ADAPTIVE_ROUTING", "0", 1);
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_ar_threshold, 0);
  assert_int_equal(rr_params_get()->ib_adaptive_routing, 0);
  setenv("RERAIL_IB_AR_THRESHOLD", "8k", 1), setenv("RERAIL_IB_ADAPTIVE_ROUTING", "2", 1);
  rr_params_reload();
  assert_int_equal(rr_params_get()->ib_ar_threshold, 8192);
  assert_int_equal(rr_params_get()->ib_adaptive_routing, -1);
  unsetenv("RERAIL_IB_AR_THRESHOLD"), unsetenv("RERAIL_IB_ADAPTIVE_ROUTING");
  unsetenv("NCCL_IB_AR_THRESHOLD"), unsetenv("NCCL_IB_ADAPTIVE_ROUTING");
  rr_params_reload();
}

/* InfiniBand ports (LIDs, no netdev, no IP) as the fake HCA presents them:
 * two ends on two HCAs exchange their address blobs and reach RTR with the
 * attributes NCCL's ncclIbQpRtr uses: the peer's LID, SL from RERAIL_IB_SL,
 * no GRH within a subnet; a GRH and the peer's FLID across subnets. */
static verbs_hca *ib_hca(uint16_t lid, uint16_t subnet, uint16_t flid, uint8_t guid_tail) {
  verbs_hca *h = calloc(1, sizeof *h);
  pthread_mutex_init(&h->lock, NULL);
  pthread_rwlock_init(&h->gen_lock, NULL);
  h->api = &fake_api;
  h->base.ops = &rr_verbs_rail_ops;
  h->ctx = &fake_ctx;
  h->pd = &fake_pd;
  pthread_mutex_init(&h->flush_lock, NULL);
  assert_int_equal(verbs_mr_cache_create(&h->mrs), RR_OK);
  snprintf(h->port.dev_name, sizeof h->port.dev_name, "mlx5_%u", guid_tail);
  h->port.port = 1;
  h->port.link_layer = IBV_LINK_LAYER_INFINIBAND;
  h->port.netdev[0] = '\0';
  h->port.lid = lid;
  h->port.gid_index = 0;
  h->port.active_mtu = IBV_MTU_4096;
  uint8_t *g = h->port.gid.raw; /* fe80:0000:FLID:SUBNET: ... GUID */
  g[0] = 0xfe, g[1] = 0x80, g[4] = (uint8_t)(flid >> 8), g[5] = (uint8_t)flid;
  g[6] = (uint8_t)(subnet >> 8), g[7] = (uint8_t)subnet, g[15] = guid_tail;
  return h;
}

static void ib_hca_free(verbs_hca *h) {
  assert_null(h->eps); /* every endpoint detached itself */
  verbs_mr_cache_destroy(h->mrs, &fake_api);
  pthread_mutex_destroy(&h->flush_lock);
  pthread_mutex_destroy(&h->lock);
  free(h);
}

/* Connect an endpoint on a to one on b, each with the other's blob; the
 * address vectors each side moved its QP to RTR with. */
static void ib_connect(verbs_hca *a, verbs_hca *b, struct ibv_ah_attr av[2]) {
  rr_rail_ep *ep[2];
  verbs_hca *h[2] = {a, b};
  uint8_t blob[2][RR_RAIL_ADDR_MAX];
  uint32_t len[2];
  for (int i = 0; i < 2; i++) {
    assert_int_equal(rr_verbs_rail_ops.ep_open(&h[i]->base, &no_events, NULL, &ep[i]), RR_OK);
    len[i] = sizeof blob[i];
    assert_int_equal(rr_verbs_rail_ops.ep_addr(ep[i], blob[i], &len[i]), RR_OK);
  }
  for (int i = 0; i < 2; i++) {
    rr_rail_connect_args args = {.peer_addr = blob[1 - i], .peer_addr_len = len[1 - i]};
    memset(&last_av, 0xee, sizeof last_av);
    assert_int_equal(rr_verbs_rail_ops.ep_connect(ep[i], &args), RR_OK);
    av[i] = last_av;
  }
  for (int i = 0; i < 2; i++) rr_verbs_rail_ops.destroy(ep[i]);
}

static void test_infiniband_ports_connect_by_lid(void **state) {
  (void)state;
  fake_reset();
  fake_ctx.ops.post_recv = f_post_recv;
  fake_ctx.ops.poll_cq = f_poll_cq;
  fake_ctx.ops.post_send = f_post_send;
  nqps = 0;
  setenv("RERAIL_IB_SL", "4", 1);
  rr_params_reload();
  verbs_hca *a = ib_hca(0x11, 0x0001, 0, 1), *b = ib_hca(0x22, 0x0001, 0, 2);
  struct ibv_ah_attr av[2];
  ib_connect(a, b, av);
  assert_int_equal(av[0].dlid, 0x22);
  assert_int_equal(av[1].dlid, 0x11);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(av[i].is_global, 0); /* one subnet: routed by LID, no GRH */
    assert_int_equal(av[i].sl, 4);
    assert_int_equal(av[i].port_num, 1);
  }
  ib_hca_free(b);
  /* The peer on another subnet, behind a router: a GRH to its GID, through its FLID. */
  b = ib_hca(0x22, 0x0002, 0x0305, 2);
  ib_connect(a, b, av);
  assert_int_equal(av[0].is_global, 1);
  assert_int_equal(av[0].dlid, 0x0305);
  assert_memory_equal(av[0].grh.dgid.raw, b->port.gid.raw, 16);
  assert_int_equal(av[0].grh.sgid_index, 0);
  assert_int_equal(av[1].is_global, 1);
  assert_int_equal(av[1].dlid, 0x11); /* our FLID is 0: the LID it is */
  ib_hca_free(b);
  ib_hca_free(a);
  unsetenv("RERAIL_IB_SL");
  rr_params_reload();
}

/* NCCL's per-communicator trafficClass (rr_rail_ep.traffic_class, set by the owner between
 * open and connect) on every QP of the endpoint, by NCCL's net_ib rule: RERAIL_IB_TC (else
 * NCCL_IB_TC), else the class, else 0; the same for the SL, the class in its 4 bits. */
static void connect_with_class(world *w, int cls, uint8_t *tc, uint8_t *sl) {
  rr_rail_ep *ep;
  int first = nqps;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&w->h->base, &no_events, NULL, &ep), RR_OK);
  assert_int_equal(ep->traffic_class, -1); /* none until the owner says */
  ep->traffic_class = cls;
  int n = verbs_ep_nqps((verbs_ep *)ep);
  rr_verbs_addr peer = {.qpn = {0x901, 0x902}, .nqps = (uint8_t)n, .psn = 1, .mtu = IBV_MTU_1024,
                        .link_layer = IBV_LINK_LAYER_ETHERNET, .ring_slots = VERBS_RING_SLOTS};
  uint8_t blob[RR_VERBS_ADDR_LEN];
  rr_verbs_addr_encode(&peer, blob);
  rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
  memset(rtr_av, 0xee, sizeof rtr_av);
  assert_int_equal(rr_verbs_rail_ops.ep_connect(ep, &a), RR_OK);
  rr_verbs_rail_ops.destroy(ep);
  nqps = first; /* the fake's QPs are reused: four per test are all it has */
  memset(&lb[first], 0, (size_t)n * sizeof lb[0]);
  /* Every QP alike: the first one's values stand for all. */
  for (int k = 0; k < n; k++) {
    assert_int_equal(rtr_av[first + k].is_global, 1);
    assert_int_equal(rtr_av[first + k].grh.traffic_class, rtr_av[first].grh.traffic_class);
    assert_int_equal(rtr_av[first + k].sl, rtr_av[first].sl);
  }
  *tc = rtr_av[first].grh.traffic_class;
  *sl = rtr_av[first].sl;
}

static void test_communicator_traffic_class(void **state) {
  world *w = *state;
  uint8_t tc, sl;
  const char *vars[] = {"RERAIL_IB_TC", "RERAIL_IB_SL", "NCCL_IB_TC", "NCCL_IB_SL"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  set_qps("2"); /* data and control share every QP: both QPs must carry the class */
  connect_with_class(w, -1, &tc, &sl);
  assert_int_equal(tc, 0), assert_int_equal(sl, 0);
  connect_with_class(w, 106, &tc, &sl);
  assert_int_equal(tc, 106), assert_int_equal(sl, 106 & 0xf);
  connect_with_class(w, 3, &tc, &sl);
  assert_int_equal(tc, 3), assert_int_equal(sl, 3);
  /* The operator's settings win over the communicator's, each on its own. */
  setenv("NCCL_IB_TC", "64", 1);
  rr_params_reload();
  connect_with_class(w, 106, &tc, &sl);
  assert_int_equal(tc, 64), assert_int_equal(sl, 106 & 0xf);
  setenv("RERAIL_IB_TC", "32", 1), setenv("RERAIL_IB_SL", "5", 1);
  rr_params_reload();
  connect_with_class(w, 106, &tc, &sl);
  assert_int_equal(tc, 32), assert_int_equal(sl, 5);
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  rr_params_reload();
  /* A class that is no traffic class (beyond 8 bits) is none. */
  connect_with_class(w, 300, &tc, &sl);
  assert_int_equal(tc, 0), assert_int_equal(sl, 0);
  set_qps("1");
}

/* ---- GID change events ---- */

static union ibv_gid v4_gid(int last) { /* ::ffff:10.55.0.last */
  union ibv_gid g = {.raw = {[10] = 0xff, [11] = 0xff, [12] = 10, [13] = 55, [14] = 0, [15] = (uint8_t)last}};
  return g;
}

/* The GID an endpoint advertises to its peer. */
static union ibv_gid advertised(rr_rail_ep *ep) {
  uint8_t blob[RR_VERBS_ADDR_LEN];
  uint32_t len = sizeof blob;
  rr_verbs_addr a;
  assert_int_equal(rr_verbs_rail_ops.ep_addr(ep, blob, &len), RR_OK);
  assert_int_equal(rr_verbs_addr_decode(blob, len, &a), RR_OK);
  union ibv_gid g;
  memcpy(g.raw, a.gid, 16);
  return g;
}

static void gid_change_event(int port) {
  events[nevents].event_type = IBV_EVENT_GID_CHANGE;
  events[nevents].element.port_num = port;
  nevents++;
}

/* RoCE: the address behind the port's GID moves (entry 1 emptied, the new one at entry 3):
 * IBV_EVENT_GID_CHANGE chooses the GID again by discovery's rules (IPv4-mapped before
 * link-local), endpoints opened from then on advertise it and send from its index; one opened
 * before keeps the GID its QPs were made with, and no endpoint fails for the event. A change on
 * another port, or a table where nothing qualifies any more, leaves the GID as it was. */
static void test_gid_change_rereads_the_gid(void **state) {
  world *w = *state;
  verbs_hca *h = w->h;
  memset(gids, 0, sizeof gids);
  gids[0] = (union ibv_gid){.raw = {0xfe, 0x80, [15] = 1}};
  gids[1] = v4_gid(1);
  h->port.gid = gids[1];
  rr_rail_ep *before, *after;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &before), RR_OK);

  memset(&gids[1], 0, sizeof gids[1]);
  gids[3] = v4_gid(9);
  gid_change_event(1);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE); /* not a port state change */
  assert_int_equal(nacked, 1);
  assert_int_equal(h->port.gid_index, 3);
  assert_memory_equal(h->port.gid.raw, gids[3].raw, 16);

  assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &after), RR_OK);
  assert_memory_equal(advertised(after).raw, gids[3].raw, 16);
  rr_verbs_addr peer = {.qpn = {0x901}, .nqps = 1, .psn = 1, .mtu = IBV_MTU_1024,
                        .link_layer = IBV_LINK_LAYER_ETHERNET, .ring_slots = VERBS_RING_SLOTS};
  uint8_t blob[RR_VERBS_ADDR_LEN];
  rr_verbs_addr_encode(&peer, blob);
  rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
  assert_int_equal(rr_verbs_rail_ops.ep_connect(after, &a), RR_OK);
  assert_int_equal(last_av.grh.sgid_index, 3);
  union ibv_gid old = v4_gid(1);
  assert_memory_equal(advertised(before).raw, old.raw, 16);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);

  gids[3] = v4_gid(20);
  gid_change_event(2);
  read_events(w);
  union ibv_gid now = v4_gid(9);
  assert_memory_equal(h->port.gid.raw, now.raw, 16);
  memset(gids, 0, sizeof gids);
  gid_change_event(1);
  read_events(w);
  assert_int_equal(h->port.gid_index, 3);
  assert_memory_equal(h->port.gid.raw, now.raw, 16);
  assert_int_equal(nacked, 3);
  rr_verbs_rail_ops.destroy(before);
  rr_verbs_rail_ops.destroy(after);
}

/* A NIC reset (verbs_reset.c): a device-fatal event fails every endpoint and closes the
 * device; the opening's PD and context stay until the last endpoint made on them is
 * destroyed (its QPs and CQ are destroyed first), NCCL's registrations are released and
 * keep their handles, and while closed an endpoint cannot open and a registration is taken
 * with keys 0. The device absent, or back with its port not ACTIVE, stays closed; back and
 * ACTIVE, it opens again (a new context and PD, the GID chosen again), every handle is
 * registered again with new keys, PORT_UP is reported, and a new endpoint opens on it. */
static void test_device_reset_and_reopen(void **state) {
  world *w = *state;
  verbs_hca *h = w->h;
  user_regs = user_deregs = 0;
  ctx_opens = ctx_closes = pd_allocs = pd_deallocs = 0;
  device_listed = 0;
  fake_port_state = IBV_PORT_ACTIVE;
  memset(gids, 0, sizeof gids);
  gids[1] = v4_gid(1);
  memset(&fake_ctx2, 0, sizeof fake_ctx2);
  fake_ctx2.async_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  assert_true(fake_ctx2.async_fd >= 0);
  h->gen = verbs_gen_new(&fake_api, &fake_ctx, &fake_pd); /* as rr_verbs_dev_open makes it */
  rr_rail_ep *old = NULL, *fresh = NULL;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &old), RR_OK);
  rr_rail_mr *kept = NULL, *late_reg = NULL;
  assert_int_equal(verbs_reg_mr(&h->base, user_buf[1], 4096, RR_MEM_HOST, -1, 0, &kept), RR_OK);
  uint32_t old_rkey = kept->rkey;
  assert_int_not_equal(old_rkey, 0);

  dev_event(IBV_EVENT_DEVICE_FATAL);
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_FATAL);
  assert_int_equal(h->closed, 1);
  assert_int_equal(h->resets, 1);
  assert_null(h->ctx);
  assert_null(h->pd);
  assert_int_equal(progress(w, 0), RR_ERR_RAIL);
  assert_int_equal(progress(w, 1), RR_ERR_RAIL);
  assert_int_equal(old->ops->progress(old), RR_ERR_RAIL);
  assert_int_equal(user_deregs, 1); /* NCCL's registration released, its handle kept */
  assert_int_equal(pd_deallocs + ctx_closes, 0); /* `old` still holds the opening */
  assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &fresh), RR_ERR_RAIL);
  assert_int_equal(verbs_reg_mr(&h->base, user_buf[2], 4096, RR_MEM_HOST, -1, 0, &late_reg), RR_OK);
  assert_int_equal(late_reg->rkey, 0); /* no rail carries it yet */
  rr_verbs_rail_ops.destroy(old);
  assert_int_equal(pd_deallocs, 1);
  assert_int_equal(ctx_closes, 1);

  /* Not listed: stays closed. Listed with the port down: opened, found not ACTIVE, closed. */
  h->next_probe_ns = 0;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE);
  assert_int_equal(ctx_opens, 0);
  device_listed = 1;
  fake_port_state = IBV_PORT_DOWN;
  h->next_probe_ns = 0;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE);
  assert_int_equal(ctx_opens, 1);
  assert_int_equal(ctx_closes, 2);
  assert_int_equal(h->closed, 1);
  /* Probed at a low rate, not on every monitor cycle. */
  fake_port_state = IBV_PORT_ACTIVE;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_NONE);
  assert_int_equal(ctx_opens, 1);

  h->next_probe_ns = 0;
  assert_int_equal(read_events(w), RR_RAIL_DEV_EV_PORT_UP);
  assert_int_equal(h->closed, 0);
  assert_int_equal(h->reopens, 1);
  assert_ptr_equal(h->ctx, &fake_ctx2);
  assert_ptr_equal(h->pd, &fake_pd2);
  assert_int_equal(h->port.gid_index, 1);
  assert_int_equal(user_regs, 3); /* both handles registered on the new PD */
  assert_int_not_equal(kept->rkey, 0);
  assert_int_not_equal(kept->rkey, old_rkey);
  assert_int_not_equal(late_reg->rkey, 0);
  assert_int_equal(rr_verbs_rail_ops.ep_open(&h->base, &no_events, NULL, &fresh), RR_OK);
  rr_verbs_rail_ops.destroy(fresh);
  verbs_dereg_mr(kept);
  verbs_dereg_mr(late_reg);
  assert_int_equal(user_deregs, 3);
  assert_int_equal(ctx_closes, 2); /* the device holds its new opening */
  verbs_gen_put(h->gen);
  h->gen = NULL;
  assert_int_equal(ctx_closes, 3);
  assert_int_equal(pd_deallocs, 2);
  close(fake_ctx2.async_fd);
}

/* InfiniBand: the same GID index is read again (a new subnet prefix). */
static void test_gid_change_infiniband(void **state) {
  world *w = *state;
  verbs_hca *h = w->h;
  fake_link_layer = h->port.link_layer = IBV_LINK_LAYER_INFINIBAND;
  h->port.gid_index = 0;
  memset(gids, 0, sizeof gids);
  gids[0] = (union ibv_gid){.raw = {0xfe, 0x80, [8] = 0x02, [15] = 0x0a}};
  gid_change_event(1);
  read_events(w);
  fake_link_layer = IBV_LINK_LAYER_ETHERNET;
  assert_int_equal(h->port.gid_index, 0);
  assert_memory_equal(h->port.gid.raw, gids[0].raw, 16);
}

/* A peer offering fewer QPs: both use as many as it has. */
static void test_qps_agree_on_the_minimum(void **state) {
  world *w = *state;
  set_qps("2");
  rr_rail_ep *ep;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&w->h->base, &no_events, NULL, &ep), RR_OK);
  set_qps("1");
  verbs_ep *vep = (verbs_ep *)ep;
  assert_int_equal(verbs_ep_nqps(vep), 2);
  rr_verbs_addr peer = {.qpn = {0x901}, .nqps = 1, .psn = 1, .mtu = IBV_MTU_1024,
                        .link_layer = IBV_LINK_LAYER_ETHERNET, .ring_slots = VERBS_RING_SLOTS};
  uint8_t blob[RR_VERBS_ADDR_LEN];
  rr_verbs_addr_encode(&peer, blob);
  rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
  assert_int_equal(rr_verbs_rail_ops.ep_connect(ep, &a), RR_OK);
  assert_int_equal(verbs_ep_nqps(vep), 1);
  assert_false(verbs_ep_has_qpn(vep, fake_qps[3].qp_num)); /* the extra QP is gone */
  assert_true(verbs_ep_has_qpn(vep, fake_qps[2].qp_num));
  rr_verbs_rail_ops.destroy(ep);
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

/* A peer whose ring has another number of slots is refused at connect. */
static void test_blob_ring_slots_checked(void **state) {
  world *w = *state;
  rr_rail_ep *ep;
  assert_int_equal(rr_verbs_rail_ops.ep_open(&w->h->base, &no_events, NULL, &ep), RR_OK);
  rr_verbs_addr peer = {.qpn = {0x901}, .nqps = 1, .psn = 1, .mtu = IBV_MTU_1024, .link_layer = IBV_LINK_LAYER_ETHERNET,
                        .ring_slots = VERBS_RING_SLOTS * 2};
  uint8_t blob[RR_VERBS_ADDR_LEN];
  rr_verbs_addr_encode(&peer, blob);
  rr_rail_connect_args a = {.peer_addr = blob, .peer_addr_len = sizeof blob};
  assert_int_equal(rr_verbs_rail_ops.ep_connect(ep, &a), RR_ERR_PROTOCOL);
  rr_verbs_rail_ops.destroy(ep);
}

/* NCCL profiler events of a message on a verbs rail use NCCL's IB descriptor v1 (plugin id
 * (1 << 16) | 1), read here as raw bytes at NCCL's offsets: type 1 (a QP work request) at 0,
 * then, 8-byte aligned, device at 8, wr_id at 16, opcode at 24, qpNum at 28, length at 32.
 * The endpoint is named by its first QP; the opcodes are libibverbs' own. */
static void test_profiler_descriptor_is_nccls_ib_v1(void **state) {
  world *w = *state;
  w->h->base.index = 3;
  const struct {
    int op;
    int opcode;
  } dirs[] = {{ENGINE_PROF_SEND, IBV_WR_RDMA_WRITE_WITH_IMM}, {ENGINE_PROF_RECV, IBV_WC_RECV_RDMA_WITH_IMM}};
  for (int i = 0; i < 2; i++)
    for (size_t k = 0; k < sizeof dirs / sizeof *dirs; k++) {
      engine_prof_descr d;
      memset(&d, 0xa5, sizeof d);
      int64_t id = engine_prof_describe(w->ep[i], dirs[k].op, 77 + (uint32_t)i, 123456789 + (size_t)i, &d);
      const unsigned char *b = d.bytes;
      int32_t device, opcode, qpn;
      uint64_t wr_id, length;
      memcpy(&device, b + 8, 4);
      memcpy(&wr_id, b + 16, 8);
      memcpy(&opcode, b + 24, 4);
      memcpy(&qpn, b + 28, 4);
      memcpy(&length, b + 32, 8);
      assert_int_equal(id, (1 << 16) | 1);
      assert_int_equal(b[0], 1);
      assert_int_equal(device, 3);
      assert_int_equal(wr_id, 77 + i);
      assert_int_equal(opcode, dirs[k].opcode);
      /* setup opens one QP per endpoint (the default), numbered from 0x100 */
      assert_int_equal(qpn, (int32_t)fake_qps[i].qp_num);
      assert_true(qpn != 0);
      assert_int_equal(length, 123456789 + i);
    }
}

/* A completion on an endpoint's CQ that names none of its QPs is counted (and warned
 * about), never silently dropped, and fails nothing. */
static void test_stray_completion_counted(void **state) {
  world *w = *state;
  uint64_t before = rr_verbs_stray_completions();
  struct ibv_wc wc = {.wr_id = 5, .status = IBV_WC_SUCCESS, .opcode = IBV_WC_SEND, .qp_num = 0x7777};
  push_wc_to(fake_qps[0].send_cq, wc);
  push_wc_to(fake_qps[0].send_cq, wc);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(rr_verbs_stray_completions(), before + 2);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(rr_verbs_stray_completions(), before + 2);
}

/* ---- registration: a hash table, and no lock held across ibv_reg_mr --------------------- */

typedef struct reg_job {
  world *w;
  void *buf;
  rr_rail_mr *mr;
  rr_status st;
} reg_job;

static void *reg_thread(void *arg) {
  reg_job *j = arg;
  j->st = verbs_reg_mr(&j->w->h->base, j->buf, 4096, RR_MEM_HOST, -1, 0, &j->mr);
  return NULL;
}

static void reg_reset(void) {
  user_regs = user_deregs = 0;
  reg_block_first = reg_inside = reg_release = 0;
}

/* While one thread sits in ibv_reg_mr (the fake blocks it until released), an endpoint's
 * progress on another thread delivers, a cached buffer is found, another buffer is
 * registered, and the same buffer registered by a second thread is cached first: the
 * blocked registration then finds it, deregisters its own MR and shares the cached one. */
static void test_registration_never_stalls_progress(void **state) {
  world *w = *state;
  open_pair(w, "1");
  reg_reset();
  rr_rail_mr *cached = NULL;
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[1], 4096, RR_MEM_HOST, -1, 0, &cached), RR_OK);
  reg_block_first = 1;
  user_regs = 0;
  reg_job slow = {.w = w, .buf = user_buf[0]};
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, reg_thread, &slow), 0);
  pthread_mutex_lock(&reg_mu);
  while (!reg_inside) pthread_cond_wait(&reg_cv, &reg_mu);
  pthread_mutex_unlock(&reg_mu);
  /* The registration is inside ibv_reg_mr now, and stays there until released. */
  assert_int_equal(ctrl(w, 0, 0xd1), RR_OK);
  assert_int_equal(progress(w, 1), RR_OK);
  assert_int_equal(progress(w, 0), RR_OK);
  assert_int_equal(nlog, 1); /* delivered during the registration */
  expect(0, 1, EV_CTRL, 0xd1);
  rr_rail_mr *hit = NULL, *other = NULL, *dup = NULL;
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[1], 4096, RR_MEM_HOST, -1, 0, &hit), RR_OK);
  assert_int_equal(hit->lkey, cached->lkey); /* from the cache, no ibv_reg_mr */
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[2], 4096, RR_MEM_HOST, -1, 0, &other), RR_OK);
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &dup), RR_OK);
  pthread_mutex_lock(&reg_mu);
  assert_int_equal(reg_inside, 1); /* all of that while the first registration was blocked */
  assert_int_equal(user_regs, 3);
  reg_release = 1;
  pthread_cond_broadcast(&reg_cv);
  pthread_mutex_unlock(&reg_mu);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(slow.st, RR_OK);
  /* The racing registration lost: its MR deregistered, the cached one shared. */
  assert_int_equal(user_deregs, 1);
  assert_int_equal(slow.mr->lkey, dup->lkey);
  assert_int_equal(verbs_mr_cache_count(w->h->mrs), 3);
  verbs_dereg_mr(slow.mr);
  assert_int_equal(user_deregs, 1); /* dup still holds it */
  verbs_dereg_mr(dup);
  verbs_dereg_mr(hit);
  verbs_dereg_mr(cached);
  verbs_dereg_mr(other);
  assert_int_equal(user_deregs, 4);
  assert_int_equal(verbs_mr_cache_count(w->h->mrs), 0);
}

/* Registrations are counted, and those after a NIC or rail of the process went down apart
 * (the lab asserts none happen then); a cached buffer registers nothing. */
static void test_registrations_counted_apart_after_a_down(void **state) {
  world *w = *state;
  reg_reset();
  uint64_t regs = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), late = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN);
  rr_rail_mr *a = NULL, *again = NULL, *b = NULL;
  if (!rr_health_down_seen()) {
    assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &a), RR_OK);
    assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[0], 4096, RR_MEM_HOST, -1, 0, &again), RR_OK);
    assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), regs + 1);
    assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN), late);
    rr_health_nic_state(0, "test0", RR_LINK_DOWN, "unit test"); /* the process's first down */
  }
  assert_true(rr_health_down_seen());
  regs = rr_counter_get(RR_CTR_VERBS_REGISTRATIONS);
  assert_int_equal(verbs_reg_mr(&w->h->base, user_buf[2], 4096, RR_MEM_HOST, -1, 0, &b), RR_OK);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS), regs);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_REGISTRATIONS_AFTER_DOWN), late + 1);
  rr_health_nic_state(0, "test0", RR_LINK_UP, "unit test");
  if (a) verbs_dereg_mr(a);
  if (again) verbs_dereg_mr(again);
  verbs_dereg_mr(b);
}

/* The cache keys on (base, len, kind) and finds each of many buffers again. */
static void test_registration_cache_many(void **state) {
  (void)state;
  verbs_mr_cache *c;
  assert_int_equal(verbs_mr_cache_create(&c), RR_OK);
  enum { N = 5000 };
  static struct ibv_mr mrs[N];
  static char region[N];
  for (int i = 0; i < N; i++) {
    int raced = 1;
    assert_non_null(verbs_mr_cache_put(c, region + i, 64, RR_MEM_HOST, &mrs[i], &raced));
    assert_int_equal(raced, 0);
  }
  assert_int_equal(verbs_mr_cache_count(c), N);
  for (int i = 0; i < N; i++) {
    verbs_mr_entry *e = verbs_mr_cache_get(c, region + i, 64, RR_MEM_HOST);
    assert_non_null(e);
    assert_ptr_equal(verbs_mr_entry_mr(e), &mrs[i]);
    assert_null(verbs_mr_cache_release(c, e)); /* the put's reference remains */
    assert_null(verbs_mr_cache_get(c, region + i, 65, RR_MEM_HOST));
    assert_null(verbs_mr_cache_get(c, region + i, 64, RR_MEM_CUDA));
  }
  for (int i = 0; i < N; i++) {
    verbs_mr_entry *e = verbs_mr_cache_get(c, region + i, 64, RR_MEM_HOST);
    assert_null(verbs_mr_cache_release(c, e));
    assert_ptr_equal(verbs_mr_cache_release(c, e), &mrs[i]); /* the last reference */
  }
  assert_int_equal(verbs_mr_cache_count(c), 0);
  verbs_mr_cache_destroy(c, &fake_api);
}

/* maxComms from the device's limits: QPs per endpoint, a CQ each (room for all its queues),
 * two MRs each with half the MRs left for NCCL's buffers, the flush QP's share. */
static void test_max_eps_honest(void **state) {
  (void)state;
  struct ibv_device_attr a = {.max_qp = 1 << 17, .max_cq = 1 << 16, .max_mr = 1 << 20, .max_cqe = 1 << 22};
  assert_int_equal(verbs_max_eps_of(&a, 1), (1 << 16) - 1);
  assert_int_equal(verbs_max_eps_of(&a, 4), ((1 << 17) - 1) / 4);
  a.max_mr = 4000;
  assert_int_equal(verbs_max_eps_of(&a, 1), 1000);
  a.max_cqe = VERBS_SQ_DEPTH + VERBS_RQ_DEPTH - 1; /* not one endpoint's CQ */
  assert_int_equal(verbs_max_eps_of(&a, 1), 0);
  /* Far above the 42 endpoints one 32768-entry device CQ held. */
  struct ibv_device_attr rxe = {.max_qp = 1 << 16, .max_cq = 1 << 14, .max_mr = 1 << 18, .max_cqe = (1 << 15) - 1};
  assert_true(verbs_max_eps_of(&rxe, 1) >= 4096);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_qp_fatal_fails_its_endpoint_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_qp_request_and_access_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cq_error_fails_its_endpoint_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_fatal_fails_every_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_port_events_fail_no_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_event_for_unknown_qp_is_ignored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_only_own_messages_inline, setup, teardown),
      cmocka_unit_test_setup_teardown(test_endpoint_footprint_within_budget, setup, teardown),
      cmocka_unit_test_setup_teardown(test_chain_one_doorbell_one_signal, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ring_writes_signalled_rarely, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_sq_credits_exact_when_nearly_full, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_qp_error_mid_chain_reports_nothing_undone, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_silence_judged_at_measured_rate, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_blob_ring_slots_checked, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profiler_descriptor_is_nccls_ib_v1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_ring_ctrl_both_ways, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_ctrl_held_behind_write, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_credits_never_overrun, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_credits_back_on_the_readers_message, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_length, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_stamp, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_count_ahead, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_ring_forged_credit, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_qps_agree_on_the_minimum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cost_per_message, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_receives_reposted_in_batches, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_split_write, setup_pair, teardown),
      cmocka_unit_test_setup_teardown(test_two_qps_global_order, setup_pair2, teardown),
      cmocka_unit_test_setup_teardown(test_two_qps_fail_and_fence, setup_pair2, teardown),
      cmocka_unit_test(test_completion_errors_classified),
      cmocka_unit_test_setup_teardown(test_traffic_class_and_sl, setup, teardown),
      cmocka_unit_test(test_adaptive_routing_params),
      cmocka_unit_test(test_infiniband_ports_connect_by_lid),
      cmocka_unit_test_setup_teardown(test_communicator_traffic_class, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gid_change_rereads_the_gid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gid_change_infiniband, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_reset_and_reopen, setup, teardown),
      cmocka_unit_test_setup_teardown(test_stray_completion_counted, setup, teardown),
      cmocka_unit_test_setup_teardown(test_registration_never_stalls_progress, setup, teardown),
      cmocka_unit_test_setup_teardown(test_registrations_counted_apart_after_a_down, setup, teardown),
      cmocka_unit_test(test_registration_cache_many),
      cmocka_unit_test(test_max_eps_honest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
