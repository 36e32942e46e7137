/* The verbs rail's endpoints and device under async events, on the fake libibverbs
 * (verbs_ep_fixture.h). The event names the endpoint it concerns and that endpoint alone
 * fails (progress and posts return RR_ERR_RAIL, the rail failure the engine handles), a CQ
 * error fails the endpoint whose CQ it is, a fatal device fails every endpoint of the device
 * and is reported as a fatal device event, a port event still reads as before, and every
 * event is acknowledged (libibverbs' destroy_qp waits for that). A GID change chooses the
 * GID again; a device reset closes the device and opens it again once it is back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "verbs_ep_fixture.h"

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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_qp_fatal_fails_its_endpoint_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_qp_request_and_access_errors, setup, teardown),
      cmocka_unit_test_setup_teardown(test_cq_error_fails_its_endpoint_only, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_fatal_fails_every_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_port_events_fail_no_endpoint, setup, teardown),
      cmocka_unit_test_setup_teardown(test_event_for_unknown_qp_is_ignored, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gid_change_rereads_the_gid, setup, teardown),
      cmocka_unit_test_setup_teardown(test_gid_change_infiniband, setup, teardown),
      cmocka_unit_test_setup_teardown(test_device_reset_and_reopen, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
