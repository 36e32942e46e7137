/* verbs_smoke: drive real RC QPs through the verbs rail's dlopen()ed libibverbs table, inside
 * the rxe lab. Two devices of one process (normally rxe2 -> rxe0, one rail between two "hosts"),
 * RDMA WRITE with immediate of SIZE bytes, ITERS times, every byte checked; then optionally a
 * silent drop on the rail (rxefault) to time the hardware's retry error under RERAIL_IB_TIMEOUT
 * and RERAIL_IB_RETRY_CNT. This checks the table's entry points and the verbs.h inlines
 * (post_send, post_recv, poll_cq go through the context's ops) against a real provider.
 *
 *   verbs_smoke SRC_DEV DST_DEV [SIZE=1048576] [ITERS=20] [DROP_RAIL]
 * Prints "verbs_smoke: ..." lines; exit 0 when every step did what it should. */
#include <endian.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rr_params.h"
#include "verbs_ports.h"

typedef struct side {
  const char *name;
  rr_verbs_port port;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  unsigned char *buf;
} side;

static const rr_ibv_api *api;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define FAIL(...) do { printf("verbs_smoke: FAIL " __VA_ARGS__); printf("\n"); return 1; } while (0)

static int open_side(side *s, size_t size) {
  rr_verbs_opts o = {.hca_spec = NULL, .gid_index = rr_params_get()->ib_gid_index, .sysfs_root = "/sys"};
  char spec[80];
  snprintf(spec, sizeof spec, "=%s", s->name);
  o.hca_spec = spec;
  int n = 0;
  if (rr_verbs_discover(api, &o, &s->port, 1, &n) != RR_OK || n != 1)
    FAIL("%s: not found as an ACTIVE port", s->name);
  s->ctx = rr_verbs_open_device(api, s->name);
  if (!s->ctx) FAIL("%s: cannot open", s->name);
  s->pd = api->alloc_pd(s->ctx);
  s->cq = s->pd ? api->create_cq(s->ctx, 64, NULL, NULL, 0) : NULL;
  s->buf = aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  if (!s->cq || !s->buf) FAIL("%s: pd/cq/buffer", s->name);
  s->mr = api->reg_mr(s->pd, s->buf, size,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  if (!s->mr) FAIL("%s: ibv_reg_mr", s->name);
  struct ibv_qp_init_attr ia = {.send_cq = s->cq, .recv_cq = s->cq, .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 32, .max_recv_wr = 32, .max_send_sge = 1,
                                        .max_recv_sge = 1}};
  s->qp = api->create_qp(s->pd, &ia);
  if (!s->qp) FAIL("%s: ibv_create_qp", s->name);
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = (uint8_t)s->port.port,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                             IBV_ACCESS_LOCAL_WRITE};
  if (api->modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    FAIL("%s: QP to INIT", s->name);
  return 0;
}

static int connect_side(side *s, const side *peer) {
  const rr_params *prm = rr_params_get();
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = (enum ibv_mtu)s->port.active_mtu,
                          .dest_qp_num = peer->qp->qp_num, .rq_psn = 0, .max_dest_rd_atomic = 1,
                          .min_rnr_timer = 12};
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = (uint8_t)s->port.port;
  a.ah_attr.grh.dgid = peer->port.gid;
  a.ah_attr.grh.sgid_index = (uint8_t)s->port.gid_index;
  a.ah_attr.grh.hop_limit = 64;
  if (api->modify_qp(s->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    FAIL("%s: QP to RTR", s->name);
  struct ibv_qp_attr r = {.qp_state = IBV_QPS_RTS, .timeout = (uint8_t)prm->ib_timeout,
                          .retry_cnt = (uint8_t)prm->ib_retry_cnt, .rnr_retry = 7, .sq_psn = 0,
                          .max_rd_atomic = 1};
  if (api->modify_qp(s->qp, &r, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
    FAIL("%s: QP to RTS", s->name);
  return 0;
}

/* Poll one completion (up to `limit` seconds); its status, or -1 on timeout. */
static int poll_one(side *s, struct ibv_wc *wc, double limit) {
  double t0 = now_s();
  while (now_s() - t0 < limit) {
    int n = ibv_poll_cq(s->cq, 1, wc);
    if (n < 0) return -2;
    if (n == 1) return (int)wc->status;
  }
  return -1;
}

static int write_imm(side *src, side *dst, size_t size, uint32_t imm) {
  struct ibv_recv_wr rw = {.wr_id = imm, .sg_list = NULL, .num_sge = 0}, *bad_r;
  if (ibv_post_recv(dst->qp, &rw, &bad_r)) FAIL("post_recv");
  struct ibv_sge sge = {.addr = (uintptr_t)src->buf, .length = (uint32_t)size, .lkey = src->mr->lkey};
  struct ibv_send_wr sw = {.wr_id = imm, .sg_list = &sge, .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                           .imm_data = htobe32(imm)}, *bad_s;
  sw.wr.rdma.remote_addr = (uintptr_t)dst->buf;
  sw.wr.rdma.rkey = dst->mr->rkey;
  if (ibv_post_send(src->qp, &sw, &bad_s)) FAIL("post_send");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: verbs_smoke SRC_DEV DST_DEV [SIZE] [ITERS] [DROP_RAIL]\n");
    return 2;
  }
  size_t size = argc > 3 ? strtoull(argv[3], NULL, 0) : 1 << 20;
  int iters = argc > 4 ? atoi(argv[4]) : 20;
  const char *drop_rail = argc > 5 ? argv[5] : NULL;
  if (size == 0 || size > (1u << 30) || iters < 1) return 2;
  api = rr_ibv_load();
  if (!api) FAIL("libibverbs not usable");
  side src = {.name = argv[1]}, dst = {.name = argv[2]};
  if (open_side(&src, size) || open_side(&dst, size)) return 1;
  if (connect_side(&src, &dst) || connect_side(&dst, &src)) return 1;

  double t0 = now_s();
  for (int it = 0; it < iters; it++) {
    for (size_t i = 0; i < size; i++) src.buf[i] = (unsigned char)(i * 7 + (size_t)it * 13 + 1);
    memset(dst.buf, 0, size);
    if (write_imm(&src, &dst, size, 1000u + (uint32_t)it)) return 1;
    struct ibv_wc wc;
    int st = poll_one(&src, &wc, 30);
    if (st != IBV_WC_SUCCESS) FAIL("send completion %d: %s", st, st >= 0 ? api->wc_status_str(wc.status) : "none");
    st = poll_one(&dst, &wc, 30);
    if (st != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
        be32toh(wc.imm_data) != 1000u + (uint32_t)it || wc.byte_len != size)
      FAIL("receive completion: status %d opcode %d imm %u len %u", st, (int)wc.opcode,
           be32toh(wc.imm_data), wc.byte_len);
    if (memcmp(src.buf, dst.buf, size)) FAIL("data differs in iteration %d", it);
  }
  double dt = now_s() - t0;
  printf("verbs_smoke: ok %d x %zu B RDMA WRITE with immediate %s -> %s, data verified, %.2f MB/s with the fill and check\n",
         iters, size, src.name, dst.name, (double)size * iters / dt / 1e6);

  if (drop_rail) {
    /* A silent rail: the QP retries timeout x retry_cnt, then completes in error. */
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rxefault drop %s on", drop_rail);
    if (system(cmd) != 0) FAIL("%s", cmd);
    if (write_imm(&src, &dst, size, 7)) return 1;
    double f0 = now_s();
    struct ibv_wc wc;
    int st = poll_one(&src, &wc, 60);
    double waited = now_s() - f0;
    snprintf(cmd, sizeof cmd, "rxefault drop %s off", drop_rail);
    if (system(cmd) != 0) FAIL("%s", cmd);
    if (st != IBV_WC_RETRY_EXC_ERR)
      FAIL("under the drop: completion %d (%s) after %.2f s, want IBV_WC_RETRY_EXC_ERR", st,
           st >= 0 ? api->wc_status_str(wc.status) : "none", waited);
    printf("verbs_smoke: ok retry error (%s) %.0f ms after the post, timeout %d retry_cnt %d\n",
           api->wc_status_str(wc.status), waited * 1e3, rr_params_get()->ib_timeout,
           rr_params_get()->ib_retry_cnt);
  }
  return 0;
}
