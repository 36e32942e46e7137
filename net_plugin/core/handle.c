#include "handle.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static const uint8_t handle_magic[4] = {'R', 'R', 'H', '2'};

rr_status rr_handle_encode(const struct sockaddr_storage *addrs, int naddrs, uint16_t port,
                           const uint8_t secret[RR_HS_SECRET_LEN], void *out) {
  if (naddrs < 1 || port == 0) return RR_ERR_INVALID;
  if (naddrs > RR_HANDLE_MAX_ADDRS) naddrs = RR_HANDLE_MAX_ADDRS;
  int family = addrs[0].ss_family;
  if (family != AF_INET && family != AF_INET6) return RR_ERR_INVALID;
  uint8_t *h = out;
  memset(h, 0, RR_NET_HANDLE_SIZE);
  memcpy(h, handle_magic, 4);
  h[4] = RR_HANDLE_VERSION;
  h[5] = (uint8_t)naddrs;
  h[6] = family == AF_INET ? 4 : 6;
  memcpy(h + 8, secret, RR_HS_SECRET_LEN);
  h[40] = (uint8_t)(port >> 8);
  h[41] = (uint8_t)port;
  for (int i = 0; i < naddrs; i++) {
    uint8_t *a = h + 42 + 16 * i;
    if (addrs[i].ss_family != family) return RR_ERR_INVALID;
    if (family == AF_INET) memcpy(a, &((const struct sockaddr_in *)&addrs[i])->sin_addr, 4);
    else memcpy(a, &((const struct sockaddr_in6 *)&addrs[i])->sin6_addr, 16);
  }
  return RR_OK;
}

rr_status rr_handle_parse(const void *in, rr_peer_addrs *out, const char **why) {
  const char *dummy;
  if (!why) why = &dummy;
  if (!in) {
    *why = "NULL handle";
    return RR_ERR_INVALID;
  }
  const uint8_t *h = in;
  if (memcmp(h, "RRH", 3) != 0) {
    *why = "not a rerail handle (was it made by another net plugin, or corrupted?)";
    return RR_ERR_INVALID;
  }
  if (h[3] != handle_magic[3] || h[4] != RR_HANDLE_VERSION) {
    *why = "a handle of another rerail version (mixed rerail versions in one job?)";
    return RR_ERR_INVALID;
  }
  uint16_t port = (uint16_t)(h[40] << 8 | h[41]);
  int family = h[6] == 4 ? AF_INET : h[6] == 6 ? AF_INET6 : 0;
  if (h[5] < 1 || h[5] > RR_HANDLE_MAX_ADDRS || port == 0 || !family || h[7] != 0) {
    *why = "malformed handle (address count, family or port)";
    return RR_ERR_INVALID;
  }
  for (int i = RR_HANDLE_LEN; i < RR_NET_HANDLE_SIZE; i++)
    if (h[i]) {
      *why = "malformed handle (trailing bytes)";
      return RR_ERR_INVALID;
    }
  memset(out, 0, sizeof *out);
  memcpy(out->secret, h + 8, RR_HS_SECRET_LEN);
  out->naddrs = h[5];
  for (int i = 0; i < out->naddrs; i++) {
    const uint8_t *a = h + 42 + 16 * i;
    if (family == AF_INET) {
      struct sockaddr_in *sin = (struct sockaddr_in *)&out->addrs[i];
      sin->sin_family = AF_INET;
      sin->sin_port = htons(port);
      memcpy(&sin->sin_addr, a, 4);
      out->addrlens[i] = sizeof *sin;
    } else {
      struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->addrs[i];
      sin6->sin6_family = AF_INET6;
      sin6->sin6_port = htons(port);
      memcpy(&sin6->sin6_addr, a, 16);
      out->addrlens[i] = sizeof *sin6;
    }
  }
  return RR_OK;
}

rr_status rr_handle_decode(const void *in, rr_peer_addrs *out) {
  const char *why = NULL;
  rr_status st = rr_handle_parse(in, out, &why);
  if (st != RR_OK) RR_WARN("connect: %s", why);
  return st;
}
