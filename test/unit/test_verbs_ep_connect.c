/* What a verbs endpoint is made of and how it connects, on the fake libibverbs
 * (verbs_ep_fixture.h): its memory footprint and the device's endpoint limit, the address
 * blob's checks, the QP count both ends agree on, QoS (traffic class, SL) and adaptive
 * routing settings, InfiniBand ports reached by LID, and the NCCL profiler descriptor of its
 * messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h" /* engine_prof_describe: the profiler descriptor */
#include "rr_params.h"

#include "verbs_ep_fixture.h"

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
      cmocka_unit_test_setup_teardown(test_endpoint_footprint_within_budget, setup, teardown),
      cmocka_unit_test_setup_teardown(test_blob_ring_slots_checked, setup, teardown),
      cmocka_unit_test_setup_teardown(test_profiler_descriptor_is_nccls_ib_v1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_qps_agree_on_the_minimum, setup, teardown),
      cmocka_unit_test_setup_teardown(test_traffic_class_and_sl, setup, teardown),
      cmocka_unit_test(test_adaptive_routing_params),
      cmocka_unit_test(test_infiniband_ports_connect_by_lid),
      cmocka_unit_test_setup_teardown(test_communicator_traffic_class, setup, teardown),
      cmocka_unit_test(test_max_eps_honest),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
