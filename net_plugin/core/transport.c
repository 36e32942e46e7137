/* The devices rerail offers NCCL, found by the transports (rail.h's
 * registry, asked in order): each probes for its devices, opens them and
 * says what each is. The core knows a transport only through that table and
 * its rr_rail_ops. */
#include "core_internal.h"
#include "rr_log.h"

#include <stdio.h>
#include <string.h>

/* The interface a device sits on, from the core's list; NULL when none. */
static const rr_netif *nif_named(const rr_netif *nifs, int nnifs, const char *name) {
  for (int i = 0; name[0] && i < nnifs; i++)
    if (!strcmp(nifs[i].name, name)) return &nifs[i];
  return NULL;
}

/* A device as the rest of the core sees it: an interface entry whose name
 * names the device and whose address, when it has one, is the device's own
 * (a TCP device's setup and data path; family AF_UNSPEC when it has none). */
static void describe(const rr_rail_dev *rd, const rr_netif *nifs, int nnifs, rr_netif *out) {
  const rr_netif *own = nif_named(nifs, nnifs, rd->attr.netdev);
  memset(out, 0, sizeof *out);
  /* A RoCE port's interface that RERAIL_SOCKET_IFNAME does not name (it
   * names the out-of-band one) is still the device's: its name and link
   * state are the device's. */
  rr_netif one[1];
  int n = 0;
  char spec[IF_NAMESIZE + 1] = "=";
  if (!own && rd->attr.netdev[0]) {
    strcat(spec, rd->attr.netdev);
    if (rr_netif_discover(spec, one, 1, &n) == RR_OK && n == 1) own = &one[0];
  }
  if (own) {
    *out = *own;
  } else {
    /* an interface name's room (15 characters) holds "mlx5_bond_0:1" */
    memcpy(out->name, rd->attr.name, strnlen(rd->attr.name, sizeof out->name - 1));
    out->addr.ss_family = AF_UNSPEC;
    out->prefix_len = -1;
    out->numa_node = -1; /* unknown unless the transport says */
  }
  if (rd->attr.pci_path[0]) snprintf(out->pci_path, sizeof out->pci_path, "%s", rd->attr.pci_path);
  if (rd->attr.speed_mbps > 0) out->speed_mbps = rd->attr.speed_mbps;
  if (rd->attr.numa_node >= 0) out->numa_node = rd->attr.numa_node;
}

/* rail.h's left_out: noted in the table for `rerail devices` (the
 * transport has logged it). */
typedef struct left_out_sink {
  rr_devices *d;
  const char *transport;
} left_out_sink;

static void note_left_out(void *arg, const char *name, const char *reason, const char *why) {
  left_out_sink *sink = arg;
  rr_devices *d = sink->d;
  if (d->nleft == RR_LEFT_OUT_MAX) return;
  rr_left_out *l = &d->left[d->nleft++];
  snprintf(l->transport, sizeof l->transport, "%s", sink->transport);
  snprintf(l->name, sizeof l->name, "%s", name);
  snprintf(l->reason, sizeof l->reason, "%s", reason);
  snprintf(l->why, sizeof l->why, "%s", why);
}

void rr_core_devices_open(const rr_netif *nifs, int nnifs, const char *spec, rr_devices *d) {
  int n = 0;
  d->nleft = 0;
  for (int t = 0; t < rr_rail_ntransports; t++) {
    const rr_rail_transport *tr = rr_rail_transports[t];
    rr_rail_found found[RR_MAX_NETIFS];
    left_out_sink sink = {.d = d, .transport = tr->name};
    rr_rail_probe in = {.nifs = nifs, .nnifs = nnifs, .ifname_spec = spec ? spec : "",
                        .opened = (const rr_rail_dev *const *)d->rail, .nopened = n,
                        .left_out = note_left_out, .left_out_arg = &sink};
    int nfound = tr->probe(&in, found, RR_MAX_NETIFS);
    for (int k = 0; k < nfound; k++) {
      if (n == RR_MAX_NETIFS) {
        RR_WARN("device %s (%s): more than %d devices; left out", found[k].name, tr->name, RR_MAX_NETIFS);
        note_left_out(&sink, found[k].name, RR_LEFT_OUT_TOO_MANY, "more devices than rerail offers NCCL");
        continue;
      }
      rr_rail_dev *rd = NULL;
      if (tr->dev_open(found[k].which, n, &rd) != RR_OK) {
        RR_WARN("device %s: the %s transport cannot open it; left out", found[k].name, tr->name);
        note_left_out(&sink, found[k].name, RR_LEFT_OUT_NOT_OPENED, "found, but its transport cannot open it");
        continue;
      }
      rd->index = n;
      describe(rd, nifs, nnifs, &d->nif[n]);
      d->rail[n++] = rd;
    }
  }
  d->count = n;
}
