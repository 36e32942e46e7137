/* The connection handle: what listen() writes and NCCL carries to the peer's
 * connect(). NCCL gives us 128 bytes; every field is encoded byte by byte
 * (multi-byte integers little-endian, the port big-endian as on the wire):
 *
 *   offset size  field
 *   0      4     magic   'R','R','H','2'
 *   4      1     version (2)
 *   5      1     naddrs  1..RR_HANDLE_MAX_ADDRS
 *   6      1     family  4 = IPv4, 6 = IPv6 (every address has it)
 *   7      1     zero
 *   8      32    secret  random per listen; a connector proves it holds it
 *                        (challenge-response, setup_wire.h), never sends it
 *   40     2     port    every listening address has the same port
 *   42     16*5  addrs   the listener's pooled NICs of that family, one
 *                        listening socket each (IPv4: first 4 bytes);
 *                        addrs[0] is the listening device, the rest the
 *                        failover targets
 *   122    6     zero
 *
 * The handle carries a secret: NCCL passes it through its bootstrap only.
 * decode() rejects anything malformed with a message; nothing in a handle is
 * trusted beyond what it checks. */
#ifndef RERAIL_CORE_HANDLE_H
#define RERAIL_CORE_HANDLE_H
#include <stdint.h>
#include <sys/socket.h>

#include "net_core.h"
#include "setup_wire.h"

#define RR_HANDLE_VERSION 2
#define RR_HANDLE_MAX_ADDRS 5
#define RR_HANDLE_LEN 122

_Static_assert(RR_HANDLE_LEN <= RR_NET_HANDLE_SIZE, "handle must fit NCCL's 128 bytes");
_Static_assert(RR_HANDLE_MAX_ADDRS == RR_HS_MAX_ADDRS, "a COMMIT names any of the handle's addresses");

/* Decoded form. */
typedef struct rr_peer_addrs {
  uint8_t secret[RR_HS_SECRET_LEN];
  int naddrs;
  struct sockaddr_storage addrs[RR_HANDLE_MAX_ADDRS]; /* port filled in */
  socklen_t addrlens[RR_HANDLE_MAX_ADDRS];
} rr_peer_addrs;

/* Encode into out (RR_NET_HANDLE_SIZE bytes, zero-filled). All addrs must
 * have one family; their ports are ignored. */
rr_status rr_handle_encode(const struct sockaddr_storage *addrs, int naddrs, uint16_t port,
                           const uint8_t secret[RR_HS_SECRET_LEN], void *out);
/* Pure: bytes in, addresses or a reason out (why may be NULL). */
rr_status rr_handle_parse(const void *in, rr_peer_addrs *out, const char **why);
/* rr_handle_parse, and a warning naming the reason. */
rr_status rr_handle_decode(const void *in, rr_peer_addrs *out);

#endif
