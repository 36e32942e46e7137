/* Receiver side of the engine: the queue of acknowledgements owed to the
 * sender, and when it is flushed. */
#include "engine_internal.h"
#include "rr_clock.h"

#include <string.h>

/* Acknowledgements are deferred and coalesced: one ACK names up to 33
 * receives, and it rides with the next control message this end sends
 * anyway (a clear-to-send, usually), so a stream of small messages costs no
 * system call per message for acks. When the sender holds NCCL's buffer
 * until the ack they leave with the next clear-to-send, within
 * ACK_COMPANY_NS (engine_recv.c, recv_complete), or at once when no other
 * receive is outstanding; else when ACK_DEFER_MAX wait, and at the latest
 * ACK_DEFER_NS after the oldest completed. An ack names sequence numbers,
 * so it stays true even if NCCL reposts the slot before it leaves. */
#define ACK_DEFER_MAX 16
/* A sender of eager messages assumes at most 16 receives ahead (EAGER_AHEAD)
 * and learns they took one message each from our acks: half that. */
#define ACK_DEFER_EAGER 8
#define ACK_DEFER_NS 1000000ull

void engine_recv_ack_enqueue(rr_engine *e, uint32_t seq) {
  /* At most one ack per slot waits: a slot's next receive is posted only
   * with a clear-to-send, and acks are flushed before it. */
  if (engine_rcv(e)->ack_pending == RR_NET_MAX_REQUESTS) return;
  if (engine_rcv(e)->ack_pending == 0) engine_rcv(e)->ack_since_ns = rr_now_ns();
  engine_rcv(e)->ack_queue[(engine_rcv(e)->ack_head + engine_rcv(e)->ack_pending) % RR_NET_MAX_REQUESTS] = seq;
  engine_rcv(e)->ack_pending++;
  if (engine_rcv(e)->ack_pending >= (engine_rcv(e)->peer_eager ? ACK_DEFER_EAGER : ACK_DEFER_MAX)) engine_rcv(e)->ack_flush = 1;
}

/* Post every waiting ack, as few messages as the sequence numbers allow.
 * RR_OK also when no rail takes them now (they stay queued). */
rr_status engine_recv_acks_flush(rr_engine *e) {
  while (engine_rcv(e)->ack_pending) {
    uint32_t base = engine_rcv(e)->ack_queue[engine_rcv(e)->ack_head], more = 0;
    uint32_t rest[RR_NET_MAX_REQUESTS];
    uint32_t nrest = 0;
    for (uint32_t j = 1; j < engine_rcv(e)->ack_pending; j++) {
      uint32_t s = engine_rcv(e)->ack_queue[(engine_rcv(e)->ack_head + j) % RR_NET_MAX_REQUESTS], d = s - base;
      if (d >= 1 && d <= 32) more |= 1u << (d - 1);
      else rest[nrest++] = s;
    }
    engine_msg a = {.type = ENGINE_CTRL_ACK, .u.ack = {.seq = base, .more = more}};
    rr_status st = engine_post_msg(e, &a);
    if (st != RR_OK) return st == RR_AGAIN ? RR_OK : st;
    engine_rcv(e)->ack_head = 0;
    engine_rcv(e)->ack_pending = nrest;
    memcpy(engine_rcv(e)->ack_queue, rest, nrest * sizeof *rest);
    engine_rcv(e)->ack_since_ns = rr_now_ns();
  }
  engine_rcv(e)->ack_flush = 0;
  engine_rcv(e)->ack_due_ns = 0;
  return RR_OK;
}

int engine_recv_acks_due(const rr_engine *e) {
  if (!engine_rcv(e)->ack_pending) return 0;
  if (engine_rcv(e)->ack_flush) return 1;
  uint64_t now = rr_now_ns();
  return (engine_rcv(e)->ack_due_ns && now >= engine_rcv(e)->ack_due_ns) || now - engine_rcv(e)->ack_since_ns >= ACK_DEFER_NS;
}
