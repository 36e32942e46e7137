/* The rail contract harness (rail_contract.h): the engine, played over two
 * endpoints of one transport, what drives them, and main, which runs every
 * case (RC_CASES, in rail_contract_core.c and rail_contract_caps.c) over
 * the fixture this executable is built with. */
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
  return h->epoch_tag == ((ep->dev->attr.caps & RR_RAIL_CAP_EPOCH_TAG) ? w->epoch_tag : 0);
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
                        .epoch_tag = h->epoch_tag};
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
  if ((h->imm & RC_IMM_SINK) || (s->sink_epoch_tag >= 0 && h->epoch_tag == (uint16_t)s->sink_epoch_tag)) {
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
   * invalidated in the cases that drain). */
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

uint64_t rc_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void rc_progress_side(rc_side *s) {
  if (!s->ep || s->failed != RR_OK) return;
  rr_status st = s->ep->ops->progress(s->ep);
  if (st != RR_OK) s->failed = st;
}

void rc_round_once(rc_env *env) {
  rc_progress_side(&env->side[0]);
  rc_progress_side(&env->side[1]);
  if (fx->tick) fx->tick(env);
}

/* Progress both ends until done(env) or the bound (a generous wall-clock
 * one: a loaded machine is slower, never wrong). Returns done(env). */
int rc_pump_until(rc_env *env, rc_pred done) {
  uint64_t deadline = rc_wall_ms() + 20000;
  for (uint64_t n = 0;; n++) {
    if (done(env)) return 1;
    if ((n & 255) == 0 && rc_wall_ms() > deadline) return done(env);
    rc_round_once(env);
  }
}

void rc_pump_rounds(rc_env *env, int rounds) {
  for (int i = 0; i < rounds; i++) rc_round_once(env);
}

/* Post a write of len bytes from A's buffer at src_off to B's at dst_off,
 * waiting out RR_AGAIN. Returns its index (its wr_id and the low bits of its
 * immediate). */
int rc_post_write_split(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t bulk,
                        uint32_t imm_flags, uint16_t epoch_tag) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(a->nposted < RC_MAX_WRITES);
  assert_true(src_off + len <= RC_BUF_BYTES && dst_off + len <= RC_BUF_BYTES);
  int i = a->nposted;
  rc_write *w = &a->w[i];
  *w = (rc_write){.src = a->buf + src_off, .dst = b->buf + dst_off, .len = len, .bulk = bulk,
                  .imm = (uint32_t)i | imm_flags, .epoch_tag = epoch_tag};
  a->nposted++; /* before posting: a rail may deliver inside post_write */
  rr_write_wr wr = {.wr_id = (uint64_t)i, .local = w->src, .len = len, .local_mr = a->mr,
                    .remote_addr = (uint64_t)(uintptr_t)w->dst, .rkey = b->mr->rkey, .imm = w->imm, .epoch_tag = epoch_tag,
                    .bulk = bulk};
  rr_status st;
  uint64_t deadline = rc_wall_ms() + 20000;
  while ((st = a->ep->ops->post_write(a->ep, &wr)) == RR_AGAIN && rc_wall_ms() < deadline) rc_round_once(env);
  assert_int_equal(st, RR_OK);
  return i;
}

int rc_post_write(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, uint32_t imm_flags, uint16_t epoch_tag) {
  return rc_post_write_split(env, src_off, dst_off, len, 0, imm_flags, epoch_tag);
}

/* Post an eager write of len bytes from A's buffer at src_off naming
 * `name`, which the harness places at B's dst_off (resolved into an
 * ordinary write at on_write_begin when `resolve`). Returns its index. */
int rc_post_eager(rc_env *env, size_t src_off, size_t dst_off, uint32_t len, rr_eager_name name, int resolve,
                  uint16_t epoch_tag) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(a->nposted < RC_MAX_WRITES);
  assert_true(src_off + len <= RC_BUF_BYTES && dst_off + len <= RC_BUF_BYTES);
  int i = a->nposted;
  rc_write *w = &a->w[i];
  *w = (rc_write){.src = a->buf + src_off, .dst = b->buf + dst_off, .len = len, .imm = (uint32_t)i, .epoch_tag = epoch_tag,
                  .eager = 1, .resolve = resolve, .name = name};
  a->nposted++; /* before posting: a rail may deliver inside post_eager */
  rr_eager_wr wr = {.wr_id = (uint64_t)i, .local = w->src, .len = len, .local_mr = a->mr, .imm = w->imm,
                    .epoch_tag = epoch_tag, .name = name};
  rr_status st;
  uint64_t deadline = rc_wall_ms() + 20000;
  while ((st = a->ep->ops->post_eager(a->ep, &wr)) == RR_AGAIN && rc_wall_ms() < deadline) rc_round_once(env);
  assert_int_equal(st, RR_OK);
  return i;
}

void rc_post_ctrl(rc_env *env, int from) {
  rc_side *s = &env->side[from];
  uint8_t m[RR_RAIL_CTRL_MAX];
  uint32_t seq = s->ctrl_sent;
  ctrl_fill(seq, m);
  rr_status st;
  uint64_t deadline = rc_wall_ms() + 20000;
  while ((st = s->ep->ops->post_ctrl(s->ep, m, ctrl_len(seq))) == RR_AGAIN && rc_wall_ms() < deadline)
    rc_round_once(env);
  assert_int_equal(st, RR_OK);
  s->ctrl_sent++;
}

void rc_post_drain(rc_env *env, uint32_t epoch) {
  rc_side *a = &env->side[0];
  assert_true(epoch < RC_MAX_EPOCHS);
  a->posted_at_drain[epoch] = a->nposted;
  rr_status st;
  uint64_t deadline = rc_wall_ms() + 20000;
  while ((st = a->ep->ops->post_drain(a->ep, epoch)) == RR_AGAIN && rc_wall_ms() < deadline) rc_round_once(env);
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
    s->sink_epoch_tag = -1;
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

void rc_destroy_ep(rc_side *s) {
  if (s->ep) s->ep->ops->destroy(s->ep);
  s->ep = NULL;
}

static int teardown(void **state) {
  rc_env *env = *state;
  const char *why = fx->violation ? fx->violation(env) : NULL;
  for (int i = 0; i < 2; i++) rc_destroy_ep(&env->side[i]);
  for (int i = 0; i < 2; i++)
    if (env->side[i].mr) env->side[i].dev->ops->dereg_mr(env->side[i].mr);
  fx->close(env);
  for (int i = 0; i < 2; i++) free(env->side[i].buf);
  free(env);
  if (why) fail_msg("%s: the transport's own checker: %s", fx->name, why);
  return 0;
}

/* What every case expects of a healthy exchange. */
void rc_assert_clean(rc_env *env) {
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

int rc_all_done_and_landed(rc_env *env) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  return (a->ndone == a->nposted && b->nrecv == a->nposted) || a->failed || b->failed;
}

/* Progress until every write posted has completed and landed; all n of
 * them did, intact, and neither end failed. */
void rc_assert_all_landed(rc_env *env, int n) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(a->ndone, n);
  assert_int_equal(b->nrecv, n);
  for (int i = 0; i < n; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
}

/* Sizes a write takes in the cases: the immediate alone, bytes, a page,
 * and writes larger than one socket read or work request. */
uint32_t rc_write_len(int i) {
  static const uint32_t lens[] = {0, 1, 7, 100, 4096, 4099, 65536, 65537, 262144 + 3, 1u << 20};
  return lens[i % (int)(sizeof lens / sizeof lens[0])];
}

/* B's endpoint failed: what the failure cases pump until. */
int rc_b_failed(rc_env *env) { return env->side[1].failed != RR_OK; }

#define CASE(f) cmocka_unit_test_setup_teardown(f, setup, teardown),

int main(void) {
  const struct CMUnitTest cases[] = {RC_CASES(CASE)};
  return cmocka_run_group_tests_name(fx->name, cases, NULL, NULL);
}
