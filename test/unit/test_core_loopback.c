/* The net core end to end inside one process, on loopback: connections
 * made and closed (their setup's own cases are test_core_setup.c's),
 * matching by tag, grouped receives, chunking, sizes as sent, zero-byte
 * messages, NULL requests when full, bad input, and a health table the
 * process must refuse (traffic moves without it). Single-threaded: both
 * ends are advanced alternately, which also proves no call ever blocks. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core_pair.h"
#include "rr_counters.h"
#include "core_internal.h"
#include "net_core.h"
#include "rr_clock.h"
#include "rr_health_bus.h"
#include "rr_health_table.h"
#include "rr_params.h"
#include "setup_wire.h"
#include "engine_wire.h"
#include "tcp_frame.h"

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

/* The communicator's trafficClass (NCCL's v11+ config, in the context) reaches every endpoint
 * of its connections on both ends, before they connect (rr_rail_ep.traffic_class: verbs puts
 * it on its QPs, TCP ignores it); a context without one gives none. Traffic moves either way. */
static void test_traffic_class_reaches_endpoints(void **state) {
  (void)state;
  const int classes[] = {106, -1};
  for (size_t c = 0; c < sizeof classes / sizeof *classes; c++) {
    pair p;
    connect_pair_class(&p, classes[c]);
    send_rails_in(&p);
    assert_true(p.send->engine.nrails >= 1);
    assert_int_equal(p.recv->engine.nrails, p.send->engine.nrails);
    for (int r = 0; r < p.send->engine.nrails; r++) {
      assert_int_equal(p.send->engine.rails[r].ep->traffic_class, classes[c]);
      assert_int_equal(p.recv->engine.rails[r].ep->traffic_class, classes[c]);
    }
    size_t n = 4097;
    roundtrip(&p, 1, &n, &n, (int)c);
    close_pair(&p);
  }
}

/* Small messages sent before their receive is posted go eagerly, each
 * assumed to be the only message of the next receive (several receives
 * ahead only for messages of one tag). Here the receive takes three: the
 * first lands from the early buffer, any copy of the others the receiver
 * drops (its assumption is wrong), and the sender, learning the receive's
 * shape from its clear-to-send, sends them again into the rest of it. Everything arrives once, in the right buffers; the
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
    /* The first goes eagerly: no clear-to-send needed. The sender assumes
     * receives ahead only for messages of one tag, so the others (other
     * tags) may wait for the clear-to-send: NULL, NCCL calls again. */
    if (i == 0) assert_non_null(sreq[i]);
    if (!sreq[i]) continue;
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
      if (!sreq[i]) assert_int_equal(rr_net_isend(p.send, sbuf[i], sizes[i], tags[i], smr[i], NULL, &sreq[i]), RR_OK);
      if (sreq[i] && !sdone[i]) assert_int_equal(rr_net_test(sreq[i], &sdone[i], NULL), RR_OK);
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
  /* A send whose tag no posted receive has is "not now" (NULL, or accepted
   * and held back when it went eagerly), never an error, as NCCL's IB
   * transport answers: it goes once the receive it belongs to is the next. */
  void *smr;
  static char sbuf[64];
  for (int i = 0; i < 8; i++) sbuf[i] = (char)(0x30 + i);
  assert_int_equal(rr_net_reg_mr(p.send, sbuf, sizeof sbuf, RR_PTR_HOST, &smr), RR_OK);
  void *late = NULL;
  for (int i = 0; i < 2000; i++) {
    int done;
    /* Clear-to-sends leave on the receiver's next test(), as with NCCL's proxy. */
    assert_int_equal(rr_net_test(first, &done, NULL), RR_OK);
    assert_false(done);
    if (!late) assert_int_equal(rr_net_isend(p.send, sbuf, 8, 999, smr, NULL, &late), RR_OK);
    else assert_int_equal(rr_net_test(late, &done, NULL), RR_OK);
  }
  /* The 32 receives of tag 1 take their messages; then a receive of tag 999. */
  void *ones[RR_NET_MAX_REQUESTS] = {0};
  int ndone = 0, sent = 0;
  for (int iter = 0; iter < 1000000 && (sent < RR_NET_MAX_REQUESTS || ndone < RR_NET_MAX_REQUESTS); iter++) {
    if (sent < RR_NET_MAX_REQUESTS) {
      assert_int_equal(rr_net_isend(p.send, sbuf, 4, 1, smr, NULL, &ones[sent]), RR_OK);
      if (ones[sent]) sent++;
    }
    if (late) {
      int done;
      assert_int_equal(rr_net_test(late, &done, NULL), RR_OK);
    } else {
      assert_int_equal(rr_net_isend(p.send, sbuf, 8, 999, smr, NULL, &late), RR_OK);
    }
    for (int k = 0; k < sent; k++) {
      int done = 0;
      if (ones[k]) assert_int_equal(rr_net_test(ones[k], &done, NULL), RR_OK);
      if (done) ones[k] = NULL;
    }
    /* Receives complete in posting order: test the oldest (the engine's slots). */
    if (ndone < RR_NET_MAX_REQUESTS) {
      int done = 0;
      rr_recv_req *oldest = &engine_rcv(&p.recv->engine)->rreq[ndone % RR_NET_MAX_REQUESTS];
      assert_int_equal(rr_net_test(oldest, &done, NULL), RR_OK);
      if (done) ndone++;
    }
  }
  assert_int_equal(ndone, RR_NET_MAX_REQUESTS);
  static char late_buf[64];
  memset(late_buf, 0xee, sizeof late_buf);
  void *lmr, *lreq = NULL;
  assert_int_equal(rr_net_reg_mr(p.recv, late_buf, sizeof late_buf, RR_PTR_HOST, &lmr), RR_OK);
  void *ldata[1] = {late_buf}, *lmrs[1] = {lmr};
  int ltag[1] = {999};
  assert_int_equal(rr_net_irecv(p.recv, 1, ldata, sz, ltag, lmrs, NULL, &lreq), RR_OK);
  assert_non_null(lreq);
  int ldone = 0, sdone = 0;
  size_t lgot = 0;
  for (int iter = 0; iter < 1000000 && !(ldone && sdone); iter++) {
    if (!late) assert_int_equal(rr_net_isend(p.send, sbuf, 8, 999, smr, NULL, &late), RR_OK);
    else if (!sdone) assert_int_equal(rr_net_test(late, &sdone, NULL), RR_OK);
    if (!ldone) assert_int_equal(rr_net_test(lreq, &ldone, &lgot), RR_OK);
  }
  assert_true(ldone && sdone);
  assert_int_equal(lgot, 8);
  assert_memory_equal(late_buf, sbuf, 8);
  rr_net_dereg_mr(p.recv, lmr);
  rr_net_dereg_mr(p.send, smr);
  rr_net_dereg_mr(p.recv, mr);
  close_pair(&p);
}

/* The same with eager messages off: isend itself answers NULL. */
static void test_unmatched_tag_not_now_no_eager(void **state) {
  (void)state;
  static char buf[64];
  pair q;
  setenv("RERAIL_TCP_EAGER_MAX", "0", 1);
  rr_params_reload();
  connect_pair(&q);
  unsetenv("RERAIL_TCP_EAGER_MAX");
  rr_params_reload();
  void *qmr, *qsmr, *qfirst, *qsreq = NULL;
  void *data[1] = {buf};
  size_t sz[1] = {sizeof buf};
  int tag[1] = {1};
  assert_int_equal(rr_net_reg_mr(q.recv, buf, sizeof buf, RR_PTR_HOST, &qmr), RR_OK);
  void *qmrs[1] = {qmr};
  assert_int_equal(rr_net_irecv(q.recv, 1, data, sz, tag, qmrs, NULL, &qfirst), RR_OK);
  assert_non_null(qfirst);
  assert_int_equal(rr_net_reg_mr(q.send, buf, sizeof buf, RR_PTR_HOST, &qsmr), RR_OK);
  for (int i = 0; i < 2000; i++) {
    int done;
    assert_int_equal(rr_net_test(qfirst, &done, NULL), RR_OK);
    assert_int_equal(rr_net_isend(q.send, buf, 8, 999, qsmr, NULL, &qsreq), RR_OK);
    assert_null(qsreq);
  }
  /* The right tag goes at once. */
  int done = 0, sdone = 0;
  for (int i = 0; i < 1000000 && !(done && sdone); i++) {
    if (!qsreq) assert_int_equal(rr_net_isend(q.send, buf, 8, 1, qsmr, NULL, &qsreq), RR_OK);
    else if (!sdone) assert_int_equal(rr_net_test(qsreq, &sdone, NULL), RR_OK);
    if (!done) assert_int_equal(rr_net_test(qfirst, &done, NULL), RR_OK);
  }
  assert_true(done && sdone);
  rr_net_dereg_mr(q.send, qsmr);
  rr_net_dereg_mr(q.recv, qmr);
  close_pair(&q);
}

/* Grouped receives whose sends come in any tag order, as NCCL's proxy
 * drives them: each tag (a proxy "sub") sends its messages in order, the
 * subs in any order among themselves, each isend retried when it answers
 * NULL. A send whose tag the receive it would go to lacks (it belongs to a
 * later one) is "not now", never an error; sizes small (eager) and large.
 * Every message lands in the buffer with its tag, whole and alone. */
enum { AT_SUBS = 6, AT_RECVS = 120, AT_WINDOW = 8, AT_MAX = 300000 };
typedef struct at_recv {
  int n, tags[8];
  size_t size[8];          /* as sent */
  unsigned char *buf[8];
  void *mr[8];
} at_recv;

static unsigned rnd(unsigned *s) { return *s = *s * 1103515245u + 12345u, (*s >> 8) & 0xffffff; }

static void test_sends_in_any_tag_order(void **state) {
  (void)state;
  static const size_t sizes[] = {0, 1, 100, 4096, 4097, 70000, AT_MAX};
  pair p;
  connect_pair(&p);
  /* two_rails.sh says how many rails each connection must have. */
  send_rails_in(&p);
  if (getenv("RR_TEST_RAILS")) assert_int_equal(p.send->engine.nrails, atoi(getenv("RR_TEST_RAILS")));
  unsigned seed = 12345;
  static at_recv rv[AT_RECVS];
  static unsigned char sdata[AT_SUBS][AT_MAX];
  void *smr[AT_SUBS];
  for (int t = 0; t < AT_SUBS; t++) {
    for (size_t k = 0; k < AT_MAX; k++) sdata[t][k] = pattern(k, 70 + t);
    assert_int_equal(rr_net_reg_mr(p.send, sdata[t], AT_MAX, RR_PTR_HOST, &smr[t]), RR_OK);
  }
  /* Receive k holds a random set of subs (tags 40 + sub), in a random order. */
  for (int k = 0; k < AT_RECVS; k++) {
    at_recv *r = &rv[k];
    unsigned mask = 0;
    while (!mask) mask = rnd(&seed) & ((1u << AT_SUBS) - 1);
    r->n = 0;
    for (int t = 0; t < AT_SUBS; t++)
      if (mask & (1u << t)) r->tags[r->n++] = 40 + t;
    for (int i = r->n - 1; i > 0; i--) {
      int j = (int)(rnd(&seed) % (unsigned)(i + 1)), x = r->tags[i];
      r->tags[i] = r->tags[j];
      r->tags[j] = x;
    }
    for (int i = 0; i < r->n; i++) {
      r->size[i] = sizes[rnd(&seed) % (sizeof sizes / sizeof *sizes)];
      r->buf[i] = malloc(AT_MAX + 1);
      memset(r->buf[i], 0xee, AT_MAX + 1);
      assert_int_equal(rr_net_reg_mr(p.recv, r->buf[i], AT_MAX, RR_PTR_HOST, &r->mr[i]), RR_OK);
    }
  }
  /* Per sub: the receives it sends to, in order, and how far it got. */
  int next_recv[AT_SUBS] = {0};
  void *sreq[AT_RECVS][8] = {{0}};
  int sent_count = 0, total = 0;
  for (int k = 0; k < AT_RECVS; k++) total += rv[k].n;
  void *rreq[AT_RECVS] = {0};
  int posted = 0, completed = 0;
  for (int iter = 0; iter < 20000000 && (completed < AT_RECVS || sent_count < total); iter++) {
    /* Receiver: keep a window of receives posted; test the oldest. */
    if (posted < AT_RECVS && posted - completed < AT_WINDOW) {
      at_recv *r = &rv[posted];
      size_t psz[8];
      void *data[8];
      for (int i = 0; i < r->n; i++) psz[i] = AT_MAX, data[i] = r->buf[i];
      assert_int_equal(rr_net_irecv(p.recv, r->n, data, psz, r->tags, r->mr, NULL, &rreq[posted]), RR_OK);
      if (rreq[posted]) posted++;
    }
    if (completed < posted) {
      int done = 0;
      size_t got[8];
      assert_int_equal(rr_net_test(rreq[completed], &done, got), RR_OK);
      if (done) {
        at_recv *r = &rv[completed];
        for (int i = 0; i < r->n; i++) {
          assert_int_equal(got[i], r->size[i]);
          for (size_t b = 0; b < r->size[i]; b++)
            if (r->buf[i][b] != pattern(b, 70 + r->tags[i] - 40))
              fail_msg("receive %d, tag %d: byte %zu", completed, r->tags[i], b);
          assert_int_equal(r->buf[i][r->size[i]], 0xee);
        }
        completed++;
      }
    }
    /* Sender: one sub, picked at random, tries its next message. */
    int t = (int)(rnd(&seed) % AT_SUBS);
    while (next_recv[t] < AT_RECVS) { /* the next receive holding sub t */
      int k = next_recv[t], i;
      for (i = 0; i < rv[k].n && rv[k].tags[i] != 40 + t; i++) {}
      if (i == rv[k].n) {
        next_recv[t]++;
        continue;
      }
      if (!sreq[k][i]) {
        assert_int_equal(rr_net_isend(p.send, sdata[t], rv[k].size[i], 40 + t, smr[t], NULL, &sreq[k][i]), RR_OK);
        if (sreq[k][i]) sent_count++;
      }
      if (sreq[k][i]) {
        int done = 0;
        assert_int_equal(rr_net_test(sreq[k][i], &done, NULL), RR_OK);
        if (done) next_recv[t]++; /* its buffer is free: the sub moves on */
      }
      break;
    }
  }
  assert_int_equal(completed, AT_RECVS);
  assert_int_equal(sent_count, total);
  for (int k = 0; k < AT_RECVS; k++)
    for (int i = 0; i < rv[k].n; i++) {
      assert_int_equal(rr_net_dereg_mr(p.recv, rv[k].mr[i]), RR_OK);
      free(rv[k].buf[i]);
    }
  for (int t = 0; t < AT_SUBS; t++) assert_int_equal(rr_net_dereg_mr(p.send, smr[t]), RR_OK);
  close_pair(&p);
}

/* The parking itself, made to happen: a small message of tag 8 leaves
 * eagerly before any receive is posted, assumed to be the only message of
 * the first receive; that receive takes tag 7 alone. The receiver drops the
 * copy, the sender parks the message (counted) and sends it to the second
 * receive, which has tag 8, once the first is filled. */
static void test_eager_to_a_receive_without_its_tag_is_parked(void **state) {
  (void)state;
  pair p;
  connect_pair(&p);
  static unsigned char s7[64], s8[64], r7[64], r8[64];
  for (int i = 0; i < 64; i++) s7[i] = (unsigned char)(7 + i), s8[i] = (unsigned char)(8 * i + 1);
  memset(r7, 0xee, sizeof r7);
  memset(r8, 0xee, sizeof r8);
  void *m7, *m8, *rm7, *rm8;
  assert_int_equal(rr_net_reg_mr(p.send, s7, sizeof s7, RR_PTR_HOST, &m7), RR_OK);
  assert_int_equal(rr_net_reg_mr(p.send, s8, sizeof s8, RR_PTR_HOST, &m8), RR_OK);
  assert_int_equal(rr_net_reg_mr(p.recv, r7, sizeof r7, RR_PTR_HOST, &rm7), RR_OK);
  assert_int_equal(rr_net_reg_mr(p.recv, r8, sizeof r8, RR_PTR_HOST, &rm8), RR_OK);
  void *q8 = NULL, *q7 = NULL, *rq7 = NULL, *rq8 = NULL;
  assert_int_equal(rr_net_isend(p.send, s8, 40, 8, m8, NULL, &q8), RR_OK);
  assert_non_null(q8); /* eager: no receive posted yet */
  /* The process counter, not the engine's stats: the monitor thread may be
   * driving this engine while the test reads (no engine lock here). */
  uint64_t parked0 = rr_counter_get(RR_CTR_PARKED_SENDS);
  void *d7[1] = {r7}, *d8[1] = {r8}, *mm7[1] = {rm7}, *mm8[1] = {rm8};
  size_t sz[1] = {sizeof r7};
  int t7[1] = {7}, t8[1] = {8};
  assert_int_equal(rr_net_irecv(p.recv, 1, d7, sz, t7, mm7, NULL, &rq7), RR_OK);
  assert_non_null(rq7);
  int done7 = 0, done8 = 0, sdone7 = 0, sdone8 = 0;
  size_t got7 = 0, got8 = 0;
  for (int iter = 0; iter < 2000000 && !(done7 && done8 && sdone7 && sdone8); iter++) {
    if (!done7) assert_int_equal(rr_net_test(rq7, &done7, &got7), RR_OK);
    /* The first receive's clear-to-send shows it lacks tag 8: parked. */
    if (!q7 && rr_counter_get(RR_CTR_PARKED_SENDS) > parked0)
      assert_int_equal(rr_net_isend(p.send, s7, 30, 7, m7, NULL, &q7), RR_OK);
    if (q7 && !sdone7) assert_int_equal(rr_net_test(q7, &sdone7, NULL), RR_OK);
    if (!sdone8) assert_int_equal(rr_net_test(q8, &sdone8, NULL), RR_OK);
    if (done7 && !rq8) {
      assert_int_equal(rr_net_irecv(p.recv, 1, d8, sz, t8, mm8, NULL, &rq8), RR_OK);
      assert_non_null(rq8);
    }
    if (rq8 && !done8) assert_int_equal(rr_net_test(rq8, &done8, &got8), RR_OK);
    if (!q7) usleep(100); /* the clear-to-send travels meanwhile */
  }
  assert_int_equal(rr_counter_get(RR_CTR_PARKED_SENDS), parked0 + 1);
  assert_true(done7 && done8);
  assert_int_equal(got7, 30);
  assert_int_equal(got8, 40);
  assert_memory_equal(r7, s7, 30);
  assert_memory_equal(r8, s8, 40);
  assert_int_equal(r7[30], 0xee);
  assert_int_equal(r8[40], 0xee);
  rr_net_dereg_mr(p.send, m7);
  rr_net_dereg_mr(p.send, m8);
  rr_net_dereg_mr(p.recv, rm7);
  rr_net_dereg_mr(p.recv, rm8);
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

/* NCCL's profiler callback, as net v10+ passes it to init(). Each start's
 * descriptor is kept as raw bytes: a profiler plugin reads them through
 * NCCL's declaration, so they are checked at NCCL's offsets, not through
 * rerail's struct. */
#define PROF_MAX_EVENTS 16
static int prof_starts, prof_stops, prof_bad;
static struct {
  int64_t plugin_id;
  unsigned char bytes[24]; /* NCCL's socket descriptor v1 is 24 bytes */
} prof_ev[PROF_MAX_EVENTS];
static int fake_profiler(void **event, int type, void *phandle, int64_t plugin_id, void *ext) {
  static int token;
  if (type == 0) {
    if (!phandle || !ext || prof_starts >= PROF_MAX_EVENTS) {
      prof_bad++;
    } else {
      prof_ev[prof_starts].plugin_id = plugin_id;
      memcpy(prof_ev[prof_starts].bytes, ext, sizeof prof_ev[prof_starts].bytes);
    }
    *event = &token;
    prof_starts++;
  } else if (type == 1) {
    if (*event != &token) prof_bad++;
    prof_stops++;
  }
  return 0;
}

static int32_t at_i32(const unsigned char *b, size_t off) {
  int32_t v;
  memcpy(&v, b + off, sizeof v);
  return v;
}
static uint64_t at_u64(const unsigned char *b, size_t off) {
  uint64_t v;
  memcpy(&v, b + off, sizeof v);
  return v;
}

/* NCCL's socket descriptor v1 (plugin id (2 << 16) | 1): type (1, a socket
 * operation) at byte 0, then, 8-byte aligned, fd at 8, op at 12 (0 send,
 * 1 receive), length at 16. The fd is one of the connection's sockets. */
static void check_sock_event(int i, int op, size_t length) {
  const unsigned char *b = prof_ev[i].bytes;
  assert_int_equal(prof_ev[i].plugin_id, (2 << 16) | 1);
  assert_int_equal(b[0], 1);
  int fd = at_i32(b, 8);
  int type = 0;
  socklen_t len = sizeof type;
  assert_true(fd >= 0);
  assert_int_equal(getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len), 0);
  assert_int_equal(type, SOCK_STREAM);
  assert_int_equal(at_i32(b, 12), op);
  assert_int_equal(at_u64(b, 16), length);
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
  assert_int_equal(prof_starts, 3); /* one per sub-receive, at once */
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
  for (int i = 0; i < 3; i++) check_sock_event(i, 1, sizeof rbuf[i]); /* receives: the posted size */
  for (int i = 3; i < 6; i++) { /* sends, in whatever order they were posted */
    size_t length = at_u64(prof_ev[i].bytes, 16);
    assert_true(length == 30000 || length == 60000 || length == 90000);
    check_sock_event(i, 0, length);
  }
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

/* A NIC's advertised speed and latency do not follow this process's view of
 * its health: every local rank builds its topology from them, and before
 * NCCL 2.22 ranks that saw different speeds could build different rings and
 * hang. Down, degraded or healed, the properties stay the same. */
static void test_properties_ignore_local_health(void **state) {
  (void)state;
  rr_init_args args = {0};
  rr_net_ctx *ctx = NULL;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  rr_dev_props up, down, healed;
  assert_int_equal(rr_net_get_properties(0, &up), RR_OK);
  rr_health_nic_state(0, up.name, RR_LINK_DOWN, "test: link down");
  assert_int_equal(rr_health_nic_get(0), RR_LINK_DOWN); /* the health view did change */
  assert_int_equal(rr_net_get_properties(0, &down), RR_OK);
  rr_health_nic_state(0, up.name, RR_LINK_UP, "test: link up");
  assert_int_equal(rr_net_get_properties(0, &healed), RR_OK);
  assert_int_equal(down.speed_mbps, up.speed_mbps);
  assert_true(down.latency_us == up.latency_us);
  assert_int_equal(healed.speed_mbps, up.speed_mbps);
  assert_true(healed.latency_us == up.latency_us);
  rr_net_finalize(ctx);
}

/* NCCL 2.24+ refuses every connection of a device whose maxP2pBytes or
 * maxCollBytes passes 1 TiB (NCCL_MAX_NET_SIZE_BYTES). A message may have
 * 2^17 chunks (the immediate's chunk field, since it gave a bit to group
 * writes), so chunks above 8 MiB would pass it: for every chunk size
 * RERAIL_CHUNK_SIZE accepts (4K-64M) the sizes stay within the limit, and
 * below it they are what the engine can carry. */
static void test_max_bytes_within_nccls_limit(void **state) {
  (void)state;
  const size_t tib = (size_t)1 << 40;
  static const char *const sizes[] = {"4K", "128K", "1M", "4M", "8M", "8196K", "32M", "64M", "65535K"};
  rr_init_args args = {0};
  rr_net_ctx *ctx = NULL;
  assert_int_equal(rr_net_init(&args, &ctx), RR_OK);
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    setenv("RERAIL_CHUNK_SIZE", sizes[i], 1);
    rr_params_reload();
    size_t chunk = rr_params_get()->chunk_size;
    assert_true(chunk >= 4096); /* accepted, not the default */
    assert_true(i == 1 || chunk != 128 << 10);
    rr_dev_props props;
    assert_int_equal(rr_net_get_properties(0, &props), RR_OK);
    size_t carried = chunk << 17;
    assert_int_equal(props.max_p2p_bytes, carried < tib ? carried : tib);
    assert_int_equal(props.max_coll_bytes, props.max_p2p_bytes);
  }
  setenv("RERAIL_CHUNK_SIZE", "128K", 1); /* main's setting */
  rr_params_reload();
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

/* A health table this process may not use leaves the plugin working: the
 * table is refused (counted by reason), messages still get through, and
 * the file keeps every byte and its mtime. As root (CI): another user's
 * table, the case that matters since root gets no exception. Without root
 * no file can be given away; one every user may write is refused as surely. */
static void test_refused_health_table_traffic_moves(void **state) {
  (void)state;
  char tdir[] = "/tmp/rr-loopback-ht-XXXXXX";
  assert_non_null(mkdtemp(tdir));
  char tpath[sizeof tdir + 16];
  snprintf(tpath, sizeof tpath, "%s/health", tdir);
  rr_ht_writer_opts o = {.nic_rows = 8, .peer_rows = 8, .group = ""};
  rr_ht_writer *w = NULL;
  assert_int_equal(rr_health_table_open_writer(tpath, &o, &w, NULL), RR_OK);
  rr_health_table_close_writer(w);
  rr_ht_refusal why = RR_HT_REFUSED_OTHER_WRITABLE;
  if (geteuid() == 0) {
    assert_int_equal(chown(tpath, 65534, 65534), 0);
    why = RR_HT_REFUSED_OWNER;
  }
  assert_int_equal(chmod(tpath, why == RR_HT_REFUSED_OWNER ? 0644 : 0666), 0);
  /* Far in the past: a write would move it to now, however coarse the clock. */
  const struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
  assert_int_equal(utimensat(AT_FDCWD, tpath, old, 0), 0);
  struct stat before, after;
  assert_int_equal(stat(tpath, &before), 0);
  unsigned char *bytes = malloc((size_t)before.st_size), *now = malloc((size_t)before.st_size);
  assert_non_null(bytes);
  assert_non_null(now);
  int fd = open(tpath, O_RDONLY);
  assert_true(fd >= 0);
  assert_int_equal(pread(fd, bytes, (size_t)before.st_size, 0), before.st_size);

  uint64_t refused = rr_health_table_refusals(why);
  setenv("RERAIL_HEALTH_PATH", tpath, 1); /* read when the first context opens the table */
  pair p;
  connect_pair(&p);
  assert_int_equal(rr_health_table_refusals(why), refused + 1);
  assert_false(rr_health_table_active());
  const size_t sizes[] = {0, 4096, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
    roundtrip(&p, 1, &sizes[i], &sizes[i], (int)i);
  close_pair(&p);
  unsetenv("RERAIL_HEALTH_PATH");

  assert_int_equal(stat(tpath, &after), 0);
  assert_int_equal(after.st_size, before.st_size);
  assert_int_equal(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  assert_int_equal(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  assert_int_equal(pread(fd, now, (size_t)before.st_size, 0), before.st_size);
  assert_memory_equal(now, bytes, (size_t)before.st_size);
  close(fd);
  free(bytes);
  free(now);
  assert_int_equal(unlink(tpath), 0);
  assert_int_equal(rmdir(tdir), 0);
}

int main(void) {
  core_tests_setup();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_single_sizes),
      cmocka_unit_test(test_traffic_class_reaches_endpoints),
      cmocka_unit_test(test_grouped),
      cmocka_unit_test(test_eager_before_grouped_receive),
      cmocka_unit_test(test_full_queue_gives_null),
      cmocka_unit_test(test_unmatched_tag_not_now_no_eager),
      cmocka_unit_test(test_sends_in_any_tag_order),
      cmocka_unit_test(test_eager_to_a_receive_without_its_tag_is_parked),
      cmocka_unit_test(test_bad_handle),
      cmocka_unit_test(test_wrong_token_refused),
      cmocka_unit_test(test_profiler_events),
      cmocka_unit_test(test_many_connections_leak_nothing),
      cmocka_unit_test(test_tcp_congestion),
      cmocka_unit_test(test_properties_ignore_local_health),
      cmocka_unit_test(test_max_bytes_within_nccls_limit),
      cmocka_unit_test(test_tcp_memory_types),
      cmocka_unit_test(test_refused_health_table_traffic_moves),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
