#include "handle.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

static const uint8_t handle_magic[4] = {'R', 'R', 'H', '3'};

static const void *ip_bytes(const struct sockaddr_storage *a) {
  return a->ss_family == AF_INET ? (const void *)&((const struct sockaddr_in *)a)->sin_addr
                                 : (const void *)&((const struct sockaddr_in6 *)a)->sin6_addr;
}

rr_status rr_handle_encode(const rr_handle_entry *e, int n, uint16_t port,
                           const uint8_t secret[RR_HS_SECRET_LEN],
                           const uint8_t process[RR_HANDLE_PROCESS_LEN], void *out) {
  static const uint8_t none[RR_HANDLE_PROCESS_LEN];
  if (n < 1 || port == 0 || !memcmp(process, none, sizeof none)) return RR_ERR_INVALID;
  if (n > RR_HANDLE_MAX_ADDRS) n = RR_HANDLE_MAX_ADDRS;
  int family = e[0].addr.ss_family;
  if (family != AF_INET && family != AF_INET6) return RR_ERR_INVALID;
  size_t alen = family == AF_INET ? 4 : 16;
  uint8_t *h = out;
  memset(h, 0, RR_NET_HANDLE_SIZE);
  memcpy(h, handle_magic, 4);
  h[4] = RR_HANDLE_VERSION;
  h[5] = (uint8_t)n;
  h[6] = family == AF_INET ? 4 : 6;
  memcpy(h + 8, secret, RR_HS_SECRET_LEN);
  h[40] = (uint8_t)(port >> 8);
  h[41] = (uint8_t)port;
  int nips = 0;
  for (int i = 0; i < n; i++) {
    if (e[i].addr.ss_family != family || e[i].dev >= RR_HS_MAX_DEVS) return RR_ERR_INVALID;
    int ip = -1;
    for (int k = 0; k < nips && ip < 0; k++)
      if (!memcmp(h + 42 + 16 * k, ip_bytes(&e[i].addr), alen)) ip = k;
    if (ip < 0) {
      if (nips == RR_HANDLE_MAX_IPS) return RR_ERR_INVALID;
      ip = nips++;
      memcpy(h + 42 + 16 * ip, ip_bytes(&e[i].addr), alen);
    }
    h[106 + 2 * i] = (uint8_t)ip | (e[i].own_ip ? RR_HANDLE_OWN_IP : 0);
    h[107 + 2 * i] = e[i].dev;
  }
  h[7] = (uint8_t)nips;
  memcpy(h + 122, process, RR_HANDLE_PROCESS_LEN);
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
  int n = h[5], nips = h[7];
  if (n < 1 || n > RR_HANDLE_MAX_ADDRS || nips < 1 || nips > RR_HANDLE_MAX_IPS || port == 0 || !family) {
    *why = "malformed handle (address count, family or port)";
    return RR_ERR_INVALID;
  }
  for (int i = n; i < RR_HANDLE_MAX_ADDRS; i++)
    if (h[106 + 2 * i] || h[107 + 2 * i]) {
      *why = "malformed handle (entries past the count)";
      return RR_ERR_INVALID;
    }
  static const uint8_t none[RR_HANDLE_PROCESS_LEN];
  if (!memcmp(h + 122, none, sizeof none)) {
    *why = "malformed handle (no listening process)";
    return RR_ERR_INVALID;
  }
  memset(out, 0, sizeof *out);
  memcpy(out->secret, h + 8, RR_HS_SECRET_LEN);
  memcpy(out->process, h + 122, RR_HANDLE_PROCESS_LEN);
  out->naddrs = n;
  for (int i = 0; i < n; i++) {
    int ip = h[106 + 2 * i] & ~RR_HANDLE_OWN_IP;
    if (ip >= nips || h[107 + 2 * i] >= RR_HS_MAX_DEVS) {
      *why = "malformed handle (an entry's address or device)";
      return RR_ERR_INVALID;
    }
    out->dev[i] = h[107 + 2 * i];
    out->own_ip[i] = (h[106 + 2 * i] & RR_HANDLE_OWN_IP) != 0;
    const uint8_t *a = h + 42 + 16 * ip;
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
