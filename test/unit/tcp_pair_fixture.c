/* tcp_pair_fixture.h's endpoint. */
#include "tcp_pair_fixture.h"

#include "rail_tcp.h"

#include <sys/socket.h>
#include <unistd.h>

rr_rail_ep *tcp_pair_ep(rr_rail_dev *dev, rr_engine *e, int snd_buf, int *far) {
  int sv[2];
  *far = -1;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0) return NULL;
  rr_rail_ep *ep = NULL;
  if ((snd_buf > 0 && setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &snd_buf, sizeof snd_buf) != 0) ||
      dev->ops->ep_open(dev, &rr_engine_rail_events, e, &ep) != RR_OK) {
    close(sv[0]);
    close(sv[1]);
    return NULL;
  }
  int fds[1] = {sv[0]};
  rr_rail_connect_args args = {.fds = fds, .nfds = 1};
  if (ep->ops->ep_connect(ep, &args) != RR_OK) {
    ep->ops->destroy(ep);
    close(sv[1]);
    return NULL;
  }
  *far = sv[1];
  return ep;
}

tcp_pair_fake_stats tcp_pair_stats;
static rr_rail_ops stats_ops; /* the TCP rail's, path_stats made up */

static rr_status made_up_path_stats(rr_rail_ep *ep, rr_rail_path_stats *out) {
  (void)ep;
  if (!tcp_pair_stats.known) return RR_ERR_INVALID;
  *out = (rr_rail_path_stats){.sent_bytes = 1u << 20, .retrans_bytes = 0, .unacked = tcp_pair_stats.unacked};
  return RR_OK;
}

void tcp_pair_stats_reset(void) {
  tcp_pair_stats = (tcp_pair_fake_stats){0};
}

rr_rail_ep *tcp_pair_ep_stats(rr_rail_dev *dev, rr_engine *e, int snd_buf, int *far) {
  rr_rail_ep *ep = tcp_pair_ep(dev, e, snd_buf, far);
  if (!ep) return NULL;
  stats_ops = rr_tcp_rail_ops;
  stats_ops.path_stats = made_up_path_stats;
  ep->ops = &stats_ops;
  return ep;
}
