/* The send comm handed out before the listener's ACCEPTs (conn_confirm.c):
 * connect() returns it from the pass that sends the PROOFs and the COMMIT,
 * with no rail in its engine and its ACCEPTs still due; the first isend
 * waits for them (a NULL request), then data moves. A socket the listener
 * refuses after that point never fails the connection: with one rail the
 * attempt starts over as a new connection; with two (RR_TEST_RAILS=2, a
 * namespace with two NICs: confirm_two_rails.sh) the refused rail joins as
 * a failed one, the connection goes on over the other, and the refused
 * rail is reopened. Both ends run in this process, driven in turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_internal.h"
#include "listen_admit.h"
#include "net_core.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_params.h"

typedef struct pair {
  rr_net_ctx *ctx;
  rr_listen_comm *listen;
  char handle[RR_NET_HANDLE_SIZE];
  rr_send_comm *send;
  rr_recv_comm *recv;
} pair;

static int want_rails(void) { return getenv("RR_TEST_RAILS") ? atoi(getenv("RR_TEST_RAILS")) : 1; }

static void pair_listen(pair *p) {
  rr_init_args args = {.traffic_class = -1};
  memset(p, 0, sizeof *p);
  assert_int_equal(rr_net_init(&args, &p->ctx), RR_OK);
  assert_int_equal(rr_net_listen(p->ctx, 0, p->handle, &p->listen), RR_OK);
}

/* connect() until it hands the comm out, accept() in between only while
 * the listener has taken no PROOF (it makes a group of the first one): the
 * comm comes from the call that sends the PROOFs, before any ACCEPT could
 * have been written. */
static void connect_until_handed_out(pair *p) {
  for (uint64_t t0 = rr_now_ns(); !p->send && rr_now_ns() - t0 < 5000000000ull; usleep(500)) {
    assert_int_equal(rr_net_connect(p->ctx, 0, p->handle, &p->send), RR_OK);
    if (p->send) break;
    assert_int_equal(p->listen->ngroups, 0);
    rr_recv_comm *r = NULL;
    assert_int_equal(rr_net_accept(p->listen, &r), RR_OK);
    assert_null(r); /* no PROOF is in yet */
  }
  assert_non_null(p->send);
}

/* The listener's pending socket of the given rail and stream of conn_id
 * (its HELLO answered, its PROOF not yet taken). */
static pending_sock *pending_of(rr_listen_comm *l, uint64_t conn_id, int rail, int stream) {
  for (int i = 0; i < l->nsocks; i++) {
    pending_sock *ps = &l->socks[i];
    if (ps->fd >= 0 && ps->state == PS_PROOF && ps->h.conn_id == conn_id && ps->h.rail == rail &&
        ps->h.stream == stream)
      return ps;
  }
  return NULL;
}

static unsigned char pattern(size_t i, int salt) { return (unsigned char)(i * 37 + salt * 11 + 3); }

/* One message: accept() (and isend) until the receive comm is there, the
 * receive posted, isend until it takes the message (NULL requests before:
 * the ACCEPTs, or the clear-to-send, are not in), then the bytes arrive
 * intact. Every call returns RR_OK: nothing here is an error. */
static void send_one(pair *p, int salt) {
  enum { N = 70000 };
  static unsigned char src[N], dst[N];
  for (size_t i = 0; i < N; i++) src[i] = pattern(i, salt);
  memset(dst, 0, sizeof dst);
  void *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  assert_int_equal(rr_net_reg_mr(p->send, src, N, RR_PTR_HOST, &smh), RR_OK);
  for (uint64_t t0 = rr_now_ns(); !p->recv && rr_now_ns() - t0 < 10000000000ull; usleep(200)) {
    assert_int_equal(rr_net_accept(p->listen, &p->recv), RR_OK);
    if (!sreq) assert_int_equal(rr_net_isend(p->send, src, N, 7, smh, NULL, &sreq), RR_OK);
  }
  assert_non_null(p->recv);
  assert_int_equal(rr_net_reg_mr(p->recv, dst, N, RR_PTR_HOST, &rmh), RR_OK);
  void *data[1] = {dst};
  size_t sizes[1] = {N};
  int tags[1] = {7};
  void *mhs[1] = {rmh};
  assert_int_equal(rr_net_irecv(p->recv, 1, data, sizes, tags, mhs, NULL, &rreq), RR_OK);
  assert_non_null(rreq);
  for (uint64_t t0 = rr_now_ns(); !sreq && rr_now_ns() - t0 < 10000000000ull; usleep(200))
    assert_int_equal(rr_net_isend(p->send, src, N, 7, smh, NULL, &sreq), RR_OK);
  assert_non_null(sreq);
  int sdone = 0, rdone = 0;
  size_t got[1] = {0};
  for (uint64_t t0 = rr_now_ns(); (!sdone || !rdone) && rr_now_ns() - t0 < 10000000000ull; usleep(100)) {
    if (!sdone) assert_int_equal(rr_net_test(sreq, &sdone, NULL), RR_OK);
    if (!rdone) assert_int_equal(rr_net_test(rreq, &rdone, got), RR_OK);
  }
  assert_true(sdone && rdone);
  assert_int_equal(got[0], N);
  assert_memory_equal(src, dst, N);
  assert_int_equal(rr_net_dereg_mr(p->send, smh), RR_OK);
  assert_int_equal(rr_net_dereg_mr(p->recv, rmh), RR_OK);
}

static void pair_close(pair *p) {
  assert_int_equal(rr_net_close_send(p->send), RR_OK);
  assert_int_equal(rr_net_close_recv(p->recv), RR_OK);
  assert_int_equal(rr_net_close_listen(p->listen), RR_OK);
  assert_int_equal(rr_net_finalize(p->ctx), RR_OK);
}

/* The comm comes before the ACCEPTs: no rail in its engine, every rail's
 * sockets still waiting for theirs; the first isend waits for them (the
 * listener writes them only on its next accept()), then data moves and
 * every rail is in the engine. */
static void test_comm_returned_before_accept(void **state) {
  (void)state;
  pair p;
  pair_listen(&p);
  uint64_t connects = rr_counter_get(RR_CTR_CONNECTS);
  connect_until_handed_out(&p);
  assert_int_equal(rr_counter_get(RR_CTR_CONNECTS), connects + 1);
  assert_int_equal(p.send->magic, RR_MAGIC_SEND);
  assert_true(atomic_load(&p.send->confirming));
  assert_int_equal(p.send->engine.nrails, 0);
  assert_int_equal(p.listen->ngroups, 0); /* the listener has not read a PROOF, so sent no ACCEPT */
  /* No accept() yet: the ACCEPTs cannot come, and isend gives NULL. */
  void *req = (void *)1;
  static char one[1];
  void *mh = NULL;
  assert_int_equal(rr_net_reg_mr(p.send, one, sizeof one, RR_PTR_HOST, &mh), RR_OK);
  assert_int_equal(rr_net_isend(p.send, one, sizeof one, 1, mh, NULL, &req), RR_OK);
  assert_null(req);
  assert_int_equal(rr_net_dereg_mr(p.send, mh), RR_OK);
  send_one(&p, 1);
  assert_false(atomic_load(&p.send->confirming));
  assert_int_equal(p.send->confirm_status, RR_OK);
  assert_int_equal(p.send->engine.nrails, want_rails());
  assert_int_equal(p.recv->engine.nrails, want_rails());
  assert_int_equal(p.recv->conn_id, p.send->conn.conn_id);
  pair_close(&p);
}

/* The listener refuses one socket (crowded out, as listen_admit.c evicts
 * one) after the comm was handed out. One rail: that rail is the whole
 * connection, the listener never hands this attempt out, and the connector
 * starts over as a new connection (a new id at the listener): no call
 * fails, and data moves. Two rails: the refused one is backup rail 1 and
 * the listener holds its other socket, so the connection goes on over rail
 * 0 (same id), rail 1 held down at both ends until the connector reopens
 * it. Stream s of the refused rail: 0 carries the COMMIT on rail 0. */
static void refused_after_handout(int stream) {
  pair p;
  pair_listen(&p);
  connect_until_handed_out(&p);
  uint64_t id0 = p.send->conn.conn_id; /* changes only at a start over, after the refusal below */
  int rails = want_rails(), rail = rails - 1;
  /* Every HELLO was answered before the PROOFs left: the sockets wait in PS_PROOF. */
  pending_sock *ps = pending_of(p.listen, id0, rail, stream);
  assert_non_null(ps);
  uint64_t crowded = rr_counter_get(RR_CTR_REFUSED_CROWDED_OUT);
  uint64_t start_overs = rr_counter_get(RR_CTR_CONNECT_START_OVERS), refused_ns = rr_now_ns();
  rr_listen_refuse(p.listen, ps, RR_CTR_REFUSED_CROWDED_OUT, "crowded out (test)");
  assert_int_equal(rr_counter_get(RR_CTR_REFUSED_CROWDED_OUT), crowded + 1);
  uint64_t reconnects = rr_counter_get(RR_CTR_RAIL_RECONNECTS);
  uint64_t deferred = rr_counter_get(RR_CTR_CONNECT_RAILS_DEFERRED);
  uint64_t deferred_up = rr_counter_get(RR_CTR_CONNECT_DEFERRED_UP);
  send_one(&p, 2 + stream);
  assert_int_equal(p.send->confirm_status, RR_OK);
  if (rails == 1) {
    assert_true(p.recv->conn_id != id0); /* a new connection: the refused one was never handed out */
    assert_int_equal(rr_counter_get(RR_CTR_CONNECT_START_OVERS), start_overs + 1);
    assert_int_equal(rr_counter_get(RR_CTR_CONNECT_RAILS_DEFERRED), deferred); /* started over, none held down */
    /* The new attempt's settle time and patience run from its start, not
     * from connect()'s first call. */
    assert_true(p.send->conn.start_ns >= refused_ns);
    assert_int_equal(p.recv->conn_id, p.send->conn.conn_id);
    assert_int_equal(p.send->engine.nrails, 1);
  } else {
    assert_int_equal(p.recv->conn_id, id0); /* the same connection, rail 1 held down */
    assert_int_equal(rr_counter_get(RR_CTR_CONNECT_START_OVERS), start_overs);
    assert_int_equal(p.send->engine.nrails, rails);
    assert_int_equal(p.recv->engine.nrails, rails);
    assert_int_equal(p.recv->rails_mask, (1u << rails) - 1);
    /* The refused rail is reopened (the monitor drives it) at both ends,
     * and carries data again. */
    for (uint64_t t0 = rr_now_ns();
         rr_counter_get(RR_CTR_RAIL_RECONNECTS) < reconnects + 2 && rr_now_ns() - t0 < 10000000000ull; usleep(1000)) {
      rr_recv_comm *none = NULL;
      assert_int_equal(rr_net_accept(p.listen, &none), RR_OK);
      assert_null(none);
    }
    assert_true(rr_counter_get(RR_CTR_RAIL_RECONNECTS) >= reconnects + 2);
    /* The connector counted the rail it went on without, and its return. */
    assert_int_equal(rr_counter_get(RR_CTR_CONNECT_RAILS_DEFERRED), deferred + 1);
    assert_int_equal(rr_counter_get(RR_CTR_CONNECT_DEFERRED_UP), deferred_up + 1);
    /* The receiver held the rail under the connector's host address (it
     * knew no other); reopened, the rail is named, and its link keyed, by
     * the address it came from: here, one host, the listener's own rail 1
     * address, which the sender's rail 1 names. */
    pthread_mutex_lock(&p.recv->engine.lock);
    assert_string_equal(p.recv->engine.rails[1].peer_addr, p.send->engine.rails[1].peer_addr);
    pthread_mutex_unlock(&p.recv->engine.lock);
  }
  send_one(&p, 9);
  pair_close(&p);
}

static void test_refused_commit_socket_after_handout(void **state) {
  (void)state;
  refused_after_handout(0);
}

static void test_refused_other_socket_after_handout(void **state) {
  (void)state;
  refused_after_handout(1);
}

/* closeSend before the first isend: the ACCEPTs are taken there, so the
 * listener's end (handed out already) sees an orderly close, not rails
 * that just ended. */
static void test_close_before_first_isend(void **state) {
  (void)state;
  pair p;
  pair_listen(&p);
  connect_until_handed_out(&p);
  for (uint64_t t0 = rr_now_ns(); !p.recv && rr_now_ns() - t0 < 5000000000ull; usleep(200))
    assert_int_equal(rr_net_accept(p.listen, &p.recv), RR_OK);
  assert_non_null(p.recv);
  uint64_t owed = rr_counter_get(RR_CTR_CLOSES_OWED);
  assert_int_equal(rr_net_close_send(p.send), RR_OK);
  assert_int_equal(rr_counter_get(RR_CTR_CLOSES_OWED), owed); /* the send end's close delivered its BYE */
  /* The monitor drives the receive end: the sender's BYE reaches it. */
  for (uint64_t t0 = rr_now_ns(); !p.recv->engine.peer_bye && rr_now_ns() - t0 < 5000000000ull; usleep(1000)) {
  }
  assert_true(p.recv->engine.peer_bye);
  assert_int_equal(rr_net_close_recv(p.recv), RR_OK);
  assert_int_equal(rr_net_close_listen(p.listen), RR_OK);
  assert_int_equal(rr_net_finalize(p.ctx), RR_OK);
}

/* A listener that goes away after the hand-out (its process closed it)
 * refuses every attempt: the comm answers isend with NULL requests while
 * the connect timeout runs from the first start over, then with an error,
 * never before the timeout and not long after it. */
static void test_listener_gone_fails_after_timeout(void **state) {
  (void)state;
  setenv("RERAIL_CONNECT_TIMEOUT", "400", 1);
  rr_params_reload();
  pair p;
  pair_listen(&p);
  connect_until_handed_out(&p);
  assert_int_equal(rr_net_close_listen(p.listen), RR_OK); /* no comm of it yet: gone at once */
  static char one[1];
  void *mh = NULL, *req = NULL;
  assert_int_equal(rr_net_reg_mr(p.send, one, sizeof one, RR_PTR_HOST, &mh), RR_OK);
  uint64_t t0 = rr_now_ns();
  rr_status st = RR_OK;
  while (st == RR_OK && rr_now_ns() - t0 < 5000000000ull) {
    st = rr_net_isend(p.send, one, sizeof one, 1, mh, NULL, &req);
    assert_null(req);
    usleep(1000);
  }
  uint64_t took_ms = (rr_now_ns() - t0) / 1000000u;
  assert_int_equal(st, RR_ERR_PEER);
  assert_true(took_ms >= 400);
  assert_true(took_ms < 3000);
  assert_int_equal(rr_net_dereg_mr(p.send, mh), RR_OK);
  assert_int_equal(rr_net_close_send(p.send), RR_OK);
  assert_int_equal(rr_net_finalize(p.ctx), RR_OK);
  unsetenv("RERAIL_CONNECT_TIMEOUT");
  rr_params_reload();
}

/* closeSend of comms whose listener is gone (its process closed it after
 * the hand-out): each closes at once, none waiting for ACCEPTs that cannot
 * come. NCCL closes its comms one after another, so a wait per comm of the
 * progress timeout (as closeSend once did) made N of them cost N timeouts:
 * here three together must take less than one. */
static void test_close_with_listener_gone_waits_for_nothing(void **state) {
  (void)state;
  setenv("RERAIL_PROGRESS_TIMEOUT", "1000", 1);
  rr_params_reload();
  enum { N = 3 };
  pair p[N];
  for (int i = 0; i < N; i++) {
    pair_listen(&p[i]);
    connect_until_handed_out(&p[i]);
    assert_true(atomic_load(&p[i].send->confirming));
    assert_int_equal(rr_net_close_listen(p[i].listen), RR_OK); /* no comm of it yet: gone at once */
  }
  uint64_t t0 = rr_now_ns();
  for (int i = 0; i < N; i++) assert_int_equal(rr_net_close_send(p[i].send), RR_OK);
  uint64_t took_ms = (rr_now_ns() - t0) / 1000000u;
  assert_true(took_ms < rr_params_get()->progress_timeout_ms);
  for (int i = 0; i < N; i++) assert_int_equal(rr_net_finalize(p[i].ctx), RR_OK);
  unsetenv("RERAIL_PROGRESS_TIMEOUT");
  rr_params_reload();
}

int main(void) {
  const char *ifname = getenv("RR_TEST_IFNAME");
  setenv("RERAIL_SOCKET_IFNAME", ifname ? ifname : "lo", 1);
  setenv("RERAIL_TCP_STREAMS", "2", 1);
  rr_params_reload();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_comm_returned_before_accept),
      cmocka_unit_test(test_refused_commit_socket_after_handout),
      cmocka_unit_test(test_refused_other_socket_after_handout),
      cmocka_unit_test(test_close_before_first_isend),
      cmocka_unit_test(test_listener_gone_fails_after_timeout),
      cmocka_unit_test(test_close_with_listener_gone_waits_for_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
