/* Wire format of the TCP rail (both directions): a 24-byte header, its fields
 * little-endian at fixed offsets, encoded and decoded field by field (never a
 * struct copied onto the wire). Every field is checked before anything is
 * written:
 * an unknown type or flag, a flag on anything but a write, a control frame over RR_RAIL_CTRL_MAX or a drain
 * marker with a payload fails the rail (RR_ERR_PROTOCOL), and the engine
 * decides where a write's payload goes (or refuses it). */
#ifndef RERAIL_TCP_FRAME_H
#define RERAIL_TCP_FRAME_H
#include <endian.h>
#include <stdint.h>
#include <string.h>

enum tcp_frame_type {
  TCP_FRAME_WRITE = 1,   /* a one-sided write: header, then len payload bytes */
  TCP_FRAME_CTRL = 2,    /* a control message of len bytes */
  TCP_FRAME_DRAIN = 3,   /* a drain barrier: imm = epoch, no payload; sent on every stream */
};

typedef struct tcp_frame_hdr {
  uint8_t type;      /* enum tcp_frame_type */
  uint8_t flags;     /* WRITE: TCP_FRAME_F_*; others: 0 */
  uint16_t epoch_tag;    /* WRITE: the writer's epoch tag (rr_write_wr.epoch_tag) */
  uint32_t len;      /* payload bytes following the header */
  uint32_t imm;      /* WRITE: immediate data; DRAIN: the epoch */
  uint32_t rkey;     /* WRITE: the key the writer names the receive buffer by */
  uint64_t raddr;    /* WRITE: receiver address of the first byte (checked, never used) */
} tcp_frame_hdr;

/* An eager write (post_eager, rr_eager_wr): raddr carries what it names,
 * the receive's sequence number in its low 32 bits and the writer's known
 * one in its high 32, and rkey the message's tag; the receiver places it. */
#define TCP_FRAME_F_EAGER 0x1u
/* A probe (RR_WRITE_PROBE): filler that measures a demoted rail; the
 * receiver reads and forgets it. */
#define TCP_FRAME_F_PROBE 0x2u

/* Offsets on the wire: type 0, flags 1, epoch_tag 2, len 4, imm 8, rkey 12, raddr 16. */
#define TCP_FRAME_BYTES 24

static inline void tcp_frame_encode(const tcp_frame_hdr *h, uint8_t out[TCP_FRAME_BYTES]) {
  uint16_t epoch_tag = htole16(h->epoch_tag);
  uint32_t len = htole32(h->len), imm = htole32(h->imm), rkey = htole32(h->rkey);
  uint64_t raddr = htole64(h->raddr);
  out[0] = h->type;
  out[1] = h->flags;
  memcpy(out + 2, &epoch_tag, 2);
  memcpy(out + 4, &len, 4);
  memcpy(out + 8, &imm, 4);
  memcpy(out + 12, &rkey, 4);
  memcpy(out + 16, &raddr, 8);
}

static inline void tcp_frame_decode(const uint8_t in[TCP_FRAME_BYTES], tcp_frame_hdr *h) {
  uint16_t epoch_tag;
  uint32_t len, imm, rkey;
  uint64_t raddr;
  memcpy(&epoch_tag, in + 2, 2);
  memcpy(&len, in + 4, 4);
  memcpy(&imm, in + 8, 4);
  memcpy(&rkey, in + 12, 4);
  memcpy(&raddr, in + 16, 8);
  *h = (tcp_frame_hdr){.type = in[0], .flags = in[1], .epoch_tag = le16toh(epoch_tag), .len = le32toh(len),
                       .imm = le32toh(imm), .rkey = le32toh(rkey), .raddr = le64toh(raddr)};
}

#endif
