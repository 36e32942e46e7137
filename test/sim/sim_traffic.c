/* NCCL's proxy pattern at both ends, and every check on the bytes.
 *
 * The receiver posts grouped receives (1..8 buffers, one tag each), at most
 * 8 in flight, and tests the oldest; the sender posts one isend per tag (at
 * most 8 in flight, retried while no clear-to-send has come) and tests the
 * oldest. Like NCCL, both reuse buffers at once: a send buffer is scribbled
 * over the moment test() says done, a receive buffer once it was checked.
 *
 * Checks: every byte of every message (a keyed stream per message), the
 * posted tail past the message untouched (a canary), the sizes test()
 * reports, each message completing exactly once at each end, a send
 * completing (unless bounced) only once the receiver holds its bytes, and
 * no write landing outside a receive that is posted and not yet reaped. */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_GROUPS 40
#define MAX_MSGS (MAX_GROUPS * RR_NET_MAX_RECVS)
#define MAX_OUT 8                 /* NCCL's steps in flight per connection */
#define CHUNK SIM_CHUNK
#define MAX_CHUNKS 72             /* a few messages pass the 64-chunk window */
#define MAX_POSTED ((MAX_CHUNKS + 2) * CHUNK)
#define SEND_BUFS (MAX_OUT * 2)
#define RECV_BUFS (MAX_OUT * RR_NET_MAX_RECVS)

typedef struct sim_msg {
  int group, sub, tag;
  size_t size, posted;
  int sbuf, rbuf;                 /* buffer indices, -1 when none */
  int bounced;
  int send_done, recv_done;
} sim_msg;

typedef struct sim_group {
  int n, first;                   /* messages [first, first+n) */
} sim_group;

typedef struct sim_traffic {
  sim_world *w;
  int ngroups, nmsgs;
  sim_group g[MAX_GROUPS];
  sim_msg m[MAX_MSGS];
  int send_order[MAX_MSGS];
  /* sender */
  int next_send;
  void *sreq[MAX_OUT];
  int smsg[MAX_OUT];
  int s_head, s_n;
  int s_refused;              /* the last isend was refused (no request): the sender waits */
  /* receiver */
  int next_group;
  void *rreq[MAX_OUT];
  int rgroup[MAX_OUT];
  int r_head, r_n;
  int sent, reaped;
  rr_status err[2];
  uint64_t last_progress_ns;
  int sfree[SEND_BUFS], nsfree;
  int sowner[SEND_BUFS];          /* the message holding each send buffer, -1 when free */
  int rfree[RECV_BUFS], nrfree;
  rr_mr smr, rmr;
} sim_traffic;

static sim_traffic T;
static char *send_arena, *recv_arena;

static char *sbuf_ptr(int i) { return send_arena + (size_t)i * MAX_POSTED; }
static char *rbuf_ptr(int i) { return recv_arena + (size_t)i * MAX_POSTED; }

/* The bytes of message i: a stream keyed by the seed and the message. */
static uint64_t msg_key(int i) { return T.w->seed * 0x100000001b3ull + (uint64_t)i * 0x9e3779b97f4a7c15ull + 1; }

static void fill(char *p, size_t n, uint64_t key) {
  uint64_t x = key;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = sim_splitmix64(&x);
    memcpy(p + i, &v, 8);
  }
  if (i < n) {
    uint64_t v = sim_splitmix64(&x);
    memcpy(p + i, &v, n - i);
  }
}

/* Offset of the first byte that differs from the stream, or n. */
static size_t check(const char *p, size_t n, uint64_t key) {
  uint64_t x = key;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = sim_splitmix64(&x);
    if (n - i >= 8) {
      uint64_t got;
      memcpy(&got, p + i, 8);
      if (got == v) continue;
    }
    const char *vb = (const char *)&v;
    for (size_t j = 0; j < 8 && i + j < n; j++)
      if (p[i + j] != vb[j]) return i + j;
  }
  return n;
}

static const uint8_t CANARY = 0xc3, SCRIBBLE_SEND = 0xee, SCRIBBLE_RECV = 0x99;

static size_t first_not(const char *p, size_t n, uint8_t v) {
  for (size_t i = 0; i < n; i++)
    if ((uint8_t)p[i] != v) return i;
  return n;
}

void sim_traffic_init(sim_world *w) {
  if (!send_arena) {
    send_arena = malloc((size_t)SEND_BUFS * MAX_POSTED);
    recv_arena = malloc((size_t)RECV_BUFS * MAX_POSTED);
    if (!send_arena || !recv_arena) abort();
  }
  memset(&T, 0, sizeof T);
  T.w = w;
  sim_rng *g = &w->rng;
  T.ngroups = (int)sim_range(g, 6, MAX_GROUPS);
  for (int i = 0; i < T.ngroups; i++) {
    int n = sim_chance(g, 700) ? 1 : (int)sim_range(g, 2, RR_NET_MAX_RECVS);
    T.g[i] = (sim_group){.n = n, .first = T.nmsgs};
    for (int j = 0; j < n; j++) {
      sim_msg *m = &T.m[T.nmsgs++];
      unsigned c = (unsigned)sim_below(g, 100);
      size_t size = c < 5    ? 0
                    : c < 30 ? sim_range(g, 1, CHUNK)
                    : c < 95 ? sim_range(g, CHUNK + 1, 8 * CHUNK)
                             : sim_range(g, 8 * CHUNK + 1, MAX_CHUNKS * CHUNK);
      size_t posted = size + (sim_chance(g, 500) ? sim_range(g, 0, 2 * CHUNK) : 0);
      *m = (sim_msg){.group = i, .sub = j, .tag = 100 + j * 7, .size = size, .posted = posted, .sbuf = -1, .rbuf = -1};
    }
    /* The sender posts a group's tags in any order. */
    int *o = &T.send_order[T.g[i].first];
    for (int j = 0; j < n; j++) o[j] = T.g[i].first + j;
    for (int j = n - 1; j > 0; j--) {
      int k = (int)sim_below(g, (uint64_t)j + 1), t = o[j];
      o[j] = o[k];
      o[k] = t;
    }
  }
  for (int i = 0; i < SEND_BUFS; i++) T.sfree[T.nsfree++] = SEND_BUFS - 1 - i, T.sowner[i] = -1;
  for (int i = 0; i < RECV_BUFS; i++) T.rfree[T.nrfree++] = RECV_BUFS - 1 - i;
  T.last_progress_ns = sim_now_ns;
}

static rr_status reg_all(sim_world *w, int side, rr_mr *mr, char *base, size_t size) {
  memset(mr, 0, sizeof *mr);
  mr->base = base;
  mr->size = size;
  for (int r = 0; r < w->nrails; r++) {
    rr_rail_dev *d = &w->dev[side][r]->base;
    rr_status st = d->ops->reg_mr(d, base, size, RR_MEM_HOST, -1, 0, &mr->reg[d->index]);
    if (st != RR_OK) return st;
  }
  return RR_OK;
}

void sim_traffic_setup_mrs(sim_world *w) {
  if (reg_all(w, SIM_SEND, &T.smr, send_arena, (size_t)SEND_BUFS * MAX_POSTED) != RR_OK ||
      reg_all(w, SIM_RECV, &T.rmr, recv_arena, (size_t)RECV_BUFS * MAX_POSTED) != RR_OK)
    abort();
}

void sim_traffic_free_mrs(sim_world *w) {
  (void)w;
  for (int d = 0; d < RR_MAX_DEVS; d++) {
    if (T.smr.reg[d]) T.smr.reg[d]->dev->ops->dereg_mr(T.smr.reg[d]);
    if (T.rmr.reg[d]) T.rmr.reg[d]->dev->ops->dereg_mr(T.rmr.reg[d]);
  }
  memset(&T.smr, 0, sizeof T.smr);
  memset(&T.rmr, 0, sizeof T.rmr);
}

static const char *side_name(int side) { return side == SIM_SEND ? "sender" : "receiver"; }

/* A call failed: fine (and final) when the seed's fault makes it expected and
 * the status is one a dead path or peer gives; a failure of the seed else. */
static void side_error(sim_world *w, int side, rr_status st, const char *call) {
  T.err[side] = st;
  rr_engine *e = &w->eng[side];
  sim_trace(w, "%s: %s failed: %s (%s)", side_name(side), call, rr_status_str(st), e->failed_why);
  if (!w->expect_error || sim_now_ns < w->error_at_ns)
    sim_fail(w, "%s: %s failed without a fatal fault: %s (%s)", side_name(side), call, rr_status_str(st),
             e->failed_why);
  else if (st != RR_ERR_PEER && st != RR_ERR_RAIL)
    sim_fail(w, "%s: %s failed with %s (%s); a dead peer or path must give a clean error", side_name(side), call,
             rr_status_str(st), e->failed_why);
  else
    w->st.errors_expected++;
}

/* ------------------------------------------------------------- sender */

static void send_reaped(sim_world *w, int mi, size_t size) {
  sim_msg *m = &T.m[mi];
  if (m->send_done++) sim_fail(w, "message %d (group %d tag %d) completed twice at the sender", mi, m->group, m->tag);
  if (size != m->size)
    sim_fail(w, "message %d: the sender's test() reports %zu bytes, %zu were sent", mi, size, m->size);
  /* NCCL reuses the buffer now: the receiver must hold the bytes already. */
  if (!m->bounced && !m->recv_done && m->rbuf >= 0) {
    size_t bad = check(rbuf_ptr(m->rbuf), m->size, msg_key(mi));
    if (bad < m->size)
      sim_fail(w, "message %d (group %d tag %d, %zu bytes): send completed while the receiver lacks byte %zu", mi,
               m->group, m->tag, m->size, bad);
  }
  memset(sbuf_ptr(m->sbuf), SCRIBBLE_SEND, m->size);
  T.sowner[m->sbuf] = -1;
  T.sfree[T.nsfree++] = m->sbuf;
  m->sbuf = -1;
  T.sent++;
  T.last_progress_ns = sim_now_ns;
  w->activity = 1;
  sim_trace(w, "sender: message %d (group %d tag %d, %zu bytes%s) done", mi, m->group, m->tag, m->size,
            m->bounced ? ", bounced" : "");
}

static void sender_step(sim_world *w) {
  rr_engine *e = &w->eng[SIM_SEND];
  if (T.s_n < MAX_OUT && T.next_send < T.nmsgs && sim_chance(&w->rng, 800)) {
    int mi = T.send_order[T.next_send];
    sim_msg *m = &T.m[mi];
    if (m->sbuf < 0) {
      m->sbuf = T.sfree[--T.nsfree];
      T.sowner[m->sbuf] = mi;
      fill(sbuf_ptr(m->sbuf), m->size, msg_key(mi));
    }
    void *req = NULL;
    rr_status st = rr_engine_isend(e, sbuf_ptr(m->sbuf), m->size, m->tag, &T.smr, NULL, &req);
    if (st != RR_OK) {
      side_error(w, SIM_SEND, st, "isend");
      return;
    }
    T.s_refused = req == NULL;
    if (req) {
      m->bounced = ((rr_send_req *)req)->bounce >= 0;
      T.sreq[(T.s_head + T.s_n) % MAX_OUT] = req;
      T.smsg[(T.s_head + T.s_n) % MAX_OUT] = mi;
      T.s_n++;
      T.next_send++;
      T.last_progress_ns = sim_now_ns;
      w->activity = 1;
      sim_trace(w, "sender: isend message %d (group %d tag %d, %zu bytes)", mi, m->group, m->tag, m->size);
    }
  }
  if (T.s_n) {
    int done = 0;
    size_t size = 0;
    rr_status st = rr_engine_test(T.sreq[T.s_head], &done, &size);
    if (st != RR_OK) {
      side_error(w, SIM_SEND, st, "test(send)");
      return;
    }
    if (done) {
      int mi = T.smsg[T.s_head];
      T.s_head = (T.s_head + 1) % MAX_OUT;
      T.s_n--;
      send_reaped(w, mi, size);
    }
  }
}

/* ----------------------------------------------------------- receiver */

static void recv_reaped(sim_world *w, int gi, const size_t *sizes) {
  sim_group *g = &T.g[gi];
  for (int j = 0; j < g->n; j++) {
    int mi = g->first + j;
    sim_msg *m = &T.m[mi];
    char *b = rbuf_ptr(m->rbuf);
    if (m->recv_done++) sim_fail(w, "message %d completed twice at the receiver", mi);
    if (sizes[j] != m->size)
      sim_fail(w, "message %d (group %d tag %d): the receiver's test() reports %zu bytes, %zu were sent", mi, gi,
               m->tag, sizes[j], m->size);
    size_t bad = check(b, m->size, msg_key(mi));
    if (bad < m->size)
      sim_fail(w, "message %d (group %d tag %d, %zu bytes): byte %zu corrupt (0x%02x)", mi, gi, m->tag, m->size, bad,
               (uint8_t)b[bad]);
    size_t tail = first_not(b + m->size, m->posted - m->size, CANARY);
    if (tail < m->posted - m->size)
      sim_fail(w, "message %d (group %d tag %d): byte %zu past its %zu bytes was written", mi, gi, m->tag,
               m->size + tail, m->size);
    memset(b, SCRIBBLE_RECV, m->posted);
    T.rfree[T.nrfree++] = m->rbuf;
    m->rbuf = -1;
  }
  T.reaped++;
  T.last_progress_ns = sim_now_ns;
  w->activity = 1;
  sim_trace(w, "receiver: group %d (%d message(s)) done and checked", gi, g->n);
}

static void receiver_step(sim_world *w) {
  rr_engine *e = &w->eng[SIM_RECV];
  if (T.r_n < MAX_OUT && T.next_group < T.ngroups && sim_chance(&w->rng, w->recv_post_pm)) {
    int gi = T.next_group;
    sim_group *g = &T.g[gi];
    void *data[RR_NET_MAX_RECVS];
    size_t sizes[RR_NET_MAX_RECVS];
    int tags[RR_NET_MAX_RECVS];
    rr_mr *mrs[RR_NET_MAX_RECVS];
    for (int j = 0; j < g->n; j++) {
      sim_msg *m = &T.m[g->first + j];
      if (m->rbuf < 0) {
        m->rbuf = T.rfree[--T.nrfree];
        memset(rbuf_ptr(m->rbuf), CANARY, m->posted);
      }
      data[j] = rbuf_ptr(m->rbuf);
      sizes[j] = m->posted;
      tags[j] = m->tag;
      mrs[j] = &T.rmr;
    }
    void *req = NULL;
    rr_status st = rr_engine_irecv(e, g->n, data, sizes, tags, mrs, NULL, &req);
    if (st != RR_OK) {
      side_error(w, SIM_RECV, st, "irecv");
      return;
    }
    if (req) {
      T.rreq[(T.r_head + T.r_n) % MAX_OUT] = req;
      T.rgroup[(T.r_head + T.r_n) % MAX_OUT] = gi;
      T.r_n++;
      T.next_group++;
      T.last_progress_ns = sim_now_ns;
      w->activity = 1;
      sim_trace(w, "receiver: irecv group %d (%d buffer(s))", gi, g->n);
    }
  }
  if (T.r_n) {
    int done = 0;
    size_t sizes[RR_NET_MAX_RECVS] = {0};
    rr_status st = rr_engine_test(T.rreq[T.r_head], &done, sizes);
    if (st != RR_OK) {
      side_error(w, SIM_RECV, st, "test(recv)");
      return;
    }
    if (done) {
      int gi = T.rgroup[T.r_head];
      T.r_head = (T.r_head + 1) % MAX_OUT;
      T.r_n--;
      recv_reaped(w, gi, sizes);
    }
  }
}

void sim_traffic_step(sim_world *w, int side) {
  if (T.err[side] != RR_OK || w->dead[side]) return;
  if (side == SIM_SEND) sender_step(w);
  else receiver_step(w);
}

int sim_traffic_done(sim_world *w) {
  (void)w;
  return T.sent == T.nmsgs && T.reaped == T.ngroups;
}

int sim_traffic_busy(sim_world *w, int side) {
  (void)w;
  if (side == SIM_SEND) return T.sent < T.nmsgs;
  return T.reaped < T.ngroups;
}

int sim_traffic_errored(sim_world *w, int side) {
  (void)w;
  return T.err[side] != RR_OK;
}

int sim_traffic_outstanding(sim_world *w, int side) {
  (void)w;
  /* A sender retrying an isend that the engine refuses (no clear-to-send
   * yet) waits on the peer as much as one with a request out. */
  return side == SIM_SEND ? T.s_n + T.s_refused : T.r_n;
}

uint64_t sim_traffic_last_progress(sim_world *w) {
  (void)w;
  return T.last_progress_ns;
}

int sim_traffic_source_ok(sim_world *w, const void *p, size_t len) {
  (void)w;
  const char *a = p;
  /* A bounced message goes from the engine's own copy. */
  if (a < send_arena || a >= send_arena + (size_t)SEND_BUFS * MAX_POSTED) return 1;
  int idx = (int)((size_t)(a - send_arena) / MAX_POSTED);
  int mi = T.sowner[idx];
  return mi >= 0 && !T.m[mi].send_done && a + len <= sbuf_ptr(idx) + T.m[mi].size;
}

int sim_traffic_source_msg(sim_world *w, const void *p) {
  (void)w;
  const char *a = p;
  if (a < send_arena || a >= send_arena + (size_t)SEND_BUFS * MAX_POSTED) return -1;
  return T.sowner[(size_t)(a - send_arena) / MAX_POSTED];
}

int sim_traffic_send_live(sim_world *w, int mi) {
  (void)w;
  return mi >= 0 && mi < T.nmsgs && !T.m[mi].send_done && T.m[mi].sbuf >= 0 && T.sowner[T.m[mi].sbuf] == mi;
}

int sim_traffic_landing_ok(sim_world *w, const void *p, size_t len) {
  const char *a = p;
  /* An eager message ahead of its receive waits in the engine's own early
   * buffer (it is checked when it reaches the receive's buffer). */
  const char *early = engine_rcv(&w->eng[SIM_RECV])->early_buf;
  if (early && a >= early && a + len <= early + (size_t)RR_NET_MAX_REQUESTS * EARLY_COPIES * RR_BOUNCE_SIZE) return 1;
  for (int k = 0; k < T.r_n; k++) {
    const sim_group *g = &T.g[T.rgroup[(T.r_head + k) % MAX_OUT]];
    for (int j = 0; j < g->n; j++) {
      const sim_msg *m = &T.m[g->first + j];
      const char *b = rbuf_ptr(m->rbuf);
      if (a >= b && a + len <= b + m->posted) return 1;
    }
  }
  return 0;
}

void sim_traffic_where(sim_world *w, const void *p, char *buf, size_t len) {
  (void)w;
  const char *a = p;
  const char *early = engine_rcv(&w->eng[SIM_RECV])->early_buf;
  if (early && a >= early && a < early + (size_t)RR_NET_MAX_REQUESTS * EARLY_COPIES * RR_BOUNCE_SIZE) {
    snprintf(buf, len, "early buffer entry %zu +%zu", (size_t)(a - early) / RR_BOUNCE_SIZE,
             (size_t)(a - early) % RR_BOUNCE_SIZE);
    return;
  }
  if (a < recv_arena || a >= recv_arena + (size_t)RECV_BUFS * MAX_POSTED) {
    snprintf(buf, len, "outside the receive buffers");
    return;
  }
  int idx = (int)((size_t)(a - recv_arena) / MAX_POSTED);
  size_t off = (size_t)(a - recv_arena) % MAX_POSTED;
  for (int i = 0; i < T.nmsgs; i++)
    if (T.m[i].rbuf == idx) {
      snprintf(buf, len, "rbuf %d +%zu (message %d, group %d, %zu of %zu bytes posted)", idx, off, i, T.m[i].group,
               T.m[i].size, T.m[i].posted);
      return;
    }
  snprintf(buf, len, "rbuf %d +%zu (free)", idx, off);
}

void sim_traffic_summary(sim_world *w, char *buf, size_t len) {
  (void)w;
  snprintf(buf, len, "%d/%d messages sent, %d/%d groups received (%d sends, %d receives outstanding)", T.sent,
           T.nmsgs, T.reaped, T.ngroups, T.s_n, T.r_n);
}
