/* A fake libibverbs.so.1 for tests: the plugin dlopen()s "libibverbs.so.1"
 * (verbs_lib.c), so a test that puts this library's directory first in
 * LD_LIBRARY_PATH runs the real discovery, the transport registry, the core
 * and `rerail devices` over HCAs that exist only here, on any host.
 *
 * RR_FAKE_IBV_PORTS lists the HCAs, one port each, separated by ';':
 *     name:ib[:lid=N][:state=down][:subnet=N]
 * InfiniBand only (LID addressing, no netdev, no IP address, GID
 * fe80::<subnet>:0002:c903:00:<lid>), the case real clusters have and the
 * Soft-RoCE lab cannot show. GID index 0 is the port GID; the rest of the
 * 128-entry table is empty.
 *
 * Data moves as the peer's NIC would move it, inside this process: QPs are
 * found by number, an RDMA WRITE copies into the peer's memory after its
 * rkey is checked against a registration, a write with immediate or a SEND
 * consumes one of the peer's posted receives (and waits, as RNR retry does,
 * while none is posted, holding back everything behind it on that QP), an
 * RDMA READ copies back. Work is carried out when it is posted and again on
 * every poll, so the receiver's progress lets a waiting sender on. A QP
 * moved to ERR flushes what it holds. One lock guards everything. */
#include <infiniband/verbs.h>

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#undef ibv_query_port
#undef ibv_reg_mr

#define MAX_DEVS 8
#define MAX_QPS 4096
#define MAX_MRS 4096
#define INLINE_MAX 1024

#define EXPORT __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct fdev {
  struct ibv_device dev;     /* first: ibv_device* <-> fdev* */
  char name[64];
  int index;
  int active;
  uint16_t lid;
  uint16_t subnet;
} fdev;

static fdev devs[MAX_DEVS];
static int ndevs = -1;

static void parse_ports(void) {
  if (ndevs >= 0) return;
  ndevs = 0;
  const char *spec = getenv("RR_FAKE_IBV_PORTS");
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", spec ? spec : "");
  char *save = NULL;
  for (char *e = strtok_r(buf, ";", &save); e && ndevs < MAX_DEVS; e = strtok_r(NULL, ";", &save)) {
    fdev *d = &devs[ndevs];
    memset(d, 0, sizeof *d);
    char *save2 = NULL;
    char *tok = strtok_r(e, ":", &save2);
    if (!tok) continue;
    snprintf(d->name, sizeof d->name, "%s", tok);
    snprintf(d->dev.name, sizeof d->dev.name, "%s", tok);
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    d->index = ndevs;
    d->active = 1;
    d->lid = (uint16_t)(0x10 + ndevs);
    while ((tok = strtok_r(NULL, ":", &save2))) {
      if (!strncmp(tok, "lid=", 4)) d->lid = (uint16_t)strtoul(tok + 4, NULL, 0);
      else if (!strcmp(tok, "state=down")) d->active = 0;
      else if (!strncmp(tok, "subnet=", 7)) d->subnet = (uint16_t)strtoul(tok + 7, NULL, 0);
    }
    ndevs++;
  }
}

/* ------------------------------------------------------------ objects */

typedef struct fcq {
  struct ibv_cq cq;
  struct ibv_wc *wc;
  unsigned head, tail, cap;
} fcq;

typedef struct fwr {
  uint64_t wr_id;
  enum ibv_wr_opcode opcode;
  unsigned flags;
  uint32_t imm;
  uint64_t laddr;            /* local buffer (0 when inline or empty) */
  uint32_t len;
  uint64_t raddr;
  uint32_t rkey;
  uint8_t data[INLINE_MAX];  /* an inline payload, copied at post time */
} fwr;

typedef struct frecv {
  uint64_t wr_id, addr;
  uint32_t len;
} frecv;

typedef struct fqp {
  struct ibv_qp qp;
  struct ibv_qp_attr attr;   /* as last modified: what query_qp reads back */
  fwr *sq;
  unsigned sq_head, sq_tail, sq_cap;
  frecv *rq;
  unsigned rq_head, rq_tail, rq_cap;
} fqp;

static fqp *qps[MAX_QPS];
static uint32_t next_qpn = 0x100;
static struct ibv_mr *mrs[MAX_MRS];
static uint32_t next_key = 0x1000;

static void cq_push(struct ibv_cq *c, struct ibv_wc wc) {
  fcq *q = (fcq *)c;
  if (q->tail - q->head == q->cap) {
    unsigned cap = q->cap ? 2 * q->cap : 256;
    struct ibv_wc *n = calloc(cap, sizeof *n);
    if (!n) abort();
    for (unsigned i = 0; i < q->tail - q->head; i++) n[i] = q->wc[(q->head + i) % q->cap];
    q->tail -= q->head, q->head = 0;
    free(q->wc);
    q->wc = n, q->cap = cap;
  }
  q->wc[q->tail++ % q->cap] = wc;
}

static fqp *qp_by_num(uint32_t qpn) {
  for (int i = 0; i < MAX_QPS; i++)
    if (qps[i] && qps[i]->qp.qp_num == qpn) return qps[i];
  return NULL;
}

/* The registration a peer's key names, covering [addr, addr+len). */
static int key_covers(uint32_t rkey, uint64_t addr, uint32_t len) {
  for (int i = 0; i < MAX_MRS; i++)
    if (mrs[i] && mrs[i]->rkey == rkey && addr >= (uint64_t)(uintptr_t)mrs[i]->addr &&
        addr + len <= (uint64_t)(uintptr_t)mrs[i]->addr + mrs[i]->length)
      return 1;
  return 0;
}

static enum ibv_wc_opcode wc_opcode(enum ibv_wr_opcode op) {
  return op == IBV_WR_SEND ? IBV_WC_SEND : op == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
}

/* Carry out the head of q's send queue; 0 when it must wait (no receive posted at the peer). */
static int execute_one(fqp *q) {
  fwr *w = &q->sq[q->sq_head % q->sq_cap];
  enum ibv_wc_status st = IBV_WC_SUCCESS;
  fqp *d = qp_by_num(q->attr.dest_qp_num);
  const void *src = w->flags & IBV_SEND_INLINE ? (const void *)w->data : (const void *)(uintptr_t)w->laddr;
  if (!d || d->attr.qp_state < IBV_QPS_RTR) {
    st = IBV_WC_RETRY_EXC_ERR;
  } else if (w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && d->rq_head == d->rq_tail) return 0;
    if (w->len && !key_covers(w->rkey, w->raddr, w->len)) st = IBV_WC_REM_ACCESS_ERR;
    else if (w->len) memcpy((void *)(uintptr_t)w->raddr, src, w->len);
    if (st == IBV_WC_SUCCESS && w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
      frecv *r = &d->rq[d->rq_head++ % d->rq_cap];
      cq_push(d->qp.recv_cq, (struct ibv_wc){.wr_id = r->wr_id, .status = IBV_WC_SUCCESS,
                                              .opcode = IBV_WC_RECV_RDMA_WITH_IMM, .byte_len = w->len,
                                              .imm_data = w->imm, .wc_flags = IBV_WC_WITH_IMM,
                                              .qp_num = d->qp.qp_num});
    }
  } else if (w->opcode == IBV_WR_SEND) {
    if (d->rq_head == d->rq_tail) return 0;
    frecv *r = &d->rq[d->rq_head++ % d->rq_cap];
    enum ibv_wc_status rs = w->len <= r->len ? IBV_WC_SUCCESS : IBV_WC_LOC_LEN_ERR;
    if (rs == IBV_WC_SUCCESS && w->len) memcpy((void *)(uintptr_t)r->addr, src, w->len);
    cq_push(d->qp.recv_cq, (struct ibv_wc){.wr_id = r->wr_id, .status = rs, .opcode = IBV_WC_RECV,
                                            .byte_len = w->len, .qp_num = d->qp.qp_num});
    if (rs != IBV_WC_SUCCESS) st = IBV_WC_REM_INV_REQ_ERR;
  } else if (w->opcode == IBV_WR_RDMA_READ) {
    if (w->len && !key_covers(w->rkey, w->raddr, w->len)) st = IBV_WC_REM_ACCESS_ERR;
    else if (w->len) memcpy((void *)(uintptr_t)w->laddr, (const void *)(uintptr_t)w->raddr, w->len);
  } else {
    st = IBV_WC_LOC_QP_OP_ERR;
  }
  q->sq_head++;
  if ((w->flags & IBV_SEND_SIGNALED) || st != IBV_WC_SUCCESS)
    cq_push(q->qp.send_cq, (struct ibv_wc){.wr_id = w->wr_id, .status = st, .opcode = wc_opcode(w->opcode),
                                            .qp_num = q->qp.qp_num});
  if (st != IBV_WC_SUCCESS) q->attr.qp_state = IBV_QPS_ERR;
  return 1;
}

/* A QP in ERR completes everything it holds with a flush error. */
static void flush_qp(fqp *q) {
  for (; q->sq_head != q->sq_tail; q->sq_head++) {
    fwr *w = &q->sq[q->sq_head % q->sq_cap];
    cq_push(q->qp.send_cq, (struct ibv_wc){.wr_id = w->wr_id, .status = IBV_WC_WR_FLUSH_ERR,
                                            .opcode = wc_opcode(w->opcode), .qp_num = q->qp.qp_num});
  }
  for (; q->rq_head != q->rq_tail; q->rq_head++)
    cq_push(q->qp.recv_cq, (struct ibv_wc){.wr_id = q->rq[q->rq_head % q->rq_cap].wr_id,
                                            .status = IBV_WC_WR_FLUSH_ERR, .opcode = IBV_WC_RECV,
                                            .qp_num = q->qp.qp_num});
}

static void pump(void) {
  for (int progress = 1; progress;) {
    progress = 0;
    for (int i = 0; i < MAX_QPS; i++) {
      fqp *q = qps[i];
      if (!q) continue;
      if (q->attr.qp_state == IBV_QPS_ERR) {
        if (q->sq_head != q->sq_tail || q->rq_head != q->rq_tail) flush_qp(q), progress = 1;
        continue;
      }
      while (q->attr.qp_state == IBV_QPS_RTS && q->sq_head != q->sq_tail && execute_one(q)) progress = 1;
    }
  }
}

/* ------------------------------------------------------- data path (ops) */

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  fqp *q = (fqp *)qp;
  pthread_mutex_lock(&lock);
  int rc = 0;
  for (; wr; wr = wr->next) {
    uint32_t len = 0;
    for (int s = 0; s < wr->num_sge; s++) len += wr->sg_list[s].length;
    if (q->sq_tail - q->sq_head == q->sq_cap || wr->num_sge > 1 ||
        ((wr->send_flags & IBV_SEND_INLINE) && len > INLINE_MAX) || q->attr.qp_state < IBV_QPS_RTS) {
      rc = q->attr.qp_state < IBV_QPS_RTS ? EINVAL : ENOMEM;
      break;
    }
    fwr *w = &q->sq[q->sq_tail % q->sq_cap];
    *w = (fwr){.wr_id = wr->wr_id, .opcode = wr->opcode, .flags = wr->send_flags, .imm = wr->imm_data, .len = len,
               .raddr = wr->wr.rdma.remote_addr, .rkey = wr->wr.rdma.rkey};
    if (len) {
      w->laddr = wr->sg_list[0].addr;
      if (wr->send_flags & IBV_SEND_INLINE) memcpy(w->data, (const void *)(uintptr_t)w->laddr, len);
    }
    q->sq_tail++;
  }
  if (rc && bad) *bad = wr;
  pump();
  pthread_mutex_unlock(&lock);
  return rc;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  fqp *q = (fqp *)qp;
  pthread_mutex_lock(&lock);
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (q->rq_tail - q->rq_head == q->rq_cap || wr->num_sge > 1) {
      rc = ENOMEM;
      break;
    }
    q->rq[q->rq_tail++ % q->rq_cap] = (frecv){.wr_id = wr->wr_id, .addr = wr->num_sge ? wr->sg_list[0].addr : 0,
                                              .len = wr->num_sge ? wr->sg_list[0].length : 0};
  }
  if (rc && bad) *bad = wr;
  pump();
  pthread_mutex_unlock(&lock);
  return rc;
}

static int f_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc) {
  fcq *q = (fcq *)c;
  pthread_mutex_lock(&lock);
  pump();
  int k = 0;
  while (k < n && q->head != q->tail) wc[k++] = q->wc[q->head++ % q->cap];
  pthread_mutex_unlock(&lock);
  return k;
}

/* --------------------------------------------------------- control path */

EXPORT struct ibv_device **ibv_get_device_list(int *num) {
  pthread_mutex_lock(&lock);
  parse_ports();
  struct ibv_device **list = calloc((size_t)ndevs + 1, sizeof *list);
  for (int i = 0; list && i < ndevs; i++) list[i] = &devs[i].dev;
  if (num) *num = list ? ndevs : 0;
  pthread_mutex_unlock(&lock);
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) { free(list); }

EXPORT const char *ibv_get_device_name(struct ibv_device *dev) { return ((fdev *)dev)->name; }

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *dev) {
  struct ibv_context *ctx = calloc(1, sizeof *ctx);
  if (!ctx) return NULL;
  ctx->device = dev;
  ctx->async_fd = eventfd(0, EFD_CLOEXEC); /* never readable: no async events here */
  ctx->cmd_fd = -1;
  ctx->num_comp_vectors = 1;
  ctx->ops.post_send = f_post_send;
  ctx->ops.post_recv = f_post_recv;
  ctx->ops.poll_cq = f_poll_cq;
  pthread_mutex_init(&ctx->mutex, NULL);
  return ctx;
}

EXPORT int ibv_close_device(struct ibv_context *ctx) {
  close(ctx->async_fd);
  pthread_mutex_destroy(&ctx->mutex);
  free(ctx);
  return 0;
}

EXPORT int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
  fdev *d = (fdev *)ctx->device;
  memset(a, 0, sizeof *a);
  a->node_guid = htobe64(0x0002c90300000000ull + (uint64_t)d->index);
  a->phys_port_cnt = 1;
  a->max_qp = MAX_QPS;
  a->max_qp_wr = 32768;
  a->max_cqe = 1 << 22;
  a->max_sge = 30;
  a->max_qp_rd_atom = 16;
  return 0;
}

/* The exported entry point behind verbs.h's ibv_query_port macro; it fills
 * the older layout, the prefix of struct ibv_port_attr up to link_layer. */
struct _compat_ibv_port_attr;
EXPORT int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *out) {
  fdev *d = (fdev *)ctx->device;
  if (port != 1) return EINVAL;
  struct ibv_port_attr *a = (struct ibv_port_attr *)out;
  a->state = d->active ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 128;
  a->lid = d->active ? d->lid : 0;
  a->active_width = 2;   /* 4x */
  a->active_speed = 64;  /* HDR: 200 Gb/s at 4x */
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid) {
  fdev *d = (fdev *)ctx->device;
  if (port != 1 || index < 0 || index >= 128) return EINVAL;
  memset(gid, 0, sizeof *gid);
  if (index) return 0;
  static const uint8_t prefix[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  memcpy(gid->raw, prefix, 8);
  gid->raw[6] = (uint8_t)(d->subnet >> 8), gid->raw[7] = (uint8_t)d->subnet;
  gid->raw[8] = 0x00, gid->raw[9] = 0x02, gid->raw[10] = 0xc9, gid->raw[11] = 0x03;
  gid->raw[14] = (uint8_t)(d->lid >> 8), gid->raw[15] = (uint8_t)d->lid;
  return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = ctx;
  return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  (void)access;
  struct ibv_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return NULL;
  pthread_mutex_lock(&lock);
  int slot = -1;
  for (int i = 0; i < MAX_MRS && slot < 0; i++)
    if (!mrs[i]) slot = i;
  if (slot < 0) {
    pthread_mutex_unlock(&lock);
    free(mr);
    errno = ENOMEM;
    return NULL;
  }
  *mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = len, .lkey = next_key,
                        .rkey = next_key};
  next_key++;
  mrs[slot] = mr;
  pthread_mutex_unlock(&lock);
  return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_MRS; i++)
    if (mrs[i] == mr) mrs[i] = NULL;
  pthread_mutex_unlock(&lock);
  free(mr);
  return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx) {
  struct ibv_comp_channel *ch = calloc(1, sizeof *ch);
  if (!ch) return NULL;
  ch->context = ctx;
  ch->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
  close(ch->fd);
  free(ch);
  return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                    struct ibv_comp_channel *ch, int comp_vector) {
  (void)comp_vector;
  fcq *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->cq.context = ctx;
  q->cq.channel = ch;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  return &q->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  fcq *q = (fcq *)cq;
  free(q->wc);
  free(q);
  return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context) {
  (void)ch, (void)cq, (void)cq_context;
  errno = EAGAIN;
  return -1;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) { (void)cq, (void)n; }

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init) {
  if (init->qp_type != IBV_QPT_RC) {
    errno = EINVAL;
    return NULL;
  }
  fqp *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->sq_cap = init->cap.max_send_wr ? init->cap.max_send_wr : 1;
  q->rq_cap = init->cap.max_recv_wr ? init->cap.max_recv_wr : 1;
  q->sq = calloc(q->sq_cap, sizeof *q->sq);
  q->rq = calloc(q->rq_cap, sizeof *q->rq);
  pthread_mutex_lock(&lock);
  int slot = -1;
  for (int i = 0; i < MAX_QPS && slot < 0; i++)
    if (!qps[i]) slot = i;
  if (slot < 0 || !q->sq || !q->rq) {
    pthread_mutex_unlock(&lock);
    free(q->sq), free(q->rq), free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->qp.context = pd->context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.srq = init->srq;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.qp_context = init->qp_context;
  q->qp.qp_num = next_qpn++;
  q->qp.state = IBV_QPS_RESET;
  q->attr.qp_state = IBV_QPS_RESET;
  qps[slot] = q;
  pthread_mutex_unlock(&lock);
  return &q->qp;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  fqp *q = (fqp *)qp;
  pthread_mutex_lock(&lock);
  if (mask & IBV_QP_STATE) q->attr.qp_state = a->qp_state, qp->state = a->qp_state;
  if (mask & IBV_QP_AV) q->attr.ah_attr = a->ah_attr;
  if (mask & IBV_QP_DEST_QPN) q->attr.dest_qp_num = a->dest_qp_num;
  if (mask & IBV_QP_PATH_MTU) q->attr.path_mtu = a->path_mtu;
  if (mask & IBV_QP_RQ_PSN) q->attr.rq_psn = a->rq_psn;
  if (mask & IBV_QP_SQ_PSN) q->attr.sq_psn = a->sq_psn;
  if (mask & IBV_QP_PORT) q->attr.port_num = a->port_num;
  if (mask & IBV_QP_ACCESS_FLAGS) q->attr.qp_access_flags = a->qp_access_flags;
  if (mask & IBV_QP_TIMEOUT) q->attr.timeout = a->timeout;
  if (mask & IBV_QP_RETRY_CNT) q->attr.retry_cnt = a->retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) q->attr.rnr_retry = a->rnr_retry;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) q->attr.max_rd_atomic = a->max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->attr.max_dest_rd_atomic = a->max_dest_rd_atomic;
  if (mask & IBV_QP_MIN_RNR_TIMER) q->attr.min_rnr_timer = a->min_rnr_timer;
  pump();
  pthread_mutex_unlock(&lock);
  return 0;
}

EXPORT int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init) {
  (void)mask;
  fqp *q = (fqp *)qp;
  pthread_mutex_lock(&lock);
  *a = q->attr;
  pthread_mutex_unlock(&lock);
  if (init) memset(init, 0, sizeof *init);
  return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  fqp *q = (fqp *)qp;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_QPS; i++)
    if (qps[i] == q) qps[i] = NULL;
  pthread_mutex_unlock(&lock);
  free(q->sq);
  free(q->rq);
  free(q);
  return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev) {
  (void)ctx, (void)ev;
  errno = EAGAIN;
  return -1;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *ev) { (void)ev; }

EXPORT const char *ibv_event_type_str(enum ibv_event_type t) {
  (void)t;
  return "fake async event";
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s) {
  static char buf[32];
  snprintf(buf, sizeof buf, "fake wc status %d", (int)s);
  return buf;
}
