/* The engine's own protocol: control messages and the immediate-data layout
 * of chunk writes. Both ends run the same version (checked at connection). */
#ifndef RERAIL_ENGINE_WIRE_H
#define RERAIL_ENGINE_WIRE_H
#include <stdint.h>

#include "net_core.h"

enum engine_ctrl_type {
  ENGINE_CTRL_CTS = 1, /* receiver -> sender: a posted receive (clear to send) */
  ENGINE_CTRL_ACK = 2, /* receiver -> sender: every chunk of a receive has landed */
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

static inline uint32_t engine_cts_len(int n) {
  return (uint32_t)(sizeof(engine_cts) - sizeof(engine_cts_entry) * (RR_NET_MAX_RECVS - n));
}

/* Immediate data of a chunk write:
 *   [31:28] epoch  [27:23] slot  [22:20] sub-receive  [19] last chunk
 *   [18] ack now   [17:0] chunk index
 * The receiver derives a message's size from its last chunk:
 * size = index * chunk_size + length of that chunk.
 * "Ack now" is set when the sender holds NCCL's buffer until the ack (it did
 * not copy the message into a bounce buffer): the receiver then sends the ack
 * at once instead of letting it ride with its next control message. */
#define IMM_CHUNK_BITS 18
#define IMM_MAX_CHUNKS (1u << IMM_CHUNK_BITS)

static inline uint32_t imm_encode(uint32_t epoch, uint32_t slot, uint32_t sub, int last,
                                  int ack_now, uint32_t chunk) {
  return (epoch & 0xf) << 28 | (slot & 0x1f) << 23 | (sub & 0x7) << 20 | (last ? 1u : 0u) << 19 |
         (ack_now ? 1u : 0u) << 18 | (chunk & (IMM_MAX_CHUNKS - 1));
}
static inline int imm_ack_now(uint32_t imm) { return (imm >> 18) & 1; }
static inline uint32_t imm_epoch(uint32_t imm) { return imm >> 28; }
static inline uint32_t imm_slot(uint32_t imm) { return (imm >> 23) & 0x1f; }
static inline uint32_t imm_sub(uint32_t imm) { return (imm >> 20) & 0x7; }
static inline int imm_last(uint32_t imm) { return (imm >> 19) & 1; }
static inline uint32_t imm_chunk(uint32_t imm) { return imm & (IMM_MAX_CHUNKS - 1); }

_Static_assert(RR_NET_MAX_REQUESTS == 32, "slot field is 5 bits");
_Static_assert(RR_NET_MAX_RECVS == 8, "sub-receive field is 3 bits");

#endif
