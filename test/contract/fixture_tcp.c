/* The TCP rail under the contract: two devices, and endpoints connected by
 * two loopback TCP connections (two streams, so that writes spread over
 * streams and drains wait for every stream), handed over as the core hands
 * its setup sockets. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rail_contract.h"
#include "rail_tcp.h"

#define STREAMS 2

/* n connected loopback TCP pairs, non-blocking, as the core's setup leaves them. */
static rr_status tcp_pairs(int n, int *a, int *b) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  if (l < 0) return RR_ERR_SYSTEM;
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  if (bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, n) != 0 ||
      getsockname(l, (struct sockaddr *)&sa, &sl) != 0) {
    close(l);
    return RR_ERR_SYSTEM;
  }
  for (int i = 0; i < n; i++) {
    a[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (a[i] < 0 || connect(a[i], (struct sockaddr *)&sa, sizeof sa) != 0 || (b[i] = accept(l, NULL, NULL)) < 0) {
      close(l);
      return RR_ERR_SYSTEM;
    }
    int one = 1;
    setsockopt(a[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(b[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(a[i], F_SETFL, fcntl(a[i], F_GETFL) | O_NONBLOCK);
    fcntl(b[i], F_SETFL, fcntl(b[i], F_GETFL) | O_NONBLOCK);
  }
  close(l);
  return RR_OK;
}

static rr_status tcp_open(rc_env *env) {
  int fds[2][STREAMS];
  rr_status st = tcp_pairs(STREAMS, fds[0], fds[1]);
  if (st != RR_OK) return st;
  for (int i = 0; i < 2; i++) {
    rc_side *s = &env->side[i];
    if ((st = rr_tcp_dev_open(i, &s->dev)) != RR_OK) return st;
    if ((st = s->dev->ops->ep_open(s->dev, &rc_events, s, &s->ep)) != RR_OK) return st;
    rr_rail_connect_args args = {.peer_addr = NULL, .peer_addr_len = 0, .fds = fds[i], .nfds = STREAMS};
    if ((st = s->ep->ops->ep_connect(s->ep, &args)) != RR_OK) return st;
  }
  return RR_OK;
}

static void tcp_close(rc_env *env) {
  for (int i = 0; i < 2; i++)
    if (env->side[i].dev) env->side[i].dev->ops->dev_close(env->side[i].dev);
}

const rc_fixture rc_fixture_under_test = {.name = "rail_contract_tcp", .open = tcp_open, .close = tcp_close};
