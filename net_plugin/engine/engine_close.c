/* Orderly close: what a closing end owes its peer leaves before its rails
 * close, and the peer reads the close that follows as the end of the
 * connection, not as a failure.
 *
 * NCCL closes a comm as soon as its own side is done: a receiver right
 * after its last receive completed, while the sender may still wait for
 * that receive's acknowledgement (it holds NCCL's buffer until then); a
 * sender right after its last small sends were reported done, which were
 * only copied into bounce buffers. So the closing end first delivers:
 *   receiver: every acknowledgement owed (completed receives);
 *   sender:   every message NCCL was (or will be) told is done;
 * then a BYE on the control rail, behind all of it, and waits until every
 * rail that carried any of it has handed it to the peer's side
 * (rr_rail_ops.flushed). Only then do the rails close.
 *
 * The peer, reading the BYE, takes the rails that close next as the end:
 * nothing is rolled back or reopened, and the engine ends "closed by the
 * peer" without a warning. A sender's messages still complete from what was
 * delivered before the BYE (a receive posted later finds an eager message in
 * the early buffer); what the peer's close leaves unanswered (a receive
 * nothing will come for, a send nobody will receive) is NCCL's error, said
 * once. docs/failover.md, "Orderly close". */
#include "engine_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <stdio.h>
#include <time.h>

/* Everything this end owes the peer has been posted on a rail. */
static int owed_posted(const rr_engine *e) {
  if (engine_is_receiver(e)) return engine_rcv(e)->ack_pending == 0;
  if (engine_send_holding(e) || e->fail_notice_pending) return 0; /* a rollback decides what goes again */
  for (uint32_t i = engine_snd(e)->fifo_head; i != engine_snd(e)->fifo_tail; i++) {
    const rr_send_req *r = engine_sreq(e, engine_snd(e)->fifo[i % RR_SEND_POOL]);
    /* A send NCCL still waits on (not bounced, not acknowledged) is being
     * abandoned by NCCL itself: nothing is owed for it. */
    int promised = r->bounce >= 0 || r->user_done;
    if (!promised || r->acked) continue;
    if (r->parked) return 0; /* waits for the receive it belongs to */
    if (r->transmitted < r->nchunks) return 0;
    if (r->claim_owed) return 0; /* placed; the receiver must be told it holds it */
    /* An eager message went under an assumption about its receive's shape
     * (docs/protocol.md, "Eager writes"); if the assumption was wrong the
     * receiver dropped it and it must go again. Sure only once the shape
     * is known (a clear-to-send or an ack said so). */
    if (r->eager || !seq_before(r->seq, engine_snd(e)->known_seq)) return 0;
  }
  return 1;
}

/* Every rail in use has handed what it carried to the peer's side. */
static int rails_flushed(const rr_engine *e) {
  for (int i = 0; i < e->nrails; i++) {
    const engine_rail *rl = &e->rails[i];
    if (rl->state == RR_RAIL_ACTIVE && !rl->ep->ops->flushed(rl->ep)) return 0;
  }
  return 1;
}

static void pause_briefly(void) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = 20000};
  nanosleep(&ts, NULL);
}

rr_status rr_engine_close(rr_engine *e, uint64_t timeout_ns) {
  uint64_t deadline = rr_now_ns() + timeout_ns;
  rr_status st = RR_AGAIN;
  pthread_mutex_lock(&e->lock);
  e->closing = 1;
  while (!e->failed) {
    if (engine_is_receiver(e) && engine_rcv(e)->ack_pending) engine_rcv(e)->ack_flush = 1; /* owed now, not later */
    engine_progress(e);
    if (e->failed) break;
    if (!e->bye_sent && owed_posted(e)) {
      engine_msg bye = {.type = ENGINE_CTRL_BYE,
                        .u.bye_seq = engine_is_sender(e) ? engine_snd(e)->send_seq : engine_rcv(e)->recv_seq};
      if (engine_post_msg(e, &bye) == RR_OK) e->bye_sent = 1;
      continue; /* progress hands it to the rail */
    }
    if (e->bye_sent && rails_flushed(e)) {
      st = RR_OK;
      break;
    }
    /* No rail can carry anything now (every NIC down): waiting out δ for
     * one to heal would hold NCCL's teardown for each such comm, and the
     * peer copes with a close that says nothing (docs/failover.md). */
    if (engine_control_rail(e) < 0 || rr_now_ns() >= deadline) break;
    pthread_mutex_unlock(&e->lock);
    pause_briefly();
    pthread_mutex_lock(&e->lock);
  }
  if (e->failed && !(e->failed == RR_ERR_PEER && e->peer_bye)) st = e->failed;
  if (st == RR_AGAIN) {
    e->stats.closes_owed++;
    rr_counter_inc(RR_CTR_CLOSES_OWED);
    RR_INFO(RR_SUB_NET, "closing the %s connection to %s: what it owed the peer was not all delivered within %llu ms",
            engine_role_word(e), e->cfg.peer, (unsigned long long)(timeout_ns / 1000000));
  }
  pthread_mutex_unlock(&e->lock);
  return st;
}

rr_status engine_on_bye(rr_engine *e, const engine_msg *m) {
  e->peer_bye = 1;
  e->peer_bye_seq = m->u.bye_seq;
  RR_INFO(RR_SUB_NET, "%s connection to %s: the peer is closing (BYE at %u)",
          engine_role_word(e), e->cfg.peer, m->u.bye_seq);
  return RR_OK;
}

void engine_closed_by_peer(rr_engine *e) {
  if (e->failed) return;
  e->failed = RR_ERR_PEER;
  snprintf(e->failed_why, sizeof e->failed_why, "closed by the peer");
  RR_INFO(RR_SUB_NET, "%s connection to %s closed by the peer", engine_role_word(e), e->cfg.peer);
}

void engine_report_unanswered(rr_engine *e, const char *what, uint32_t seq) {
  if (e->bye_warned) return;
  e->bye_warned = 1;
  RR_WARN("%s %u on the connection to %s: the peer closed the connection before answering it", what, seq,
          e->cfg.peer);
}
