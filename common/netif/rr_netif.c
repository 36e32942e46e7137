#include "rr_netif.h"
#include "rr_log.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int rr_ifname_match(const char *spec, const char *ifname) {
  if (!spec || !*spec) return 1;
  int exclude = 0, exact = 0;
  if (*spec == '^') exclude = 1, spec++;
  if (*spec == '=') exact = 1, spec++;
  int hit = 0;
  const char *p = spec;
  while (*p && !hit) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n > 0) {
      if (exact) hit = strlen(ifname) == n && !strncmp(ifname, p, n);
      else hit = !strncmp(ifname, p, n);
    }
    p += n;
    if (*p == ',') p++;
  }
  return exclude ? !hit : hit;
}

const char *rr_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len) {
  const void *a = NULL;
  if (sa->sa_family == AF_INET) a = &((const struct sockaddr_in *)sa)->sin_addr;
  else if (sa->sa_family == AF_INET6) a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
  if (!a || !inet_ntop(sa->sa_family, a, buf, (socklen_t)len)) snprintf(buf, len, "<unknown>");
  return buf;
}

static int read_int_file(const char *path, int dflt) {
  FILE *f = fopen(path, "r");
  if (!f) return dflt;
  int v;
  if (fscanf(f, "%d", &v) != 1) v = dflt;
  fclose(f);
  return v;
}

/* Keep the path up to its last PCI function component ("0000:3b:00.0"), so a
 * virtio or auxiliary child still names the PCI device it hangs off. */
static void trim_to_pci_device(char *path) {
  char *last = NULL;
  for (char *c = strstr(path, "/pci"); c && *c; c = strchr(c + 1, '/')) {
    unsigned dom, bus, dev, fn;
    char tail;
    if (sscanf(c + 1, "%8x:%2x:%2x.%1x%c", &dom, &bus, &dev, &fn, &tail) >= 4) last = c;
  }
  if (!last) { path[0] = '\0'; return; }
  char *next = strchr(last + 1, '/');
  if (next) *next = '\0';
}

void rr_netif_read_sysfs(const char *sysfs_root, rr_netif *nif) {
  char path[PATH_MAX], real[PATH_MAX];
  nif->pci_path[0] = '\0';
  snprintf(path, sizeof path, "%s/class/net/%s/device", sysfs_root, nif->name);
  /* An interface no device sits under is the kernel's own (lo, veth,
   * bridge, tun/tap, docker0): sysfs keeps those under devices/virtual. */
  nif->is_virtual = access(path, F_OK) != 0;
  if (realpath(path, real)) {
    trim_to_pci_device(real);
    if (strlen(real) < sizeof nif->pci_path) strcpy(nif->pci_path, real);
  }
  snprintf(path, sizeof path, "%s/class/net/%s/speed", sysfs_root, nif->name);
  int speed = read_int_file(path, 0);
  nif->speed_mbps = speed > 0 ? speed : 0;
  snprintf(path, sizeof path, "%s/class/net/%s/device/numa_node", sysfs_root, nif->name);
  nif->numa_node = read_int_file(path, -1);
}

static int mask_bits(const struct sockaddr *mask) {
  if (!mask) return -1;
  const unsigned char *b;
  size_t n;
  if (mask->sa_family == AF_INET) b = (const unsigned char *)&((const struct sockaddr_in *)mask)->sin_addr, n = 4;
  else if (mask->sa_family == AF_INET6) b = (const unsigned char *)&((const struct sockaddr_in6 *)mask)->sin6_addr, n = 16;
  else return -1;
  int bits = 0;
  for (size_t i = 0; i < n; i++)
    for (int k = 7; k >= 0 && (b[i] >> k & 1); k--) bits++;
  return bits;
}

int rr_netif_rail_id(const rr_netif *nif) {
  if (!nif || nif->is_loopback) return -1;
  const unsigned char *x;
  int max;
  if (nif->addr.ss_family == AF_INET) {
    x = (const unsigned char *)&((const struct sockaddr_in *)&nif->addr)->sin_addr;
    max = 32;
  } else if (nif->addr.ss_family == AF_INET6) {
    x = (const unsigned char *)&((const struct sockaddr_in6 *)&nif->addr)->sin6_addr;
    max = 128;
  } else {
    return -1;
  }
  if (nif->prefix_len <= 0 || nif->prefix_len >= max) return -1;
  /* FNV-1a over family, prefix length and the network bits. */
  uint32_t h = 2166136261u;
  const unsigned char head[2] = {(unsigned char)max, (unsigned char)nif->prefix_len};
  for (int i = 0; i < 2; i++) h = (h ^ head[i]) * 16777619u;
  for (int i = 0; i < max / 8; i++) {
    int keep = nif->prefix_len - i * 8; /* network bits in this byte */
    unsigned char mask = keep >= 8 ? 0xff : keep <= 0 ? 0 : (unsigned char)(0xff << (8 - keep));
    h = (h ^ (x[i] & mask)) * 16777619u;
  }
  return (int)((h ^ (h >> 15)) & 0x7fff);
}

int rr_sockaddr_same_subnet(const struct sockaddr_storage *a, const struct sockaddr_storage *b,
                            int prefix_len) {
  if (a->ss_family != b->ss_family || prefix_len < 0) return 0;
  const unsigned char *x, *y;
  int max;
  if (a->ss_family == AF_INET) {
    x = (const unsigned char *)&((const struct sockaddr_in *)a)->sin_addr;
    y = (const unsigned char *)&((const struct sockaddr_in *)b)->sin_addr;
    max = 32;
  } else if (a->ss_family == AF_INET6) {
    x = (const unsigned char *)&((const struct sockaddr_in6 *)a)->sin6_addr;
    y = (const unsigned char *)&((const struct sockaddr_in6 *)b)->sin6_addr;
    max = 128;
  } else {
    return 0;
  }
  if (prefix_len > max) prefix_len = max;
  for (int bit = 0; bit < prefix_len; bit++)
    if ((x[bit / 8] ^ y[bit / 8]) >> (7 - bit % 8) & 1) return 0;
  return 1;
}

static int usable_family(const struct sockaddr *sa) {
  if (!sa) return 0;
  if (sa->sa_family == AF_INET) return 2;
  if (sa->sa_family == AF_INET6) {
    const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
    return IN6_IS_ADDR_LINKLOCAL(a) ? 0 : 1; /* link-local needs scope plumbing: skip */
  }
  return 0;
}

int rr_ifname_spec_selects(const char *spec) { return spec && *spec && *spec != '^'; }

static int collect(struct ifaddrs *list, const char *spec, int want_loopback, rr_netif *out,
                   int max) {
  int n = 0;
  for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
    int rank = usable_family(ifa->ifa_addr);
    if (!rank) continue;
    /* A NIC the operator names that is down now (its IPv4 address stays) is
     * one of the pool all the same: it starts marked down and is used when
     * it heals. Without such a list only what is up is taken. */
    if (!(ifa->ifa_flags & IFF_UP) && !rr_ifname_spec_selects(spec)) continue;
    int loop = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    if (spec && *spec) {
      if (!rr_ifname_match(spec, ifa->ifa_name)) continue;
    } else if (loop != want_loopback) {
      continue;
    }
    int slot = -1;
    for (int i = 0; i < n; i++)
      if (!strcmp(out[i].name, ifa->ifa_name)) slot = i;
    if (slot >= 0) {
      /* Already have this interface: upgrade IPv6 to IPv4 if one shows up. */
      if (out[slot].addr.ss_family == AF_INET6 && rank == 2) {
        out[slot].addrlen = sizeof(struct sockaddr_in);
        memcpy(&out[slot].addr, ifa->ifa_addr, out[slot].addrlen);
        out[slot].prefix_len = mask_bits(ifa->ifa_netmask);
      }
      continue;
    }
    if (n == max || strlen(ifa->ifa_name) >= IF_NAMESIZE) continue;
    rr_netif *nif = &out[n++];
    memset(nif, 0, sizeof *nif);
    strcpy(nif->name, ifa->ifa_name);
    nif->addrlen = rank == 2 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&nif->addr, ifa->ifa_addr, nif->addrlen);
    nif->prefix_len = mask_bits(ifa->ifa_netmask);
    nif->is_loopback = loop;
    nif->is_up = (ifa->ifa_flags & IFF_UP) && (ifa->ifa_flags & IFF_RUNNING);
  }
  return n;
}

rr_status rr_netif_discover(const char *spec, rr_netif *out, int max, int *count) {
  struct ifaddrs *list;
  if (getifaddrs(&list) != 0) {
    RR_WARN("getifaddrs failed: cannot list network interfaces");
    return RR_ERR_SYSTEM;
  }
  int n = collect(list, spec, 0, out, max);
  if (n == 0 && !(spec && *spec)) n = collect(list, NULL, 1, out, max);
  freeifaddrs(list);
  for (int i = 0; i < n; i++) rr_netif_read_sysfs("/sys", &out[i]);
  *count = n;
  return RR_OK;
}
