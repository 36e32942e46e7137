/* The fake libibverbs of the verbs endpoint tests (verbs_ep_fixture.h): its state, its
 * calls, and the worlds the tests run in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rr_counters.h"
#include "rr_params.h"
#include "verbs_ep_fixture.h"

struct ibv_context fake_ctx;
struct ibv_pd fake_pd;
/* Each endpoint's own CQ: one of these, named by its index. */
static struct ibv_cq fake_cqs[FAKE_CQS];
static int ncqs;
static struct ibv_mr fake_mr;
struct ibv_qp fake_qps[FAKE_QPS];
int nqps;
struct ibv_async_event events[FAKE_EVENTS];
int nevents, next_event, nacked;

/* Loopback: each QP's posted receives (a FIFO) and a CQ whose entries the test may hold. */
static int loopback;
fake_loopback_qp lb[FAKE_QPS];
/* Every CQ's completions in one list, each with the CQ it is on (poll_cq takes only its
 * own), in the order they were made. */
struct ibv_wc cq[FAKE_CQ];
struct ibv_cq *cq_of[FAKE_CQ]; /* NULL once polled */
unsigned cq_head, cq_tail;
int cq_gate = -1; /* completions poll_cq may still return; -1: no limit */
/* Completions of this QP number wait aside (its packets are late) until released. */
uint32_t late_qpn;
struct ibv_wc late[FAKE_CQ];
unsigned nlate;

int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
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

void push_wc_to(struct ibv_cq *c, struct ibv_wc wc) {
  assert_true(cq_tail - cq_head < FAKE_CQ);
  cq_of[cq_tail % FAKE_CQ] = c;
  cq[cq_tail++ % FAKE_CQ] = wc;
}

/* A completion goes to the CQ of the QP it names. */
void push_wc(struct ibv_wc wc) {
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
unsigned fail_wr_at, loopback_wrs;

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
fake_post posts[MAX_POSTS];
int nposts, ncalls;

int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
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

int f_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc) {
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
char user_buf[3][4096];
static struct ibv_mr user_mrs[8];
int user_regs, user_deregs;
pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
int reg_block_first, reg_inside, reg_release;

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
struct ibv_qp_cap last_qp_cap; /* what the last QP was created with */
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
struct ibv_ah_attr last_av; /* the address vector of the last QP moved to RTR */
struct ibv_ah_attr rtr_av[FAKE_QPS]; /* ... and of each QP */
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
struct ibv_context fake_ctx2;
struct ibv_pd fake_pd2;
static struct ibv_device *fake_dev_list[2] = {(struct ibv_device *)&fake_ctx2, NULL};
int device_listed, fake_port_state = IBV_PORT_ACTIVE;
int ctx_opens, ctx_closes, pd_allocs, pd_deallocs;
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
union ibv_gid gids[FAKE_GIDS];
int fake_link_layer = IBV_LINK_LAYER_ETHERNET;
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

const rr_ibv_api fake_api = {
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

const rr_rail_events no_events; /* nothing completes on a fake CQ */

rr_status progress(world *w, int i) { return w->ep[i]->ops->progress(w->ep[i]); }

void fake_reset(void) {
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

int setup(void **state) {
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

int teardown(void **state) {
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

rr_rail_dev_event_kind read_events(world *w) {
  rr_rail_dev_event ev;
  return rr_verbs_rail_ops.dev_event(&w->h->base, &ev);
}

rr_status post_write(world *w, int i, size_t len) {
  static char buf[1 << 16];
  static rr_rail_mr rmr = {.lkey = 7};
  rr_write_wr wr = {.wr_id = 1, .local = buf, .len = len, .local_mr = &rmr, .remote_addr = 0x1000, .rkey = 9};
  return w->ep[i]->ops->post_write(w->ep[i], &wr);
}

rr_status flush(world *w, int i) { return w->ep[i]->ops->post_flush(w->ep[i]); }

/* What the engines of the pair were told, in order. */
pair_event evlog[MAX_LOG];
int nlog;
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

void set_qps(const char *n) {
  setenv("RERAIL_IB_QPS_PER_RAIL", n, 1);
  rr_params_reload();
}

/* The world's endpoints replaced by two of one fake device, opened with
 * `qps` QPs each and connected to each other (connect reads the knob again:
 * 1 there checks that both ends keep what they agreed at open). */
void open_pair(world *w, const char *qps) {
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
int setup_pair(void **state) {
  set_qps("1");
  int rc = setup(state);
  open_pair(*state, "1");
  return rc;
}

rr_status ctrl(world *w, int i, uint32_t v) { return w->ep[i]->ops->post_ctrl(w->ep[i], &v, sizeof v); }

void expect(int k, int ep, int kind, uint32_t value) {
  assert_true(k < nlog);
  assert_int_equal(evlog[k].ep, ep);
  assert_int_equal(evlog[k].kind, kind);
  assert_int_equal(evlog[k].value, value);
}

/* The same with two QPs per endpoint (ep0: QPs 0x100, 0x101; ep1: 0x102, 0x103). */
int setup_pair2(void **state) {
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

rr_status write_imm(world *w, int i, uint32_t imm) {
  static char buf[64];
  static rr_rail_mr rmr = {.lkey = 7};
  rr_write_wr wr = {.wr_id = imm, .local = buf, .len = sizeof buf, .local_mr = &rmr, .remote_addr = 0x1000,
                    .rkey = 9, .imm = imm};
  return w->ep[i]->ops->post_write(w->ep[i], &wr);
}
