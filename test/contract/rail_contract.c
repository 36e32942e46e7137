/* The rail contract cases (rail_contract.h): each case states the rail.h
 * promise it checks. A case that does not apply to a transport is skipped
 * by the capability flag that says so, never by the transport's name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rail_contract.h"

/* ------------------------------------------------- the engine, played */

static rc_side *side_of(rr_rail_ep *ep) { return (rc_side *)ep->events_arg; }
static rc_side *peer_of(rc_side *s) { return &s->env->side[1 - s->idx]; }

static void log_event(rc_side *s, int kind, uint64_t id) {
  if (s->nlog < RC_LOG_MAX) s->log[s->nlog++] = (rc_event){kind, id};
}

/* The write the peer posted with this immediate (imm carries its index). */
static rc_write *posted_write(rc_side *writer, uint32_t imm) {
  uint32_t i = imm & 0xffffu;
  if ((int)i >= writer->nposted || writer->w[i].imm != imm) return NULL;
  return &writer->w[i];
}

/* Where a write may land: inside our registered buffer, named by its key. */
static int inside_buffer(const rc_side *s, uint32_t rkey, uint64_t raddr, uint32_t len) {
  uint64_t base = (uint64_t)(uintptr_t)s->buf;
  return rkey == s->mr->rkey && raddr >= base && raddr + len <= base + RC_BUF_BYTES;
}

static rr_status on_write_done(rr_rail_ep *ep, uint64_t wr_id) {
  rc_side *s = side_of(ep);
  if (s->refused) s->after_failure++;
  if (wr_id >= (uint64_t)s->nposted || s->w[wr_id].done) {
    s->bad_done++;
    return RR_OK;
  }
  rc_write *w = &s->w[wr_id];
  w->done = 1;
  s->ndone++;
  if (ep->dev->attr.caps & RR_RAIL_CAP_WRITE_DONE_PLACED) {
    s->placed_checked++;
    if (w->len && memcmp(w->dst, w->src, w->len) != 0) s->placed_bad++;
  }
  return RR_OK;
}

/* The epoch tag a write must arrive with: its own on a rail that carries
 * tags (RR_RAIL_CAP_EPOCH_TAG), 0 on one that does not. */
static int tag_ok(const rr_rail_ep *ep, const rr_write_hdr *h, const rc_write *w) {
  return h->fence == ((ep->dev->attr.caps & RR_RAIL_CAP_EPOCH_TAG) ? w->fence : 0);
}

static int same_name(const rr_eager_name *x, const rr_eager_name *y) {
  return x->seq == y->seq && x->known == y->known && x->tag == y->tag;
}

/* An eager write names a receive (rr_write_hdr.eager), not a buffer: the
 * harness finds the write posted with that immediate, checks the name, and
 * places it where that write says, as the engine places one into its
 * receive or its early buffer. The ones marked `resolve` come back
 * rewritten into the ordinary write a clear-to-send would have made, which
 * is what the rail must hand on_write_recv. */
static rr_status eager_begin(rr_rail_ep *ep, rc_side *s, rr_write_hdr *h, void **dst) {
  s->neager_begin++;
  rc_write *w = posted_write(peer_of(s), h->imm);
  if (!w || !w->eager || !same_name(&h->eager, &w->name) || h->len != w->len || h->rkey || h->raddr ||
      !tag_ok(ep, h, w)) {
    s->bad_write++;
    s->refused = 1;
    return RR_ERR_PROTOCOL;
  }
  if (w->resolve)
    *h = (rr_write_hdr){.imm = h->imm, .len = h->len, .rkey = s->mr->rkey, .raddr = (uint64_t)(uintptr_t)w->dst,
                        .fence = h->fence};
  *dst = w->dst;
  return RR_OK;
}

static rr_status on_write_begin(rr_rail_ep *ep, rr_write_hdr *h, void **dst) {
  rc_side *s = side_of(ep);
  if (s->refused) s->after_failure++;
  s->nbegin++;
  if (!(ep->dev->attr.caps & RR_RAIL_CAP_WRITE_BEGIN)) s->begin_uncapable++;
  if (h->flags & RR_WRITE_PROBE) { /* filler: the engine discards it */
    s->nprobe_begin++;
    *dst = NULL;
    return RR_OK;
  }
  if (h->flags & RR_WRITE_EAGER) return eager_begin(ep, s, h, dst);
  if (h->imm & RC_IMM_REFUSE) {
    s->refused = 1;
    return RR_ERR_PROTOCOL;
  }
  if (!inside_buffer(s, h->rkey, h->raddr, h->len)) {
    s->bad_write++;
    s->refused = 1;
    return RR_ERR_PROTOCOL;
  }
  if ((h->imm & RC_IMM_SINK) || (s->sink_fence_tag >= 0 && h->fence == (uint16_t)s->sink_fence_tag)) {
    *dst = NULL;
    return RR_OK;
  }
  *dst = (void *)(uintptr_t)h->raddr;
  return RR_OK;
}

static rr_status on_write_recv(rr_rail_ep *ep, const rr_write_hdr *h) {
  rc_side *s = side_of(ep);
  if (s->refused) s->after_failure++;
  rc_write *w = posted_write(peer_of(s), h->imm);
  /* Reported as posted, with its bytes where the writer named. Where that
   * was is in the header only on rails that see the writer's header
   * (WRITE_BEGIN); a NIC's receive completion carries the immediate and
   * the length alone (verbs: raddr and rkey 0), which is all the engine
   * reads there (it knows the place from the immediate). rail.h's
   * rr_write_hdr says "the key the writer used" without that exception. */
  int named = !(ep->dev->attr.caps & RR_RAIL_CAP_WRITE_BEGIN) ||
              ((uint64_t)(uintptr_t)(w ? w->dst : NULL) == h->raddr && inside_buffer(s, h->rkey, h->raddr, h->len));
  /* An eager write arrives as on_write_begin left it: still eager, naming
   * what it was posted with, or resolved into an ordinary write. */
  if (w && w->eager)
    named = (h->flags & RR_WRITE_EAGER) ? !w->resolve && same_name(&h->eager, &w->name) : w->resolve && named;
  else if (h->flags & RR_WRITE_EAGER)
    named = 0;
  /* A split write's arrival has the length of what came with the
   * immediate; every byte of it, bulk included, is in place. */
  if (!w || w->recvd || w->len - w->bulk != h->len || !named || !tag_ok(ep, h, w) ||
      (w->len && memcmp(w->dst, w->src, w->len) != 0) || (h->imm & (RC_IMM_SINK | RC_IMM_REFUSE)))
    s->bad_write++;
  if (w) w->recvd = 1;
  s->nrecv++;
  log_event(s, RC_EV_RECV, h->imm);
  return RR_OK;
}

/* Control message `seq`: its length and every byte follow from seq. */
static uint32_t ctrl_len(uint32_t seq) { return 4 + (seq * 37u) % (RR_RAIL_CTRL_MAX - 3); }
static void ctrl_fill(uint32_t seq, uint8_t *m) {
  memcpy(m, &seq, 4);
  for (uint32_t i = 4; i < ctrl_len(seq); i++) m[i] = (uint8_t)(seq * 7u + i);
}

static rr_status on_ctrl(rr_rail_ep *ep, const void *msg, uint32_t len) {
  rc_side *s = side_of(ep);
  if (s->refused) s->after_failure++;
  uint8_t want[RR_RAIL_CTRL_MAX];
  uint32_t seq = s->ctrl_next++;
  ctrl_fill(seq, want);
  if (len != ctrl_len(seq) || memcmp(msg, want, len) != 0) s->bad_ctrl++;
  log_event(s, RC_EV_CTRL, seq);
  if (s->refuse_ctrl_seq >= 0 && seq == (uint64_t)s->refuse_ctrl_seq) {
    s->refused = 1;
    return RR_ERR_PROTOCOL;
  }
  return RR_OK;
}

static rr_status on_drain(rr_rail_ep *ep, uint32_t epoch) {
  rc_side *s = side_of(ep);
  rc_side *wr = peer_of(s);
  if (s->refused) s->after_failure++;
  s->ndrain++;
  s->last_drain = epoch;
  log_event(s, RC_EV_DRAIN, epoch);
  /* Every write posted before the barrier has landed (none was sunk or
   * fenced in the cases that drain). */
  int upto = epoch < RC_MAX_EPOCHS ? wr->posted_at_drain[epoch] : 0;
  for (int i = 0; i < upto; i++)
    if (wr->w[i].len && memcmp(wr->w[i].dst, wr->w[i].src, wr->w[i].len) != 0) {
      s->drain_early++;
      break;
    }
  return RR_OK;
}

const rr_rail_events rc_events = {.on_write_done = on_write_done,
                                  .on_write_begin = on_write_begin,
                                  .on_write_recv = on_write_recv,
                                  .on_ctrl = on_ctrl,
                                  .on_drain = on_drain};

/* ----------------------------------------------------------- driving */

static const rc_fixture *fx = &rc_fixture_under_test;

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void progress_side(rc_side *s) {
  if (!s->ep || s->failed != RR_OK) return;
  rr_status st = s->ep->ops->progress(s->ep);
  if (st != RR_OK) s->failed = st;
}

static void round_once(rc_env *env) {
  progress_side(&env->side[0]);
  progress_side(&env->side[1]);
  if (fx->tick) fx->tick(env);
}

/* Progress both ends until done(env) or the bound (a generous wall-clock
 * one: a loaded machine is slower, never wrong). Returns done(env). */
typedef int (*rc_pred)(rc_env *env);
static int pump_until(rc_env *env, rc_pred done) {
  uint64_t deadline = wall_ms() + 20000;
  for (uint64_t n = 0;; n++) {
    if (done(env)) return 1;
    if ((n & 255) == 0 && wall_ms() > deadline) return done(env);
    round_once(env);
  }
}

static void pump_rounds(rc_env *env, int rounds) {
  for (int i = 0; i < rounds; i++) round_once(env);
}

/* Post a write of len bytes from A's buffer at src_off to B's at dst_off,
 * waiting out RR_AGAIN. Returns its index (its wr_id and the low bits of its
 * immediate). */
static int post_write_split(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t bulk,
                            uint32_t imm_flags, uint16_t fence) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(a->nposted < RC_MAX_WRITES);
  assert_true(src_off + len <= RC_BUF_BYTES && dst_off + len <= RC_BUF_BYTES);
  int i = a->nposted;
  rc_write *w = &a->w[i];
  *w = (rc_write){.src = a->buf + src_off, .dst = b->buf + dst_off, .len = len, .bulk = bulk,
                  .imm = (uint32_t)i | imm_flags, .fence = fence};
  a->nposted++; /* before posting: a rail may deliver inside post_write */
  rr_write_wr wr = {.wr_id = (uint64_t)i, .local = w->src, .len = len, .local_mr = a->mr,
                    .remote_addr = (uint64_t)(uintptr_t)w->dst, .rkey = b->mr->rkey, .imm = w->imm, .fence = fence,
                    .bulk = bulk};
  rr_status st;
  uint64_t deadline = wall_ms() + 20000;
  while ((st = a->ep->ops->post_write(a->ep, &wr)) == RR_AGAIN && wall_ms() < deadline) round_once(env);
  assert_int_equal(st, RR_OK);
  return i;
}

static int post_write(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t imm_flags, uint16_t fence) {
  return post_write_split(env, src_off, dst_off, len, 0, imm_flags, fence);
}

/* Post an eager write of len bytes from A's buffer at src_off naming
 * `name`, which the harness places at B's dst_off (resolved into an
 * ordinary write at on_write_begin when `resolve`). Returns its index. */
static int post_eager(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, rr_eager_name name, int resolve,
                      uint16_t fence) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(a->nposted < RC_MAX_WRITES);
  assert_true(src_off + len <= RC_BUF_BYTES && dst_off + len <= RC_BUF_BYTES);
  int i = a->nposted;
  rc_write *w = &a->w[i];
  *w = (rc_write){.src = a->buf + src_off, .dst = b->buf + dst_off, .len = len, .imm = (uint32_t)i, .fence = fence,
                  .eager = 1, .resolve = resolve, .name = name};
  a->nposted++; /* before posting: a rail may deliver inside post_eager */
  rr_eager_wr wr = {.wr_id = (uint64_t)i, .local = w->src, .len = len, .local_mr = a->mr, .imm = w->imm,
                    .fence = fence, .name = name};
  rr_status st;
  uint64_t deadline = wall_ms() + 20000;
  while ((st = a->ep->ops->post_eager(a->ep, &wr)) == RR_AGAIN && wall_ms() < deadline) round_once(env);
  assert_int_equal(st, RR_OK);
  return i;
}

static void post_ctrl(rc_env *env, int from) {
  rc_side *s = &env->side[from];
  uint8_t m[RR_RAIL_CTRL_MAX];
  uint32_t seq = s->ctrl_sent;
  ctrl_fill(seq, m);
  rr_status st;
  uint64_t deadline = wall_ms() + 20000;
  while ((st = s->ep->ops->post_ctrl(s->ep, m, ctrl_len(seq))) == RR_AGAIN && wall_ms() < deadline) round_once(env);
  assert_int_equal(st, RR_OK);
  s->ctrl_sent++;
}

static void post_drain(rc_env *env, uint32_t epoch) {
  rc_side *a = &env->side[0];
  assert_true(epoch < RC_MAX_EPOCHS);
  a->posted_at_drain[epoch] = a->nposted;
  rr_status st;
  uint64_t deadline = wall_ms() + 20000;
  while ((st = a->ep->ops->post_drain(a->ep, epoch)) == RR_AGAIN && wall_ms() < deadline) round_once(env);
  assert_int_equal(st, RR_OK);
}

/* A's buffer holds a pattern; B's starts zeroed. */
static void fill_source(rc_env *env) {
  for (size_t i = 0; i < RC_BUF_BYTES; i++) env->side[0].buf[i] = (char)(i * 131u + (i >> 13) + 1);
  memset(env->side[1].buf, 0, RC_BUF_BYTES);
}

static int setup(void **state) {
  rc_env *env = calloc(1, sizeof *env);
  if (!env) return -1;
  env->fx = fx;
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    s->env = env;
    s->idx = i;
    s->sink_fence_tag = -1;
    s->refuse_ctrl_seq = -1;
    s->buf = aligned_alloc(4096, RC_BUF_BYTES);
    if (!s->buf) return -1;
    memset(s->buf, 0, RC_BUF_BYTES);
  }
  if (fx->open(env) != RR_OK) return -1;
  env->caps = env->side[0].dev->attr.caps;
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    if (s->dev->ops->reg_mr(s->dev, s->buf, RC_BUF_BYTES, RR_MEM_HOST, -1, 0, &s->mr) != RR_OK) return -1;
  }
  fill_source(env);
  *state = env;
  return 0;
}

static void destroy_ep(rc_side *s) {
  if (s->ep) s->ep->ops->destroy(s->ep);
  s->ep = NULL;
}

static int teardown(void **state) {
  rc_env *env = *state;
  const char *why = fx->violation ? fx->violation(env) : NULL;
  for (int i = 0; i < 2; i++) destroy_ep(&env->side[i]);
  for (int i = 0; i < 2; i++)
    if (env->side[i].mr) env->side[i].dev->ops->dereg_mr(env->side[i].mr);
  fx->close(env);
  for (int i = 0; i < 2; i++) free(env->side[i].buf);
  free(env);
  if (why) fail_msg("%s: the transport's own checker: %s", fx->name, why);
  return 0;
}

/* What every case expects of a healthy exchange. */
static void assert_clean(rc_env *env) {
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    assert_int_equal(s->bad_ctrl, 0);
    assert_int_equal(s->bad_write, 0);
    assert_int_equal(s->bad_done, 0);
    assert_int_equal(s->placed_bad, 0);
    assert_int_equal(s->drain_early, 0);
    assert_int_equal(s->begin_uncapable, 0);
    assert_int_equal(s->after_failure, 0);
  }
  const char *why = fx->violation ? fx->violation(env) : NULL;
  if (why) fail_msg("the transport's own checker: %s", why);
}

static int all_done_and_landed(rc_env *env) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  return (a->ndone == a->nposted && b->nrecv == a->nposted) || a->failed || b->failed;
}

/* Progress until every write posted has completed and landed; all n of
 * them did, intact, and neither end failed. */
static void assert_all_landed(rc_env *env, int n) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(pump_until(env, all_done_and_landed));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(a->ndone, n);
  assert_int_equal(b->nrecv, n);
  for (int i = 0; i < n; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
}

/* Sizes a write takes in the cases: the immediate alone, bytes, a page,
 * and writes larger than one socket read or work request. */
static uint32_t write_len(int i) {
  static const uint32_t lens[] = {0, 1, 7, 100, 4096, 4099, 65536, 65537, 262144 + 3, 1u << 20};
  return lens[i % (int)(sizeof lens / sizeof lens[0])];
}

/* ------------------------------------------------------------- cases */

/* post_flush (optional, rail.h): with nothing queued it does nothing and says
 * RR_OK; after each pass of writes it hands them over, and they land and
 * complete as any others. A rail without it has each write in flight once
 * posted; with it, progress() alone must also hand over what is queued
 * (every other case here never calls it). */
static void test_flush_ends_a_pass(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0];
  rr_status (*flush)(rr_rail_ep *) = a->ep->ops->post_flush;
  if (flush) assert_int_equal(flush(a->ep), RR_OK);
  size_t off = 0;
  for (int i = 0; i < 40; i++) {
    uint32_t len = write_len(i);
    post_write(env, off, off, len, 0, 0);
    off += len + 64;
    if (flush && i % 8 == 7) assert_int_equal(flush(a->ep), RR_OK);
  }
  if (flush) assert_int_equal(flush(a->ep), RR_OK);
  assert_true(pump_until(env, all_done_and_landed));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(a->ndone, 40);
  assert_int_equal(env->side[1].nrecv, 40);
  for (int i = 0; i < 40; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
  assert_clean(env);
}

/* Every write lands, bytes and immediate, where the writer named, reported
 * once by on_write_recv (asked for first by on_write_begin on rails that
 * see writes before they land, never on others); on_write_done follows for
 * each, once. */
static void test_writes_land(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 40; i++) {
    uint32_t len = write_len(i);
    post_write(env, off, off, len, 0, 0);
    off += len + 64;
  }
  assert_all_landed(env, 40);
  const rc_side *b = &env->side[1];
  /* Each immediate once. */
  int seen[40] = {0};
  for (int k = 0; k < b->nlog; k++)
    if (b->log[k].kind == RC_EV_RECV) seen[b->log[k].id & 0xffff]++;
  for (int i = 0; i < 40; i++) assert_int_equal(seen[i], 1);
  if (env->caps & RR_RAIL_CAP_WRITE_BEGIN) assert_int_equal(b->nbegin, 40);
  else assert_int_equal(b->nbegin, 0);
  assert_clean(env);
}

/* RR_RAIL_CAP_WRITE_DONE_PLACED: on_write_done means the bytes are in the
 * peer's memory (checked inside the callback). */
static void test_done_means_placed(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_DONE_PLACED)) {
    skip(); /* on_write_done means only that the source is free again */
    return;
  }
  size_t off = 0;
  for (int i = 0; i < 60; i++) {
    uint32_t len = write_len(i) ? write_len(i) : 8;
    if (off + len > RC_BUF_BYTES) off = 0;
    post_write(env, off, off, len, 0, 0);
    off += len;
    if (i % 7 == 0) pump_rounds(env, 3);
  }
  assert_true(pump_until(env, all_done_and_landed));
  assert_int_equal(env->side[0].placed_checked, 60);
  assert_clean(env);
}

/* RR_RAIL_CAP_ADAPTIVE_ROUTING: a write split into a plain bulk and a
 * write with immediate behind it lands whole and arrives once, with the
 * length of what came with the immediate (checked in on_write_recv). */
static void test_split_writes_land(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_ADAPTIVE_ROUTING)) {
    skip(); /* the rail carries no plain writes (rr_write_wr.bulk is 0 for it) */
    return;
  }
  size_t off = 0;
  for (int i = 0; i < 30; i++) {
    uint32_t len = write_len(i) ? write_len(i) : 8;
    uint32_t bulk = i % 3 == 0 ? len : len - len / 4; /* nothing behind the bulk, or a quarter */
    if (off + len > RC_BUF_BYTES) off = 0;
    post_write_split(env, off, off, len, bulk, 0, 0);
    off += len;
    if (i % 7 == 0) pump_rounds(env, 3);
  }
  assert_true(pump_until(env, all_done_and_landed));
  assert_int_equal(env->side[1].nrecv, 30);
  assert_int_equal(env->side[0].ndone, 30);
  assert_clean(env);
}

static int drained_4(rc_env *env) {
  return env->side[1].last_drain == 4 || env->side[0].failed || env->side[1].failed;
}
static int drained_1(rc_env *env) { return env->side[1].ndrain == 1 || env->side[0].failed || env->side[1].failed; }

/* on_drain(epoch) comes only once every write posted before the barrier
 * has landed (checked inside the callback). Barriers posted one at a time
 * are each delivered. */
static void test_drain_follows_writes(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 20; i++) {
    uint32_t len = write_len(i) ? write_len(i) : 16;
    post_write(env, off, off, len, 0, 0);
    off += len;
  }
  post_drain(env, 1);
  assert_true(pump_until(env, drained_1));
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->last_drain, 1);
  assert_true(pump_until(env, all_done_and_landed));
  assert_clean(env);
}

/* Barriers posted back to back, writes between them: the last one is
 * delivered and those delivered come in posting order, each after the
 * writes before it. An earlier barrier may be reported only through a
 * later one: the TCP rail (and the simulation's streams, after it) deliver
 * a barrier once every stream carried it, and a stream that already
 * carried the next one stands for both. rail.h's post_drain does not say
 * so (it reads as one on_drain per barrier); the engine waits only for its
 * current epoch's (engine_recv_on_drain), so nothing depends on the
 * earlier one. */
static void test_drains_back_to_back(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (uint32_t epoch = 1; epoch <= 4; epoch++) {
    for (int i = 0; i < 9; i++) {
      uint32_t len = write_len(i + (int)epoch) ? write_len(i + (int)epoch) : 16;
      post_write(env, off, off, len, 0, 0);
      off += len;
    }
    post_drain(env, epoch);
    pump_rounds(env, (int)epoch); /* the next batch overtakes in flight on some rounds */
  }
  assert_true(pump_until(env, drained_4));
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  uint32_t prev = 0;
  for (int k = 0; k < b->nlog; k++)
    if (b->log[k].kind == RC_EV_DRAIN) {
      assert_true(b->log[k].id > prev);
      prev = (uint32_t)b->log[k].id;
    }
  assert_int_equal(prev, 4);
  assert_true(pump_until(env, all_done_and_landed));
  assert_clean(env);
}

static int ctrl_all_in(rc_env *env) {
  return (env->side[1].ctrl_next == env->side[0].ctrl_sent && env->side[0].ctrl_next == env->side[1].ctrl_sent &&
          env->side[1].nrecv == env->side[0].nposted) ||
         env->side[0].failed || env->side[1].failed;
}

/* Control messages arrive in order and intact, both ways, every length up
 * to RR_RAIL_CTRL_MAX, with writes in between. */
static void test_ctrl_in_order(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 400; i++) {
    post_ctrl(env, 0);
    post_ctrl(env, 1);
    if (i % 25 == 0) {
      uint32_t len = write_len(i / 25);
      post_write(env, off, off, len, 0, 0);
      off += len;
    }
    if (i % 50 == 0) pump_rounds(env, 2);
  }
  assert_true(pump_until(env, ctrl_all_in));
  assert_int_equal(env->side[0].failed, RR_OK);
  assert_int_equal(env->side[1].failed, RR_OK);
  assert_int_equal(env->side[1].ctrl_next, 400);
  assert_int_equal(env->side[0].ctrl_next, 400);
  assert_clean(env);
}

static int log_has(rc_env *env, int n) { return env->side[1].nlog >= n || env->side[1].failed || env->side[0].failed; }

/* RR_RAIL_CAP_EP_ORDERED: writes, control messages and drains are
 * delivered in the order they were posted on the endpoint. */
static void test_ordered_delivery(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_EP_ORDERED)) {
    skip(); /* only control messages are ordered (test_ctrl_in_order) */
    return;
  }
  rc_event want[200];
  int n = 0;
  size_t off = 0;
  uint32_t epoch = 1;
  for (int i = 0; i < 200; i++) {
    int what = (i * 7) % 5; /* writes mostly, control messages and drains among them */
    if (what <= 2) {
      uint32_t len = write_len(i);
      int k = post_write(env, off, off, len, 0, 0);
      off += len;
      if (off > RC_BUF_BYTES - (1u << 21)) off = 0;
      want[n++] = (rc_event){RC_EV_RECV, env->side[0].w[k].imm};
    } else if (what == 3) {
      want[n++] = (rc_event){RC_EV_CTRL, env->side[0].ctrl_sent};
      post_ctrl(env, 0);
    } else if (epoch < RC_MAX_EPOCHS) {
      post_drain(env, epoch);
      want[n++] = (rc_event){RC_EV_DRAIN, epoch++};
    }
    if (i % 16 == 0) pump_rounds(env, 2);
  }
  for (uint64_t deadline = wall_ms() + 20000; !log_has(env, n) && wall_ms() < deadline;) round_once(env);
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->nlog, n);
  for (int k = 0; k < n; k++) {
    assert_int_equal(b->log[k].kind, want[k].kind);
    assert_int_equal(b->log[k].id, want[k].id);
  }
}

static int sink_case_done(rc_env *env) {
  return env->side[0].ndone == env->side[0].nposted || env->side[0].failed || env->side[1].failed;
}

/* RR_RAIL_CAP_WRITE_BEGIN: a write the engine gives no destination (*dst
 * NULL) is read and discarded: nothing of it lands, no on_write_recv, and
 * the endpoint carries on with the writes behind it. */
static void test_write_begin_sink(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_BEGIN)) {
    skip(); /* the NIC places writes itself: the engine is not asked */
    return;
  }
  size_t off = 0;
  int sunk = 0;
  for (int i = 0; i < 30; i++) {
    uint32_t len = write_len(i);
    int sink = i % 3 == 1;
    post_write(env, off, off, len, sink ? RC_IMM_SINK : 0, 0);
    sunk += sink;
    off += len + 16;
  }
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(pump_until(env, sink_case_done));
  for (uint64_t deadline = wall_ms() + 20000; b->nrecv < 30 - sunk && !b->failed && wall_ms() < deadline;)
    round_once(env);
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->nrecv, 30 - sunk);
  assert_int_equal(b->nbegin, 30);
  for (int i = 0; i < 30; i++) {
    const rc_write *w = &a->w[i];
    if (!(w->imm & RC_IMM_SINK)) continue;
    for (uint32_t k = 0; k < w->len; k++) assert_int_equal(w->dst[k], 0);
  }
  assert_clean(env);
}

static int b_failed(rc_env *env) { return env->side[1].failed != RR_OK; }

/* RR_RAIL_CAP_WRITE_BEGIN: a write the engine refuses (RR_ERR_PROTOCOL)
 * writes nothing and fails the endpoint: progress returns the failure,
 * and no callback follows it in that call. */
static void test_write_begin_refusal(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_BEGIN)) {
    skip(); /* the NIC places writes itself: the engine is not asked */
    return;
  }
  post_write(env, 0, 0, 4096, 0, 0);
  int bad = post_write(env, 8192, 8192, 65536, RC_IMM_REFUSE, 0);
  post_write(env, 1u << 20, 1u << 20, 4096, 0, 0);
  post_ctrl(env, 0);
  assert_true(pump_until(env, b_failed));
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_int_equal(b->failed, RR_ERR_PROTOCOL);
  for (uint32_t k = 0; k < a->w[bad].len; k++) assert_int_equal(a->w[bad].dst[k], 0);
  assert_int_equal(b->after_failure, 0);
  assert_int_equal(b->bad_write, 0);
}

/* on_ctrl failing makes progress stop and return that failure: the
 * messages behind it are not delivered in that call. */
static void test_callback_failure_stops_progress(void **state) {
  rc_env *env = *state;
  env->side[1].refuse_ctrl_seq = 5;
  for (int i = 0; i < 12; i++) post_ctrl(env, 0);
  assert_true(pump_until(env, b_failed));
  assert_int_equal(env->side[1].failed, RR_ERR_PROTOCOL);
  assert_int_equal(env->side[1].ctrl_next, 6);
  assert_int_equal(env->side[1].after_failure, 0);
  assert_int_equal(env->side[1].bad_ctrl, 0);
}

/* After fence() returns, nothing issued before it lands in registered
 * memory. On a rail that asks the engine (WRITE_BEGIN) that is the rail
 * and the engine together: the rail carries each write's fence tag and
 * honours a NULL destination, the engine sinks the old tag (played here
 * from the fence on). `fence_sender`, `fence_receiver`: which ends fence;
 * `midway`: fence once the receiver has begun taking writes. The sender's
 * fence alone cannot stop a write whose landing the receiver has begun
 * (TCP: the engine gave it a destination; RC: the responder places what
 * reached it): only the receiver's own fence cuts that one off, which is
 * why there is no sender-only midway case. rail.h's "on either side"
 * means: each side's fence for what lands on that side. */
/* n writes of epoch tag 1 from offset 0, every other one large enough to
 * be in flight for a while: what a fence is to cut off. */
static void post_old_epoch(rc_env *env, int n) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    uint32_t len = i % 2 ? (2u << 20) / 3 : write_len(i);
    post_write(env, off, off, len, 0, 1);
    off += len;
  }
}

static void fence_case(rc_env *env, int fence_sender, int fence_receiver, int midway) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  post_old_epoch(env, 12);
  if (midway) {
    /* Only the receiver reads, until something of the writes arrived. */
    progress_side(a);
    for (uint64_t deadline = wall_ms() + 20000; b->nbegin == 0 && b->nrecv == 0 && !b->failed && wall_ms() < deadline;) {
      progress_side(a);
      progress_side(b);
      if (fx->tick) fx->tick(env);
    }
  }
  if (fence_sender) a->ep->ops->fence(a->ep);
  if (fence_receiver) b->ep->ops->fence(b->ep);
  b->sink_fence_tag = 1; /* the engine's side of the fence */
  char *snap = malloc(RC_BUF_BYTES);
  assert_non_null(snap);
  memcpy(snap, b->buf, RC_BUF_BYTES);
  pump_rounds(env, 20000);
  assert_memory_equal(snap, b->buf, RC_BUF_BYTES);
  free(snap);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(env->side[i].bad_write, 0);
    assert_int_equal(env->side[i].bad_done, 0);
  }
}

static void test_fence_sender(void **state) { fence_case(*state, 1, 0, 0); }
static void test_fence_receiver_midway(void **state) { fence_case(*state, 0, 1, 1); }
static void test_fence_both_midway(void **state) { fence_case(*state, 1, 1, 1); }

static int a_flushed(rc_env *env) { return env->side[0].ep->ops->flushed(env->side[0].ep); }

/* flushed(): 1 with nothing posted; 0 while a posted write has not reached
 * the peer; 1 again once it has (and the peer has it all). */
static void test_flushed(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0];
  assert_int_equal(a->ep->ops->flushed(a->ep), 1);
  post_write(env, 0, 0, 1u << 20, 0, 0);
  post_ctrl(env, 0);
  assert_int_equal(a->ep->ops->flushed(a->ep), 0);
  assert_true(pump_until(env, all_done_and_landed));
  assert_true(pump_until(env, a_flushed));
  assert_true(pump_until(env, ctrl_all_in));
  assert_int_equal(a->failed, RR_OK);
  assert_clean(env);
}

static int a_failed(rc_env *env) {
  rc_side *a = &env->side[0];
  if (a->failed == RR_OK) {
    /* The engine keeps talking: a path failure shows on what it posts. */
    uint8_t m[8] = {0};
    rr_status st = a->ep->ops->post_ctrl(a->ep, m, sizeof m);
    if (st != RR_OK && st != RR_AGAIN) a->failed = st;
  }
  return a->failed != RR_OK;
}

/* The peer's endpoint destroyed: the survivor reports it as a failure of
 * the path or the peer (from progress or a post), never crashes, delivers
 * nothing after it, and counts as flushed from then on. */
static void test_peer_gone_is_reported(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0], *b = &env->side[1];
  post_write(env, 0, 0, 65536, 0, 0);
  post_ctrl(env, 0);
  assert_true(pump_until(env, all_done_and_landed));
  destroy_ep(b);
  assert_true(pump_until(env, a_failed));
  assert_true(a->failed == RR_ERR_PEER || a->failed == RR_ERR_RAIL);
  assert_int_equal(a->ep->ops->flushed(a->ep), 1);
  assert_int_equal(a->after_failure, 0);
}

/* Destroying endpoints with writes, control messages and drains still
 * queued or in flight, in either order, frees everything (ASan in CI) and
 * crashes nothing. */
static void destroy_busy(rc_env *env, int first) {
  size_t off = 0;
  for (int i = 0; i < 16; i++) {
    uint32_t len = write_len(i);
    post_write(env, off, off, len, 0, 0);
    off += len;
    post_ctrl(env, 0);
    post_ctrl(env, 1);
  }
  post_drain(env, 1);
  pump_rounds(env, 2);
  destroy_ep(&env->side[first]);
  pump_rounds(env, 50);
  destroy_ep(&env->side[1 - first]);
}

static void test_destroy_busy_writer_first(void **state) { destroy_busy(*state, 0); }
static void test_destroy_busy_receiver_first(void **state) { destroy_busy(*state, 1); }

/* The ops table: every entry present (rail.h), the flush entries all or
 * none, post_eager exactly with RR_RAIL_CAP_EAGER, path_stats exactly with
 * RR_RAIL_CAP_PATH_STATS, which then counts what was sent. */
static void test_ops_and_path_stats(void **state) {
  rc_env *env = *state;
  const rr_rail_ops *o = env->side[0].ep->ops;
  assert_non_null(o->name);
  void (*const req[])(void) = {(void (*)(void))o->reg_mr,    (void (*)(void))o->dereg_mr,
                               (void (*)(void))o->dev_progress, (void (*)(void))o->dev_event,
                               (void (*)(void))o->dev_close,  (void (*)(void))o->ep_open,
                               (void (*)(void))o->ep_addr,    (void (*)(void))o->ep_connect,
                               (void (*)(void))o->post_write, (void (*)(void))o->post_ctrl,
                               (void (*)(void))o->post_drain, (void (*)(void))o->progress,
                               (void (*)(void))o->fence,      (void (*)(void))o->backlog,
                               (void (*)(void))o->flushed,    (void (*)(void))o->last_alive_ns,
                               (void (*)(void))o->destroy};
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) assert_non_null(req[i]);
  int nflush = !!o->flush_post + !!o->flush_poll + !!o->flush_abandon;
  assert_true(nflush == 0 || nflush == 3);
  assert_int_equal(!!(env->caps & RR_RAIL_CAP_PATH_STATS), o->path_stats != NULL);
  assert_int_equal(!!(env->caps & RR_RAIL_CAP_EAGER), o->post_eager != NULL);
  if (!o->path_stats) return;
  post_write(env, 0, 0, 1u << 20, 0, 0);
  assert_true(pump_until(env, all_done_and_landed));
  rr_rail_path_stats ps;
  assert_int_equal(o->path_stats(env->side[0].ep, &ps), RR_OK);
  assert_true(ps.sent_bytes >= (1u << 20));
  assert_true(ps.retrans_bytes <= ps.sent_bytes);
}

/* RR_RAIL_CAP_PROBE_WRITE: probe filler crosses the path and completes
 * like a write (on_write_done with its wr_id, once), and never reaches the
 * peer as data: no on_write_recv, nothing written where the request named
 * (a rail may ignore the names: verbs writes into the peer's scratch); a
 * rail that sees writes before they land hands it to on_write_begin, which
 * sinks it. A write after the probes lands as usual. */
static int probes_and_write_done(rc_env *env) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  return (a->ndone == a->nposted && b->nrecv == 1) || a->failed || b->failed;
}
static void test_probe_write(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_PROBE_WRITE)) {
    skip();
    return;
  }
  rc_side *a = &env->side[0], *b = &env->side[1];
  const int nprobes = 12;
  for (int i = 0; i < nprobes; i++) {
    assert_true(a->nposted < RC_MAX_WRITES);
    int k = a->nposted++;
    uint32_t len = i % 2 ? RR_WRITE_PROBE_MAX : 65536 + (uint32_t)i;
    a->w[k] = (rc_write){.src = a->buf, .dst = b->buf, .len = 0, .imm = (uint32_t)k};
    rr_write_wr wr = {.wr_id = (uint64_t)k, .local = a->buf, .len = len, .local_mr = a->mr,
                      .remote_addr = (uint64_t)(uintptr_t)b->buf, .rkey = b->mr->rkey, .flags = RR_WRITE_PROBE};
    rr_status st;
    uint64_t deadline = wall_ms() + 20000;
    while ((st = a->ep->ops->post_write(a->ep, &wr)) == RR_AGAIN && wall_ms() < deadline) round_once(env);
    assert_int_equal(st, RR_OK);
  }
  post_write(env, 0, 4096, 4096, 0, 0); /* index nprobes: the one write that is data */
  assert_true(pump_until(env, probes_and_write_done));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(a->ndone, nprobes + 1);
  assert_int_equal(b->nrecv, 1);
  assert_int_equal(b->bad_write, 0);
  for (int k = 0; k < b->nlog; k++)
    if (b->log[k].kind == RC_EV_RECV) assert_int_equal(b->log[k].id & 0xffff, nprobes);
  if (env->caps & RR_RAIL_CAP_WRITE_BEGIN) assert_int_equal(b->nprobe_begin, nprobes);
  else assert_int_equal(b->nprobe_begin, 0);
  for (size_t i = 0; i < 4096; i++) assert_int_equal(b->buf[i], 0); /* the named place untouched */
  assert_memory_equal(b->buf + 4096, a->buf, 4096);
}

/* Flags that hold only together (rail.h): a rail whose fence keeps the
 * endpoint needs on_write_begin and epoch tags, for what of a fenced epoch
 * arrives after the fence is sunk there by its tag; one that carries eager
 * writes needs on_write_begin, where the receiver places them. */
static void test_caps_that_need_each_other(void **state) {
  rc_env *env = *state;
  uint32_t c = env->caps;
  if (c & RR_RAIL_CAP_FENCE_KEEPS_EP) {
    assert_true(c & RR_RAIL_CAP_WRITE_BEGIN);
    assert_true(c & RR_RAIL_CAP_EPOCH_TAG);
  }
  if (c & RR_RAIL_CAP_EAGER) assert_true(c & RR_RAIL_CAP_WRITE_BEGIN);
}

/* RR_RAIL_CAP_EPOCH_TAG: each write arrives with the epoch tag it was
 * posted with, every value of the 16 bits; a rail without the flag
 * delivers 0 (on_write_recv checks it, in this case and every other). */
static void test_epoch_tags_delivered(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 24; i++) {
    uint32_t len = write_len(i);
    post_write(env, off, off, len, 0, (uint16_t)(i == 23 ? 0xffffu : (uint32_t)i * 2731u));
    off += len + 64;
  }
  assert_all_landed(env, 24);
  assert_clean(env);
}

/* RR_RAIL_CAP_EAGER: an eager write reaches on_write_begin flagged
 * RR_WRITE_EAGER with what it named (seq, known, tag) intact, its length
 * and epoch tag, and no key or address (checked in eager_begin); it lands
 * where the engine puts it, and on_write_recv gets the header as
 * on_write_begin left it: still eager, or resolved into an ordinary write.
 * Mixed with ordinary writes; on_write_done for every one. (A rail without
 * the flag has post_eager NULL: test_ops_and_path_stats.) */
static void test_eager_writes(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_EAGER)) {
    skip();
    return;
  }
  size_t off = 0;
  int neager = 0;
  for (int i = 0; i < 48; i++) {
    uint32_t len = write_len(i % 5); /* up to 4096: the engine's bounce size */
    if (i % 3 == 2) {
      post_write(env, off, off, len, 0, (uint16_t)(i * 4099u));
    } else {
      /* Names that use every bit: seq and known near the wrap, tags of both signs. */
      rr_eager_name name = {.seq = 0xfffffff0u + (uint32_t)i, .known = 0x80000000u ^ (uint32_t)i,
                            .tag = i % 2 ? -1 - i : INT32_MAX - i};
      post_eager(env, off, off, len, name, i % 4 == 1, (uint16_t)(0xffe0u + (uint32_t)i));
      neager++;
    }
    off += len + 64;
    if (i % 10 == 9) pump_rounds(env, 2);
  }
  assert_all_landed(env, 48);
  assert_int_equal(env->side[1].neager_begin, neager);
  assert_clean(env);
}

static int marked_writes_and_ctrl_in(rc_env *env) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  if (a->failed || b->failed) return 1;
  for (int i = env->mark; i < a->nposted; i++)
    if (!a->w[i].done || !a->w[i].recvd) return 0;
  return b->ctrl_next == a->ctrl_sent && a->ctrl_next == b->ctrl_sent;
}

/* RR_RAIL_CAP_FENCE_KEEPS_EP: after fence() on both ends the endpoints
 * carry on. Writes posted after it land and complete, and control messages
 * go both ways, while nothing of before it lands any more (the engine
 * sinks the old epoch tag). */
static void test_fence_keeps_endpoint(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_FENCE_KEEPS_EP)) {
    skip(); /* fence() breaks the endpoint: the engine drains such a rail instead */
    return;
  }
  rc_side *a = &env->side[0], *b = &env->side[1];
  post_old_epoch(env, 8);
  pump_rounds(env, 2);
  a->ep->ops->fence(a->ep);
  b->ep->ops->fence(b->ep);
  b->sink_fence_tag = 1; /* the engine's side of the fence */
  env->mark = a->nposted;
  size_t off = RC_BUF_BYTES / 2; /* clear of the writes before the fence */
  for (int i = 0; i < 10; i++) {
    uint32_t len = write_len(i);
    post_write(env, off, off, len, 0, 2);
    off += len + 64;
    post_ctrl(env, 0);
    post_ctrl(env, 1);
  }
  assert_true(pump_until(env, marked_writes_and_ctrl_in));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(b->failed, RR_OK);
  for (int i = env->mark; i < a->nposted; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
  assert_int_equal(b->ctrl_next, 10);
  assert_int_equal(a->ctrl_next, 10);
  assert_clean(env);
}

#define CASE(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void) {
  const struct CMUnitTest cases[] = {
      CASE(test_ops_and_path_stats),
      CASE(test_caps_that_need_each_other),
      CASE(test_epoch_tags_delivered),
      CASE(test_eager_writes),
      CASE(test_writes_land),
      CASE(test_flush_ends_a_pass),
      CASE(test_done_means_placed),
      CASE(test_split_writes_land),
      CASE(test_drain_follows_writes),
      CASE(test_drains_back_to_back),
      CASE(test_ctrl_in_order),
      CASE(test_ordered_delivery),
      CASE(test_write_begin_sink),
      CASE(test_write_begin_refusal),
      CASE(test_callback_failure_stops_progress),
      CASE(test_fence_sender),
      CASE(test_fence_receiver_midway),
      CASE(test_fence_both_midway),
      CASE(test_fence_keeps_endpoint),
      CASE(test_flushed),
      CASE(test_peer_gone_is_reported),
      CASE(test_destroy_busy_writer_first),
      CASE(test_destroy_busy_receiver_first),
      CASE(test_probe_write),
  };
  return cmocka_run_group_tests_name(fx->name, cases, NULL, NULL);
}
