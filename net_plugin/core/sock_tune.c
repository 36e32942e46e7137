/* Socket options every setup and data socket gets (TCP_NODELAY, and the
 * operator's congestion control for the rails). */
#include "core_internal.h"
#include "rr_log.h"
#include "rr_params.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>

rr_status rr_sock_tune(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) return RR_ERR_SYSTEM;
  /* RERAIL_TCP_CONGESTION: e.g. BBR paces on a host whose qdisc does not, and
   * on a fast local link that can halve a rail's throughput (bench/RESULTS.md):
   * an operator may pick another algorithm for the rails alone. One that the
   * kernel lacks or does not allow is reported once; the socket keeps the
   * system's. */
  const char *cc = rr_params_get()->tcp_congestion;
  if (cc[0] && setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) != 0) {
    static atomic_flag warned = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&warned))
      RR_WARN("RERAIL_TCP_CONGESTION=%s: the kernel refuses it (%s); the rails keep the system's congestion "
              "control (see net.ipv4.tcp_available_congestion_control and tcp_allowed_congestion_control)",
              cc, strerror(errno));
  }
  return RR_OK;
}
