/* The verbs rail's control ring (verbs_ring.c): the memory a peer writes its
 * control messages into with plain RDMA WRITEs, one slot per message, and the
 * rules for reading a slot the NIC may be filling while it is read.
 *
 * A slot, little-endian:  stamp u32 | len u32 | ops u32 | credit u32 |
 * body[len] | 0-3 zero bytes | stamp u32 (the trailer, right behind the
 * body, 4-byte aligned so it is read in one load). The stamp is
 * the message's number on the endpoint (never 0, so a cleared slot reads
 * as empty); a message counts as arrived when its leading and trailing stamps
 * are both the one expected. The NIC may store a field a byte at a time, so
 * a leading stamp whose every byte is 0 or the expected stamp's byte in its
 * place is one still landing (empty); any other is not the expected one.
 * `ops` is how many receive-consuming requests (writes with immediate,
 * drains, NOPs) the writer had posted before it, so the reader can hold it
 * until it has delivered those. `credit` is how many of the reader's own
 * messages the writer has consumed from its ring.
 *
 * Behind the slots lies one credit word: the peer writes there how many of
 * our messages it has consumed when it has no message of its own to carry
 * the count. Pure code: no libibverbs call. */
#ifndef RERAIL_VERBS_RING_H
#define RERAIL_VERBS_RING_H
#include <stddef.h>
#include <stdint.h>

#include "rail.h"

/* Messages the peer may have written and we not yet consumed: twice our
 * SEND_SLOTS, so a writer that gets its slots back from completions is
 * held by credits only when we fall that far behind (credits come back
 * at half the ring). Every slot is pinned, 576 B each. */
#define VERBS_RING_SLOTS 64u
#define VERBS_RING_HDR 16u
/* Header, the largest body and the trailer, rounded up to cache lines. */
#define VERBS_RING_SLOT_BYTES ((VERBS_RING_HDR + RR_RAIL_CTRL_MAX + 4u + 63u) & ~63u)
#define VERBS_RING_CREDIT_OFF ((size_t)VERBS_RING_SLOTS * VERBS_RING_SLOT_BYTES)
#define VERBS_RING_BYTES (VERBS_RING_CREDIT_OFF + 64u)

/* The stamp of message number n (0-based, counted for ever): never 0. */
static inline uint32_t verbs_ring_stamp(uint64_t n) { return (uint32_t)(n % 0xffffffffu) + 1u; }
static inline uint32_t verbs_ring_trailer_off(uint32_t len) { return VERBS_RING_HDR + ((len + 3u) & ~3u); }
static inline size_t verbs_ring_slot_off(uint64_t n) { return (size_t)(n % VERBS_RING_SLOTS) * VERBS_RING_SLOT_BYTES; }

typedef struct verbs_ring_msg {
  uint32_t len;
  uint32_t ops;
  uint32_t credit;
  uint8_t body[RR_RAIL_CTRL_MAX];
} verbs_ring_msg;

/* Lay message number n out in `out` (a slot-sized buffer) as the peer's
 * slot will hold it; returns the bytes to write (header, body, trailer). */
uint32_t verbs_ring_encode(void *out, uint64_t n, uint32_t ops, uint32_t credit, const void *body, uint32_t len);

typedef enum verbs_ring_peek_result {
  VERBS_RING_EMPTY = 0,      /* nothing yet, or not all of it (its stamp included) has landed */
  VERBS_RING_READY = 1,      /* *m holds a copy of the message */
  VERBS_RING_BAD = -1,       /* a stamp that is not (part of) the expected one, or a length over the limit */
} verbs_ring_peek_result;

/* Look at the slot that must next hold message number n. The slot is the
 * peer's to write: every field is checked and the body copied out before
 * anyone acts on it (the peer could rewrite it while it is parsed). */
verbs_ring_peek_result verbs_ring_peek(const void *slot, uint64_t n, verbs_ring_msg *m);

/* After a message is consumed: zero what it occupied, so the next lap of the
 * ring finds an empty slot until the writer's next message lands. */
void verbs_ring_clear(void *slot, uint32_t len);

/* The credit word (a count the peer writes), read as it is now. */
uint32_t verbs_ring_credit_word(const void *ring);

/* ---- the reader: a peer's message judged against our own counts ----
 * Pure functions of the ring's bytes and this state (no libibverbs call), so
 * a fuzzer drives them as the rail does (test/fuzz/fuzz_verbs_ring.c). */
typedef struct verbs_ring_state {
  uint64_t rx_msgs;     /* messages consumed from our ring: the next due is number rx_msgs */
  uint32_t rx_ops;      /* ordered requests (writes, drains) delivered */
  uint32_t rx_last_ops; /* `ops` of the last message consumed: they never go back */
  /* How far a message's `ops` may be ahead of rx_ops: what the peer's send
   * queues and our receive queues can hold between them. */
  uint32_t max_ahead;
  uint64_t tx_msgs;     /* our messages written into the peer's ring */
  uint64_t tx_acked;    /* of those, consumed by the peer as far as we know */
} verbs_ring_state;

typedef enum verbs_ring_read_result {
  VERBS_RING_READ_EMPTY = 0,  /* nothing due yet, or not all of it has landed */
  VERBS_RING_READ_READY = 1,  /* *m is the next message, valid and due */
  VERBS_RING_READ_HELD = 2,   /* valid, but behind an ordered request not yet delivered */
  VERBS_RING_READ_MALFORMED = -1, /* a stamp that is not (part of) the expected one, or a length over the limit */
  VERBS_RING_READ_BAD_ORDER = -2, /* `ops` going back, or further ahead than any queue holds */
  VERBS_RING_READ_BAD_CREDIT = -3, /* credit for messages we never sent */
} verbs_ring_read_result;

/* The peer's count of our messages it has consumed (32 bits of it, from a
 * message's header or the credit word): 0 and *acked the new tx_acked (a
 * count older than s->tx_acked is stale and leaves it), or -1 when the
 * count claims messages never sent. */
int verbs_ring_credit(const verbs_ring_state *s, uint32_t consumed, uint64_t *acked);

/* Judge the slot of our ring (`ring`, VERBS_RING_BYTES) that must hold
 * message number s->rx_msgs. Neither the ring nor *s changes; only READY
 * and HELD fill *m. A negative result is the peer's fault: the caller fails
 * the endpoint and delivers nothing of it. */
verbs_ring_read_result verbs_ring_read(const void *ring, const verbs_ring_state *s, verbs_ring_msg *m);

/* Message m (READY from verbs_ring_read) is being delivered: its slot is
 * cleared, the counts move past it, the credit it carried is taken. */
void verbs_ring_consume(void *ring, verbs_ring_state *s, const verbs_ring_msg *m);

#endif
