/* tcp_pair_fixture.h's endpoint. */
#include "tcp_pair_fixture.h"

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
