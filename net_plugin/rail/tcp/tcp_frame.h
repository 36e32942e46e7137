/* Wire format of the TCP rail (both directions, host byte order: both ends of
 * a connection run the same build on the same architecture, checked by the
 * connection hello). */
#ifndef RERAIL_TCP_FRAME_H
#define RERAIL_TCP_FRAME_H
#include <stdint.h>

enum tcp_frame_type { TCP_FRAME_WRITE = 1, TCP_FRAME_CTRL = 2 };

typedef struct tcp_frame_hdr {
  uint8_t type;      /* enum tcp_frame_type */
  uint8_t flags;     /* none yet; must be 0 */
  uint16_t fence;    /* WRITE: the writer's fence tag (rr_write_wr.fence) */
  uint32_t len;      /* payload bytes following the header */
  uint32_t imm;      /* WRITE: immediate data */
  uint32_t rkey;     /* WRITE: registration the payload lands in */
  uint64_t raddr;    /* WRITE: receiver virtual address of the first byte */
} tcp_frame_hdr;

_Static_assert(sizeof(tcp_frame_hdr) == 24, "TCP frame header is 24 bytes on the wire");

#endif
