/* The rail contract cases on what every rail promises (rail_contract.h):
 * writes land, drains follow the writes before them, control messages
 * come in order, a failing callback stops progress, nothing lands after
 * invalidate(), and an endpoint ends cleanly. Each case states the rail.h
 * promise it checks; one that needs a capability flag is skipped by that
 * flag, never by the transport's name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "rail_contract.h"

/* post_flush (optional, rail.h): with nothing queued it does nothing and says
 * RR_OK; after each pass of writes it hands them over, and they land and
 * complete as any others. A rail without it has each write in flight once
 * posted; with it, progress() alone must also hand over what is queued
 * (every other case here never calls it). */
void test_flush_ends_a_pass(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0];
  rr_status (*flush)(rr_rail_ep *) = a->ep->ops->post_flush;
  if (flush) assert_int_equal(flush(a->ep), RR_OK);
  size_t off = 0;
  for (int i = 0; i < 40; i++) {
    uint32_t len = rc_write_len(i);
    rc_post_write(env, off, off, len, 0, 0);
    off += len + 64;
    if (flush && i % 8 == 7) assert_int_equal(flush(a->ep), RR_OK);
  }
  if (flush) assert_int_equal(flush(a->ep), RR_OK);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(a->ndone, 40);
  assert_int_equal(env->side[1].nrecv, 40);
  for (int i = 0; i < 40; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
  rc_assert_clean(env);
}

/* Every write lands, bytes and immediate, where the writer named, reported
 * once by on_write_recv (asked for first by on_write_begin on rails that
 * see writes before they land, never on others); on_write_done follows for
 * each, once. */
void test_writes_land(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 40; i++) {
    uint32_t len = rc_write_len(i);
    rc_post_write(env, off, off, len, 0, 0);
    off += len + 64;
  }
  rc_assert_all_landed(env, 40);
  const rc_side *b = &env->side[1];
  /* Each immediate once. */
  int seen[40] = {0};
  for (int k = 0; k < b->nlog; k++)
    if (b->log[k].kind == RC_EV_RECV) seen[b->log[k].id & 0xffff]++;
  for (int i = 0; i < 40; i++) assert_int_equal(seen[i], 1);
  if (env->caps & RR_RAIL_CAP_WRITE_BEGIN) assert_int_equal(b->nbegin, 40);
  else assert_int_equal(b->nbegin, 0);
  rc_assert_clean(env);
}

static int drained_4(rc_env *env) {
  return env->side[1].last_drain == 4 || env->side[0].failed || env->side[1].failed;
}
static int drained_1(rc_env *env) { return env->side[1].ndrain == 1 || env->side[0].failed || env->side[1].failed; }

/* on_drain(epoch) comes only once every write posted before the barrier
 * has landed (checked inside the callback). Barriers posted one at a time
 * are each delivered. */
void test_drain_follows_writes(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 20; i++) {
    uint32_t len = rc_write_len(i) ? rc_write_len(i) : 16;
    rc_post_write(env, off, off, len, 0, 0);
    off += len;
  }
  rc_post_drain(env, 1);
  assert_true(rc_pump_until(env, drained_1));
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->last_drain, 1);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  rc_assert_clean(env);
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
void test_drains_back_to_back(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (uint32_t epoch = 1; epoch <= 4; epoch++) {
    for (int i = 0; i < 9; i++) {
      uint32_t len = rc_write_len(i + (int)epoch) ? rc_write_len(i + (int)epoch) : 16;
      rc_post_write(env, off, off, len, 0, 0);
      off += len;
    }
    rc_post_drain(env, epoch);
    rc_pump_rounds(env, (int)epoch); /* the next batch overtakes in flight on some rounds */
  }
  assert_true(rc_pump_until(env, drained_4));
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  uint32_t prev = 0;
  for (int k = 0; k < b->nlog; k++)
    if (b->log[k].kind == RC_EV_DRAIN) {
      assert_true(b->log[k].id > prev);
      prev = (uint32_t)b->log[k].id;
    }
  assert_int_equal(prev, 4);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  rc_assert_clean(env);
}

static int ctrl_all_in(rc_env *env) {
  return (env->side[1].ctrl_next == env->side[0].ctrl_sent && env->side[0].ctrl_next == env->side[1].ctrl_sent &&
          env->side[1].nrecv == env->side[0].nposted) ||
         env->side[0].failed || env->side[1].failed;
}

/* Control messages arrive in order and intact, both ways, every length up
 * to RR_RAIL_CTRL_MAX, with writes in between. */
void test_ctrl_in_order(void **state) {
  rc_env *env = *state;
  size_t off = 0;
  for (int i = 0; i < 400; i++) {
    rc_post_ctrl(env, 0);
    rc_post_ctrl(env, 1);
    if (i % 25 == 0) {
      uint32_t len = rc_write_len(i / 25);
      rc_post_write(env, off, off, len, 0, 0);
      off += len;
    }
    if (i % 50 == 0) rc_pump_rounds(env, 2);
  }
  assert_true(rc_pump_until(env, ctrl_all_in));
  assert_int_equal(env->side[0].failed, RR_OK);
  assert_int_equal(env->side[1].failed, RR_OK);
  assert_int_equal(env->side[1].ctrl_next, 400);
  assert_int_equal(env->side[0].ctrl_next, 400);
  rc_assert_clean(env);
}

static int log_has(rc_env *env, int n) { return env->side[1].nlog >= n || env->side[1].failed || env->side[0].failed; }

/* RR_RAIL_CAP_EP_ORDERED: writes, control messages and drains are
 * delivered in the order they were posted on the endpoint. */
void test_ordered_delivery(void **state) {
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
      uint32_t len = rc_write_len(i);
      int k = rc_post_write(env, off, off, len, 0, 0);
      off += len;
      if (off > RC_BUF_BYTES - (1u << 21)) off = 0;
      want[n++] = (rc_event){RC_EV_RECV, env->side[0].w[k].imm};
    } else if (what == 3) {
      want[n++] = (rc_event){RC_EV_CTRL, env->side[0].ctrl_sent};
      rc_post_ctrl(env, 0);
    } else if (epoch < RC_MAX_EPOCHS) {
      rc_post_drain(env, epoch);
      want[n++] = (rc_event){RC_EV_DRAIN, epoch++};
    }
    if (i % 16 == 0) rc_pump_rounds(env, 2);
  }
  for (uint64_t deadline = rc_wall_ms() + 20000; !log_has(env, n) && rc_wall_ms() < deadline;) rc_round_once(env);
  rc_side *b = &env->side[1];
  assert_int_equal(b->failed, RR_OK);
  assert_int_equal(b->nlog, n);
  for (int k = 0; k < n; k++) {
    assert_int_equal(b->log[k].kind, want[k].kind);
    assert_int_equal(b->log[k].id, want[k].id);
  }
}

/* on_ctrl failing makes progress stop and return that failure: the
 * messages behind it are not delivered in that call. */
void test_callback_failure_stops_progress(void **state) {
  rc_env *env = *state;
  env->side[1].refuse_ctrl_seq = 5;
  for (int i = 0; i < 12; i++) rc_post_ctrl(env, 0);
  assert_true(rc_pump_until(env, rc_b_failed));
  assert_int_equal(env->side[1].failed, RR_ERR_PROTOCOL);
  assert_int_equal(env->side[1].ctrl_next, 6);
  assert_int_equal(env->side[1].after_failure, 0);
  assert_int_equal(env->side[1].bad_ctrl, 0);
}

/* After invalidate() returns, nothing issued before it lands in registered
 * memory. On a rail that asks the engine (WRITE_BEGIN) that is the rail
 * and the engine together: the rail carries each write's epoch tag and
 * honours a NULL destination, the engine sinks the old tag (played here
 * from the invalidation on). `invalidate_sender`, `invalidate_receiver`: which ends invalidate;
 * `midway`: invalidate once the receiver has begun taking writes. The sender's
 * invalidate alone cannot stop a write whose landing the receiver has begun
 * (TCP: the engine gave it a destination; RC: the responder places what
 * reached it): only the receiver's own invalidation cuts that one off, which is
 * why there is no sender-only midway case. rail.h's "on either side"
 * means: each side's invalidation for what lands on that side. */
/* n writes of epoch tag 1 from offset 0, every other one large enough to
 * be in flight for a while: what an invalidation is to cut off. */
static void post_old_epoch(rc_env *env, int n) {
  size_t off = 0;
  for (int i = 0; i < n; i++) {
    uint32_t len = i % 2 ? (2u << 20) / 3 : rc_write_len(i);
    rc_post_write(env, off, off, len, 0, 1);
    off += len;
  }
}

static void invalidate_case(rc_env *env, int invalidate_sender, int invalidate_receiver, int midway) {
  rc_side *a = &env->side[0], *b = &env->side[1];
  post_old_epoch(env, 12);
  if (midway) {
    /* Only the receiver reads, until something of the writes arrived. */
    rc_progress_side(a);
    for (uint64_t deadline = rc_wall_ms() + 20000;
         b->nbegin == 0 && b->nrecv == 0 && !b->failed && rc_wall_ms() < deadline;) {
      rc_progress_side(a);
      rc_progress_side(b);
      if (env->fx->tick) env->fx->tick(env);
    }
  }
  if (invalidate_sender) a->ep->ops->invalidate(a->ep);
  if (invalidate_receiver) b->ep->ops->invalidate(b->ep);
  b->sink_epoch_tag = 1; /* the engine's side of the invalidation */
  char *snap = malloc(RC_BUF_BYTES);
  assert_non_null(snap);
  memcpy(snap, b->buf, RC_BUF_BYTES);
  rc_pump_rounds(env, 20000);
  assert_memory_equal(snap, b->buf, RC_BUF_BYTES);
  free(snap);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(env->side[i].bad_write, 0);
    assert_int_equal(env->side[i].bad_done, 0);
  }
}

void test_invalidate_sender(void **state) { invalidate_case(*state, 1, 0, 0); }
void test_invalidate_receiver_midway(void **state) { invalidate_case(*state, 0, 1, 1); }
void test_invalidate_both_midway(void **state) { invalidate_case(*state, 1, 1, 1); }

static int marked_writes_and_ctrl_in(rc_env *env) {
  const rc_side *a = &env->side[0], *b = &env->side[1];
  if (a->failed || b->failed) return 1;
  for (int i = env->mark; i < a->nposted; i++)
    if (!a->w[i].done || !a->w[i].recvd) return 0;
  return b->ctrl_next == a->ctrl_sent && a->ctrl_next == b->ctrl_sent;
}

/* RR_RAIL_CAP_INVALIDATE_KEEPS_EP: after invalidate() on both ends the endpoints
 * carry on. Writes posted after it land and complete, and control messages
 * go both ways, while nothing of before it lands any more (the engine
 * sinks the old epoch tag). */
void test_invalidate_keeps_endpoint(void **state) {
  rc_env *env = *state;
  if (!(env->caps & RR_RAIL_CAP_INVALIDATE_KEEPS_EP)) {
    skip(); /* invalidate() breaks the endpoint: the engine drains such a rail instead */
    return;
  }
  rc_side *a = &env->side[0], *b = &env->side[1];
  post_old_epoch(env, 8);
  rc_pump_rounds(env, 2);
  a->ep->ops->invalidate(a->ep);
  b->ep->ops->invalidate(b->ep);
  b->sink_epoch_tag = 1; /* the engine's side of the invalidation */
  env->mark = a->nposted;
  size_t off = RC_BUF_BYTES / 2; /* clear of the writes before the invalidation */
  for (int i = 0; i < 10; i++) {
    uint32_t len = rc_write_len(i);
    rc_post_write(env, off, off, len, 0, 2);
    off += len + 64;
    rc_post_ctrl(env, 0);
    rc_post_ctrl(env, 1);
  }
  assert_true(rc_pump_until(env, marked_writes_and_ctrl_in));
  assert_int_equal(a->failed, RR_OK);
  assert_int_equal(b->failed, RR_OK);
  for (int i = env->mark; i < a->nposted; i++) assert_memory_equal(a->w[i].dst, a->w[i].src, a->w[i].len);
  assert_int_equal(b->ctrl_next, 10);
  assert_int_equal(a->ctrl_next, 10);
  rc_assert_clean(env);
}

static int a_flushed(rc_env *env) { return env->side[0].ep->ops->flushed(env->side[0].ep); }

/* flushed(): 1 with nothing posted; 0 while a posted write has not reached
 * the peer; 1 again once it has (and the peer has it all). */
void test_flushed(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0];
  assert_int_equal(a->ep->ops->flushed(a->ep), 1);
  rc_post_write(env, 0, 0, 1u << 20, 0, 0);
  rc_post_ctrl(env, 0);
  assert_int_equal(a->ep->ops->flushed(a->ep), 0);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  assert_true(rc_pump_until(env, a_flushed));
  assert_true(rc_pump_until(env, ctrl_all_in));
  assert_int_equal(a->failed, RR_OK);
  rc_assert_clean(env);
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
void test_peer_gone_is_reported(void **state) {
  rc_env *env = *state;
  rc_side *a = &env->side[0], *b = &env->side[1];
  rc_post_write(env, 0, 0, 65536, 0, 0);
  rc_post_ctrl(env, 0);
  assert_true(rc_pump_until(env, rc_all_done_and_landed));
  rc_destroy_ep(b);
  assert_true(rc_pump_until(env, a_failed));
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
    uint32_t len = rc_write_len(i);
    rc_post_write(env, off, off, len, 0, 0);
    off += len;
    rc_post_ctrl(env, 0);
    rc_post_ctrl(env, 1);
  }
  rc_post_drain(env, 1);
  rc_pump_rounds(env, 2);
  rc_destroy_ep(&env->side[first]);
  rc_pump_rounds(env, 50);
  rc_destroy_ep(&env->side[1 - first]);
}

void test_destroy_busy_writer_first(void **state) { destroy_busy(*state, 0); }
void test_destroy_busy_receiver_first(void **state) { destroy_busy(*state, 1); }
