/* The engine's own protocol: control messages and the immediate-data layout
 * of chunk writes. Both ends run the same version (checked at connection).
 *
 * Control messages are truthful whenever they arrive (a late CTS or ACK from
 * a rail that came back still states a fact), except the failover messages,
 * which carry the epoch they belong to and are ignored when stale. */
#ifndef RERAIL_ENGINE_WIRE_H
#define RERAIL_ENGINE_WIRE_H
#include <stdint.h>

#include "net_core.h"

enum engine_ctrl_type {
  ENGINE_CTRL_CTS = 1,         /* receiver -> sender: a posted receive (clear to send) */
  ENGINE_CTRL_ACK = 2,         /* receiver -> sender: every chunk of a receive has landed */
  ENGINE_CTRL_PROBE = 3,       /* either way: proves a rail works (the peer ignores it) */
  ENGINE_CTRL_FAIL = 4,        /* either way: rails I consider down; from the sender, "roll back" */
  ENGINE_CTRL_RESUME_SLOT = 5, /* receiver -> sender: one outstanding receive after a rollback */
  ENGINE_CTRL_RESUME_END = 6,  /* receiver -> sender: rollback complete, carry on */
};

typedef struct engine_cts_entry {
  int32_t tag;
  uint32_t rkey;
  uint64_t addr;
  uint64_t size;       /* posted size: the most the sender may write */
} engine_cts_entry;

typedef struct engine_cts {
  uint8_t type;
  uint8_t n;           /* grouped receives, 1..RR_NET_MAX_RECVS */
  uint16_t reserved;
  uint32_t seq;        /* receive sequence number; slot = seq % RR_NET_MAX_REQUESTS */
  engine_cts_entry e[RR_NET_MAX_RECVS];
} engine_cts;

typedef struct engine_ack {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t seq;
} engine_ack;

typedef struct engine_probe {
  uint8_t type;
  uint8_t rail;
  uint16_t reserved;
  uint32_t reserved2;
} engine_probe;

typedef struct engine_fail {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t epoch;      /* the sender of this message's epoch */
  uint32_t down_mask;  /* rails (bit per rail index) the sender of this message sees down */
  uint32_t reserved2;
} engine_fail_msg;

/* After a rollback to epoch `epoch`, one per receive that is posted and not
 * complete: its clear-to-send again (it may have been lost with the rail) and,
 * per sub-receive, the chunks held: every chunk below prefix[i] has landed;
 * the sender replays from there. */
typedef struct engine_resume_slot {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t epoch;
  uint32_t prefix[RR_NET_MAX_RECVS];
  engine_cts cts;
} engine_resume_slot;

/* Ends a rollback: every receive before recv_seq that no RESUME_SLOT named
 * is complete (its ACK may have been lost). */
typedef struct engine_resume_end {
  uint8_t type;
  uint8_t reserved[3];
  uint32_t epoch;
  uint32_t recv_seq;
  uint32_t reserved2;
} engine_resume_end;

static inline uint32_t engine_cts_len(int n) {
  return (uint32_t)(sizeof(engine_cts) - sizeof(engine_cts_entry) * (RR_NET_MAX_RECVS - n));
}

/* Immediate data of a chunk write:
 *   [31:28] epoch (low 4 bits)  [27:23] slot  [22:20] sub-receive  [19] last chunk
 *   [18] ack now   [17:0] chunk index
 * The receiver derives a message's size from its last chunk:
 * size = index * chunk_size + length of that chunk.
 * "Ack now" is set when the sender holds NCCL's buffer until the ack (it did
 * not copy the message into a bounce buffer): the receiver then sends the ack
 * at once instead of letting it ride with its next control message.
 * The epoch fences replays: the receiver drops writes of any other epoch. A
 * write cannot be 16 epochs old: fencing drains every rail at each change. */
#define IMM_CHUNK_BITS 18
#define IMM_MAX_CHUNKS (1u << IMM_CHUNK_BITS)

static inline uint32_t imm_encode(uint32_t epoch, uint32_t slot, uint32_t sub, int last,
                                  int ack_now, uint32_t chunk) {
  return (epoch & 0xf) << 28 | (slot & 0x1f) << 23 | (sub & 0x7) << 20 | (last ? 1u : 0u) << 19 |
         (ack_now ? 1u : 0u) << 18 | (chunk & (IMM_MAX_CHUNKS - 1));
}
static inline uint32_t imm_epoch(uint32_t imm) { return imm >> 28; }
static inline uint32_t imm_slot(uint32_t imm) { return (imm >> 23) & 0x1f; }
static inline uint32_t imm_sub(uint32_t imm) { return (imm >> 20) & 0x7; }
static inline int imm_last(uint32_t imm) { return (imm >> 19) & 1; }
static inline int imm_ack_now(uint32_t imm) { return (imm >> 18) & 1; }
static inline uint32_t imm_chunk(uint32_t imm) { return imm & (IMM_MAX_CHUNKS - 1); }

_Static_assert(RR_NET_MAX_REQUESTS == 32, "slot field is 5 bits");
_Static_assert(RR_NET_MAX_RECVS == 8, "sub-receive field is 3 bits");
_Static_assert(sizeof(engine_resume_slot) <= 512, "fits a rail control message");

#endif
