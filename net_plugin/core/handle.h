/* The connection handle: what listen() writes and NCCL carries to the peer's
 * connect(). NCCL gives us 128 bytes; every field is encoded byte by byte
 * (multi-byte integers little-endian, the port big-endian as on the wire):
 *
 *   offset size  field
 *   0      4     magic   'R','R','H','3'
 *   4      1     version (4)
 *   5      1     naddrs  entries, 1..RR_HANDLE_MAX_ADDRS
 *   6      1     family  4 = IPv4, 6 = IPv6 (every address has it)
 *   7      1     nips    distinct addresses, 1..RR_HANDLE_MAX_IPS
 *   8      32    secret  random per listen; a connector proves it holds it
 *                        (challenge-response, setup_wire.h), never sends it
 *   40     2     port    every listening address has the same port
 *   42     16*4  ips     the addresses listened on (IPv4: first 4 bytes)
 *   106    2*8   entries one per listener device a rail may reach, each
 *                        (ip index | RR_HANDLE_OWN_IP, listener device);
 *                        entry 0 is the listening device, the rest the
 *                        failover targets. A TCP device's entry has its own
 *                        address (its setup sockets are its data path); the
 *                        entries of RDMA devices share the out-of-band
 *                        address, and a HELLO names the device it is for
 *   122    6     process random per listening process, the same in every
 *                        handle it writes, never all zero: connect() counts
 *                        an authenticated answer from any listener of that
 *                        process as progress of every connection to it
 *                        (peer_progress.h)
 *
 * The handle carries a secret: NCCL passes it through its bootstrap only.
 * decode() rejects anything malformed with a message; nothing in a handle is
 * trusted beyond what it checks (the listener checks a HELLO's device
 * against its own list). */
#ifndef RERAIL_CORE_HANDLE_H
#define RERAIL_CORE_HANDLE_H
#include <stdint.h>
#include <sys/socket.h>

#include "net_core.h"
#include "setup_wire.h"

#define RR_HANDLE_VERSION 4
#define RR_HANDLE_MAX_ADDRS 8
#define RR_HANDLE_MAX_IPS 4
#define RR_HANDLE_PROCESS_LEN 6
#define RR_HANDLE_LEN 128
#define RR_HANDLE_OWN_IP 0x80u        /* entry flag: the device's own address (setup is data) */

_Static_assert(RR_HANDLE_LEN <= RR_NET_HANDLE_SIZE, "handle must fit NCCL's 128 bytes");
_Static_assert(RR_HANDLE_LEN == 42 + 16 * RR_HANDLE_MAX_IPS + 2 * RR_HANDLE_MAX_ADDRS + RR_HANDLE_PROCESS_LEN,
               "handle layout");
_Static_assert(RR_HANDLE_MAX_ADDRS == RR_HS_MAX_ADDRS, "a COMMIT names any of the handle's addresses");

/* One entry as listen() describes it. */
typedef struct rr_handle_entry {
  struct sockaddr_storage addr;       /* where its setup sockets go (port ignored) */
  uint8_t dev;                        /* the listener's device */
  uint8_t own_ip;                     /* addr is the device's own (a TCP device) */
} rr_handle_entry;

/* Decoded form: entry i is addrs[i] (port filled in), dev[i], own_ip[i]. */
typedef struct rr_peer_addrs {
  uint8_t secret[RR_HS_SECRET_LEN];
  uint8_t process[RR_HANDLE_PROCESS_LEN]; /* the listening process (not all zero) */
  int naddrs;
  struct sockaddr_storage addrs[RR_HANDLE_MAX_ADDRS];
  socklen_t addrlens[RR_HANDLE_MAX_ADDRS];
  uint8_t dev[RR_HANDLE_MAX_ADDRS];
  uint8_t own_ip[RR_HANDLE_MAX_ADDRS];
} rr_peer_addrs;

/* Encode into out (RR_NET_HANDLE_SIZE bytes, zero-filled). All addresses
 * must have one family, at most RR_HANDLE_MAX_IPS distinct ones; entries
 * past RR_HANDLE_MAX_ADDRS are left out; process must not be all zero. */
rr_status rr_handle_encode(const rr_handle_entry *e, int n, uint16_t port,
                           const uint8_t secret[RR_HS_SECRET_LEN],
                           const uint8_t process[RR_HANDLE_PROCESS_LEN], void *out);
/* Pure: bytes in, addresses or a reason out (why may be NULL). */
rr_status rr_handle_parse(const void *in, rr_peer_addrs *out, const char **why);
/* rr_handle_parse, and a warning naming the reason. */
rr_status rr_handle_decode(const void *in, rr_peer_addrs *out);

#endif
