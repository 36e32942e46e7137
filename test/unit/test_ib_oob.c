/* InfiniBand HCAs with no IP address, end to end in one process: the fake
 * libibverbs (fake_ibverbs.c, found first through LD_LIBRARY_PATH) presents
 * three IB ports (LIDs, no netdev), one of them DOWN, and loopback is the
 * only IP interface (RERAIL_SOCKET_IFNAME=lo).
 *
 *  - discovery through the transport registry: the two ACTIVE ports are
 *    devices 0 and 1, verbs, InfiniBand, their LIDs, no netdev and no
 *    address; the DOWN port is left out as not_active; lo is left out for
 *    the RDMA ports (rdma_preferred) and is the out-of-band interface;
 *  - getProperties: HCA:port names, the port number, distinct GUIDs;
 *  - listen/connect/accept on each device set up over the out-of-band
 *    interface alone (the handle's address is lo's), and every queue pair
 *    reaches RTS addressed as NCCL's ncclIbQpRtr would: dlid the peer
 *    port's LID, SL from RERAIL_IB_SL, no GRH (one subnet);
 *  - isend/irecv move checked bytes through the fake NICs, both ways. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core_internal.h"
#include "core_pair.h"
#include "net_core.h"
#include "rail_verbs.h"
#include "verbs_ep.h"

#define LID0 0x0011
#define LID1 0x0042
#define TEST_SL 5

static const rr_left_out *left_out_named(const rr_devices *d, const char *name) {
  for (int i = 0; i < d->nleft; i++)
    if (!strcmp(d->left[i].name, name)) return &d->left[i];
  return NULL;
}

static void test_ib_ports_are_devices(void **state) {
  (void)state;
  const rr_devices *d = rr_core_devices_discover();
  assert_int_equal(d->count, 2);
  const uint16_t lids[2] = {LID0, LID1};
  for (int i = 0; i < 2; i++) {
    const rr_rail_dev *rd = d->rail[i];
    assert_string_equal(rd->ops->name, "verbs");
    assert_string_equal(rd->attr.link, "InfiniBand");
    assert_int_equal(rd->attr.lid, lids[i]);
    assert_int_equal(rd->attr.netdev[0], '\0');
    assert_int_equal(rd->attr.port, 1);
    assert_int_equal(rd->attr.caps & RR_RAIL_CAP_SETUP_IS_DATA, 0);
    assert_int_equal(d->nif[i].addr.ss_family, AF_UNSPEC); /* no IP on the HCA */
  }
  assert_string_equal(d->rail[0]->attr.name, "mlx5_0:1");
  assert_string_equal(d->rail[1]->attr.name, "mlx5_1:1");
  const rr_left_out *down = left_out_named(d, "mlx5_2:1");
  assert_non_null(down);
  assert_string_equal(down->reason, RR_LEFT_OUT_NOT_ACTIVE);
  const rr_left_out *lo = left_out_named(d, "lo");
  assert_non_null(lo);
  assert_string_equal(lo->reason, RR_LEFT_OUT_RDMA_PREFERRED);
  assert_true(d->need_oob);
  assert_true(d->has_oob);
  assert_string_equal(d->oob.name, "lo");

  rr_dev_props p0, p1;
  assert_int_equal(rr_net_get_properties(0, &p0), RR_OK);
  assert_int_equal(rr_net_get_properties(1, &p1), RR_OK);
  assert_string_equal(p0.name, "mlx5_0:1");
  assert_int_equal(p0.port, 1);
  assert_true(p0.guid != p1.guid);
  assert_true(p0.ptr_support & RR_PTR_HOST);
}

static void connect_pair_dev(pair *p, int dev) {
  rr_init_args args = {.traffic_class = -1};
  assert_int_equal(rr_net_init(&args, &p->ctx), RR_OK);
  unsigned char handle[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_net_listen(p->ctx, dev, handle, &p->listen), RR_OK);
  /* The handle names the listener's devices at the out-of-band address. */
  rr_peer_addrs peer;
  assert_int_equal(rr_handle_decode(handle, &peer), RR_OK);
  assert_true(peer.naddrs >= 1);
  for (int a = 0; a < peer.naddrs; a++) {
    const struct sockaddr_in *sin = (const struct sockaddr_in *)&peer.addrs[a];
    assert_int_equal(sin->sin_family, AF_INET);
    assert_int_equal(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
  }
  p->send = NULL;
  p->recv = NULL;
  finish_pair_on(p, dev, handle);
}

/* Every QP of every verbs rail of an engine is at RTS, addressed by LID. */
static int check_rtr(rr_engine *e) {
  int checked = 0;
  for (int r = 0; r < e->nrails; r++) {
    rr_rail_ep *rep = e->rails[r].ep;
    if (!rep || rep->ops != &rr_verbs_rail_ops) continue;
    verbs_ep *ep = to_ep(rep);
    uint16_t own = (uint16_t)rep->dev->attr.lid;
    for (int q = 0; q < ep->nqps; q++) {
      struct ibv_qp_attr a;
      struct ibv_qp_init_attr init;
      assert_int_equal(ep->hca->api->query_qp(ep->qps[q].qp, &a, IBV_QP_STATE | IBV_QP_AV, &init), 0);
      assert_int_equal(a.qp_state, IBV_QPS_RTS);
      /* Both ends sit on the same port here: the peer's LID is ours. */
      assert_int_equal(a.ah_attr.dlid, own);
      assert_int_equal(a.ah_attr.sl, TEST_SL);
      assert_int_equal(a.ah_attr.is_global, 0);
      assert_int_equal(a.ah_attr.port_num, 1);
      checked++;
    }
  }
  return checked;
}

static unsigned char pattern(size_t i, int salt) { return (unsigned char)(i * 131 + salt * 7 + 1); }

static void roundtrip(pair *p, size_t size, int salt) {
  unsigned char *sbuf = malloc(size + 1), *rbuf = malloc(size + 1);
  for (size_t k = 0; k < size; k++) sbuf[k] = pattern(k, salt);
  memset(rbuf, 0xee, size + 1);
  void *smr, *rmr;
  assert_int_equal(rr_net_reg_mr(p->send, sbuf, size, RR_PTR_HOST, &smr), RR_OK);
  assert_int_equal(rr_net_reg_mr(p->recv, rbuf, size, RR_PTR_HOST, &rmr), RR_OK);
  void *rreq = NULL, *sreq = NULL;
  void *rptr[1] = {rbuf}, *rmrs[1] = {rmr};
  size_t rsize[1] = {size}, got[1] = {0};
  int tag[1] = {7};
  assert_int_equal(rr_net_irecv(p->recv, 1, rptr, rsize, tag, rmrs, NULL, &rreq), RR_OK);
  assert_non_null(rreq);
  int sdone = 0, rdone = 0;
  for (int i = 0; i < 2000000 && !(sdone && rdone); i++) {
    if (!sreq) assert_int_equal(rr_net_isend(p->send, sbuf, size, 7, smr, NULL, &sreq), RR_OK);
    if (sreq && !sdone) assert_int_equal(rr_net_test(sreq, &sdone, NULL), RR_OK);
    if (!rdone) assert_int_equal(rr_net_test(rreq, &rdone, got), RR_OK);
  }
  assert_true(sdone && rdone);
  assert_int_equal(got[0], size);
  for (size_t k = 0; k < size; k++)
    if (rbuf[k] != pattern(k, salt)) fail_msg("byte %zu of %zu", k, size);
  assert_int_equal(rbuf[size], 0xee);
  assert_int_equal(rr_net_dereg_mr(p->send, smr), RR_OK);
  assert_int_equal(rr_net_dereg_mr(p->recv, rmr), RR_OK);
  free(sbuf);
  free(rbuf);
}

static void test_setup_over_oob_and_traffic(void **state) {
  (void)state;
  for (int dev = 0; dev < 2; dev++) {
    pair p;
    connect_pair_dev(&p, dev);
    assert_true(p.send->engine.nrails >= 1);
    assert_true(check_rtr(&p.send->engine) >= 1);
    assert_true(check_rtr(&p.recv->engine) >= 1);
    const size_t sizes[] = {0, 1, 4095, 4096, 4097, 1 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) roundtrip(&p, sizes[i], (int)i + dev);
    close_pair(&p);
  }
}

int main(void) {
  /* Three HCAs, no IP on any of them; loopback is the only interface. */
  setenv("RR_FAKE_IBV_PORTS", "mlx5_0:ib:lid=0x11;mlx5_1:ib:lid=0x42;mlx5_2:ib:state=down", 1);
  setenv("RERAIL_SOCKET_IFNAME", "lo", 1);
  setenv("RERAIL_IB_SL", "5", 1);
  setenv("RERAIL_BACKUPS", "1", 1);
  unsetenv("RERAIL_TRANSPORT");
  unsetenv("RERAIL_IB_HCA");
  unsetenv("NCCL_IB_HCA");
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ib_ports_are_devices),
      cmocka_unit_test(test_setup_over_oob_and_traffic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
