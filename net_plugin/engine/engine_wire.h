/* The engine's own protocol on the wire: control messages and the
 * immediate-data layout of chunk writes (docs/protocol.md says why each rule
 * holds).
 *
 * Control messages are encoded little-endian field by field (never a struct
 * copied onto the wire) and decoded into the host structs below with every
 * length, count and reserved field checked: a message that fails decoding is
 * a protocol violation of the rail that carried it, never of the job.
 *
 *   header     type u8 | 0 u8 | 0 u16                                  4 bytes
 *   CTS        hdr | seq u32 | n u8 | nrails u8 | 0 u16 | n x entry
 *              entry: tag i32 | flags u32 | addr u64 | size u64 | nrails x rkey u32
 *   ACK        hdr | seq u32 | more u32
 *   PROBE      hdr | rail u32
 *   FAIL, DOWN hdr | epoch u32 | down_mask u32 | degraded_mask u32 | local_mask u32
 *              (a peer before degraded rails sends the first two only: both masks 0)
 *   RESUME_SLOT hdr | epoch u32 | n x prefix u32 | CTS body (from seq on)
 *   RESUME_END hdr | epoch u32 | recv_seq u32 | slot_mask u32
 *   BYE        hdr | seq u32
 *   PLACED     hdr | seq u32 | sub u8 | 0 u8 | 0 u16 | size u64 */
#ifndef RERAIL_ENGINE_WIRE_H
#define RERAIL_ENGINE_WIRE_H
#include <stddef.h>
#include <stdint.h>

#include "net_core.h"
#include "rr_status.h"

#define RR_MAX_RAILS 8

enum engine_ctrl_type {
  ENGINE_CTRL_CTS = 1,         /* receiver -> sender: a posted receive (clear to send) */
  ENGINE_CTRL_ACK = 2,         /* receiver -> sender: every chunk of a receive has landed */
  ENGINE_CTRL_PROBE = 3,       /* either way: proves a rail works (the peer ignores it) */
  /* receiver -> sender: "I moved to epoch E (or am in it); these rails are down".
   * sender -> receiver: "I lost something while in epoch E (or wait to leave
   * it); these rails are down": the receiver rolls back when E is its
   * current epoch and announces its current rollback again when E is older. */
  ENGINE_CTRL_FAIL = 4,
  ENGINE_CTRL_RESUME_SLOT = 5, /* receiver -> sender: one outstanding receive after a rollback */
  ENGINE_CTRL_RESUME_END = 6,  /* receiver -> sender: the announcement of a rollback is complete */
  /* sender -> receiver: "these rails are down here" and nothing more (rails
   * that failed while carrying no traffic; repeated while any stays down). */
  ENGINE_CTRL_DOWN = 7,
  /* either way: "I am closing in order; everything I owe you went before
   * this" (a receiver's acks, a sender's messages). seq: the sender's next
   * send sequence number, the receiver's next receive. The rails that close
   * next are the end of the connection, not a failure: nothing is rolled
   * back or reopened (docs/failover.md, "Orderly close"). */
  ENGINE_CTRL_BYE = 8,
  /* sender -> receiver, after a rollback: "every chunk of sub-receive sub of
   * receive seq (size bytes) is placed in your memory": its writes completed
   * here on rails whose completion means placement, and NCCL may already
   * have its buffer back, so it is never sent again (docs/protocol.md,
   * invariant 8). */
  ENGINE_CTRL_PLACED = 9,
  ENGINE_CTRL_NTYPES
};

/* Clear-to-send entry flags. NO_CPU: the buffer is GPU memory (registered
 * as NCCL_PTR_CUDA or NCCL_PTR_DMABUF): only a NIC that registered it may
 * write into it, so no eager copy lands there (the receiver sinks it and the
 * sender, seeing this flag, sends the message again as an ordinary write on
 * a rail whose key for it is not 0). Both ends decide from this one bit. */
#define ENGINE_CTS_NO_CPU 0x1u
#define ENGINE_CTS_FLAGS ENGINE_CTS_NO_CPU

typedef struct engine_cts_entry {
  int32_t tag;
  uint32_t flags;              /* ENGINE_CTS_* */
  uint64_t addr;               /* receiver address of the buffer */
  uint64_t size;               /* posted size: the most the sender may write */
  uint32_t rkey[RR_MAX_RAILS]; /* the buffer's key on every rail's NIC, by rail index */
} engine_cts_entry;

typedef struct engine_cts {
  uint32_t seq;                /* receive sequence number; slot = seq % RR_NET_MAX_REQUESTS */
  uint8_t n;                   /* grouped receives, 1..RR_NET_MAX_RECVS */
  uint8_t nrails;              /* rkeys per entry: the connection's rail count */
  engine_cts_entry e[RR_NET_MAX_RECVS];
} engine_cts;

typedef struct engine_msg {
  uint8_t type;                /* enum engine_ctrl_type */
  union {
    engine_cts cts;            /* CTS */
    struct {
      uint32_t seq;            /* receive seq is complete ... */
      uint32_t more;           /* ... and so is seq + 1 + i for every bit i */
    } ack;
    uint32_t probe_rail;       /* PROBE */
    uint32_t bye_seq;          /* BYE */
    struct {
      uint32_t seq;            /* the receive */
      uint8_t sub;             /* its sub-receive (< RR_NET_MAX_RECVS) */
      uint64_t size;           /* the message's bytes, all of them placed */
    } placed;                  /* PLACED */
    struct {
      uint32_t epoch;
      uint32_t down_mask;      /* bit per rail index */
      /* Of down_mask: rails the writer demoted (up, but delivering a fraction
       * of their rate): kept connected and probed, not reopened. */
      uint32_t degraded_mask;
      /* Of down_mask: rails whose fault the writer places at its own end
       * (its NIC's link is down, or that NIC fails towards every peer): the
       * reader classifies them as the peer's fault (docs/failover.md). */
      uint32_t local_mask;
    } fail;
    struct {
      uint32_t epoch;
      uint32_t prefix[RR_NET_MAX_RECVS]; /* per sub-receive: chunks [0, prefix) have landed */
      engine_cts cts;          /* the receive's clear-to-send again (it may have been lost) */
    } slot;
    struct {
      uint32_t epoch;
      uint32_t recv_seq;       /* receives before it that slot_mask does not name are complete */
      uint32_t slot_mask;      /* the slots this rollback's RESUME_SLOTs named */
    } end;
  } u;
} engine_msg;

/* Sequence numbers and epochs wrap: compare them the way TCP does. */
static inline int seq_before(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }

/* Encode into buf (RR_RAIL_CTRL_MAX bytes); returns the length, 0 when the
 * message cannot be encoded (a bug: counts out of range). */
uint32_t engine_msg_encode(const engine_msg *m, uint8_t *buf, uint32_t cap);
/* Decode and validate; nrails is the connection's rail count (a CTS must
 * carry exactly that many keys). RR_ERR_PROTOCOL with *why set when the
 * bytes are not a valid message. */
rr_status engine_msg_decode(const void *buf, uint32_t len, int nrails, engine_msg *m,
                            const char **why);

/* Largest encoded message. */
#define ENGINE_CTS_HDR 12u
#define ENGINE_CTS_ENTRY(nrails) (24u + 4u * (uint32_t)(nrails))
#define ENGINE_MSG_MAX (8u + 4u * RR_NET_MAX_RECVS + ENGINE_CTS_HDR - 4u + \
                        RR_NET_MAX_RECVS * ENGINE_CTS_ENTRY(RR_MAX_RAILS))
_Static_assert(ENGINE_MSG_MAX <= 512, "every control message fits a rail control message");

/* Immediate data of a write of chunks (a group: consecutive chunks of one
 * sub-receive that went on one rail in one pass, docs/protocol.md "Group
 * writes"):
 *   [31:28] epoch (low 4 bits)  [27:23] slot  [22:20] sub-receive
 *   [19] last chunk  [18] ack now  [17] split  [16:0] where the group is
 * Whole (split 0): the write carries the group's bytes itself, and [16:0]
 *   is its first chunk f. Its length L says how many chunks it holds:
 *   max(1, ceil(L / chunk_size)), every one full but the message's last.
 *   One chunk per write is the case L <= chunk_size, as before groups.
 * Split (split 1, adaptive routing): the group's q full chunks went first
 *   as a plain RDMA write, which the receiver never sees complete; this
 *   write carries what is left, r < chunk_size bytes (the message's partial
 *   last chunk, or nothing), and completes the group. [16:11] is q - 1,
 *   [10:0] f: a split group starts below chunk IMM_SPLIT_MAX_FIRST and holds
 *   at most IMM_SPLIT_MAX_FULL full chunks (else it goes whole).
 * Either way the receiver knows the group's chunks and bytes from the
 * immediate and the length alone, and derives a message's size from its
 * last group: size = f * chunk_size + bytes of the group.
 * "Ack now" is set when the sender holds NCCL's buffer until the ack (it did
 * not copy the message into a bounce buffer): the receiver then sends the ack
 * at once instead of letting it ride with its next control message.
 * The epoch invalidates replays: the receiver drops writes of any other epoch. A
 * write cannot be 16 epochs old: at each rollback the rails are invalidated or
 * drained before a receive completes. */
#define IMM_CHUNK_BITS 17
#define IMM_MAX_CHUNKS (1u << IMM_CHUNK_BITS)
#define IMM_SPLIT (1u << 17)
#define IMM_SPLIT_FIRST_BITS 11
#define IMM_SPLIT_MAX_FIRST (1u << IMM_SPLIT_FIRST_BITS)
#define IMM_SPLIT_MAX_FULL (1u << (IMM_CHUNK_BITS - IMM_SPLIT_FIRST_BITS))

static inline uint32_t imm_encode(uint32_t epoch, uint32_t slot, uint32_t sub, int last,
                                  int ack_now, uint32_t chunk) {
  return (epoch & 0xf) << 28 | (slot & 0x1f) << 23 | (sub & 0x7) << 20 | (last ? 1u : 0u) << 19 |
         (ack_now ? 1u : 0u) << 18 | (chunk & (IMM_MAX_CHUNKS - 1));
}
/* A split group: q (1..IMM_SPLIT_MAX_FULL) full chunks from first
 * (< IMM_SPLIT_MAX_FIRST) went before as a plain write. */
static inline uint32_t imm_encode_split(uint32_t epoch, uint32_t slot, uint32_t sub, int last, int ack_now,
                                        uint32_t first, uint32_t q) {
  return imm_encode(epoch, slot, sub, last, ack_now, 0) | IMM_SPLIT |
         ((q - 1) & (IMM_SPLIT_MAX_FULL - 1)) << IMM_SPLIT_FIRST_BITS | (first & (IMM_SPLIT_MAX_FIRST - 1));
}
static inline uint32_t imm_epoch(uint32_t imm) { return imm >> 28; }
static inline uint32_t imm_slot(uint32_t imm) { return (imm >> 23) & 0x1f; }
static inline uint32_t imm_sub(uint32_t imm) { return (imm >> 20) & 0x7; }
static inline int imm_last(uint32_t imm) { return (imm >> 19) & 1; }
static inline int imm_ack_now(uint32_t imm) { return (imm >> 18) & 1; }
static inline int imm_split(uint32_t imm) { return (imm & IMM_SPLIT) != 0; }
/* The group's first chunk, either shape. */
static inline uint32_t imm_chunk(uint32_t imm) {
  return imm_split(imm) ? imm & (IMM_SPLIT_MAX_FIRST - 1) : imm & (IMM_MAX_CHUNKS - 1);
}
/* Split only: the full chunks that went before as a plain write. */
static inline uint32_t imm_split_full(uint32_t imm) {
  return ((imm >> IMM_SPLIT_FIRST_BITS) & (IMM_SPLIT_MAX_FULL - 1)) + 1;
}

/* What a write of len bytes with immediate imm carries: chunks
 * [*first, *first + *n) and *bytes bytes of them. 0 when the shape is
 * impossible whatever was posted (a split write with a full chunk or more
 * behind its bulk); the receiver checks the rest against its receive. */
static inline int imm_group(uint32_t imm, uint32_t len, size_t chunk_size, uint32_t *first, uint32_t *n,
                            uint64_t *bytes) {
  *first = imm_chunk(imm);
  if (imm_split(imm)) {
    if (len >= chunk_size) return 0;
    uint32_t q = imm_split_full(imm);
    *n = q + (len > 0);
    *bytes = (uint64_t)q * chunk_size + len;
    return 1;
  }
  *n = len ? (uint32_t)((len + chunk_size - 1) / chunk_size) : 1;
  *bytes = len;
  return 1;
}

_Static_assert(RR_NET_MAX_REQUESTS == 32, "slot field is 5 bits; RESUME_END's slot mask is 32 bits");
_Static_assert(RR_NET_MAX_RECVS == 8, "sub-receive field is 3 bits");
_Static_assert(RR_MAX_RAILS <= 32, "rail masks are 32 bits");

#endif
