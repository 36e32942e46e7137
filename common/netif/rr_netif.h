/* Network interfaces as rerail sees them: which ones to use (NCCL_SOCKET_IFNAME
 * syntax), their addresses, and what sysfs says about them (PCI path, speed,
 * NUMA node). Shared by the TCP rail, the failover chain and the rerail tool. */
#ifndef RERAIL_COMMON_NETIF_H
#define RERAIL_COMMON_NETIF_H
#include <net/if.h>
#include <sys/socket.h>

#include "rr_status.h"

#define RR_MAX_NETIFS 32

typedef struct rr_netif {
  char name[IF_NAMESIZE];
  struct sockaddr_storage addr;  /* IPv4 preferred, else a global IPv6 address */
  socklen_t addrlen;
  int prefix_len;                /* netmask length of addr, -1 when unknown */
  char pci_path[256];            /* "" when the interface sits on no PCI device */
  int speed_mbps;                /* 0 when sysfs does not know (veth, lo) */
  int numa_node;                 /* -1 when unknown */
  int is_loopback;
  int is_virtual;
  int is_up;                     /* up and running when it was listed */                /* no device behind it (lo, veth, bridge, tun, docker0...) */
} rr_netif;

/* Does ifname pass the filter spec? Spec syntax is NCCL_SOCKET_IFNAME's:
 * comma-separated prefixes; a leading '^' turns the list into exclusions;
 * a leading '=' (after '^' if any) makes every entry an exact name.
 * An empty or NULL spec matches everything. */
int rr_ifname_match(const char *spec, const char *ifname);

/* Does spec name the interfaces to use (a list of names or prefixes), rather
 * than leave every interface but some (empty, or a '^' list)? */
int rr_ifname_spec_selects(const char *spec);

/* Discover usable interfaces. With a spec that names interfaces
 * (rr_ifname_spec_selects), those it selects that have an address, up or
 * down (a NIC that is down when the job starts is pooled, marked down, and
 * used when it heals); otherwise every up interface the spec leaves,
 * non-loopback, else loopback. Fills at most max entries; *count may be 0 (RR_OK) when the spec
 * matches nothing: the caller decides how to report that. */
rr_status rr_netif_discover(const char *spec, rr_netif *out, int max, int *count);

/* Fill pci_path, speed_mbps, numa_node and is_virtual from a sysfs tree rooted at
 * sysfs_root ("/sys" normally; tests pass fake trees). */
void rr_netif_read_sysfs(const char *sysfs_root, rr_netif *nif);

/* Are a and b in the same subnet of prefix_len bits (same family)? */
int rr_sockaddr_same_subnet(const struct sockaddr_storage *a, const struct sockaddr_storage *b,
                            int prefix_len);

/* The rail a NIC is on, as NCCL's railId (0..32767), or -1 when unknown.
 * A connection pairs a local NIC with the peer's address in the same subnet
 * (rr_sockaddr_same_subnet), so a subnet is what rerail knows of a rail: the
 * id is a hash of the NIC's network (family, prefix length, masked address),
 * the same on every host for NICs in one subnet, whatever their host bits.
 * Unknown: loopback, no usable address, or a prefix that names no shared
 * network (0, or a host route /32, /128). Distinct subnets may collide
 * (15 bits): NCCL would then treat two rails of a host as one. */
int rr_netif_rail_id(const rr_netif *nif);

/* "10.0.0.1" / "fe80::1" for logs; buf of at least 64 bytes. */
const char *rr_sockaddr_str(const struct sockaddr *sa, char *buf, size_t len);

#endif
