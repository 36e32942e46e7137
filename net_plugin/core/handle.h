/* The connection handle: what listen() writes and NCCL carries to the peer's
 * connect(). Layout (NCCL gives us 128 bytes; byte order is the host's, the
 * port in network order):
 *
 *   offset size  field
 *   0      4     magic   'R','R','H','1'
 *   4      1     version (1)
 *   5      1     naddrs  1..RR_HANDLE_MAX_ADDRS
 *   6      2     port    listener's TCP port, network byte order
 *   8      8     token   random per listen; every incoming connection must present it
 *   16     20*5  addrs   {family (4 = IPv4, 6 = IPv6), 3 reserved, 16 address bytes};
 *                        addrs[0] is the listening device, the rest the host's
 *                        other rails (failover targets)
 *   116    12    zero
 *
 * decode() rejects anything malformed with a message; nothing in a handle is
 * trusted beyond what it checks. */
#ifndef RERAIL_CORE_HANDLE_H
#define RERAIL_CORE_HANDLE_H
#include <stdint.h>
#include <sys/socket.h>

#include "net_core.h"

#define RR_HANDLE_MAGIC 0x31485252u /* "RRH1" little endian */
#define RR_HANDLE_VERSION 1
#define RR_HANDLE_MAX_ADDRS 5

typedef struct rr_handle_addr {
  uint8_t family;
  uint8_t reserved[3];
  uint8_t addr[16];
} rr_handle_addr;

typedef struct rr_handle {
  uint32_t magic;
  uint8_t version;
  uint8_t naddrs;
  uint16_t port;
  uint64_t token;
  rr_handle_addr addrs[RR_HANDLE_MAX_ADDRS];
} rr_handle;

_Static_assert(sizeof(rr_handle) <= RR_NET_HANDLE_SIZE, "handle must fit NCCL's 128 bytes");

/* Decoded form. */
typedef struct rr_peer_addrs {
  uint64_t token;
  int naddrs;
  struct sockaddr_storage addrs[RR_HANDLE_MAX_ADDRS]; /* port filled in */
  socklen_t addrlens[RR_HANDLE_MAX_ADDRS];
} rr_peer_addrs;

/* Encode into out (RR_NET_HANDLE_SIZE bytes, zero-filled). addrs' ports are ignored. */
rr_status rr_handle_encode(const struct sockaddr_storage *addrs, int naddrs, uint16_t port,
                           uint64_t token, void *out);
rr_status rr_handle_decode(const void *in, rr_peer_addrs *out);

#endif
