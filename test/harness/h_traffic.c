/* The per-connection progress engine, shaped like NCCL's proxy.
 *
 * Sender (sendProxyProgress): post isends for op `posted` while fewer than K
 * ops are in flight (a NULL request means "not now": retry the same message on
 * the next pass); test only the oldest outstanding request, in posting order.
 * *request holds a stale pointer when isend is called, as in NCCL.
 *
 * Receiver (recvProxyProgress), three pointers like NCCL's posted / received /
 * transmitted: post irecv for op `posted` (one call per op, grouped receives
 * with distinct tags; the optional-completion hint on some single receives);
 * test the oldest posted request; when done, iflush once (NCCL does this for
 * GPU memory; the harness does it for every op and accepts a NULL request);
 * retire in order once the flush request (if any) is done and every byte,
 * every reported size, the untouched tail of each posted buffer and its guard
 * have been checked. A slot's buffer is reused only after it retires, and is
 * re-poisoned before every post, so stale or misplaced data is caught.
 * Each completion (test() reporting an op done) feeds the stall report and
 * the timeline (h_report.c). */
#include "harness.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIZE_SENTINEL (INT_MIN + 0x5a5a)
#define STALE_REQUEST ((void *)(uintptr_t)0xdead0000beef0001ull)
#define MAX_PRINTED_ERRORS 8
#define HINT_GRACE_S 10.0

static const char *dir_name(const h_conn *c) {
  return c->is_send ? "send" : "recv";
}

static void conn_error(h_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void conn_error(h_conn *c, const char *fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  c->failed = 1;
  if (c->errors_printed++ < MAX_PRINTED_ERRORS)
    h_error("conn %d (%s, %s): %s", c->idx, dir_name(c), c->net->name ? c->net->name : "?", msg);
  else
    atomic_fetch_add(&g_cnt.errors, 1);
}

int h_conn_alloc(h_conn *c) {
  size_t bytes = c->sched.slot_bytes * (size_t)g_opt.inflight;
  c->buf_bytes = (bytes + 4095) & ~(size_t)4095;
  c->buf = aligned_alloc(4096, c->buf_bytes);
  if (!c->buf) {
    h_error("cannot allocate %zu bytes for connection %d", c->buf_bytes, c->idx);
    return -1;
  }
  memset(c->buf, 0, c->buf_bytes);
  return 0;
}

int h_conn_register(h_conn *c) {
  hnet *n = c->net;
  int rc = H_CALL(A_REGMR, n->reg_mr(n, c->comm, c->buf, c->buf_bytes, g_opt.mem_type, &c->mh));
  if (rc != HNET_SUCCESS) {
    conn_error(c, "regMr(%zu bytes, NCCL_PTR_%s) returned %s", c->buf_bytes,
               g_opt.mem_type == HNET_PTR_CUDA ? "CUDA" : "HOST", hnet_result_str(rc));
    return -1;
  }
  return 0;
}

/* --protect: while the plugin owns the buffer, the CPU may not touch it (as
 * GPU memory): any read or write by the plugin faults. The NIC still
 * reaches the pages it pinned at regMr. */
static int buf_protect(h_conn *c, int plugin_owns) {
  if (!g_opt.protect || !c->buf) return 0;
  if (mprotect(c->buf, c->buf_bytes, plugin_owns ? PROT_NONE : PROT_READ | PROT_WRITE) == 0) return 0;
  conn_error(c, "mprotect(%zu bytes, %s) failed", c->buf_bytes, plugin_owns ? "PROT_NONE" : "PROT_READ|PROT_WRITE");
  return -1;
}

void h_conn_release(h_conn *c) {
  hnet *n = c->net;
  if (c->mh) {
    int rc = H_CALL(A_DEREGMR, n->dereg_mr(n, c->comm, c->mh));
    if (rc != HNET_SUCCESS) conn_error(c, "deregMr returned %s", hnet_result_str(rc));
    c->mh = NULL;
  }
  /* A send comm that never got a request, or any comm under --scale-report
   * (h_conn_publish_due): its id as it stands, while the comm is there to
   * ask (a failure is reported where it happens). */
  if (c->comm && !c->id_published) (void)h_conn_publish_id(c);
  if (c->comm) {
    int rc = c->is_send ? H_CALL(A_CLOSE, n->close_send(n, c->comm))
                        : H_CALL(A_CLOSE, n->close_recv(n, c->comm));
    if (rc != HNET_SUCCESS)
      conn_error(c, "%s returned %s", c->is_send ? "closeSend" : "closeRecv", hnet_result_str(rc));
    c->comm = NULL;
  }
  if (c->listen) {
    int rc = H_CALL(A_CLOSE, n->close_listen(n, c->listen));
    if (rc != HNET_SUCCESS) conn_error(c, "closeListen returned %s", hnet_result_str(rc));
    c->listen = NULL;
  }
  buf_protect(c, 0);
  free(c->buf);
  c->buf = NULL;
}

static char *slot_base(h_conn *c, const h_slot *sl) {
  return c->buf + (size_t)(sl->seq % (uint64_t)g_opt.inflight) * c->sched.slot_bytes;
}

/* The size the sender sends for message i: the scheduled size, or the posted
 * size for the end marker (--duration). */
static size_t send_size(const h_slot *sl, int i) {
  return sl->marker ? sl->op.m[i].posted : sl->op.m[i].size;
}

/* ---- sender ---------------------------------------------------------------- */

static int sender_post(h_conn *c) {
  hnet *n = c->net;
  int K = g_opt.inflight, progressed = 0;
  for (;;) {
    h_slot *sl = &c->slots[c->posted % (uint64_t)K];
    if (!c->posting) {
      if (c->posted > c->last || c->posted - c->retired >= (uint64_t)K) return progressed;
      memset(sl, 0, sizeof *sl);
      sl->seq = c->posted;
      h_sched_op(&c->sched, sl->seq, &sl->op);
      if (g_opt.duration > 0 && !c->marker_sent && sl->op.n == 1 && h_now() >= c->deadline) {
        sl->marker = 1;
        c->marker_sent = 1;
        c->last = sl->seq + H_TAIL_OPS;
      }
      char *base = slot_base(c, sl);
      for (int i = 0; i < sl->op.n; i++)
        h_payload_fill(base + h_sched_offset(&c->sched, &sl->op, i), send_size(sl, i),
                       h_payload_key(&c->sched, sl->seq, sl->op.m[i].tag));
      c->posting = 1;
      if (buf_protect(c, 1)) return -1;
      if (c->st.t_first == 0) c->st.t_first = h_now();
    }
    int i = sl->op.order[sl->nposted];
    char *data = slot_base(c, sl) + h_sched_offset(&c->sched, &sl->op, i);
    size_t size = send_size(sl, i);
    void *req = STALE_REQUEST;
    int rc = H_CALL(A_ISEND, n->isend(n, c->comm, data, size, sl->op.m[i].tag, c->mh, &req));
    if (rc != HNET_SUCCESS) {
      conn_error(c, "isend(seq %llu, msg %d/%d, tag %d, %zu bytes) returned %s",
                 (unsigned long long)sl->seq, i, sl->op.n, sl->op.m[i].tag, size, hnet_result_str(rc));
      return -1;
    }
    if (req == STALE_REQUEST) {
      conn_error(c, "isend(seq %llu, tag %d) returned success without writing *request (NCCL leaves a "
                 "stale pointer there and would test it)", (unsigned long long)sl->seq, sl->op.m[i].tag);
      return -1;
    }
    if (!req) {
      atomic_fetch_add_explicit(&g_cnt.null_isend, 1, memory_order_relaxed);
      return progressed;
    }
    progressed = 1;
    /* A request: the connection is confirmed, its id final (h_conn_publish_id). */
    if (!c->id_published && h_conn_publish_due() && h_conn_publish_id(c)) return -1;
    sl->req[sl->nposted++] = req;
    if (sl->nposted == sl->op.n) {
      c->posting = 0;
      c->posted++;
    }
  }
}

static int sender_test(h_conn *c) {
  hnet *n = c->net;
  h_slot *sl = &c->slots[c->retired % (uint64_t)g_opt.inflight];
  if (c->retired > c->posted || (c->retired == c->posted && !c->posting)) return 0;
  if (sl->ntested >= sl->nposted) return 0;
  int sizes[HNET_TEST_SIZES];
  for (int k = 0; k < HNET_TEST_SIZES; k++) sizes[k] = SIZE_SENTINEL;
  int done = 0;
  int rc = H_CALL(A_TEST, n->test_raw(n, sl->req[sl->ntested], &done, sizes));
  int i = sl->op.order[sl->ntested];
  if (rc != HNET_SUCCESS) {
    conn_error(c, "test() on the isend of seq %llu (msg %d/%d, tag %d, %zu bytes) returned %s",
               (unsigned long long)sl->seq, i, sl->op.n, sl->op.m[i].tag, send_size(sl, i),
               hnet_result_str(rc));
    return -1;
  }
  if (!done) return 0;
  if (sizes[0] != (int)send_size(sl, i))
    conn_error(c, "test() of the isend of seq %llu (tag %d) reported %d bytes, %zu were sent",
               (unsigned long long)sl->seq, sl->op.m[i].tag, sizes[0], send_size(sl, i));
  for (int k = 1; k < HNET_TEST_SIZES; k++)
    if (sizes[k] != SIZE_SENTINEL) {
      conn_error(c, "test() of a send request wrote size entry %d (NCCL passes one int for sends: "
                 "this overwrites NCCL's stack)", k);
      break;
    }
  if (c->failed) return -1;
  sl->ntested++;
  if (sl->ntested == sl->op.n) {
    if (buf_protect(c, 0)) return -1;
    c->st.ops++;
    c->st.msgs += (uint64_t)sl->op.n;
    for (int k = 0; k < sl->op.n; k++) c->st.bytes += send_size(sl, k);
    c->st.t_last = h_now();
    c->retired++;
  }
  return 1;
}

/* ---- receiver -------------------------------------------------------------- */

static void recv_arrays(h_conn *c, h_slot *sl, void **data, size_t *sizes, int *tags, void **mh) {
  char *base = slot_base(c, sl);
  for (int i = 0; i < sl->op.n; i++) {
    data[i] = base + h_sched_offset(&c->sched, &sl->op, i);
    if (sizes) sizes[i] = sl->op.m[i].posted;
    if (tags) tags[i] = sl->op.m[i].tag;
    mh[i] = c->mh;
  }
}

static int receiver_post(h_conn *c) {
  hnet *n = c->net;
  int K = g_opt.inflight, progressed = 0;
  while (c->posted <= c->last && c->posted - c->retired < (uint64_t)K) {
    h_slot *sl = &c->slots[c->posted % (uint64_t)K];
    if (!sl->prepared) {
      memset(sl, 0, sizeof *sl);
      sl->seq = c->posted;
      h_sched_op(&c->sched, sl->seq, &sl->op);
      /* NCCL passes the hint for LL/LL128 receives of one sub; v8's
       * compatibility layer (the loader here) clears it. */
      sl->op.hint = sl->op.hint && sl->op.n == 1 && g_opt.recv_hint;
      char *base = slot_base(c, sl);
      for (int i = 0; i < sl->op.n; i++) {
        char *p = base + h_sched_offset(&c->sched, &sl->op, i);
        memset(p, H_POISON, sl->op.m[i].posted);
        memset(p + sl->op.m[i].posted, H_CANARY, H_GUARD);
      }
      sl->prepared = 1;
    }
    void *data[H_MAX_GROUP], *mh[H_MAX_GROUP];
    size_t sizes[H_MAX_GROUP];
    int tags[H_MAX_GROUP];
    recv_arrays(c, sl, data, sizes, tags, mh);
    if (buf_protect(c, 1)) return -1;
    void *req = sl->op.hint ? HNET_OPTIONAL_RECV_COMPLETION : NULL;
    int rc = H_CALL(A_IRECV, n->irecv(n, c->comm, sl->op.n, data, sizes, tags, mh, &req));
    if (rc != HNET_SUCCESS) {
      conn_error(c, "irecv(seq %llu, %d receive(s), first tag %d, posted %zu bytes) returned %s",
                 (unsigned long long)sl->seq, sl->op.n, tags[0], sizes[0], hnet_result_str(rc));
      return -1;
    }
    if (sl->op.hint && req == HNET_OPTIONAL_RECV_COMPLETION && n->version >= 9) {
      conn_error(c, "irecv(seq %llu) left the optional-completion hint (0x1) in *request: NCCL would "
                 "call test() on it", (unsigned long long)sl->seq);
      return -1;
    }
    if (!req) {
      atomic_fetch_add_explicit(&g_cnt.null_irecv, 1, memory_order_relaxed);
      return progressed;
    }
    if (sl->op.hint) atomic_fetch_add_explicit(&g_cnt.hints, 1, memory_order_relaxed);
    if (c->st.t_first == 0) c->st.t_first = h_now();
    sl->rreq = req;
    c->posted++;
    progressed = 1;
  }
  return progressed;
}

static int receiver_test(h_conn *c) {
  hnet *n = c->net;
  if (c->received >= c->posted) return 0;
  h_slot *sl = &c->slots[c->received % (uint64_t)g_opt.inflight];
  for (int k = 0; k < HNET_TEST_SIZES; k++) sl->sizes[k] = SIZE_SENTINEL;
  int done = 0;
  int rc = H_CALL(A_TEST, n->test_raw(n, sl->rreq, &done, sl->sizes));
  if (rc != HNET_SUCCESS) {
    conn_error(c, "test() on the irecv of seq %llu (%d receive(s), first tag %d) returned %s",
               (unsigned long long)sl->seq, sl->op.n, sl->op.m[0].tag, hnet_result_str(rc));
    return -1;
  }
  if (!done) return 0;
  uint64_t now_ns = h_now_ns();
  sl->t_done = (double)now_ns * 1e-9;
  c->received++;
  if (g_opt.stall_report || g_opt.timeline) {
    uint64_t bytes = 0;
    for (int i = 0; i < sl->op.n; i++)
      if (sl->sizes[i] > 0) bytes += (uint64_t)sl->sizes[i];
    h_report_completion(c, now_ns, bytes);
  }
  /* iflush once per received op; host memory needs none, so a NULL request is
   * the expected answer, but a real one is tested before the op retires.
   * --no-flush: none at all, as NCCL itself for host buffers. */
  if (g_opt.no_flush) {
    sl->freq = NULL;
    return 1;
  }
  void *data[H_MAX_GROUP], *mh[H_MAX_GROUP];
  int fsizes[H_MAX_GROUP];
  recv_arrays(c, sl, data, NULL, NULL, mh);
  for (int i = 0; i < sl->op.n; i++) fsizes[i] = sl->sizes[i] == SIZE_SENTINEL ? 0 : sl->sizes[i];
  void *freq = NULL;
  rc = H_CALL(A_IFLUSH, n->iflush(n, c->comm, sl->op.n, data, fsizes, mh, &freq));
  if (rc != HNET_SUCCESS) {
    conn_error(c, "iflush(seq %llu) returned %s", (unsigned long long)sl->seq, hnet_result_str(rc));
    return -1;
  }
  sl->freq = freq;
  if (freq) atomic_fetch_add_explicit(&g_cnt.flush_reqs, 1, memory_order_relaxed);
  return 1;
}

static size_t count_not(const unsigned char *p, size_t n, unsigned char v, size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) {
      if (!bad) *first = i;
      bad++;
    }
  return bad;
}

/* 0 = all good, 1 = data not there yet (hinted receive: retry), -1 = error. */
static int verify_recv(h_conn *c, h_slot *sl, int allow_retry) {
  char *base = slot_base(c, sl);
  unsigned long long seq = (unsigned long long)sl->seq;
  int marker = 0;
  for (int i = 0; i < sl->op.n; i++) {
    const h_msg *m = &sl->op.m[i];
    int rep = sl->sizes[i];
    if (rep == SIZE_SENTINEL) {
      conn_error(c, "seq %llu: test() reported done but wrote no size for receive %d of %d", seq, i,
                 sl->op.n);
      return -1;
    }
    size_t expect = m->size;
    if (g_opt.duration > 0 && sl->op.n == 1 && m->posted != m->size && rep >= 0 &&
        (size_t)rep == m->posted) {
      marker = 1;
      expect = m->posted;
    }
    if (rep < 0 || (size_t)rep != expect) {
      conn_error(c, "seq %llu receive %d/%d (tag %d): size reported %d, sent %zu, posted %zu", seq, i,
                 sl->op.n, m->tag, rep, m->size, m->posted);
      return -1;
    }
    unsigned char *p = (unsigned char *)base + h_sched_offset(&c->sched, &sl->op, i);
    size_t first = 0;
    uint8_t e = 0, g = 0;
    size_t bad = h_payload_check(p, expect, h_payload_key(&c->sched, sl->seq, m->tag), &first, &e, &g);
    if (bad) {
      if (allow_retry) return 1;
      conn_error(c, "DATA MISMATCH conn %d seq %llu receive %d/%d (tag %d, %zu bytes): %zu bytes differ; "
                 "first at offset %zu: expected 0x%02x, got 0x%02x%s", c->idx, seq, i, sl->op.n, m->tag,
                 expect, bad, first, e, g, g == H_POISON ? " (the poison: never written)" : "");
      return -1;
    }
    bad = count_not(p + expect, m->posted - expect, H_POISON, &first);
    if (bad) {
      conn_error(c, "seq %llu receive %d (tag %d): %zu bytes written past the %zu-byte message inside "
                 "the %zu-byte posted buffer (first at offset %zu)", seq, i, m->tag, bad, expect,
                 m->posted, expect + first);
      return -1;
    }
    bad = count_not(p + m->posted, H_GUARD, H_CANARY, &first);
    if (bad) {
      conn_error(c, "seq %llu receive %d (tag %d): the guard after the %zu-byte posted buffer was "
                 "overwritten (%zu bytes, first at +%zu)", seq, i, m->tag, m->posted, bad, first);
      return -1;
    }
  }
  for (int k = sl->op.n; k < HNET_TEST_SIZES; k++)
    if (sl->sizes[k] != SIZE_SENTINEL) {
      conn_error(c, "seq %llu: test() wrote size entry %d for an irecv of %d receive(s)", seq, k, sl->op.n);
      return -1;
    }
  if (marker && c->last == UINT64_MAX) c->last = sl->seq + H_TAIL_OPS;
  return 0;
}

static int receiver_retire(h_conn *c) {
  hnet *n = c->net;
  int progressed = 0;
  while (c->retired < c->received) {
    h_slot *sl = &c->slots[c->retired % (uint64_t)g_opt.inflight];
    if (sl->freq) {
      int done = 0;
      int rc = H_CALL(A_TEST, n->test_raw(n, sl->freq, &done, NULL));
      if (rc != HNET_SUCCESS) {
        conn_error(c, "test() on the iflush request of seq %llu returned %s", (unsigned long long)sl->seq,
                   hnet_result_str(rc));
        return -1;
      }
      if (!done) return progressed;
      sl->freq = NULL;
    }
    if (buf_protect(c, 0)) return -1; /* the receive and its flush are done: ours to check */
    if (g_opt.selftest_corrupt >= 0 && c->idx == 0 && sl->seq == (uint64_t)g_opt.selftest_corrupt) {
      for (int i = 0; i < sl->op.n; i++)
        if (sl->op.m[i].size > 0) {
          slot_base(c, sl)[h_sched_offset(&c->sched, &sl->op, i) + sl->op.m[i].size / 2] ^= 0x40;
          break;
        }
      sl->op.hint = 0;
    }
    int allow_retry = sl->op.hint && h_now() - sl->t_done < HINT_GRACE_S;
    int v = verify_recv(c, sl, allow_retry);
    if (v < 0) return -1;
    if (v > 0) return progressed;
    /* NCCL tells the plugin once the receive's buffer has been consumed,
     * passing the (already completed) request pointer */
    if (n->irecv_consumed) {
      int rc = H_CALL(A_CONSUMED, n->irecv_consumed(n, c->comm, sl->op.n, sl->rreq));
      if (rc != HNET_SUCCESS) {
        conn_error(c, "irecvConsumed(seq %llu) returned %s", (unsigned long long)sl->seq, hnet_result_str(rc));
        return -1;
      }
    }
    c->st.ops++;
    c->st.msgs += (uint64_t)sl->op.n;
    for (int i = 0; i < sl->op.n; i++) c->st.bytes += (size_t)sl->sizes[i];
    c->st.t_last = h_now();
    sl->prepared = 0;
    c->retired++;
    progressed = 1;
  }
  return progressed;
}

int h_conn_progress(h_conn *c) {
  if (c->failed) return -1;
  if (c->finished) return 0;
  int p = 0, r;
  if (c->is_send) {
    if ((r = sender_post(c)) < 0) return -1;
    p |= r;
    if ((r = sender_test(c)) < 0) return -1;
    p |= r;
    if (!c->posting && c->retired == c->posted && c->retired > c->last) c->finished = 1;
  } else {
    if ((r = receiver_post(c)) < 0) return -1;
    p |= r;
    if ((r = receiver_test(c)) < 0) return -1;
    p |= r;
    if ((r = receiver_retire(c)) < 0) return -1;
    p |= r;
    if (c->retired > c->last) c->finished = 1;
  }
  if (c->failed) return -1;
  return c->finished ? 0 : 1 + p;
}

void h_conn_dump(const h_conn *c) {
  const h_slot *sl = &c->slots[c->retired % (uint64_t)g_opt.inflight];
  char last[32];
  if (c->last == UINT64_MAX) snprintf(last, sizeof last, "unknown");
  else snprintf(last, sizeof last, "%llu", (unsigned long long)c->last);
  fprintf(stderr,
          "  conn %d %s: comm %p posted %llu received %llu retired %llu last %s%s%s; oldest op seq "
          "%llu: %d message(s), first %zu bytes tag %d%s\n",
          c->idx, dir_name(c), c->comm, (unsigned long long)c->posted, (unsigned long long)c->received,
          (unsigned long long)c->retired, last, c->finished ? " (finished)" : "",
          c->failed ? " (failed)" : "", (unsigned long long)sl->seq, sl->op.n, sl->op.m[0].size,
          sl->op.m[0].tag, c->is_send && c->posting ? " (partially posted)" : "");
}

/* ---- --die-mid-message ----------------------------------------------------- */

#define DIE_SEQ (UINT64_MAX - 1)

int h_die_sender(h_conn *c) {
  hnet *n = c->net;
  size_t size = g_opt.die_size;
  char *buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  void *mh = NULL;
  if (!buf) {
    h_error("cannot allocate %zu bytes for the dying message", size);
    return -1;
  }
  int tag = 0x100 + c->idx;
  h_payload_fill(buf, size, h_payload_key(&c->sched, DIE_SEQ, tag));
  int rc = H_CALL(A_REGMR, n->reg_mr(n, c->comm, buf, size, HNET_PTR_HOST, &mh));
  if (rc != HNET_SUCCESS) {
    h_error("regMr of the dying message returned %s", hnet_result_str(rc));
    return -1;
  }
  void *req = NULL;
  h_watchdog_phase("die: posting the large isend");
  while (!req) {
    req = STALE_REQUEST;
    rc = H_CALL(A_ISEND, n->isend(n, c->comm, buf, size, tag, mh, &req));
    if (rc != HNET_SUCCESS) {
      h_error("isend of the dying message returned %s", hnet_result_str(rc));
      return -1;
    }
    if (req == STALE_REQUEST) {
      h_error("isend did not write *request");
      return -1;
    }
  }
  double t0 = h_now();
  while (h_now() - t0 < g_opt.die_after_ms * 1e-3) {
    int done = 0, sz = 0;
    rc = H_CALL(A_TEST, n->test_raw(n, req, &done, &sz));
    if (rc != HNET_SUCCESS) {
      h_error("test of the dying message returned %s before the planned death", hnet_result_str(rc));
      return -1;
    }
    if (done) {
      fprintf(stderr,
              "harness[%s %d] the %zu-byte message completed within %.1f ms, before the planned death: "
              "use a larger --die-size or a smaller --die-after-ms\n",
              h_role_name(g_opt.role), (int)getpid(), size, (h_now() - t0) * 1e3);
      fflush(stderr);
      _exit(H_EXIT_TOO_FAST);
    }
  }
  fprintf(stderr, "harness[%s %d] dying mid-message: %zu-byte isend in flight for %d ms, now _exit(0)\n",
          h_role_name(g_opt.role), (int)getpid(), size, g_opt.die_after_ms);
  fflush(stderr);
  _exit(0);
}

int h_die_receiver(h_conn *c) {
  hnet *n = c->net;
  size_t size = g_opt.die_size;
  char *buf = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  void *mh = NULL;
  if (!buf) {
    h_error("cannot allocate %zu bytes for the dying message", size);
    return -1;
  }
  memset(buf, H_POISON, size);
  int tag = 0x100 + c->idx;
  int rc = H_CALL(A_REGMR, n->reg_mr(n, c->comm, buf, size, HNET_PTR_HOST, &mh));
  if (rc != HNET_SUCCESS) {
    h_error("regMr of the dying message's buffer returned %s", hnet_result_str(rc));
    return -1;
  }
  void *req = NULL;
  double t0 = h_now();
  h_watchdog_phase("die: posting the large irecv");
  int verdict = -1;
  while (!req) {
    void *data = buf;
    size_t sz = size;
    rc = H_CALL(A_IRECV, n->irecv(n, c->comm, 1, &data, &sz, &tag, &mh, &req));
    if (rc != HNET_SUCCESS) {
      printf("die-mid-message: PASS (irecv returned %s %.3f s after the peer's planned death)\n",
             hnet_result_str(rc), h_now() - t0);
      verdict = 0;
      goto out;
    }
    if (h_now() - t0 > g_opt.die_bound) {
      h_error("die-mid-message: irecv returned NULL for %.0f s", g_opt.die_bound);
      goto out;
    }
  }
  h_watchdog_phase("die: testing the irecv whose sender dies");
  for (;;) {
    int done = 0, sizes[HNET_TEST_SIZES] = {0};
    rc = H_CALL(A_TEST, n->test_raw(n, req, &done, sizes));
    double dt = h_now() - t0;
    if (rc != HNET_SUCCESS) {
      printf("die-mid-message: PASS (test() returned %s %.3f s after posting the receive; last plugin "
             "warning: ", hnet_result_str(rc), dt);
      char w[512];
      hnet_last_warning(w, sizeof w);
      printf("%s)\n", w[0] ? w : "none");
      verdict = 0;
      break;
    }
    if (done) {
      size_t first = 0;
      uint8_t e, g;
      size_t bad = h_payload_check(buf, size, h_payload_key(&c->sched, DIE_SEQ, tag), &first, &e, &g);
      h_error("die-mid-message: FAIL: the receive completed (%d bytes reported, %zu bytes wrong) although "
              "the sender died mid-message", sizes[0], bad);
      break;
    }
    if (dt > g_opt.die_bound) {
      h_error("die-mid-message: FAIL: no error from test() %.0f s after the sender died (a dead peer must "
              "end in a prompt error, not a hang)", g_opt.die_bound);
      break;
    }
  }
out:
  fflush(stdout);
  rc = H_CALL(A_DEREGMR, n->dereg_mr(n, c->comm, mh));
  if (rc != HNET_SUCCESS) h_info("deregMr after the peer died returned %s", hnet_result_str(rc));
  free(buf);
  return verdict;
}
