/* Wire format of the TCP rail (both directions, host byte order: both ends of
 * a connection run the same build on the same architecture, checked by the
 * connection hello). Every field is checked before anything is written:
 * an unknown type, a flag, a control frame over RR_RAIL_CTRL_MAX or a drain
 * marker with a payload fails the rail (RR_ERR_PROTOCOL), and the engine
 * decides where a write's payload goes (or refuses it). */
#ifndef RERAIL_TCP_FRAME_H
#define RERAIL_TCP_FRAME_H
#include <stdint.h>

enum tcp_frame_type {
  TCP_FRAME_WRITE = 1,   /* a one-sided write: header, then len payload bytes */
  TCP_FRAME_CTRL = 2,    /* a control message of len bytes */
  TCP_FRAME_DRAIN = 3,   /* a drain barrier: imm = epoch, no payload; sent on every stream */
};

typedef struct tcp_frame_hdr {
  uint8_t type;      /* enum tcp_frame_type */
  uint8_t flags;     /* none yet; must be 0 */
  uint16_t fence;    /* WRITE: the writer's fence tag (rr_write_wr.fence) */
  uint32_t len;      /* payload bytes following the header */
  uint32_t imm;      /* WRITE: immediate data; DRAIN: the epoch */
  uint32_t rkey;     /* WRITE: the key the writer names the receive buffer by */
  uint64_t raddr;    /* WRITE: receiver address of the first byte (checked, never used) */
} tcp_frame_hdr;

_Static_assert(sizeof(tcp_frame_hdr) == 24, "TCP frame header is 24 bytes on the wire");

#endif
