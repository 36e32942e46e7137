/* What one TCP socket has sent and retransmitted, and what it has in flight
 * unacknowledged (TCP_INFO), for the TCP rail's path_stats op. A file of its own: the fields it reads
 * (tcpi_bytes_sent, tcpi_bytes_retrans, Linux 4.19) are declared in
 * <linux/tcp.h>, whose struct tcp_info clashes with the older one
 * <netinet/tcp.h> gives the rest of the rail. */
#include "rail_tcp.h"

#include <linux/tcp.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>

rr_status tcp_socket_path_stats(int fd, uint64_t *sent_bytes, uint64_t *retrans_bytes, uint32_t *unacked) {
  struct tcp_info ti;
  memset(&ti, 0, sizeof ti);
  socklen_t len = sizeof ti;
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0) return RR_ERR_SYSTEM;
  /* A kernel older than the fields fills less: it cannot tell. */
  if (len < offsetof(struct tcp_info, tcpi_bytes_retrans) + sizeof ti.tcpi_bytes_retrans)
    return RR_ERR_UNSUPPORTED;
  *sent_bytes = ti.tcpi_bytes_sent;
  *retrans_bytes = ti.tcpi_bytes_retrans;
  *unacked = ti.tcpi_unacked;
  return RR_OK;
}
