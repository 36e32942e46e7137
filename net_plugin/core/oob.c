/* The out-of-band interface: where the setup of RDMA devices travels
 * (connection setup, authentication, reopening failed rails), as NCCL's IB
 * transport sets its connections up over its bootstrap socket interface and
 * needs no IP address on an HCA. A data NIC's failure then takes only its
 * rails down, never the means to reopen them elsewhere or later.
 *
 * The choice is NCCL's socket interface choice (src/misc/socket.cc,
 * ncclFindInterfaces): the interfaces NCCL_SOCKET_IFNAME (here
 * RERAIL_SOCKET_IFNAME) names, first one up; unset, an InfiniBand (IPoIB)
 * interface, else any but docker and loopback ones, else docker's, else
 * loopback. rerail also prefers a physical interface to a virtual one. */
#include "core_internal.h"
#include "rr_log.h"

#include <string.h>

static int rank_default(const rr_netif *nif) {
  if (!strncmp(nif->name, "ib", 2)) return 0;
  if (nif->is_loopback) return 4;
  if (!strncmp(nif->name, "docker", 6)) return 3;
  return nif->is_virtual ? 2 : 1;
}

int rr_core_choose_oob(const rr_netif *nifs, int nnifs, const char *spec, rr_netif *out) {
  int best = -1, best_rank = 99;
  int named = rr_ifname_spec_selects(spec);
  for (int i = 0; i < nnifs; i++) {
    const rr_netif *nif = &nifs[i];
    if (!nif->is_up || (nif->addr.ss_family != AF_INET && nif->addr.ss_family != AF_INET6)) continue;
    int rank = named ? 0 : rank_default(nif);
    if (rank < best_rank) best = i, best_rank = rank;
  }
  if (best < 0) return 0;
  *out = nifs[best];
  return 1;
}

const struct sockaddr_storage *rr_core_setup_addr(int dev, int *own_ip) {
  const rr_devices *d = rr_core_devices();
  *own_ip = 0;
  if (dev < 0 || dev >= d->count) return NULL;
  int own = (d->rail[dev]->attr.caps & RR_RAIL_CAP_SETUP_IS_DATA) != 0;
  if (!own && d->has_oob) return &d->oob.addr;
  /* No out-of-band interface: an RDMA device with an address of its own
   * sets up over it (and loses setup with its link). */
  if (d->nif[dev].addr.ss_family != AF_INET && d->nif[dev].addr.ss_family != AF_INET6) return NULL;
  *own_ip = own;
  return &d->nif[dev].addr;
}
