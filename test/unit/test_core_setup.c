/* Connection setup end to end inside one process, on loopback: what the
 * connect timeout decides (an unreachable peer, slow turns, a silent
 * listener, a busy peer process), the listener's hold on sockets that have
 * not proved the secret, and a connector played by hand so the listener
 * sees the interleavings a network may produce. Traffic over set-up
 * connections is test_core_loopback.c's. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_pair.h"
#include "engine_wire.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_params.h"
#include "setup_wire.h"
#include "tcp_frame.h"

/* A context and a listener, under RERAIL_CONNECT_TIMEOUT=timeout_ms for the
 * tests of what the connect timeout decides (NULL: the default);
 * listener_close undoes both and the setting. */
static void listener_open(const char *timeout_ms, rr_net_ctx **ctx, char *handle, rr_listen_comm **l) {
  if (timeout_ms) setenv("RERAIL_CONNECT_TIMEOUT", timeout_ms, 1);
  rr_params_reload();
  rr_init_args args = {.traffic_class = -1};
  assert_int_equal(rr_net_init(&args, ctx), RR_OK);
  assert_int_equal(rr_net_listen(*ctx, 0, handle, l), RR_OK);
}

static void listener_close(rr_net_ctx *ctx, rr_listen_comm *l) {
  assert_int_equal(rr_net_close_listen(l), RR_OK);
  assert_int_equal(rr_net_finalize(ctx), RR_OK);
  unsetenv("RERAIL_CONNECT_TIMEOUT");
  rr_params_reload();
}

/* A listener no rail reaches (its address refuses every socket, as a peer
 * whose NIC is not up yet may): connect() keeps returning a NULL comm, never
 * an error, for RERAIL_CONNECT_TIMEOUT, and only then fails, clearly; it
 * holds no socket afterwards. */
static void test_unreachable_peer_retries_until_timeout(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("1000", &ctx, handle, &l);
  int fds_before = open_fds();
  handle[42 + 3] = 2; /* the first address: 127.0.0.2, where nothing listens */
  rr_send_comm *s = NULL;
  rr_status st = RR_OK;
  uint64_t t0 = rr_now_ns(), calls = 0;
  while (st == RR_OK && rr_now_ns() - t0 < 5000000000ull) {
    st = rr_net_connect(ctx, 0, handle, &s);
    assert_null(s);
    calls++;
    usleep(1000);
  }
  uint64_t took_ms = (rr_now_ns() - t0) / 1000000;
  assert_int_equal(st, RR_ERR_PEER);
  assert_true(took_ms >= 1000);
  assert_true(calls > 10);
  assert_int_equal(open_fds(), fds_before);
  listener_close(ctx, l);
}

/* NCCL's proxy sets connections up round-robin from one thread: with
 * hundreds under way, a turn (one connect() and one accept() call for each)
 * outlasts RERAIL_CONNECT_TIMEOUT. Here every turn is 400 ms against a
 * 300 ms timeout, and each connect() call finds the listener's answer to its
 * last message: the connection makes progress on every call and is set up,
 * though the whole setup spans several timeouts (a deadline from the first
 * call failed it on its second). */
static void test_slow_turns_with_progress_connect(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("300", &ctx, handle, &l);
  rr_send_comm *s = NULL;
  rr_recv_comm *r = NULL;
  uint64_t t0 = rr_now_ns();
  for (int turn = 0; turn < 20 && (!s || !r); turn++) {
    if (turn) usleep(400000);
    if (!s) assert_int_equal(rr_net_connect(ctx, 0, handle, &s), RR_OK);
    if (!r) assert_int_equal(rr_net_accept(l, &r), RR_OK);
  }
  assert_non_null(s);
  assert_non_null(r);
  assert_true(rr_now_ns() - t0 > 300000000ull); /* it did span the timeout */
  pair p = {.ctx = ctx, .listen = l, .send = s, .recv = r};
  close_pair(&p);
  unsetenv("RERAIL_CONNECT_TIMEOUT");
  rr_params_reload();
}

/* ... but a peer whose process stopped answering (its kernel takes the TCP
 * connection, the listener is never serviced: no CHALLENGE ever comes)
 * fails the connection once the timeout passed without progress, however
 * often connect() is called. */
static void test_silent_listener_times_out(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("300", &ctx, handle, &l);
  rr_send_comm *s = NULL;
  rr_status st = RR_OK;
  uint64_t t0 = rr_now_ns();
  while (st == RR_OK && rr_now_ns() - t0 < 5000000000ull) {
    st = rr_net_connect(ctx, 0, handle, &s);
    assert_null(s);
    usleep(5000);
  }
  assert_int_equal(st, RR_ERR_PEER);
  assert_true(rr_now_ns() - t0 >= 300000000ull);
  listener_close(ctx, l);
}

/* A peer process with thousands of connections answers each only in its
 * turn of accept() calls, which may outlast the timeout; while it answers
 * any connection of ours, the others to it wait on. Here one listener of
 * the process is never serviced (its connection gets no CHALLENGE) while
 * connections to its other listener are made one after another for four
 * timeouts: the waiting one does not fail (on its own progress alone it
 * failed after one). Once the process answers nothing, it fails within the
 * timeout. */
static void test_peer_process_answers_keep_connection_waiting(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char served[RR_NET_HANDLE_SIZE], waiting[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l, *l_waiting;
  listener_open("300", &ctx, served, &l);
  assert_int_equal(rr_net_listen(ctx, 0, waiting, &l_waiting), RR_OK);
  rr_send_comm *w = NULL;
  int made = 0;
  uint64_t t0 = rr_now_ns(), last_made = t0;
  while (rr_now_ns() - t0 < 1200000000ull) {
    assert_int_equal(rr_net_connect(ctx, 0, waiting, &w), RR_OK);
    assert_null(w);
    pair p = {.ctx = ctx, .listen = l};
    finish_pair(&p, served);
    assert_int_equal(rr_net_close_send(p.send), RR_OK);
    assert_int_equal(rr_net_close_recv(p.recv), RR_OK);
    made++;
    last_made = rr_now_ns();
    usleep(20000);
  }
  assert_true(made >= 10);
  rr_status st = RR_OK;
  while (st == RR_OK && rr_now_ns() - t0 < 5000000000ull) {
    st = rr_net_connect(ctx, 0, waiting, &w);
    assert_null(w);
    usleep(5000);
  }
  assert_int_equal(st, RR_ERR_PEER);
  assert_true(rr_now_ns() - last_made >= 300000000ull);
  assert_true(rr_now_ns() - last_made < 3000000000ull);
  rr_net_close_listen(l_waiting);
  listener_close(ctx, l);
}

/* The listener's pending sockets, open ones only (its lock is free: the
 * test is the only caller). */
static int pending_open(const rr_listen_comm *l) {
  int n = 0;
  for (int i = 0; i < l->nsocks; i++) n += l->socks[i].fd >= 0;
  return n;
}

/* A socket to the listener's first address, as a stranger opens one, from
 * source address src (NULL: the kernel's choice; on loopback every
 * 127.0.0.0/8 address is ours, so each is a source of its own). */
static int dial_listener_from(const rr_listen_comm *l, const char *src) {
  struct sockaddr_storage a;
  socklen_t alen = sizeof a;
  assert_int_equal(getsockname(l->fds[0], (struct sockaddr *)&a, &alen), 0);
  int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  assert_true(fd >= 0);
  if (src) {
    struct sockaddr_in from = {.sin_family = AF_INET};
    assert_int_equal(a.ss_family, AF_INET);
    assert_int_equal(inet_pton(AF_INET, src, &from.sin_addr), 1);
    assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof from), 0);
  }
  assert_int_equal(connect(fd, (struct sockaddr *)&a, alen), 0);
  return fd;
}

static int dial_listener(const rr_listen_comm *l) { return dial_listener_from(l, NULL); }

/* Calls accept() for ms milliseconds, as NCCL's proxy does while it waits;
 * no connection may come out. */
static void accept_for(rr_listen_comm *l, int ms) {
  for (uint64_t t0 = rr_now_ns(); rr_now_ns() - t0 < (uint64_t)ms * 1000000ull;) {
    rr_recv_comm *r = NULL;
    assert_int_equal(rr_net_accept(l, &r), RR_OK);
    assert_null(r);
    usleep(5000);
  }
}

/* 1 when the listener closed its end of fd. */
static int closed_by_listener(int fd) {
  char b[64];
  ssize_t n = recv(fd, b, sizeof b, MSG_DONTWAIT);
  while (n > 0) n = recv(fd, b, sizeof b, MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A connector that is slow between two handshake messages (NCCL drives
 * hundreds of connections under way from one thread: a turn may take
 * seconds) keeps its socket: connect() is called once, then not for 1.5 s,
 * and the connection is still made on those sockets. */
static void test_slow_connector_not_refused(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open(NULL, &ctx, handle, &l);
  rr_send_comm *s = NULL;
  rr_recv_comm *r = NULL;
  assert_int_equal(rr_net_connect(ctx, 0, handle, &s), RR_OK);
  assert_null(s);
  accept_for(l, 50);
  int held = pending_open(l);
  assert_true(held >= 1);
  accept_for(l, 1500); /* the connector does not get its turn */
  assert_int_equal(pending_open(l), held);
  pair p = {.ctx = ctx, .listen = l, .send = s, .recv = r};
  finish_pair(&p, handle);
  assert_int_equal(pending_open(l), 0);
  close_pair(&p);
}

/* ---- A connector played by hand: the listener sees the interleavings the
 * network may produce, in an order the test chooses. */

/* Read n bytes of the listener's answer on fd, calling accept() (no
 * connection may come out yet) while they have not all come. */
static void read_driving(rr_listen_comm *l, int fd, uint8_t *buf, size_t n) {
  size_t got = 0;
  for (uint64_t t0 = rr_now_ns(); got < n && rr_now_ns() - t0 < 5000000000ull;) {
    ssize_t k = recv(fd, buf + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += (size_t)k;
      continue;
    }
    assert_true(k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
    rr_recv_comm *r = NULL;
    assert_int_equal(rr_net_accept(l, &r), RR_OK);
    assert_null(r);
    usleep(1000);
  }
  assert_int_equal(got, n);
}

/* The first half of a connector's handshake, by hand: a socket of rail
 * `rail` (stream 0 of 1) of a first connection conn_id sends its HELLO and
 * reads the listener's CHALLENGE; hello[] and *ch are for hand_prove. */
static int hand_hello(rr_listen_comm *l, uint64_t conn_id, int rail, uint8_t hello[RR_HS_HELLO_LEN],
                      rr_hs_challenge *ch) {
  int fd = dial_listener(l);
  rr_hs_hello h = {.conn_id = conn_id, .rail = (uint8_t)rail, .stream = 0, .nstreams = 1,
                   .chunk_size = 128 << 10, .dev = 0};
  assert_int_equal(rr_hs_random(h.nonce, sizeof h.nonce), RR_OK);
  uint8_t in[RR_HS_MAX_LEN];
  rr_hs_hello_encode(&h, hello);
  assert_int_equal(send(fd, hello, RR_HS_HELLO_LEN, 0), (ssize_t)RR_HS_HELLO_LEN);
  read_driving(l, fd, in, RR_HS_CHALLENGE_LEN);
  size_t need = 0;
  const char *why = NULL;
  assert_int_equal(rr_hs_challenge_decode(in, RR_HS_CHALLENGE_LEN, ch, &need, &why), RR_OK);
  return fd;
}

/* ... and the second: its PROOF (its endpoint a TCP one: an empty blob),
 * up to the listener's ACCEPT. */
static void hand_prove(rr_listen_comm *l, int fd, const uint8_t *secret, const uint8_t *hello,
                       const rr_hs_challenge *ch) {
  uint8_t in[RR_HS_MAX_LEN], out[RR_HS_MAX_LEN];
  rr_hs_proof pr;
  memset(&pr, 0, sizeof pr);
  rr_hs_mac_blob(RR_HS_PROOF, secret, hello, ch->nonce, pr.blob, 0, pr.mac);
  size_t n = rr_hs_proof_encode(RR_HS_PROOF, &pr, out);
  assert_int_equal(send(fd, out, n, 0), (ssize_t)n);
  read_driving(l, fd, in, RR_HS_ACCEPT_FIXED); /* the listener's TCP blob is empty too */
}

/* One authenticated setup socket: the connector's whole handshake up to
 * the listener's ACCEPT. */
static int hand_dial(rr_listen_comm *l, const uint8_t *secret, uint64_t conn_id, int rail) {
  uint8_t hello[RR_HS_HELLO_LEN];
  rr_hs_challenge ch;
  int fd = hand_hello(l, conn_id, rail, hello, &ch);
  hand_prove(l, fd, secret, hello, &ch);
  return fd;
}

static void hand_commit(int fd, uint32_t rails) {
  rr_hs_commit cm = {.rails = rails};
  uint8_t out[RR_HS_COMMIT_LEN];
  rr_hs_commit_encode(&cm, out);
  assert_int_equal(send(fd, out, sizeof out, 0), (ssize_t)sizeof out);
}

/* accept() until it hands out a connection (within 5 s). */
static rr_recv_comm *accept_one(rr_listen_comm *l) {
  rr_recv_comm *r = NULL;
  for (uint64_t t0 = rr_now_ns(); !r && rr_now_ns() - t0 < 5000000000ull; usleep(1000))
    assert_int_equal(rr_net_accept(l, &r), RR_OK);
  assert_non_null(r);
  return r;
}

/* Between its ACCEPTs and its COMMIT nothing travels for a whole turn of
 * the connector, which may outlast the connect timeout: the listener keeps
 * an authenticated group while its sockets are open (here twice the 400 ms
 * timeout, then the COMMIT makes the connection), up to 4 timeouts; one
 * whose sockets the connector closed goes a timeout after that. */
static void test_group_kept_while_open(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("400", &ctx, handle, &l);
  rr_peer_addrs peer;
  assert_int_equal(rr_handle_decode(handle, &peer), RR_OK);

  int slow = hand_dial(l, peer.secret, 0x51017, 0);
  accept_for(l, 800);
  assert_int_equal(l->ngroups, 1);
  hand_commit(slow, 0x1);
  rr_recv_comm *rc = accept_one(l);
  assert_int_equal(rr_net_close_recv(rc), RR_OK);
  close(slow);

  int gone = hand_dial(l, peer.secret, 0x90e, 0);
  close(gone);
  accept_for(l, 100);
  assert_int_equal(l->ngroups, 1); /* seen to end, not yet a timeout ago */
  accept_for(l, 500);
  assert_int_equal(l->ngroups, 0);

  int vanished = hand_dial(l, peer.secret, 0xdead, 0); /* open, silent for good */
  accept_for(l, 1200);
  assert_int_equal(l->ngroups, 1);
  accept_for(l, 600); /* past 4 timeouts */
  assert_int_equal(l->ngroups, 0);
  close(vanished);

  listener_close(ctx, l);
}

/* The race the flapping lab case met: the connector sent its COMMIT on its
 * lowest rail, went on, and its engine put a frame on stream 0 of the other
 * rail (a control message once the commit rail failed under it, an eager
 * message in balance mode), which came first: the COMMIT's segment was lost
 * on the failing path. The listener takes that frame for neither a COMMIT
 * nor garbage: it keeps the connection, takes the COMMIT when it comes, and
 * leaves every byte of the frame to the rail's transport (one byte taken and
 * the transport parses a garbled header: a protocol violation). */
static void test_frames_before_commit_on_another_rail(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open(NULL, &ctx, handle, &l);
  rr_peer_addrs peer;
  assert_int_equal(rr_handle_decode(handle, &peer), RR_OK);
  int rail0 = hand_dial(l, peer.secret, 0xc0ffee, 0), rail1 = hand_dial(l, peer.secret, 0xc0ffee, 1);

  /* Two probes (the peer ignores them): bytes enough that the transport
   * parses a header wherever the listener left it off. */
  engine_msg probe = {.type = ENGINE_CTRL_PROBE, .u.probe_rail = 1};
  uint8_t frame[TCP_FRAME_BYTES + RR_RAIL_CTRL_MAX];
  uint32_t len = engine_msg_encode(&probe, frame + TCP_FRAME_BYTES, RR_RAIL_CTRL_MAX);
  assert_true(len > 0);
  tcp_frame_hdr fh = {.type = TCP_FRAME_CTRL, .len = len};
  tcp_frame_encode(&fh, frame);
  for (int i = 0; i < 2; i++)
    assert_int_equal(send(rail1, frame, TCP_FRAME_BYTES + len, 0), (ssize_t)(TCP_FRAME_BYTES + len));
  accept_for(l, 50);
  assert_int_equal(l->ngroups, 1); /* not dropped as garbled */
  assert_true(l->groups[0].fds[1][0] >= 0);

  hand_commit(rail0, 0x3);
  rr_recv_comm *rc = accept_one(l);
  rr_engine *e = &rc->engine;
  assert_int_equal(e->nrails, 2);
  for (int i = 0; i < 20; i++) {
    pthread_mutex_lock(&e->lock);
    engine_progress(e);
    pthread_mutex_unlock(&e->lock);
    usleep(1000);
  }
  pthread_mutex_lock(&e->lock);
  uint64_t violations = e->stats.violations;
  rr_rail_state s1 = e->rails[1].state;
  pthread_mutex_unlock(&e->lock);
  assert_int_equal(violations, 0);
  assert_int_equal(s1, RR_RAIL_ACTIVE);
  close(rail0);
  close(rail1);
  assert_int_equal(rr_net_close_recv(rc), RR_OK);
  listener_close(ctx, l);
}

/* COMMIT on a higher rail while every socket of a lower one is held and
 * silent (the connector gave that rail up, and its close is lost on a dead
 * path): the listener does not wait on the lower rail. */
static void test_commit_on_higher_rail_lower_silent(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open(NULL, &ctx, handle, &l);
  rr_peer_addrs peer;
  assert_int_equal(rr_handle_decode(handle, &peer), RR_OK);
  int rail0 = hand_dial(l, peer.secret, 0xbeef, 0), rail1 = hand_dial(l, peer.secret, 0xbeef, 1);
  hand_commit(rail1, 0x2);
  rr_recv_comm *rc = accept_one(l);
  assert_int_equal(rc->engine.nrails, 1);
  assert_int_equal(rc->rails_mask, 0x2);
  close(rail0);
  close(rail1);
  assert_int_equal(rr_net_close_recv(rc), RR_OK);
  listener_close(ctx, l);
}

/* ---- Sockets that have not proved the secret (listen_admit.c): held
 * without a clock while the listener is under its caps, the one idle
 * longest evicted when a newcomer needs the room. */

/* A quiet listener holds an unproved socket however long its connector
 * takes to come back: here a silent socket and one whose PROOF comes four
 * connect timeouts (300 ms each) after the CHALLENGE, as a connector's
 * sweep over thousands of connections may take. The latter completes. A
 * half-sent HELLO is still dropped within about a second. */
static void test_unproved_held_while_uncrowded(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("300", &ctx, handle, &l);
  rr_peer_addrs peer;
  assert_int_equal(rr_handle_decode(handle, &peer), RR_OK);
  uint64_t no_handshake = rr_counter_get(RR_CTR_REFUSED_NO_HANDSHAKE);

  int silent = dial_listener(l), half = dial_listener(l);
  rr_hs_hello h = {.conn_id = 0x1234, .nstreams = 1, .chunk_size = 128 << 10};
  uint8_t hello[RR_HS_HELLO_LEN];
  rr_hs_hello_encode(&h, hello);
  assert_int_equal(send(half, hello, RR_HS_HELLO_LEN / 2, 0), (ssize_t)(RR_HS_HELLO_LEN / 2));
  uint8_t slow_hello[RR_HS_HELLO_LEN];
  rr_hs_challenge ch;
  int slow = hand_hello(l, 0x510e, 0, slow_hello, &ch);

  accept_for(l, 1200);
  assert_true(closed_by_listener(half));
  assert_int_equal(rr_counter_get(RR_CTR_REFUSED_NO_HANDSHAKE), no_handshake + 1);
  assert_false(closed_by_listener(silent));
  assert_int_equal(pending_open(l), 2);

  hand_prove(l, slow, peer.secret, slow_hello, &ch);
  hand_commit(slow, 0x1);
  rr_recv_comm *rc = accept_one(l);
  assert_int_equal(rc->conn_id, 0x510e);
  assert_int_equal(rr_net_close_recv(rc), RR_OK);
  assert_int_equal(pending_open(l), 1); /* the silent one, still */
  close(slow);
  close(half);
  close(silent);
  listener_close(ctx, l);
}

/* n strangers' sockets from src, taken in by the listener. */
static void flood_from(rr_listen_comm *l, const char *src, int *fds, int n) {
  for (int i = 0; i < n; i++) fds[i] = dial_listener_from(l, src);
  accept_for(l, 50);
}

/* Under crowding the socket idle longest goes, and only when a newcomer
 * needs its slot: a full table (two sources at their cap) keeps every
 * socket; a newcomer from a third source evicts the oldest of all; one more
 * from a source at its cap evicts that source's oldest. */
static void test_crowded_evicts_idle_longest(void **state) {
  (void)state;
  rr_net_ctx *ctx;
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  listener_open("300", &ctx, handle, &l);
  uint64_t crowded_out = rr_counter_get(RR_CTR_REFUSED_CROWDED_OUT);
  uint64_t per_source = rr_counter_get(RR_CTR_REFUSED_PER_SOURCE);
  int a[RR_LISTEN_PER_SOURCE], b[RR_LISTEN_PER_SOURCE];
  flood_from(l, "127.0.0.2", a, RR_LISTEN_PER_SOURCE);
  flood_from(l, "127.0.0.3", b, RR_LISTEN_PER_SOURCE);
  _Static_assert(2 * RR_LISTEN_PER_SOURCE == RR_LISTEN_PENDING, "two sources at their cap fill the table");
  accept_for(l, 700); /* past the connect timeout: no clock runs */
  assert_int_equal(pending_open(l), RR_LISTEN_PENDING);
  assert_false(closed_by_listener(a[0]));

  int c;
  flood_from(l, "127.0.0.4", &c, 1);
  assert_int_equal(pending_open(l), RR_LISTEN_PENDING);
  assert_true(closed_by_listener(a[0]));
  assert_false(closed_by_listener(a[1]));
  assert_false(closed_by_listener(c));
  assert_int_equal(rr_counter_get(RR_CTR_REFUSED_CROWDED_OUT), crowded_out + 1);

  int more;
  flood_from(l, "127.0.0.3", &more, 1);
  assert_int_equal(pending_open(l), RR_LISTEN_PENDING);
  assert_true(closed_by_listener(b[0]));
  assert_false(closed_by_listener(b[1]));
  assert_false(closed_by_listener(a[1]));
  assert_false(closed_by_listener(more));
  assert_int_equal(rr_counter_get(RR_CTR_REFUSED_PER_SOURCE), per_source + 1);
  assert_int_equal(rr_counter_get(RR_CTR_REFUSED_CROWDED_OUT), crowded_out + 1);

  for (int i = 0; i < RR_LISTEN_PER_SOURCE; i++) close(a[i]), close(b[i]);
  close(c);
  close(more);
  listener_close(ctx, l);
}

/* Strangers that hold every slot a listener has, and never speak, do not
 * keep an honest connector out: its sockets take the strangers' slots.
 * Twice: the table filled from two other addresses (the honest sockets
 * crowd strangers out), and the honest peer's own address at its cap (they
 * take that address's oldest). */
static void test_strangers_at_cap_do_not_stop_honest(void **state) {
  (void)state;
  const char *srcs[2][2] = {{"127.0.0.2", "127.0.0.3"}, {"127.0.0.2", "127.0.0.1"}};
  const rr_counter evicted_by[2] = {RR_CTR_REFUSED_CROWDED_OUT, RR_CTR_REFUSED_PER_SOURCE};
  for (int round = 0; round < 2; round++) {
    pair p = {0};
    char handle[RR_NET_HANDLE_SIZE];
    listener_open("300", &p.ctx, handle, &p.listen);
    int a[RR_LISTEN_PER_SOURCE], b[RR_LISTEN_PER_SOURCE];
    flood_from(p.listen, srcs[round][0], a, RR_LISTEN_PER_SOURCE);
    flood_from(p.listen, srcs[round][1], b, RR_LISTEN_PER_SOURCE);
    assert_int_equal(pending_open(p.listen), RR_LISTEN_PENDING);
    uint64_t evicted = rr_counter_get(evicted_by[round]);
    finish_pair(&p, handle);
    assert_true(rr_counter_get(evicted_by[round]) > evicted);
    for (int i = 0; i < RR_LISTEN_PER_SOURCE; i++) close(a[i]), close(b[i]);
    close_pair(&p);
    unsetenv("RERAIL_CONNECT_TIMEOUT");
    rr_params_reload();
  }
}

/* RR_TEST_IFNAME pools other interfaces than lo (two_rails.sh: two NICs, so
 * every connection has two rails) and RR_TEST_FILTER picks the cases. */

/* rr_net_conn_id (rerailConnId_v1): both comms of a connection give the id
 * the connector drew; two connections differ; a listen comm or a pointer
 * that is no comm gives none. */
static void test_conn_id_same_at_both_ends(void **state) {
  (void)state;
  pair a, b;
  connect_pair(&a);
  connect_pair(&b);
  uint64_t as = 0, ar = 1, bs = 0, none = 7;
  assert_int_equal(rr_net_conn_id(a.send, &as), RR_OK);
  assert_int_equal(rr_net_conn_id(a.recv, &ar), RR_OK);
  assert_int_equal(rr_net_conn_id(b.send, &bs), RR_OK);
  assert_int_equal(as, a.send->conn.conn_id);
  assert_int_equal(as, ar);
  assert_true(as != bs);
  uint32_t not_a_comm[16] = {0};
  assert_int_equal(rr_net_conn_id(a.listen, &none), RR_ERR_INVALID);
  assert_int_equal(rr_net_conn_id(not_a_comm, &none), RR_ERR_INVALID);
  assert_int_equal(rr_net_conn_id(NULL, &none), RR_ERR_INVALID);
  assert_int_equal(none, 7);
  close_pair(&a);
  close_pair(&b);
}

int main(void) {
  core_tests_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_unreachable_peer_retries_until_timeout),
      cmocka_unit_test(test_slow_connector_not_refused),
      cmocka_unit_test(test_slow_turns_with_progress_connect),
      cmocka_unit_test(test_silent_listener_times_out),
      cmocka_unit_test(test_peer_process_answers_keep_connection_waiting),
      cmocka_unit_test(test_unproved_held_while_uncrowded),
      cmocka_unit_test(test_crowded_evicts_idle_longest),
      cmocka_unit_test(test_strangers_at_cap_do_not_stop_honest),
      cmocka_unit_test(test_group_kept_while_open),
      cmocka_unit_test(test_frames_before_commit_on_another_rail),
      cmocka_unit_test(test_commit_on_higher_rail_lower_silent),
      cmocka_unit_test(test_conn_id_same_at_both_ends),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
