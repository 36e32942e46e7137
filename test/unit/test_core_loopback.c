/* The net core end to end inside one process, on loopback: connection setup,
 * matching by tag, grouped receives, chunking, sizes as sent, zero-byte
 * messages, NULL requests when full, and bad input. Single-threaded: both
 * ends are advanced alternately, which also proves no call ever blocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_internal.h"
#include "net_core.h"
#include "rr_clock.h"
#include "rr_health.h"
#include "rr_params.h"

typedef struct pair {
  rr_net_ctx *ctx;
  rr_listen_comm *listen;
  rr_send_comm *send;
  rr_recv_comm *recv;
} pair;

static void connect_pair(pair *p) {
  rr_init_args args = {.traffic_class = -1};
  assert_int_equal(rr_net_init(&args, &p->ctx), RR_OK);
  int ndev = 0;
  assert_int_equal(rr_net_devices(&ndev), RR_OK);
  assert_true(ndev >= 1);
  char handle[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_net_listen(p->ctx, 0, handle, &p->listen), RR_OK);
  p->send = NULL;
  p->recv = NULL;
  for (int i = 0; i < 100000 && (!p->send || !p->recv); i++) {
    if (!p->send) assert_int_equal(rr_net_connect(p->ctx, 0, handle, &p->send), RR_OK);
    if (!p->recv) assert_int_equal(rr_net_accept(p->listen, &p->recv), RR_OK);
  }
  assert_non_null(p->send);
  assert_non_null(p->recv);
}

static void close_pair(pair *p) {
  assert_int_equal(rr_net_close_send(p->send), RR_OK);
  assert_int_equal(rr_net_close_recv(p->recv), RR_OK);
  assert_int_equal(rr_net_close_listen(p->listen), RR_OK);
  assert_int_equal(rr_net_finalize(p->ctx), RR_OK);
}

static unsigned char pattern(size_t i, int salt) { return (unsigned char)(i * 131 + salt * 7 + 1); }

/* Send one group of n messages (sizes[i] bytes, posted[i] receive sizes) and check them. */
static void roundtrip(pair *p, int n, const size_t *sizes, const size_t *posted, int salt) {
  void *sbuf[8], *rbuf[8], *smr[8], *rmr[8];
  int tags[8];
  size_t rsizes[8];
  for (int i = 0; i < n; i++) {
    sbuf[i] = malloc(sizes[i] + 1);
    rbuf[i] = malloc(posted[i] + 1);
    for (size_t k = 0; k < sizes[i]; k++) ((unsigned char *)sbuf[i])[k] = pattern(k, salt + i);
    memset(rbuf[i], 0xee, posted[i] + 1);
    assert_int_equal(rr_net_reg_mr(p->send, sbuf[i], sizes[i], RR_PTR_HOST, &smr[i]), RR_OK);
    assert_int_equal(rr_net_reg_mr(p->recv, rbuf[i], posted[i], RR_PTR_HOST, &rmr[i]), RR_OK);
    tags[i] = 100 + i;
    rsizes[i] = posted[i];
  }
  void *rreq = NULL;
  assert_int_equal(rr_net_irecv(p->recv, n, rbuf, rsizes, tags, rmr, NULL, &rreq), RR_OK);
  assert_non_null(rreq);
  void *sreq[8] = {0};
  int rdone = 0, sdone[8] = {0}, alldone = 0;
  size_t got[8];
  for (int iter = 0; iter < 10000000 && !(rdone && alldone); iter++) {
    /* Post in reverse tag order: matching is by tag, not by position. */
    for (int i = n - 1; i >= 0; i--)
      if (!sreq[i])
        assert_int_equal(rr_net_isend(p->send, sbuf[i], sizes[i], tags[i], smr[i], NULL, &sreq[i]), RR_OK);
    alldone = 1;
    for (int i = 0; i < n; i++) {
      if (sreq[i] && !sdone[i]) assert_int_equal(rr_net_test(sreq[i], &sdone[i], NULL), RR_OK);
      alldone &= sdone[i];
    }
    if (!rdone) assert_int_equal(rr_net_test(rreq, &rdone, got), RR_OK);
  }
  assert_true(rdone && alldone);
  for (int i = 0; i < n; i++) {
    assert_int_equal(got[i], sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++)
      if (((unsigned char *)rbuf[i])[k] != pattern(k, salt + i)) fail_msg("byte %zu of message %d", k, i);
    assert_int_equal(((unsigned char *)rbuf[i])[posted[i]], 0xee); /* nothing past the end */
    assert_int_equal(rr_net_dereg_mr(p->send, smr[i]), RR_OK);
    assert_int_equal(rr_net_dereg_mr(p->recv, rmr[i]), RR_OK);
    free(sbuf[i]);
    free(rbuf[i]);
  }
}

static void test_single_sizes(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  /* Around the bounce size, the chunk size, zero, and odd sizes. */
  const size_t sizes[] = {0, 1, 7, 4095, 4096, 4097, 65536, 524287, 524288, 524289, 3000001, 8 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    size_t posted = sizes[i] + (i % 3) * 1000; /* receive may be larger than the send */
    roundtrip(&p, 1, &sizes[i], &posted, (int)i);
  }
  close_pair(&p);
}

/* Small messages sent before their receive is posted go eagerly, each
 * assumed to be the only message of the next receive. Here the receive
 * takes three: the first lands from the early buffer, the receiver drops the
 * copies of the other two (their assumption is wrong), and the sender,
 * learning the receive's shape from its clear-to-send, sends them again into
 * the rest of it. Everything arrives once, in the right buffers; the
 * connection goes on working. */
static void test_eager_before_grouped_receive(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  enum { N = 3 };
  const size_t sizes[N] = {100, 0, 4096};
  static unsigned char sbuf[N][4096], rbuf[N][4097];
  void *smr[N], *rmr[N], *sreq[N], *rptr[N];
  size_t rsizes[N];
  int tags[N];
  for (int i = 0; i < N; i++) {
    for (size_t k = 0; k < sizes[i]; k++) sbuf[i][k] = pattern(k, 50 + i);
    memset(rbuf[i], 0xee, sizeof rbuf[i]);
    assert_int_equal(rr_net_reg_mr(p.send, sbuf[i], sizeof sbuf[i], RR_PTR_HOST, &smr[i]), RR_OK);
    assert_int_equal(rr_net_reg_mr(p.recv, rbuf[i], 4096, RR_PTR_HOST, &rmr[i]), RR_OK);
    tags[i] = 100 + i;
    rsizes[i] = 4096;
    rptr[i] = rbuf[i];
  }
  int sdone[N] = {0};
  for (int i = 0; i < N; i++) {
    sreq[i] = NULL;
    assert_int_equal(rr_net_isend(p.send, sbuf[i], sizes[i], tags[i], smr[i], NULL, &sreq[i]), RR_OK);
    assert_non_null(sreq[i]); /* eager: no clear-to-send needed */
    assert_int_equal(rr_net_test(sreq[i], &sdone[i], NULL), RR_OK);
    if (sizes[i]) assert_true(sdone[i]); /* copied: NCCL's buffer is free at once */
  }
  /* The monitor thread reads them into the early buffer meanwhile. */
  usleep(50 * 1000);
  void *rreq = NULL;
  assert_int_equal(rr_net_irecv(p.recv, N, rptr, rsizes, tags, rmr, NULL, &rreq), RR_OK);
  assert_non_null(rreq);
  int rdone = 0;
  size_t got[N];
  int alldone = 0;
  for (int iter = 0; iter < 10000000 && !(rdone && alldone); iter++) {
    if (!rdone) assert_int_equal(rr_net_test(rreq, &rdone, got), RR_OK);
    alldone = 1;
    for (int i = 0; i < N; i++) {
      if (!sdone[i]) assert_int_equal(rr_net_test(sreq[i], &sdone[i], NULL), RR_OK);
      alldone &= sdone[i];
    }
  }
  assert_true(rdone && alldone);
  for (int i = 0; i < N; i++) {
    assert_int_equal(got[i], sizes[i]);
    for (size_t k = 0; k < sizes[i]; k++)
      if (rbuf[i][k] != pattern(k, 50 + i)) fail_msg("byte %zu of message %d", k, i);
    assert_int_equal(rbuf[i][sizes[i] == 4096 ? 4096 : sizes[i]], 0xee);
  }
  for (int i = 0; i < N; i++) {
    assert_int_equal(rr_net_dereg_mr(p.send, smr[i]), RR_OK);
    assert_int_equal(rr_net_dereg_mr(p.recv, rmr[i]), RR_OK);
  }
  /* Traffic goes on: receives of one and of several messages. */
  const size_t more[3] = {10, 70000, 5};
  for (int rep = 0; rep < 6; rep++) roundtrip(&p, 1 + rep % 3, more, more, rep);
  close_pair(&p);
}

static void test_grouped(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  const size_t sizes[8] = {0, 10, 5000, 1 << 20, 3, 700000, 0, 65537};
  const size_t posted[8] = {16, 10, 6000, 1 << 20, 100, 800000, 0, 70000};
  for (int rep = 0; rep < 40; rep++) roundtrip(&p, 1 + rep % 8, sizes, posted, rep); /* slot reuse */
  close_pair(&p);
}

static void test_full_queue_gives_null(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  static char buf[64];
  void *mr;
  assert_int_equal(rr_net_reg_mr(p.recv, buf, sizeof buf, RR_PTR_HOST, &mr), RR_OK);
  void *data[1] = {buf}, *mrs[1] = {mr}, *req;
  size_t sz[1] = {sizeof buf};
  int tag[1] = {1};
  void *first = NULL;
  for (int i = 0; i < RR_NET_MAX_REQUESTS; i++) {
    assert_int_equal(rr_net_irecv(p.recv, 1, data, sz, tag, mrs, NULL, &req), RR_OK);
    assert_non_null(req);
    if (!first) first = req;
  }
  assert_int_equal(rr_net_irecv(p.recv, 1, data, sz, tag, mrs, NULL, &req), RR_OK);
  assert_null(req); /* full: NULL request, not an error */
  /* No receive with this tag: a clear error, no hang. A small message may
   * leave before the clear-to-send shows there is no such receive (eager):
   * then the error comes from test() on either end instead of isend(). */
  void *smr, *sreq = NULL;
  assert_int_equal(rr_net_reg_mr(p.send, buf, sizeof buf, RR_PTR_HOST, &smr), RR_OK);
  rr_status st = RR_OK, rst = RR_OK;
  for (int i = 0; i < 100000 && st == RR_OK && rst == RR_OK; i++) {
    int done;
    /* Clear-to-sends leave on the receiver's next test(), as with NCCL's proxy. */
    rst = rr_net_test(first, &done, NULL);
    st = sreq ? rr_net_test(sreq, &done, NULL) : rr_net_isend(p.send, buf, 8, 999, smr, NULL, &sreq);
  }
  assert_int_equal(st == RR_ERR_INVALID || rst == RR_ERR_INVALID, 1);
  /* With eager messages off, isend itself refuses it. */
  {
    pair q;
    setenv("RERAIL_TCP_EAGER_MAX", "0", 1);
    rr_params_reload();
    connect_pair(&q);
    unsetenv("RERAIL_TCP_EAGER_MAX");
    rr_params_reload();
    void *qmr, *qsmr, *qfirst, *qsreq = NULL;
    assert_int_equal(rr_net_reg_mr(q.recv, buf, sizeof buf, RR_PTR_HOST, &qmr), RR_OK);
    void *qmrs[1] = {qmr};
    assert_int_equal(rr_net_irecv(q.recv, 1, data, sz, tag, qmrs, NULL, &qfirst), RR_OK);
    assert_non_null(qfirst);
    assert_int_equal(rr_net_reg_mr(q.send, buf, sizeof buf, RR_PTR_HOST, &qsmr), RR_OK);
    st = RR_OK;
    for (int i = 0; i < 100000 && st == RR_OK && !qsreq; i++) {
      int done;
      assert_int_equal(rr_net_test(qfirst, &done, NULL), RR_OK);
      st = rr_net_isend(q.send, buf, 8, 999, qsmr, NULL, &qsreq);
    }
    assert_int_equal(st, RR_ERR_INVALID);
    rr_net_dereg_mr(q.send, qsmr);
    rr_net_dereg_mr(q.recv, qmr);
    close_pair(&q);
  }
  rr_net_dereg_mr(p.send, smr);
  rr_net_dereg_mr(p.recv, mr);
  close_pair(&p);
}

static void test_bad_handle(void **state) {
  (void)state;
  rr_init_args args = {.traffic_class = -1};
  rr_net_ctx *ctx;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  char handle[RR_NET_HANDLE_SIZE];
  for (size_t i = 0; i < sizeof handle; i++) handle[i] = (char)(i * 37 + 11);
  rr_send_comm *s = NULL;
  assert_int_equal(rr_net_connect(ctx, 0, handle, &s), RR_ERR_INVALID);
  assert_null(s);
  memset(handle, 0, sizeof handle);
  assert_int_equal(rr_net_connect(ctx, 0, handle, &s), RR_ERR_INVALID);
  assert_int_equal(rr_net_connect(ctx, 0, NULL, &s), RR_ERR_INVALID);
  assert_int_equal(rr_net_connect(ctx, 99, handle, &s), RR_ERR_INVALID);
  int done;
  assert_int_equal(rr_net_test(NULL, &done, NULL), RR_ERR_INVALID);
  rr_net_finalize(ctx);
}

static void test_wrong_token_refused(void **state) {
  (void)state;
  rr_init_args args = {.traffic_class = -1};
  rr_net_ctx *ctx;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  assert_int_equal(rr_net_listen(ctx, 0, handle, &l), RR_OK);
  handle[8] ^= 0x5a; /* a byte of the secret */
  /* The listener's proof (challenge-response, mutual) does not match the
   * secret the connector holds: connect() fails with a clear error, and the
   * listener never hands the connection to NCCL. */
  rr_send_comm *s = NULL;
  rr_recv_comm *r = NULL;
  rr_status st = RR_OK;
  for (int i = 0; i < 20000 && st == RR_OK; i++) {
    st = rr_net_connect(ctx, 0, handle, &s);
    assert_null(s);
    assert_int_equal(rr_net_accept(l, &r), RR_OK);
    assert_null(r);
  }
  assert_int_equal(st, RR_ERR_PEER);
  for (int i = 0; i < 1000; i++) {
    assert_int_equal(rr_net_accept(l, &r), RR_OK);
    assert_null(r);
  }
  rr_net_close_listen(l);
  rr_net_finalize(ctx);
}

static int open_fds(void) {
  int n = 0;
  for (int fd = 0; fd < 4096; fd++) n += fcntl(fd, F_GETFD) != -1;
  return n;
}

/* Connections set up and torn down as NCCL does (closeListen right after
 * accept, closes in either order), many times over: nothing accumulates. */
static void test_many_connections_leak_nothing(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  close_pair(&p);
  int before = open_fds();
  for (int i = 0; i < 200; i++) {
    connect_pair(&p);
    assert_int_equal(rr_net_close_listen(p.listen), RR_OK);
    if (i & 1) {
      assert_int_equal(rr_net_close_recv(p.recv), RR_OK);
      assert_int_equal(rr_net_close_send(p.send), RR_OK);
    } else {
      assert_int_equal(rr_net_close_send(p.send), RR_OK);
      assert_int_equal(rr_net_close_recv(p.recv), RR_OK);
    }
    assert_int_equal(rr_net_finalize(p.ctx), RR_OK);
  }
  assert_int_equal(open_fds(), before);
}

/* NCCL's profiler callback, as net v10+ passes it to init(). */
static int prof_starts, prof_stops, prof_bad;
static int fake_profiler(void **event, int type, void *phandle, int64_t plugin_id, void *ext) {
  static int token;
  if (type == 0) {
    if (!phandle || plugin_id != ((2 << 16) | 1) || !ext || *(const uint8_t *)ext != 1) prof_bad++;
    *event = &token;
    prof_starts++;
  } else if (type == 1) {
    if (*event != &token) prof_bad++;
    prof_stops++;
  }
  return 0;
}

static void test_profiler_events(void **state) {
  (void)state;
  pair p;
  rr_init_args args = {.traffic_class = -1, .comm_id = 77, .profiler = fake_profiler};
  assert_int_equal(rr_net_init(&args, &p.ctx), RR_OK);
  char handle[RR_NET_HANDLE_SIZE];
  assert_int_equal(rr_net_listen(p.ctx, 0, handle, &p.listen), RR_OK);
  p.send = NULL;
  p.recv = NULL;
  for (int i = 0; i < 100000 && (!p.send || !p.recv); i++) {
    if (!p.send) assert_int_equal(rr_net_connect(p.ctx, 0, handle, &p.send), RR_OK);
    if (!p.recv) assert_int_equal(rr_net_accept(p.listen, &p.recv), RR_OK);
  }
  static char sbuf[3][100000], rbuf[3][100000];
  void *smr[3], *rmr[3], *sreq[3] = {0}, *rreq = NULL;
  void *rdata[3], *ph[3];
  size_t rsz[3];
  int tags[3] = {5, 6, 7};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(rr_net_reg_mr(p.send, sbuf[i], sizeof sbuf[i], RR_PTR_HOST, &smr[i]), RR_OK);
    assert_int_equal(rr_net_reg_mr(p.recv, rbuf[i], sizeof rbuf[i], RR_PTR_HOST, &rmr[i]), RR_OK);
    rdata[i] = rbuf[i];
    rsz[i] = sizeof rbuf[i];
    ph[i] = &ph[i]; /* NCCL's per-request handle: any non-NULL pointer */
  }
  assert_int_equal(rr_net_irecv(p.recv, 3, rdata, rsz, tags, rmr, ph, &rreq), RR_OK);
  int rdone = 0, sdone[3] = {0};
  for (int it = 0; it < 1000000 && !(rdone && sdone[0] && sdone[1] && sdone[2]); it++) {
    for (int i = 0; i < 3; i++) {
      if (!sreq[i]) assert_int_equal(rr_net_isend(p.send, sbuf[i], 1000 * (size_t)(i + 1) * 30, tags[i], smr[i], ph[i], &sreq[i]), RR_OK);
      if (sreq[i] && !sdone[i]) assert_int_equal(rr_net_test(sreq[i], &sdone[i], NULL), RR_OK);
    }
    if (!rdone) assert_int_equal(rr_net_test(rreq, &rdone, NULL), RR_OK);
  }
  assert_true(rdone);
  assert_int_equal(prof_starts, 6); /* 3 sends + 3 sub-receives */
  assert_int_equal(prof_stops, 6);
  assert_int_equal(prof_bad, 0);
  for (int i = 0; i < 3; i++) {
    rr_net_dereg_mr(p.send, smr[i]);
    rr_net_dereg_mr(p.recv, rmr[i]);
  }
  close_pair(&p);
}

/* The congestion control a fresh rail socket ends up with. */
static void tuned_congestion(char *name, socklen_t cap) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  assert_int_equal(rr_sock_tune(fd), RR_OK);
  memset(name, 0, cap);
  assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &cap), 0);
  close(fd);
}

/* RERAIL_TCP_CONGESTION picks the rails' algorithm; a name the kernel lacks
 * or a malformed one leaves the system's, and traffic flows either way. */
static void test_tcp_congestion(void **state) {
  (void)state;
  char sys[16], got[16];
  unsetenv("RERAIL_TCP_CONGESTION");
  rr_params_reload();
  tuned_congestion(sys, sizeof sys);
  static const struct { const char *value, *want; } cases[] = {
      {"reno", "reno"},                 /* built into every kernel */
      {"no_such_algo", NULL},           /* the kernel refuses it: the system's */
      {"reno; rm -rf", NULL},           /* not a name: ignored at parse time */
      {"averyveryverylongname", NULL},  /* longer than the kernel allows */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    setenv("RERAIL_TCP_CONGESTION", cases[i].value, 1);
    rr_params_reload();
    tuned_congestion(got, sizeof got);
    assert_string_equal(got, cases[i].want ? cases[i].want : sys);
    pair p;
    connect_pair(&p);
    const size_t size = 1 << 20, posted = 1 << 20;
    roundtrip(&p, 1, &size, &posted, (int)i);
    close_pair(&p);
  }
  unsetenv("RERAIL_TCP_CONGESTION");
  rr_params_reload();
}

/* A NIC known to be down when NCCL creates a communicator is advertised as
 * slow, so the new communicator's search avoids it; healed, it is whole again. */
static void test_properties_follow_health(void **state) {
  (void)state;
  rr_init_args args = {0};
  rr_net_ctx *ctx = NULL;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  rr_dev_props up, down, healed;
  assert_int_equal(rr_net_get_properties(0, &up), RR_OK);
  rr_health_nic_state(0, up.name, RR_LINK_DOWN, "test: link down");
  assert_int_equal(rr_net_get_properties(0, &down), RR_OK);
  rr_health_nic_state(0, up.name, RR_LINK_UP, "test: link up");
  assert_int_equal(rr_net_get_properties(0, &healed), RR_OK);
  assert_true(down.speed_mbps * 50 <= up.speed_mbps);
  assert_true(down.latency_us > up.latency_us);
  assert_int_equal(healed.speed_mbps, up.speed_mbps);
  rr_net_finalize(ctx);
}

/* TCP rails read and write through the CPU: host memory only (ptrSupport, regMr of CUDA
 * memory refused, a DMA-BUF of host memory accepted), and nothing to flush, even with the
 * test knob that flushes host memory on verbs NICs. */
static void test_tcp_memory_types(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  rr_dev_props props;
  assert_int_equal(rr_net_get_properties(0, &props), RR_OK);
  assert_int_equal(props.ptr_support, RR_PTR_HOST);
  static char buf[4096];
  void *mh = NULL;
  assert_int_equal(rr_net_reg_mr(p.recv, buf, sizeof buf, RR_PTR_CUDA, &mh), RR_ERR_UNSUPPORTED);
  assert_int_equal(rr_net_reg_mr_dmabuf(p.recv, buf, sizeof buf, RR_PTR_CUDA, 0, 5, &mh), RR_ERR_UNSUPPORTED);
  assert_int_equal(rr_net_reg_mr_dmabuf(p.recv, buf, sizeof buf, RR_PTR_HOST, 0, 5, &mh), RR_OK);
  void *data[1] = {buf}, *mhs[1] = {mh}, *req = (void *)1;
  int sizes[1] = {100};
  assert_int_equal(rr_net_iflush(p.recv, 1, data, sizes, mhs, &req), RR_OK);
  assert_null(req);
  setenv("RERAIL_TEST_FORCE_GPU_FLUSH", "1", 1);
  rr_params_reload();
  assert_int_equal(rr_net_iflush(p.recv, 1, data, sizes, mhs, &req), RR_OK);
  assert_null(req);
  unsetenv("RERAIL_TEST_FORCE_GPU_FLUSH");
  rr_params_reload();
  assert_int_equal(rr_net_dereg_mr(p.recv, mh), RR_OK);
  close_pair(&p);
}

/* A listener no rail reaches (its address refuses every socket, as a peer
 * whose NIC is not up yet may): connect() keeps returning a NULL comm, never
 * an error, for RERAIL_CONNECT_TIMEOUT, and only then fails, clearly; it
 * holds no socket afterwards. */
static void test_unreachable_peer_retries_until_timeout(void **state) {
  (void)state;
  setenv("RERAIL_CONNECT_TIMEOUT", "1000", 1);
  rr_params_reload();
  rr_init_args args = {.traffic_class = -1};
  rr_net_ctx *ctx;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  char handle[RR_NET_HANDLE_SIZE];
  rr_listen_comm *l;
  assert_int_equal(rr_net_listen(ctx, 0, handle, &l), RR_OK);
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
  rr_net_close_listen(l);
  rr_net_finalize(ctx);
  unsetenv("RERAIL_CONNECT_TIMEOUT");
  rr_params_reload();
}

int main(void) {
  setenv("RERAIL_SOCKET_IFNAME", "lo", 1);
  setenv("RERAIL_CHUNK_SIZE", "128K", 1); /* many chunks per message */
  setenv("RERAIL_TCP_STREAMS", "2", 1);
  rr_params_reload();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_sizes),
      cmocka_unit_test(test_grouped),
      cmocka_unit_test(test_eager_before_grouped_receive),
      cmocka_unit_test(test_full_queue_gives_null),
      cmocka_unit_test(test_bad_handle),
      cmocka_unit_test(test_wrong_token_refused),
      cmocka_unit_test(test_profiler_events),
      cmocka_unit_test(test_many_connections_leak_nothing),
      cmocka_unit_test(test_tcp_congestion),
      cmocka_unit_test(test_properties_follow_health),
      cmocka_unit_test(test_tcp_memory_types),
      cmocka_unit_test(test_unreachable_peer_retries_until_timeout),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
