/* Endpoints of connection setup, through the rail seam: a rail's endpoint is
 * opened before its setup sockets authenticate (its address blob travels in
 * the handshake), and connected with the peer's blob and the sockets once
 * they have. Nothing here names one transport's constructor. */
#include "core_internal.h"

rr_status rr_setup_ep_open(int dev, rr_engine *e, rr_rail_ep **ep, uint8_t *blob, uint16_t *blob_len) {
  (void)dev, (void)e;
  *ep = NULL;
  *blob_len = 0;
  (void)blob;
  return RR_OK;
}

rr_status rr_setup_ep_addr(rr_rail_ep *ep, uint8_t *blob, uint16_t *blob_len) {
  (void)ep, (void)blob;
  *blob_len = 0;
  return RR_OK;
}

rr_status rr_setup_ep_connect(rr_rail_ep **ep, int dev, rr_engine *e, const uint8_t *peer_blob,
                              uint16_t peer_blob_len, int *fds, int nfds) {
  (void)peer_blob, (void)peer_blob_len;
  rr_rail_ep *made = NULL;
  rr_status st = rr_tcp_ep_create(dev, fds, nfds, &rr_engine_rail_events, e, &made);
  for (int i = 0; i < nfds; i++) fds[i] = -1; /* owned by the endpoint (or closed) */
  *ep = st == RR_OK ? made : NULL;
  return st;
}

void rr_setup_ep_abandon(rr_rail_ep **ep) {
  if (*ep) (*ep)->ops->destroy(*ep);
  *ep = NULL;
}
