/* Endpoints of connection setup, through the rail seam: a rail's endpoint is
 * opened on its device before its setup sockets authenticate (its address
 * blob travels in the handshake, setup_wire.h), and connected with the
 * peer's blob and the sockets once they have. Whatever the transport: nothing
 * here names one transport's constructor. */
#include "core_internal.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

_Static_assert(RR_RAIL_ADDR_MAX <= RR_HS_BLOB_MAX, "endpoint blobs fit the handshake");

static rr_rail_dev *device(int dev) {
  const rr_devices *d = rr_core_devices();
  return dev >= 0 && dev < d->count ? d->rail[dev] : NULL;
}

rr_status rr_setup_ep_addr(rr_rail_ep *ep, uint8_t *blob, uint16_t *blob_len) {
  uint8_t tmp[RR_RAIL_ADDR_MAX];
  uint32_t len = sizeof tmp;
  *blob_len = 0;
  if (!ep) return RR_ERR_INVALID;
  rr_status st = ep->ops->ep_addr(ep, tmp, &len);
  if (st != RR_OK) return st;
  if (len > RR_RAIL_ADDR_MAX) return RR_ERR_INTERNAL; /* a transport that breaks its own limit */
  memcpy(blob, tmp, len);
  *blob_len = (uint16_t)len;
  return RR_OK;
}

rr_status rr_setup_ep_open(int dev, rr_engine *e, rr_rail_ep **ep, uint8_t *blob, uint16_t *blob_len) {
  rr_rail_dev *rd = device(dev);
  *ep = NULL;
  *blob_len = 0;
  if (!rd) return RR_ERR_INVALID;
  uint64_t t0 = rr_now_ns();
  rr_status st = rd->ops->ep_open(rd, &rr_engine_rail_events, e, ep);
  rr_counter_add(RR_CTR_SETUP_EP_US_OPEN, (rr_now_ns() - t0) / 1000u);
  if (st != RR_OK) {
    *ep = NULL;
    return st;
  }
  (*ep)->traffic_class = e ? e->cfg.traffic_class : -1; /* before its connect, which applies it */
  st = rr_setup_ep_addr(*ep, blob, blob_len);
  if (st != RR_OK) rr_setup_ep_abandon(ep);
  return st;
}

#define SLOW_CONNECT_MS 20

rr_status rr_setup_ep_connect(rr_rail_ep **ep, int dev, rr_engine *e, const uint8_t *peer_blob,
                              uint16_t peer_blob_len, int *fds, int nfds) {
  (void)e;
  rr_status st = RR_ERR_INVALID;
  if (*ep) {
    rr_rail_connect_args args = {.peer_addr = peer_blob, .peer_addr_len = peer_blob_len, .fds = fds,
                                 .nfds = nfds};
    uint64_t t0 = rr_now_ns();
    st = (*ep)->ops->ep_connect(*ep, &args);
    /* A connect runs on the thread that drives the connection (NCCL's, for
     * a reconnect): one that blocks (a RoCE queue pair resolving its peer's
     * address) stalls every rail of it. Worth knowing when it happens. */
    uint64_t took_us = (rr_now_ns() - t0) / 1000u, took_ms = took_us / 1000u;
    rr_counter_add(RR_CTR_SETUP_EP_US_CONNECT, took_us);
    if (took_ms >= SLOW_CONNECT_MS)
      RR_INFO(RR_SUB_NET, "connecting a %s endpoint on device %d took %llu ms", (*ep)->ops->name, dev,
              (unsigned long long)took_ms);
  }
  /* Sockets the transport did not take (verbs: all of them) are ours to close. */
  for (int i = 0; i < nfds; i++)
    if (fds[i] >= 0) close(fds[i]), fds[i] = -1;
  if (st != RR_OK) rr_setup_ep_abandon(ep);
  return st;
}

void rr_setup_ep_abandon(rr_rail_ep **ep) {
  if (*ep) (*ep)->ops->destroy(*ep);
  *ep = NULL;
}

rr_status rr_setup_recv(int fd, uint8_t *buf, uint16_t *got, size_t need, const char *closed,
                        const char **why) {
  for (;;) {
    ssize_t n = recv(fd, buf + *got, need - *got, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return RR_AGAIN;
    if (n <= 0) {
      *why = n == 0 ? closed : strerror(errno);
      return RR_ERR_PEER;
    }
    *got += (uint16_t)n;
    return RR_OK;
  }
}
