#include "handle.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

rr_status rr_handle_encode(const struct sockaddr_storage *addrs, int naddrs, uint16_t port,
                           uint64_t token, void *out) {
  if (naddrs < 1) return RR_ERR_INVALID;
  if (naddrs > RR_HANDLE_MAX_ADDRS) naddrs = RR_HANDLE_MAX_ADDRS;
  rr_handle h;
  memset(&h, 0, sizeof h);
  h.magic = RR_HANDLE_MAGIC;
  h.version = RR_HANDLE_VERSION;
  h.naddrs = (uint8_t)naddrs;
  h.port = htons(port);
  h.token = token;
  for (int i = 0; i < naddrs; i++) {
    if (addrs[i].ss_family == AF_INET) {
      h.addrs[i].family = 4;
      memcpy(h.addrs[i].addr, &((const struct sockaddr_in *)&addrs[i])->sin_addr, 4);
    } else if (addrs[i].ss_family == AF_INET6) {
      h.addrs[i].family = 6;
      memcpy(h.addrs[i].addr, &((const struct sockaddr_in6 *)&addrs[i])->sin6_addr, 16);
    } else {
      return RR_ERR_INVALID;
    }
  }
  memset(out, 0, RR_NET_HANDLE_SIZE);
  memcpy(out, &h, sizeof h);
  return RR_OK;
}

rr_status rr_handle_decode(const void *in, rr_peer_addrs *out) {
  rr_handle h;
  if (!in) {
    RR_WARN("connect: NULL handle");
    return RR_ERR_INVALID;
  }
  memcpy(&h, in, sizeof h);
  if (h.magic != RR_HANDLE_MAGIC) {
    RR_WARN("connect: the handle is not a rerail handle (magic 0x%08x): was it made by another "
            "net plugin or corrupted?", h.magic);
    return RR_ERR_INVALID;
  }
  if (h.version != RR_HANDLE_VERSION) {
    RR_WARN("connect: handle version %u, this rerail speaks %u: mixed rerail versions in one job?",
            h.version, RR_HANDLE_VERSION);
    return RR_ERR_INVALID;
  }
  if (h.naddrs < 1 || h.naddrs > RR_HANDLE_MAX_ADDRS || h.port == 0) {
    RR_WARN("connect: malformed handle (%u addresses, port %u)", h.naddrs, ntohs(h.port));
    return RR_ERR_INVALID;
  }
  memset(out, 0, sizeof *out);
  out->token = h.token;
  out->naddrs = h.naddrs;
  for (int i = 0; i < h.naddrs; i++) {
    if (h.addrs[i].family == 4) {
      struct sockaddr_in *sin = (struct sockaddr_in *)&out->addrs[i];
      sin->sin_family = AF_INET;
      sin->sin_port = h.port;
      memcpy(&sin->sin_addr, h.addrs[i].addr, 4);
      out->addrlens[i] = sizeof *sin;
    } else if (h.addrs[i].family == 6) {
      struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->addrs[i];
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = h.port;
      memcpy(&sin6->sin6_addr, h.addrs[i].addr, 16);
      out->addrlens[i] = sizeof *sin6;
    } else {
      RR_WARN("connect: malformed handle (address %d has family %u)", i, h.addrs[i].family);
      return RR_ERR_INVALID;
    }
  }
  return RR_OK;
}
