/* The rail contract cases on what each capability flag adds
 * (rail_contract.h): the ops table and the flags that need each other,
 * epoch tags, eager writes, placed completions, split writes,
 * on_write_begin's sink and refusal, probe writes. Each case states the
 * rail.h promise it checks and is skipped by the flag it needs, never by
 * the transport's name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "rail_contract.h"

/* RR_RAIL_CAP_WRITE_DONE_PLACED: on_write_done means the bytes are in the
 * peer's memory (checked inside the callback). */
void test_done_means_placed(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_DONE_PLACED)) {
    skip(); /* on_write_done means only that the source is free again */
    return;
  }
  size_t off = 0;
  for (int i = 0; i < 60; i++) {
    uint32_t len = rc_write_len(i) ? rc_write_len(i) : 8;
    if (off + len > RC_BUF_BYTES) off = 0;
    rc_post_write(env, off, off, len, 0, 0);
    off += len;
    if (i % 7 == 0) rc_pump_rounds(env, 3);
  }
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  assert_int_equal(env->side[0].placed_checked, 60);
  rc_assert_clean(env);
}

/* RR_RAIL_CAP_ADAPTIVE_ROUTING: a write split into a plain bulk and a
 * write with immediate behind it lands whole and arrives once, with the
 * length of what came with the immediate (checked in on_write_recv). */
void test_split_writes_land(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_ADAPTIVE_ROUTING)) {
    skip(); /* the rail carries no plain writes (rr_write_wr.bulk is 0 for it) */
    return;
  }
  size_t off = 0;
  for (int i = 0; i < 30; i++) {
    uint32_t len = rc_write_len(i) ? rc_write_len(i) : 8;
    uint32_t bulk = i % 3 == 0 ? len : len - len / 4; /* nothing behind the bulk, or a quarter */
    if (off + len > RC_BUF_BYTES) off = 0;
    rc_post_write_split(env, off, off, len, bulk, 0, 0);
    off += len;
    if (i % 7 == 0) rc_pump_rounds(env, 3);
  }
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  assert_int_equal(env->side[1].nrecv, 30);
  assert_int_equal(env->side[0].ndone, 30);
  rc_assert_clean(env);
}

static int sink_case_done(rc_env *env) {
  return env->side[0].ndone == env->side[0].nposted || env->side[0].failed || env->side[1].failed;
}

/* RR_RAIL_CAP_WRITE_BEGIN: a write the engine gives no destination (*dst
 * NULL) is read and discarded: nothing of it lands, no on_write_recv, and
 * the endpoint carries on with the writes behind it. */
void test_write_begin_sink(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_BEGIN)) {
    skip(); /* the NIC places writes itself: the engine is not asked */
    return;
  }
  size_t off = 0;
  int sunk = 0;
  for (int i = 0; i < 30; i++) {
    uint32_t len = rc_write_len(i);
    int sink = i % 3 == 1;
    rc_post_write(env, off, off, len, sink ? RC_IMM_SINK : 0, 0);
    sunk += sink;
    off += len + 16;
  }
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_true(rc_pump_until(env, sink_case_done));
  for (uint64_t deadline = rc_wall_ms() + 20000; b->nrecv < 30 - sunk && !b->failed && rc_wall_ms() < deadline;)
    rc_round_once(env);
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->nrecv, 30 - sunk);
  assert_int_equal(b->nbegin, 30);
  for (int i = 0; i < 30; i++) {
    const rc_write *w = &a->w[i];
    if (!(w->imm & RC_IMM_SINK)) continue;
    for (uint32_t k = 0; k < w->len; k++) assert_int_equal(w->dst[k], 0);
  }
  rc_assert_clean(env);
}

/* RR_RAIL_CAP_WRITE_BEGIN: a write the engine refuses (RR_ERR_PROTOCOL)
 * writes nothing and fails the endpoint: progress returns the failure,
 * and no callback follows it in that call. */
void test_write_begin_refusal(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_WRITE_BEGIN)) {
    skip(); /* the NIC places writes itself: the engine is not asked */
    return;
  }
  rc_post_write(env, 0, 0, 4096, 0, 0);
  int bad = rc_post_write(env, 8192, 8192, 65536, RC_IMM_REFUSE, 0);
  rc_post_write(env, 1u << 20, 1u << 20, 4096, 0, 0);
  rc_post_ctrl(env, 0);
  assert_true(rc_pump_until(env, rc_b_failed));
  rc_side *a = &env->side[0], *b = &env->side[1];
  assert_int_equal(b->failed, RR_ERR_PROTOCOL);
  for (uint32_t k = 0; k < a->w[bad].len; k++) assert_int_equal(a->w[bad].dst[k], 0);
  assert_int_equal(b->after_failure, 0);
  assert_int_equal(b->bad_write, 0);
}

static int all_acked(rc_env *env) {
  rr_rail_path_stats ps;
  return env->side[0].ep->ops->path_stats(env->side[0].ep, &ps) == RR_OK && ps.unacked == 0;
}

/* The ops table: every entry present (rail.h), the flush entries all or
 * none, post_eager exactly with RR_RAIL_CAP_EAGER, path_stats exactly with
 * RR_RAIL_CAP_PATH_STATS, which then counts what was sent. */
void test_ops_and_path_stats(void **state) {
  rc_env *env = *state;
  const rr_rail_ops *o = env->side[0].ep->ops;
  assert_non_null(o->name);
  void (*const req[])(void) = {(void (*)(void))o->reg_mr,    (void (*)(void))o->dereg_mr,
                               (void (*)(void))o->dev_progress, (void (*)(void))o->dev_event,
                               (void (*)(void))o->dev_close,  (void (*)(void))o->ep_open,
                               (void (*)(void))o->ep_addr,    (void (*)(void))o->ep_connect,
                               (void (*)(void))o->post_write, (void (*)(void))o->post_ctrl,
                               (void (*)(void))o->post_drain, (void (*)(void))o->progress,
                               (void (*)(void))o->invalidate, (void (*)(void))o->backlog,
                               (void (*)(void))o->flushed,    (void (*)(void))o->last_alive_ns,
                               (void (*)(void))o->destroy};
  for (size_t i = 0; i < sizeof req / sizeof req[0]; i++) assert_non_null(req[i]);
  int nflush = !!o->flush_post + !!o->flush_poll + !!o->flush_abandon;
  assert_true(nflush == 0 || nflush == 3);
  assert_int_equal(!!(env->caps & RR_RAIL_CAP_PATH_STATS), o->path_stats != NULL);
  assert_int_equal(!!(env->caps & RR_RAIL_CAP_EAGER), o->post_eager != NULL);
  if (!o->path_stats) return;
  rc_post_write(env, 0, 0, 1u << 20, 0, 0);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  rr_rail_path_stats ps;
  assert_int_equal(o->path_stats(env->side[0].ep, &ps), RR_OK);
  assert_true(ps.sent_bytes >= (1u << 20));
  assert_true(ps.retrans_bytes <= ps.sent_bytes);
  /* What landed, the peer acknowledges: nothing stays unacknowledged (the
   * latency criterion waits for this to end a sample). */
  assert_true(rc_pump_until(env, all_acked));
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
void test_probe_write(void **state) {
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
    uint64_t deadline = rc_wall_ms() + 20000;
    while ((st = a->ep->ops->post_write(a->ep, &wr)) == RR_AGAIN && rc_wall_ms() < deadline) rc_round_once(env);
    assert_int_equal(st, RR_OK);
  }
  rc_post_write(env, 0, 4096, 4096, 0, 0); /* index nprobes: the one write that is data */
  assert_true(rc_pump_until(env, probes_and_write_done));
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

/* Flags that hold only together (rail.h): a rail whose invalidation keeps the
 * endpoint needs on_write_begin and epoch tags, for what of an invalidated epoch
 * arrives after the invalidation is sunk there by its tag; one that carries eager
 * writes needs on_write_begin, where the receiver places them. */
void test_caps_that_need_each_other(void **state) {
  rc_env *env = *state;
  uint32_t c = env->caps;
  if (c & RR_RAIL_CAP_INVALIDATE_KEEPS_EP) {
    assert_true(c & RR_RAIL_CAP_WRITE_BEGIN);
    assert_true(c & RR_RAIL_CAP_EPOCH_TAG);
  }
  if (c & RR_RAIL_CAP_EAGER) assert_true(c & RR_RAIL_CAP_WRITE_BEGIN);
}

/* RR_RAIL_CAP_EPOCH_TAG: each write arrives with the epoch tag it was
 * posted with, every value of the 16 bits; a rail without the flag
 * delivers 0 (on_write_recv checks it, in this case and every other). */
void test_epoch_tags_delivered(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 24; i++) {
    uint32_t len = rc_write_len(i);
    rc_post_write(env, off, off, len, 0, (uint16_t)(i == 23 ? 0xffffu : (uint32_t)i * 2731u));
    off += len + 64;
  }
  rc_assert_all_landed(env, 24);
  rc_assert_clean(env);
}

/* RR_RAIL_CAP_EAGER: an eager write reaches on_write_begin flagged
 * RR_WRITE_EAGER with what it named (seq, known, tag) intact, its length
 * and epoch tag, and no key or address (checked in eager_begin); it lands
 * where the engine puts it, and on_write_recv gets the header as
 * on_write_begin left it: still eager, or resolved into an ordinary write.
 * Mixed with ordinary writes; on_write_done for every one. (A rail without
 * the flag has post_eager NULL: test_ops_and_path_stats.) */
void test_eager_writes(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_EAGER)) {
    skip();
    return;
  }
  size_t off = 0;
  int neager = 0;
  for (int i = 0; i < 48; i++) {
    uint32_t len = rc_write_len(i % 5); /* up to 4096: the engine's bounce size */
    if (i % 3 == 2) {
      rc_post_write(env, off, off, len, 0, (uint16_t)(i * 4099u));
    } else {
      /* Names that use every bit: seq and known near the wrap, tags of both signs. */
      rr_eager_name name = {.seq = 0xfffffff0u + (uint32_t)i, .known = 0x80000000u ^ (uint32_t)i,
                            .tag = i % 2 ? -1 - i : INT32_MAX - i};
      rc_post_eager(env, off, off, len, name, i % 4 == 1, (uint16_t)(0xffe0u + (uint32_t)i));
      neager++;
    }
    off += len + 64;
    if (i % 10 == 9) rc_pump_rounds(env, 2);
  }
  rc_assert_all_landed(env, 48);
  assert_int_equal(env->side[1].neager_begin, neager);
  rc_assert_clean(env);
}
