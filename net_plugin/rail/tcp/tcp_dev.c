/* The TCP rail's device layer: a pooled NIC as sockets see it.
 *
 * Registrations: TCP has no protection domains and needs no local keys, but
 * every registration still gets a key per device, random, which the engine
 * advertises in its clear-to-sends and checks on every frame that arrives:
 * a peer cannot guess its way into a buffer, and the engine, not the rail,
 * decides where bytes land (nothing is looked up in a process-wide table). */
#include "rail_tcp.h"
#include "rr_clock.h"
#include "rr_log.h"
#include "rr_params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

typedef struct tcp_dev {
  rr_rail_dev base;
} tcp_dev;

static uint32_t random_key(void) {
  uint32_t k = 0;
  while (k == 0) {
    if (getrandom(&k, sizeof k, 0) != (ssize_t)sizeof k)
      k = (uint32_t)(rr_now_ns() * 2654435761u) ^ (uint32_t)getpid();
  }
  return k;
}

rr_status tcp_reg_mr(rr_rail_dev *dev, void *base, size_t len, uint32_t kind, int dmabuf_fd,
                            uint64_t dmabuf_offset, rr_rail_mr **out) {
  (void)dmabuf_fd;
  (void)dmabuf_offset;
  /* Sockets read and write host memory only (a DMA-BUF of host memory is
   * still host memory to them; the core maps it before asking). */
  if (!(kind & (RR_MEM_HOST | RR_MEM_DMABUF))) return RR_ERR_UNSUPPORTED;
  rr_rail_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return RR_ERR_NOMEM;
  *mr = (rr_rail_mr){.dev = dev, .base = base, .len = len};
  mr->lkey = mr->rkey = random_key();
  *out = mr;
  return RR_OK;
}

void tcp_dereg_mr(rr_rail_mr *mr) { free(mr); }

/* Every socket is driven by its own endpoint's progress: nothing is shared. */
rr_status tcp_dev_progress(rr_rail_dev *dev) {
  (void)dev;
  return RR_OK;
}

/* Link state comes from netlink in the core's monitor, for every transport. */
rr_rail_dev_event_kind tcp_dev_event(rr_rail_dev *dev, rr_rail_dev_event *ev) {
  (void)dev;
  ev->kind = RR_RAIL_DEV_EV_NONE;
  return RR_RAIL_DEV_EV_NONE;
}

void tcp_dev_close(rr_rail_dev *dev) { free(rr_container_of(dev, tcp_dev, base)); }

/* The interfaces probe() chose, by the number dev_open() is given. */
static rr_netif found[RR_MAX_NETIFS];
static int nfound;

static int taken(const rr_rail_probe *in, const char *name) {
  for (int i = 0; i < in->nopened; i++)
    if (!strcmp(in->opened[i]->attr.netdev, name)) return 1;
  return 0;
}

/* Which interfaces run TCP (docs/devices.md):
 *  - where RDMA ports are devices (an earlier transport opened some), none,
 *    unless RERAIL_TRANSPORT=mixed: then the interfaces RERAIL_SOCKET_IFNAME
 *    names that no RDMA device sits on (NCCL too picks IB over sockets);
 *  - otherwise every interface the core lists that no earlier device sits
 *    on, leaving out virtual ones (lo, veth, bridges, tun/tap, docker0) unless
 *    RERAIL_SOCKET_IFNAME names them; a host with nothing else (a container
 *    whose eth0 is a veth) pools its virtual interfaces, loopback last, as
 *    NCCL's default socket interface choice falls back. */
static int tcp_probe(const rr_rail_probe *in, rr_rail_found *out, int max) {
  const rr_params *p = rr_params_get();
  int named = rr_ifname_spec_selects(in->ifname_spec);
  nfound = 0;
  if (in->nopened > 0 && p->transport != RR_TRANSPORT_TCP && !(p->transport == RR_TRANSPORT_MIXED && named)) {
    for (int i = 0; in->left_out && i < in->nnifs; i++)
      if (!taken(in, in->nifs[i].name))
        in->left_out(in->left_out_arg, in->nifs[i].name, RR_LEFT_OUT_RDMA_PREFERRED,
                     "RDMA ports are pooled instead (TCP beside them: RERAIL_TRANSPORT=mixed and "
                     "RERAIL_SOCKET_IFNAME naming it)");
    return 0;
  }
  /* pass 0: physical (or named); 1: virtual but not loopback; 2: loopback */
  for (int pass = 0; pass < 3 && nfound == 0; pass++) {
    for (int i = 0; i < in->nnifs && nfound < max && nfound < RR_MAX_NETIFS; i++) {
      const rr_netif *nif = &in->nifs[i];
      int rank = named || !nif->is_virtual ? 0 : nif->is_loopback ? 2 : 1;
      if (rank != pass || taken(in, nif->name)) continue;
      found[nfound] = *nif;
      out[nfound] = (rr_rail_found){.which = nfound};
      snprintf(out[nfound].name, sizeof out[nfound].name, "%s", nif->name);
      snprintf(out[nfound].netdev, sizeof out[nfound].netdev, "%s", nif->name);
      nfound++;
    }
  }
  /* What the passes left: virtual interfaces beside physical ones, lo beside others. */
  for (int i = 0; in->left_out && i < in->nnifs; i++) {
    const rr_netif *nif = &in->nifs[i];
    int chosen = 0;
    for (int k = 0; k < nfound && !chosen; k++) chosen = !strcmp(found[k].name, nif->name);
    if (chosen || taken(in, nif->name)) continue;
    if (named || !nif->is_virtual)
      in->left_out(in->left_out_arg, nif->name, RR_LEFT_OUT_TOO_MANY, "more interfaces than rerail offers devices");
    else if (nif->is_loopback)
      in->left_out(in->left_out_arg, nif->name, RR_LEFT_OUT_LOOPBACK,
                   "loopback, not pooled beside other interfaces (name it in RERAIL_SOCKET_IFNAME)");
    else
      in->left_out(in->left_out_arg, nif->name, RR_LEFT_OUT_VIRTUAL,
                   "virtual, not pooled (name it in RERAIL_SOCKET_IFNAME)");
  }
  return nfound;
}

static rr_status tcp_open_found(int which, int index, rr_rail_dev **out) {
  if (which < 0 || which >= nfound) return RR_ERR_INVALID;
  rr_status st = rr_tcp_dev_open(index, out);
  if (st != RR_OK) return st;
  const rr_netif *nif = &found[which];
  rr_rail_dev_attr *a = &(*out)->attr;
  snprintf(a->name, sizeof a->name, "%s", nif->name);
  snprintf(a->netdev, sizeof a->netdev, "%s", nif->name);
  snprintf(a->pci_path, sizeof a->pci_path, "%s", nif->pci_path);
  a->numa_node = nif->numa_node;
  a->speed_mbps = nif->speed_mbps;
  return RR_OK;
}

rr_status rr_tcp_dev_open(int index, rr_rail_dev **out) {
  tcp_dev *d = calloc(1, sizeof *d);
  if (!d) return RR_ERR_NOMEM;
  d->base.ops = &rr_tcp_rail_ops;
  d->base.index = index;
  /* Several streams per rail: writes of one endpoint are not ordered with
   * each other, only each stream's frames are. Host memory only: sockets
   * move bytes through the CPU, so GPU memory is never theirs (a DMA-BUF of
   * host memory is registered by its address, as host memory). */
  d->base.attr = (rr_rail_dev_attr){.caps = RR_RAIL_CAP_WRITE_BEGIN | RR_RAIL_CAP_INVALIDATE_KEEPS_EP |
                                            RR_RAIL_CAP_EPOCH_TAG | RR_RAIL_CAP_EAGER |
                                            RR_RAIL_CAP_SETUP_IS_DATA | RR_RAIL_CAP_PROBE_WRITE |
                                            RR_RAIL_CAP_PATH_STATS,
                                    .mem_kinds = RR_MEM_HOST,
                                    .inline_max = 0,
                                    .max_eps = 0,
                                    .addr_len = 0,
                                    .numa_node = -1};
  *out = &d->base;
  return RR_OK;
}

const rr_rail_transport rr_tcp_transport = {.name = "tcp", .probe = tcp_probe, .dev_open = tcp_open_found};
