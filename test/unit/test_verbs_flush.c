/* The verbs rail's GPU memory path on any host, against a faked libibverbs:
 *
 *  - what a device registers (verbs_mem_kinds): CUDA only with a GPUDirect RDMA module's file
 *    in a fake sysfs tree, DMA-BUF only when the probe registration (fd -1) fails with
 *    another error than "not supported";
 *  - the flush QP (verbs_flush.c): made on the first flush and connected to itself, an RDMA
 *    READ of one byte per flush, DONE on its completion, FAILED on an error completion (the
 *    QP is made again for the next), RR_AGAIN when its queue is full, refused on a port that
 *    is down, a flush pending too long abandoned without waiting;
 *  - iflush/test (core/flush.c): NULL for host memory and with RERAIL_GDR_FLUSH_DISABLE,
 *    a read on the NIC of every rail carrying traffic, a NIC that fails its read handing it
 *    to another NIC of the connection (no error), an error (not a hang) only when no NIC of
 *    the connection can read for a while. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core_internal.h"
#include "rail_verbs.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_params.h"

/* ---- a fake libibverbs ------------------------------------------------------------ */

#define FAKE_QPS 16
#define FAKE_CQS 16
#define MAX_WRS 256

static struct ibv_context fake_ctx;
static struct ibv_pd fake_pd;
static struct ibv_mr fake_mr = {.lkey = 0x11, .rkey = 0x22};
static struct ibv_qp qps[FAKE_QPS];
static struct ibv_cq cqs[FAKE_CQS];
static int nqps, ncqs, qps_destroyed, cqs_destroyed, fail_create_qp, reg_calls;
static uint32_t self_dest_qpn[FAKE_QPS]; /* the dest QP number each QP was connected to */

/* Posted reads, in order; `done` marks those completed with `status` (polled later). */
static struct fake_wr {
  struct ibv_qp *qp;
  uint64_t wr_id;
  enum ibv_wr_opcode opcode;
  unsigned flags;
  uint64_t raddr;
  uint32_t rkey, len;
  int completed, polled;
  enum ibv_wc_status status;
} wrs[MAX_WRS];
static int nwrs;

static int qp_index(const struct ibv_qp *qp) { return (int)(qp - qps); }

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  (void)bad;
  if (nwrs == MAX_WRS) return ENOMEM;
  wrs[nwrs++] = (struct fake_wr){.qp = qp, .wr_id = wr->wr_id, .opcode = wr->opcode, .flags = wr->send_flags,
                                 .raddr = wr->wr.rdma.remote_addr, .rkey = wr->wr.rdma.rkey,
                                 .len = wr->num_sge ? wr->sg_list[0].length : 0};
  return 0;
}

static int f_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  int got = 0;
  for (int i = 0; i < nwrs && got < n; i++) {
    struct fake_wr *w = &wrs[i];
    if (!w->completed || w->polled || w->qp->send_cq != cq) continue;
    w->polled = 1;
    wc[got++] = (struct ibv_wc){.wr_id = w->wr_id, .status = w->status, .qp_num = w->qp->qp_num};
  }
  return got;
}

/* Complete the oldest outstanding read on dev h's flush QP. */
static int complete_next(verbs_hca *h, enum ibv_wc_status st) {
  for (int i = 0; i < nwrs; i++) {
    struct fake_wr *w = &wrs[i];
    if (w->completed || !w->qp->pd || (void *)w->qp->pd != (void *)h) continue;
    w->completed = 1;
    w->status = st;
    return 1;
  }
  return 0;
}

static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)pd, (void)addr, (void)len, (void)access;
  reg_calls++;
  return &fake_mr;
}
static int f_dereg_mr(struct ibv_mr *mr) {
  (void)mr;
  return 0;
}
static int iova2_calls;
static unsigned iova2_access;
static uint64_t iova2_iova;
static struct ibv_mr *f_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova, unsigned access) {
  (void)pd, (void)addr, (void)len;
  iova2_calls++;
  iova2_access = access;
  iova2_iova = iova;
  return &fake_mr;
}
static struct ibv_cq *f_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx, struct ibv_comp_channel *ch,
                                  int vec) {
  (void)cq_ctx, (void)ch, (void)vec;
  if (ncqs == FAKE_CQS) return NULL;
  struct ibv_cq *c = &cqs[ncqs++];
  memset(c, 0, sizeof *c);
  c->context = ctx;
  c->cqe = cqe;
  return c;
}
static int f_destroy_cq(struct ibv_cq *cq) {
  (void)cq;
  cqs_destroyed++;
  return 0;
}
/* The fake PD pointer is the owning verbs_hca (so a read can be traced to its device). */
static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr) {
  if (fail_create_qp || nqps == FAKE_QPS) return NULL;
  struct ibv_qp *q = &qps[nqps];
  memset(q, 0, sizeof *q);
  q->context = &fake_ctx;
  q->pd = pd;
  q->send_cq = attr->send_cq;
  q->recv_cq = attr->recv_cq;
  q->qp_num = 0x200u + (uint32_t)nqps++;
  return q;
}
static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  if (mask & IBV_QP_DEST_QPN) self_dest_qpn[qp_index(qp)] = attr->dest_qp_num;
  return 0;
}
static int f_destroy_qp(struct ibv_qp *qp) {
  (void)qp;
  qps_destroyed++;
  return 0;
}
static const char *f_wc_status_str(enum ibv_wc_status s) {
  (void)s;
  return "fake status";
}

/* The DMA-BUF probe: errno of the next reg_dmabuf_mr (0: it "succeeds"). */
static int dmabuf_errno;
static int dmabuf_calls;
static struct {
  uint64_t off, iova;
  size_t len;
  int fd, access;
} dmabuf_last;
static struct ibv_mr *f_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova, int fd,
                                      int access) {
  (void)pd;
  dmabuf_calls++;
  dmabuf_last.off = off, dmabuf_last.iova = iova, dmabuf_last.len = len, dmabuf_last.fd = fd;
  dmabuf_last.access = access;
  if (fd >= 0) return &fake_mr; /* a registration NCCL asked for */
  if (!dmabuf_errno) return &fake_mr;
  errno = dmabuf_errno;
  return NULL;
}
static struct ibv_pd *f_alloc_pd(struct ibv_context *ctx) {
  (void)ctx;
  return &fake_pd;
}
static int f_dealloc_pd(struct ibv_pd *pd) {
  (void)pd;
  return 0;
}

static rr_ibv_api fake_api = {
    .reg_mr = f_reg_mr,
    .dereg_mr = f_dereg_mr,
    .create_cq = f_create_cq,
    .destroy_cq = f_destroy_cq,
    .create_qp = f_create_qp,
    .modify_qp = f_modify_qp,
    .destroy_qp = f_destroy_qp,
    .wc_status_str = f_wc_status_str,
    .alloc_pd = f_alloc_pd,
    .dealloc_pd = f_dealloc_pd,
};

/* ---- a world: two verbs devices, one receive connection with a rail on each ---------- */

typedef struct world {
  verbs_hca *h[2];
  rr_rail_ep ep[2];
  rr_recv_comm *comm;
  char buf[4096];
  rr_rail_mr reg[2];
  rr_mr mr;
} world;

static verbs_hca *hca_new(int index) {
  verbs_hca *h = calloc(1, sizeof *h);
  pthread_mutex_init(&h->lock, NULL);
  pthread_mutex_init(&h->flush_lock, NULL);
  h->api = &fake_api;
  h->base.ops = &rr_verbs_rail_ops;
  h->base.index = index;
  assert_int_equal(verbs_mr_cache_create(&h->mrs), RR_OK);
  h->ctx = &fake_ctx;
  h->pd = (struct ibv_pd *)h; /* see f_create_qp */
  snprintf(h->port.dev_name, sizeof h->port.dev_name, "fake%d", index);
  h->port.port = 1;
  h->port.link_layer = IBV_LINK_LAYER_ETHERNET;
  h->port.gid_index = 1;
  h->port.active_mtu = IBV_MTU_1024;
  return h;
}

static void set_delta_ms(const char *ms) {
  setenv("RERAIL_PROGRESS_TIMEOUT", ms, 1);
  rr_params_reload();
}

static int setup(void **state) {
  memset(&fake_ctx, 0, sizeof fake_ctx);
  fake_ctx.ops.poll_cq = f_poll_cq;
  fake_ctx.ops.post_send = f_post_send;
  nqps = ncqs = nwrs = qps_destroyed = cqs_destroyed = fail_create_qp = 0;
  unsetenv("RERAIL_GDR_FLUSH_DISABLE");
  unsetenv("RERAIL_TEST_FORCE_GPU_FLUSH");
  set_delta_ms("1000");
  world *w = calloc(1, sizeof *w);
  w->comm = calloc(1, sizeof *w->comm);
  w->comm->magic = RR_MAGIC_RECV;
  rr_engine *e = &w->comm->engine;
  pthread_mutex_init(&e->lock, NULL);
  e->nrails = 2;
  w->mr = (rr_mr){.base = w->buf, .size = sizeof w->buf, .type = RR_PTR_CUDA};
  for (int i = 0; i < 2; i++) {
    w->h[i] = hca_new(i);
    w->ep[i] = (rr_rail_ep){.ops = &rr_verbs_rail_ops, .dev = &w->h[i]->base};
    e->rails[i].ep = &w->ep[i];
    e->rails[i].state = RR_RAIL_ACTIVE;
    w->reg[i] = (rr_rail_mr){.dev = &w->h[i]->base, .base = w->buf, .len = sizeof w->buf, .lkey = 0x30u + i,
                             .rkey = 0x40u + i};
    w->mr.reg[i] = &w->reg[i];
  }
  *state = w;
  return 0;
}

static int teardown(void **state) {
  world *w = *state;
  for (int i = 0; i < 2; i++) {
    verbs_flush_close(w->h[i]);
    assert_int_equal(verbs_mr_cache_count(w->h[i]->mrs), 0); /* every test deregisters what it registered */
    verbs_mr_cache_destroy(w->h[i]->mrs, &fake_api);
    pthread_mutex_destroy(&w->h[i]->lock);
    pthread_mutex_destroy(&w->h[i]->flush_lock);
    free(w->h[i]);
  }
  pthread_mutex_destroy(&w->comm->engine.lock);
  free(w->comm);
  free(w);
  return 0;
}

/* iflush of one receive of `len` bytes at buf+off. */
static rr_status iflush(world *w, rr_mr *mr, size_t off, int len, void **req) {
  void *data[1] = {w->buf + off};
  int sizes[1] = {len};
  void *mh[1] = {mr};
  return rr_net_iflush(w->comm, 1, data, sizes, mh, req);
}

static int test_req(void *req, rr_status *st) {
  int done = 0;
  *st = rr_net_test(req, &done, NULL);
  return done;
}

static int reads_on(const world *w, int dev) {
  int n = 0;
  for (int i = 0; i < nwrs; i++) n += (void *)wrs[i].qp->pd == (void *)w->h[dev];
  return n;
}

/* ---- what a device registers ------------------------------------------------------ */

static char sysroot[] = "/tmp/rerail-flush-sysfs-XXXXXX";

static void put(const char *rel) {
  char path[512], cmd[1200];
  snprintf(path, sizeof path, "%s/%s", sysroot, rel);
  snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && echo 1.0 > '%s'", path, path);
  assert_int_equal(system(cmd), 0);
}

static void test_mem_kinds(void **state) {
  (void)state;
  assert_non_null(mkdtemp(sysroot));
  /* No GPUDirect module, no ibv_reg_dmabuf_mr in this libibverbs: host only. */
  fake_api.reg_dmabuf_mr = NULL;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
  /* The entry point exists but the provider or kernel cannot: EOPNOTSUPP / EPROTONOSUPPORT. */
  fake_api.reg_dmabuf_mr = f_reg_dmabuf_mr;
  dmabuf_errno = EOPNOTSUPP;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
  dmabuf_errno = EPROTONOSUPPORT;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
  /* It could, only not with fd -1: DMA-BUF. */
  dmabuf_errno = EBADF;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST | RR_MEM_DMABUF);
  /* A provider that accepts fd -1 is not believed (and its MR is released). */
  dmabuf_errno = 0;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
  /* Each of the GPUDirect RDMA module's files NCCL looks for gives CUDA. */
  static const char *const marks[] = {"module/nvidia_peermem/version",
                                      "kernel/mm/memory_peers/nvidia-peermem/version",
                                      "kernel/mm/memory_peers/nv_mem/version"};
  dmabuf_errno = EOPNOTSUPP;
  for (size_t i = 0; i < sizeof marks / sizeof *marks; i++) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/module '%s'/kernel", sysroot, sysroot);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
    put(marks[i]);
    assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST | RR_MEM_CUDA);
  }
  dmabuf_errno = EBADF;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST | RR_MEM_CUDA | RR_MEM_DMABUF);
  /* The module's directory alone (a module being unloaded) is not enough. */
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'/kernel && mkdir -p '%s'/module/nvidia_peermem", sysroot, sysroot);
  assert_int_equal(system(cmd), 0);
  dmabuf_errno = EOPNOTSUPP;
  assert_int_equal(verbs_mem_kinds(&fake_api, &fake_ctx, sysroot), RR_MEM_HOST);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", sysroot);
  assert_int_equal(system(cmd), 0);
}

/* regMrDmaBuf reaches ibv_reg_dmabuf_mr with NCCL's descriptor and offset, and the buffer's
 * address as the I/O address (the address writes name); CUDA memory by address (GPUDirect
 * RDMA) is a plain ibv_reg_mr, as in NCCL. */
static void test_reg_kinds(void **state) {
  world *w = *state;
  rr_rail_dev *d = &w->h[1]->base;
  fake_api.reg_dmabuf_mr = f_reg_dmabuf_mr;
  dmabuf_calls = reg_calls = 0;
  rr_rail_mr *m = NULL;
  assert_int_equal(verbs_reg_mr(d, w->buf, 2048, RR_MEM_DMABUF, 7, 4096, &m), RR_OK);
  assert_int_equal(dmabuf_calls, 1);
  assert_int_equal(reg_calls, 0);
  assert_int_equal(dmabuf_last.fd, 7);
  assert_int_equal(dmabuf_last.off, 4096);
  assert_int_equal(dmabuf_last.len, 2048);
  assert_int_equal(dmabuf_last.iova, (uint64_t)(uintptr_t)w->buf);
  assert_true(dmabuf_last.access & IBV_ACCESS_REMOTE_WRITE);
  assert_true(dmabuf_last.access & IBV_ACCESS_REMOTE_READ); /* the flush reads it back */
  assert_int_equal(m->rkey, fake_mr.rkey);
  verbs_dereg_mr(m);
  assert_int_equal(verbs_reg_mr(d, w->buf, 2048, RR_MEM_CUDA, -1, 0, &m), RR_OK);
  assert_int_equal(dmabuf_calls, 1);
  assert_int_equal(reg_calls, 1);
  verbs_dereg_mr(m);
  /* A libibverbs without ibv_reg_dmabuf_mr: refused, not crashed. */
  fake_api.reg_dmabuf_mr = NULL;
  assert_int_equal(verbs_reg_mr(d, w->buf, 2048, RR_MEM_DMABUF, 7, 0, &m), RR_ERR_UNSUPPORTED);
}

/* PCIe relaxed ordering as NCCL asks for it: with RERAIL_IB_PCI_RELAXED_ORDERING (default
 * NCCL_IB_PCI_RELAXED_ORDERING, else 2) at 1 or 2 and ibv_reg_mr_iova2 in libibverbs, memory
 * by address goes through ibv_reg_mr_iova2 (the buffer's address as its I/O address) with
 * IBV_ACCESS_RELAXED_ORDERING, DMA-BUF memory gets the flag too; 0, or a libibverbs without
 * ibv_reg_mr_iova2, is the plain ibv_reg_mr without it. */
static void set_ro(const char *ours, const char *nccls) {
  if (ours) setenv("RERAIL_IB_PCI_RELAXED_ORDERING", ours, 1);
  else unsetenv("RERAIL_IB_PCI_RELAXED_ORDERING");
  if (nccls) setenv("NCCL_IB_PCI_RELAXED_ORDERING", nccls, 1);
  else unsetenv("NCCL_IB_PCI_RELAXED_ORDERING");
  rr_params_reload();
}

/* Register and deregister w->buf as `kind`: 1 when it went through ibv_reg_mr_iova2 with
 * relaxed ordering, 0 through ibv_reg_mr (or DMA-BUF) without it. */
static int registered_relaxed(world *w, uint32_t kind) {
  rr_rail_mr *m = NULL;
  iova2_calls = reg_calls = dmabuf_calls = 0;
  iova2_access = 0, dmabuf_last.access = 0;
  assert_int_equal(verbs_reg_mr(&w->h[0]->base, w->buf, 1024, kind, kind == RR_MEM_DMABUF ? 5 : -1, 0, &m), RR_OK);
  verbs_dereg_mr(m);
  if (kind == RR_MEM_DMABUF) return (dmabuf_last.access & IBV_ACCESS_RELAXED_ORDERING) != 0;
  assert_int_equal(iova2_calls + reg_calls, 1);
  if (!iova2_calls) return 0;
  assert_int_equal(iova2_iova, (uint64_t)(uintptr_t)w->buf);
  assert_true(iova2_access & IBV_ACCESS_REMOTE_WRITE);
  return (iova2_access & IBV_ACCESS_RELAXED_ORDERING) != 0;
}

static void test_relaxed_ordering(void **state) {
  world *w = *state;
  fake_api.reg_mr_iova2 = f_reg_mr_iova2;
  fake_api.reg_dmabuf_mr = f_reg_dmabuf_mr;
  set_ro(NULL, NULL); /* NCCL's default: 2, on where supported */
  assert_int_equal(registered_relaxed(w, RR_MEM_HOST), 1);
  assert_int_equal(registered_relaxed(w, RR_MEM_CUDA), 1);
  assert_int_equal(registered_relaxed(w, RR_MEM_DMABUF), 1);
  set_ro(NULL, "0"); /* NCCL's variable when ours is unset */
  assert_int_equal(registered_relaxed(w, RR_MEM_CUDA), 0);
  assert_int_equal(reg_calls, 1);
  assert_int_equal(registered_relaxed(w, RR_MEM_DMABUF), 0);
  set_ro("1", "0"); /* ours wins */
  assert_int_equal(registered_relaxed(w, RR_MEM_CUDA), 1);
  set_ro("0", NULL);
  assert_int_equal(registered_relaxed(w, RR_MEM_HOST), 0);
  set_ro("7", NULL); /* out of range: the default */
  assert_int_equal(rr_params_get()->ib_relaxed_ordering, 2);
  /* A libibverbs older than IBVERBS_1.8: plain ibv_reg_mr, no flag. */
  fake_api.reg_mr_iova2 = NULL;
  set_ro("1", NULL);
  assert_int_equal(registered_relaxed(w, RR_MEM_CUDA), 0);
  assert_int_equal(reg_calls, 1);
  fake_api.reg_dmabuf_mr = NULL;
  set_ro(NULL, NULL);
}

/* ---- the flush QP ----------------------------------------------------------------- */

static void test_flush_read_completes(void **state) {
  world *w = *state;
  rr_rail_flush f = {0};
  rr_rail_dev *d = &w->h[0]->base;
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf + 100, &f), RR_OK);
  assert_int_equal(f.state, RR_FLUSH_PENDING);
  /* One QP, made now and connected to itself; one signalled 1-byte RDMA READ of the buffer
   * under the buffer's own key on that device. */
  assert_int_equal(nqps, 1);
  assert_int_equal(self_dest_qpn[0], qps[0].qp_num);
  assert_int_equal(nwrs, 1);
  assert_int_equal(wrs[0].opcode, IBV_WR_RDMA_READ);
  assert_true(wrs[0].flags & IBV_SEND_SIGNALED);
  assert_int_equal(wrs[0].raddr, (uint64_t)(uintptr_t)(w->buf + 100));
  assert_int_equal(wrs[0].rkey, 0x40u);
  assert_int_equal(wrs[0].len, 1);
  verbs_flush_poll(d);
  assert_int_equal(f.state, RR_FLUSH_PENDING); /* nothing completed yet */
  uint64_t before = rr_verbs_flush_reads(), counted = rr_counter_get(RR_CTR_VERBS_FLUSH_READS);
  assert_true(complete_next(w->h[0], IBV_WC_SUCCESS));
  verbs_flush_poll(d);
  assert_int_equal(f.state, RR_FLUSH_DONE);
  assert_int_equal(rr_verbs_flush_reads(), before + 1);
  assert_int_equal(rr_counter_get(RR_CTR_VERBS_FLUSH_READS), counted + 1); /* what the lab decides on */
  /* The QP is kept for the next flush. */
  rr_rail_flush g = {0};
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &g), RR_OK);
  assert_int_equal(nqps, 1);
  /* An address outside the registration is refused. */
  rr_rail_flush x = {0};
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf + sizeof w->buf, &x), RR_ERR_INVALID);
  assert_int_equal(verbs_flush_post(d, &w->reg[1], w->buf, &x), RR_ERR_INVALID); /* another device's key */
}

static void test_flush_error_completion_fails_and_remakes_qp(void **state) {
  world *w = *state;
  rr_rail_dev *d = &w->h[0]->base;
  rr_rail_flush f[3] = {0};
  for (int i = 0; i < 3; i++) assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &f[i]), RR_OK);
  assert_true(complete_next(w->h[0], IBV_WC_SUCCESS));
  assert_true(complete_next(w->h[0], IBV_WC_RETRY_EXC_ERR));
  verbs_flush_poll(d);
  assert_int_equal(f[0].state, RR_FLUSH_DONE);
  assert_int_equal(f[1].state, RR_FLUSH_FAILED);
  /* The QP is in error: the read behind it fails too, and the QP goes. */
  assert_int_equal(f[2].state, RR_FLUSH_FAILED);
  assert_int_equal(qps_destroyed, 1);
  assert_int_equal(cqs_destroyed, 1);
  /* The next flush makes a fresh QP. */
  rr_rail_flush g = {0};
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &g), RR_OK);
  assert_int_equal(nqps, 2);
  assert_int_equal(self_dest_qpn[1], qps[1].qp_num);
}

static void test_flush_queue_full_port_down_abandon(void **state) {
  world *w = *state;
  rr_rail_dev *d = &w->h[0]->base;
  static rr_rail_flush f[65];
  memset(f, 0, sizeof f);
  for (int i = 0; i < 64; i++) assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &f[i]), RR_OK);
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &f[64]), RR_AGAIN);
  assert_true(complete_next(w->h[0], IBV_WC_SUCCESS));
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &f[64]), RR_OK); /* room again */
  /* Abandoning a read that never completes resets the QP: everything on it fails at once. */
  verbs_flush_abandon(d, &f[10]);
  for (int i = 1; i < 65; i++) assert_int_equal(f[i].state, RR_FLUSH_FAILED);
  assert_int_equal(f[0].state, RR_FLUSH_DONE);
  assert_int_equal(qps_destroyed, 1);
  /* A port that is down takes no read (it could only time out). */
  w->h[0]->port_down = 1;
  rr_rail_flush g = {0};
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &g), RR_ERR_RAIL);
  w->h[0]->port_down = 0;
  /* A device that cannot make the QP says so at once. */
  fail_create_qp = 1;
  assert_int_equal(verbs_flush_post(d, &w->reg[0], w->buf, &g), RR_ERR_RAIL);
}

/* ---- iflush and test --------------------------------------------------------------- */

static void test_iflush_host_memory_and_disabled(void **state) {
  world *w = *state;
  void *req = (void *)1;
  rr_mr host = w->mr;
  host.type = RR_PTR_HOST;
  assert_int_equal(iflush(w, &host, 0, 100, &req), RR_OK);
  assert_null(req);
  /* Nothing received: nothing to flush. */
  assert_int_equal(iflush(w, &w->mr, 0, 0, &req), RR_OK);
  assert_null(req);
  setenv("RERAIL_GDR_FLUSH_DISABLE", "1", 1);
  rr_params_reload();
  assert_int_equal(iflush(w, &w->mr, 0, 100, &req), RR_OK);
  assert_null(req);
  assert_int_equal(nwrs, 0);
  unsetenv("RERAIL_GDR_FLUSH_DISABLE");
  /* The lab's test knob flushes host memory as GPU memory. */
  setenv("RERAIL_TEST_FORCE_GPU_FLUSH", "1", 1);
  rr_params_reload();
  assert_int_equal(iflush(w, &host, 0, 100, &req), RR_OK);
  assert_non_null(req);
  unsetenv("RERAIL_TEST_FORCE_GPU_FLUSH");
  rr_params_reload();
  while (complete_next(w->h[0], IBV_WC_SUCCESS) || complete_next(w->h[1], IBV_WC_SUCCESS)) {}
  rr_status st;
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
  /* A buffer outside its registration is refused. */
  assert_int_equal(iflush(w, &w->mr, sizeof w->buf, 1, &req), RR_ERR_INVALID);
}

static void test_iflush_reads_on_every_active_rail(void **state) {
  world *w = *state;
  void *req = NULL;
  assert_int_equal(iflush(w, &w->mr, 512, 100, &req), RR_OK);
  assert_non_null(req);
  assert_int_equal(reads_on(w, 0), 1);
  assert_int_equal(reads_on(w, 1), 1);
  rr_status st;
  assert_false(test_req(req, &st));
  assert_true(complete_next(w->h[0], IBV_WC_SUCCESS));
  assert_false(test_req(req, &st)); /* the other NIC's read is still out */
  assert_true(complete_next(w->h[1], IBV_WC_SUCCESS));
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
  /* A rail that is down carries no traffic: one read, on the other NIC. */
  w->comm->engine.rails[0].state = RR_RAIL_DOWN;
  nwrs = 0;
  assert_int_equal(iflush(w, &w->mr, 0, 8, &req), RR_OK);
  assert_int_equal(reads_on(w, 0), 0);
  assert_int_equal(reads_on(w, 1), 1);
  assert_true(complete_next(w->h[1], IBV_WC_SUCCESS));
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
}

static void test_iflush_failed_nic_hands_over(void **state) {
  world *w = *state;
  w->comm->engine.rails[1].state = RR_RAIL_DOWN; /* a backup, idle */
  void *req = NULL;
  assert_int_equal(iflush(w, &w->mr, 0, 100, &req), RR_OK);
  assert_int_equal(reads_on(w, 0), 1);
  assert_int_equal(reads_on(w, 1), 0);
  /* rail 0's NIC fails its read (its port just went down): the read moves to the other NIC
   * of the connection, and the flush succeeds there. */
  w->h[0]->port_down = 1;
  assert_true(complete_next(w->h[0], IBV_WC_RETRY_EXC_ERR));
  rr_status st;
  assert_false(test_req(req, &st));
  assert_int_equal(st, RR_OK);
  assert_int_equal(reads_on(w, 1), 1);
  assert_true(complete_next(w->h[1], IBV_WC_SUCCESS));
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
}

/* Polls for longer than any scheduling delay, short of a hang: the cases below
 * wait on what the flush does, not on a sleep that a loaded machine stretches. */
#define WAIT_NS (10ull * 1000000000ull)

static void test_iflush_stuck_read_is_abandoned(void **state) {
  world *w = *state;
  set_delta_ms("20");
  w->comm->engine.rails[1].state = RR_RAIL_DOWN;
  void *req = NULL;
  uint64_t t0 = rr_now_ns();
  assert_int_equal(iflush(w, &w->mr, 0, 100, &req), RR_OK);
  /* Rail 0's read never completes: after the progress timeout it is given up on and the
   * other NIC reads instead. Only a test() gives a read up, so the test() that posts the
   * other NIC's read is caught here, before that read can in turn outlive a timeout
   * (which a fixed sleep allowed when this thread was held up past 20 ms). */
  rr_status st;
  assert_false(test_req(req, &st));
  struct timespec ts = {0, 1000000};
  while (reads_on(w, 1) == 0 && rr_now_ns() - t0 < WAIT_NS) {
    nanosleep(&ts, NULL);
    assert_false(test_req(req, &st));
    assert_int_equal(st, RR_OK);
  }
  /* Never before its progress timeout (delays only make this later). */
  assert_true(rr_now_ns() - t0 >= 20 * 1000000ull);
  assert_int_equal(qps_destroyed, 1);
  assert_int_equal(reads_on(w, 1), 1);
  assert_true(complete_next(w->h[1], IBV_WC_SUCCESS));
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
}

static void test_iflush_no_nic_can_read_is_an_error_not_a_hang(void **state) {
  world *w = *state;
  set_delta_ms("20");
  void *req = NULL;
  uint64_t t0 = rr_now_ns();
  assert_int_equal(iflush(w, &w->mr, 0, 100, &req), RR_OK);
  w->h[0]->port_down = w->h[1]->port_down = 1;
  assert_true(complete_next(w->h[0], IBV_WC_RETRY_EXC_ERR));
  assert_true(complete_next(w->h[1], IBV_WC_RETRY_EXC_ERR));
  /* Every NIC fails: rounds again for 4 progress timeouts (a port may come back), then an
   * error -- within a bounded time, never a hang. Not at the first failure: the error
   * comes 4 x 20 ms after the flush began at the soonest, however the calls were spaced
   * (counting calls assumed 2 ms sleeps, which a loaded machine stretches). */
  rr_status st = RR_OK;
  int done = 0;
  struct timespec ts = {0, 2 * 1000000};
  while (!done && rr_now_ns() - t0 < WAIT_NS) {
    done = test_req(req, &st);
    if (!done) nanosleep(&ts, NULL);
  }
  uint64_t took = rr_now_ns() - t0;
  assert_true(done);
  assert_int_equal(st, RR_ERR_RAIL);
  assert_true(took >= 4 * 20 * 1000000ull);
}

static void test_iflush_port_back_within_the_rounds(void **state) {
  world *w = *state;
  /* A progress timeout long enough that no scheduling delay uses up the rounds (4 of
   * them, 4 s) before the port is back; the rounds come every tenth of it. */
  set_delta_ms("1000");
  void *req = NULL;
  uint64_t t0 = rr_now_ns();
  w->comm->engine.rails[1].state = RR_RAIL_DOWN;
  assert_int_equal(iflush(w, &w->mr, 0, 100, &req), RR_OK);
  w->h[0]->port_down = w->h[1]->port_down = 1;
  assert_true(complete_next(w->h[0], IBV_WC_RETRY_EXC_ERR));
  rr_status st;
  assert_false(test_req(req, &st));
  assert_int_equal(st, RR_OK);
  /* The port comes back before the rounds run out: the next round reads on it, and the
   * flush completes. */
  w->h[0]->port_down = 0;
  int before = reads_on(w, 0);
  struct timespec ts = {0, 5 * 1000000};
  while (reads_on(w, 0) == before && rr_now_ns() - t0 < WAIT_NS) {
    nanosleep(&ts, NULL);
    assert_false(test_req(req, &st));
    assert_int_equal(st, RR_OK);
  }
  assert_int_equal(reads_on(w, 0), before + 1);
  while (complete_next(w->h[0], IBV_WC_SUCCESS)) {}
  assert_true(test_req(req, &st));
  assert_int_equal(st, RR_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_mem_kinds),
      cmocka_unit_test_setup_teardown(test_reg_kinds, setup, teardown),
      cmocka_unit_test_setup_teardown(test_relaxed_ordering, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flush_read_completes, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flush_error_completion_fails_and_remakes_qp, setup, teardown),
      cmocka_unit_test_setup_teardown(test_flush_queue_full_port_down_abandon, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_host_memory_and_disabled, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_reads_on_every_active_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_failed_nic_hands_over, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_stuck_read_is_abandoned, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_no_nic_can_read_is_an_error_not_a_hang, setup, teardown),
      cmocka_unit_test_setup_teardown(test_iflush_port_back_within_the_rounds, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
