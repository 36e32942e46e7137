/* Idle rails take their link's life (net_plugin/engine/link_life.h), in the
 * engine: two busy receiving connections, each with a control rail on NIC 0
 * and an idle backup on NIC 1 to the same peer address. Their backups'
 * link is probed by one of them per δ/16 until it answers, not by each; life another
 * connection saw on the link keeps an idle backup up past δ while a control
 * rail with no life of its own fails; a link with no life fails its idle
 * rails within δ as before. TCP rails over socket pairs (no TCP_INFO: a
 * rail's own life is what it read, here nothing); every time is passed in. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine_internal.h" /* engine_rails_tick and the rails' state */
#include "link_life.h"
#include "rail_tcp.h"

#define MS 1000000ull
#define BUF_BYTES 16384
#define DELTA (1000 * MS)
#define NCONN 2
#define NRAIL 2

typedef struct conn {
  rr_engine e;
  rr_mr mr;
  void *buf;
  int peer_fd[NRAIL];
} conn;

static conn c[NCONN]; /* engines are large for a stack */
static int moved_fd[NCONN] = {-1, -1}; /* peers of endpoints a test swapped in */
static rr_rail_dev *dev[NRAIL];
static uint64_t t0;   /* every rail was added by then */

/* A drive of connection k at now, as far as this test needs one: its
 * rails judged, then what they queued (a probe) handed to the socket, as
 * the engine's progress would, so that the next judgement sees no backlog. */
static void tick(int k, uint64_t now) {
  engine_rails_tick(&c[k].e, now);
  for (int d = 0; d < NRAIL; d++) {
    rr_rail_ep *ep = c[k].e.rails[d].ep;
    if (c[k].e.rails[d].state != RR_RAIL_DEAD) assert_int_equal(ep->ops->progress(ep), RR_OK);
  }
}

static int setup(void **state) {
  (void)state;
  rr_link_life_reset(&rr_link_lives);
  for (int d = 0; d < NRAIL; d++) assert_int_equal(rr_tcp_dev_open(d, &dev[d]), RR_OK);
  static const char *const ifname[NRAIL] = {"ll0", "ll1"}, *const peer[NRAIL] = {"10.77.0.2", "10.77.1.2"};
  for (int k = 0; k < NCONN; k++) {
    rr_engine_config cfg = {.role = RR_ENGINE_RECV, .chunk_size = 4096, .progress_timeout_ns = DELTA,
                            .failback_hold_ns = 500 * MS};
    assert_int_equal(rr_engine_init(&c[k].e, &cfg), RR_OK);
    for (int d = 0; d < NRAIL; d++) {
      int sv[2];
      assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
      rr_rail_ep *ep = NULL;
      assert_int_equal(dev[d]->ops->ep_open(dev[d], &rr_engine_rail_events, &c[k].e, &ep), RR_OK);
      int fds[1] = {sv[0]};
      rr_rail_connect_args args = {.fds = fds, .nfds = 1};
      assert_int_equal(ep->ops->ep_connect(ep, &args), RR_OK);
      assert_int_equal(rr_engine_add_rail(&c[k].e, ep, 1, ifname[d], peer[d]), RR_OK);
      c[k].peer_fd[d] = sv[1];
    }
    c[k].buf = calloc(1, BUF_BYTES);
    assert_non_null(c[k].buf);
    c[k].mr = (rr_mr){.base = c[k].buf, .size = BUF_BYTES, .type = RR_PTR_HOST};
    for (int d = 0; d < NRAIL; d++)
      assert_int_equal(dev[d]->ops->reg_mr(dev[d], c[k].buf, BUF_BYTES, RR_MEM_HOST, -1, 0, &c[k].mr.reg[d]), RR_OK);
    /* A posted receive makes the connection busy: its rails are judged. */
    void *bufs[1] = {c[k].buf}, *req = NULL;
    size_t sizes[1] = {BUF_BYTES};
    int tags[1] = {1};
    rr_mr *mrs[1] = {&c[k].mr};
    assert_int_equal(rr_engine_irecv(&c[k].e, 1, bufs, sizes, tags, mrs, NULL, &req), RR_OK);
    for (int d = 0; d < NRAIL; d++) {
      /* The clear-to-send goes out (a rail with bytes queued is not probed:
       * one probe at a time), and the peer has spoken on every rail: its
       * silence is judged against δ, not the connect timeout. */
      rr_rail_ep *ep = c[k].e.rails[d].ep;
      assert_int_equal(ep->ops->progress(ep), RR_OK);
      assert_int_equal(ep->ops->backlog(ep), 0);
      c[k].e.rails[d].heard = 1;
    }
  }
  /* The backups share one link, the control rails another. */
  assert_true(c[0].e.rails[1].life_slot >= 0);
  assert_int_equal(c[0].e.rails[1].life_slot, c[1].e.rails[1].life_slot);
  assert_int_not_equal(c[0].e.rails[0].life_slot, c[0].e.rails[1].life_slot);
  t0 = 0;
  for (int k = 0; k < NCONN; k++)
    for (int d = 0; d < NRAIL; d++)
      if (c[k].e.rails[d].last_alive_ns > t0) t0 = c[k].e.rails[d].last_alive_ns;
  /* Work starts: silence is judged from here. */
  for (int k = 0; k < NCONN; k++) engine_rails_tick(&c[k].e, t0);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  for (int k = 0; k < NCONN; k++) {
    rr_engine_fini(&c[k].e);
    for (int d = 0; d < NRAIL; d++) {
      dev[d]->ops->dereg_mr(c[k].mr.reg[d]);
      close(c[k].peer_fd[d]);
    }
    free(c[k].buf);
    if (moved_fd[k] >= 0) close(moved_fd[k]);
    moved_fd[k] = -1;
  }
  for (int d = 0; d < NRAIL; d++) dev[d]->ops->dev_close(dev[d]);
  /* Every rail is gone: so is every link it held. */
  assert_int_equal(rr_link_life_used(&rr_link_lives), 0);
  rr_link_life_reset(&rr_link_lives);
  return 0;
}

/* Silent for more than δ/4: each control rail probes itself (the
 * connection's own messages go there), but of the two idle backups only
 * the first in doubt probes the link; δ/16 later, no answer having come,
 * the other may. Once the link answers, neither probes before its life is
 * δ/4 old again. */
static void test_one_probe_per_link(void **state) {
  (void)state;
  uint64_t now = t0 + DELTA / 4 + 50 * MS;
  tick(0, now);
  tick(1, now + MS);
  assert_int_equal(c[0].e.rails[0].last_probe_ns, now);
  assert_int_equal(c[1].e.rails[0].last_probe_ns, now + MS);
  assert_int_equal(c[0].e.rails[1].last_probe_ns, now);
  assert_int_equal(c[1].e.rails[1].last_probe_ns, 0);
  tick(1, now + DELTA / 16 - MS);
  assert_int_equal(c[1].e.rails[1].last_probe_ns, 0);
  tick(1, now + DELTA / 16 + MS);
  assert_int_equal(c[1].e.rails[1].last_probe_ns, now + DELTA / 16 + MS);
  /* The link answers: its life is both backups' own. */
  uint64_t life = now + DELTA / 16 + 10 * MS;
  rr_link_life_saw(&rr_link_lives, c[0].e.rails[1].life_slot, life);
  for (int k = 0; k < NCONN; k++) {
    tick(k, life + DELTA / 4 - MS);
    assert_int_equal(c[k].e.rails[1].last_alive_ns, life);
    assert_true(c[k].e.rails[1].last_probe_ns < life);
  }
  tick(0, life + DELTA / 4 + MS);
  assert_int_equal(c[0].e.rails[1].last_probe_ns, life + DELTA / 4 + MS);
}

/* Life another connection's rail saw on the link is taken by an idle
 * backup; when the control rail beside it fails, silent on its own for δ,
 * the backup becomes the control rail still ACTIVE, and from then it is
 * judged by its own life alone (the life it took gives it the full δ). */
static void test_link_life_keeps_idle_rail(void **state) {
  (void)state;
  int slot = c[1].e.rails[1].life_slot;
  uint64_t life = t0 + DELTA - 100 * MS;
  rr_link_life_saw(&rr_link_lives, slot, life);
  tick(1, t0 + DELTA - 50 * MS);
  assert_int_equal(c[1].e.rails[0].state, RR_RAIL_ACTIVE);
  assert_int_equal(c[1].e.rails[1].last_alive_ns, life);
  tick(1, t0 + DELTA + 100 * MS);
  assert_int_equal(c[1].e.rails[0].state, RR_RAIL_DOWN);
  assert_int_equal(c[1].e.rails[1].state, RR_RAIL_ACTIVE);
  assert_int_equal(engine_control_rail(&c[1].e), 1);
  /* Carrying the connection, it takes no more of the link's life. */
  rr_link_life_saw(&rr_link_lives, slot, life + DELTA);
  tick(1, life + DELTA - MS);
  assert_int_equal(c[1].e.rails[1].state, RR_RAIL_ACTIVE);
  assert_int_equal(c[1].e.rails[1].last_alive_ns, life);
  tick(1, life + DELTA + MS);
  assert_int_not_equal(c[1].e.rails[1].state, RR_RAIL_ACTIVE);
}

/* A link nobody has heard: its idle rails fail within δ, as before. */
static void test_silent_link_fails_idle_rails(void **state) {
  (void)state;
  tick(0, t0 + DELTA - MS);
  assert_int_equal(c[0].e.rails[1].state, RR_RAIL_ACTIVE);
  tick(0, t0 + DELTA + MS);
  tick(1, t0 + DELTA + MS);
  for (int k = 0; k < NCONN; k++) assert_int_equal(c[k].e.rails[1].state, RR_RAIL_DOWN);
}

/* A receiver's rail reopened from another address than it was named by (a
 * rail added for later knows only the peer host's address): the rail and
 * its link follow the address it reached, and the link it left goes with
 * the last rail that held it. */
static void replace_backup(int k, const char *peer_addr) {
  int sv[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  rr_rail_ep *ep = NULL;
  assert_int_equal(dev[1]->ops->ep_open(dev[1], &rr_engine_rail_events, &c[k].e, &ep), RR_OK);
  int fds[1] = {sv[0]};
  rr_rail_connect_args args = {.fds = fds, .nfds = 1};
  assert_int_equal(ep->ops->ep_connect(ep, &args), RR_OK);
  rr_engine_rail_replace(&c[k].e, 1, ep, peer_addr);
  moved_fd[k] = sv[1];
}

static void test_reopened_rail_keyed_by_its_address(void **state) {
  (void)state;
  int old = c[0].e.rails[1].life_slot;
  assert_int_equal(rr_link_life_used(&rr_link_lives), 2);
  replace_backup(0, "10.77.9.2");
  assert_string_equal(c[0].e.rails[1].peer_addr, "10.77.9.2");
  int moved = c[0].e.rails[1].life_slot;
  assert_true(moved >= 0);
  assert_int_not_equal(moved, old);
  assert_int_equal(c[1].e.rails[1].life_slot, old); /* still held by the other connection's backup */
  assert_int_equal(rr_link_life_used(&rr_link_lives), 3);
  /* The other backup moves too: one link again, the old one freed. */
  replace_backup(1, "10.77.9.2");
  assert_int_equal(c[1].e.rails[1].life_slot, moved);
  assert_int_equal(rr_link_life_used(&rr_link_lives), 2);
  /* NULL: the rail keeps its address and link. */
  close(moved_fd[1]);
  replace_backup(1, NULL);
  assert_int_equal(c[1].e.rails[1].life_slot, moved);
  assert_string_equal(c[1].e.rails[1].peer_addr, "10.77.9.2");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_one_probe_per_link, setup, teardown),
      cmocka_unit_test_setup_teardown(test_link_life_keeps_idle_rail, setup, teardown),
      cmocka_unit_test_setup_teardown(test_silent_link_fails_idle_rails, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reopened_rail_keyed_by_its_address, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
