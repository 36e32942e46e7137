/* Failover-chain topology: how close two NICs of this host are (PCIe tree, then
 * NUMA) and, for one NIC, the order in which the others take over its traffic
 * when it fails.
 *
 * Closer first, because a nearby NIC reaches the same GPU and host memory over
 * the fewest PCIe hops and without crossing the socket interconnect, so the
 * bandwidth after a failover stays closest to what the failed NIC gave.
 *
 * Everything here is a pure function of its inputs (the rr_netif entries and
 * the NUMA distance table under sysfs_root): the two ends of a connection and
 * every rank of a host compute chains on their own and must agree, so no
 * ordering may depend on timing, memory addresses or qsort's instability. */
#ifndef RERAIL_COMMON_TOPO_H
#define RERAIL_COMMON_TOPO_H

#include "rr_netif.h"

/* A distance is a class base plus a refinement below RR_TOPO_CLASS_STRIDE, so a
 * plain integer comparison orders by class first and then within the class. */
#define RR_TOPO_CLASS_STRIDE 1000

/* NUMA distance assumed when the table does not say (Linux's REMOTE_DISTANCE,
 * what the kernel reports for a remote node when firmware has no SLIT). */
#define RR_TOPO_NUMA_DISTANCE_DEFAULT 20

/* Distance classes, closest first. The value of each is its base distance. */
typedef enum rr_topo_class {
  /* Two ports/functions of one adapter: same PCI domain:bus:device (any
   * function, including two netdevs on one function). Refinement: 0. */
  RR_TOPO_SAME_DEVICE = 0 * RR_TOPO_CLASS_STRIDE,
  /* Different devices whose PCI paths share at least one bridge below the host
   * bridge (a PCIe switch, or a chain of them): traffic between them never
   * reaches the root complex. Refinement: the deeper the deepest shared
   * bridge, the smaller (a NIC under the same leaf switch beats one under a
   * sibling switch of the same parent switch). */
  RR_TOPO_SAME_SWITCH = 1 * RR_TOPO_CLASS_STRIDE,
  /* Same host bridge ("pciDDDD:BB" root), different root ports. Refinement: 0. */
  RR_TOPO_SAME_ROOT = 2 * RR_TOPO_CLASS_STRIDE,
  /* Different host bridges (or no PCI path on one side) but the same NUMA
   * node, both numa_node >= 0. Refinement: 0. */
  RR_TOPO_SAME_NUMA = 3 * RR_TOPO_CLASS_STRIDE,
  /* Both on PCI, on different NUMA nodes (both >= 0). Refinement: the NUMA
   * distance between the nodes (max of both directions, so the distance is
   * symmetric; RR_TOPO_NUMA_DISTANCE_DEFAULT when unknown), clamped below the
   * stride. */
  RR_TOPO_OTHER_NUMA = 4 * RR_TOPO_CLASS_STRIDE,
  /* Nothing known that relates them: no usable PCI path (veth, lo, a
   * malformed path) and not the same known NUMA node, or different host
   * bridges with an unknown NUMA node. Refinement: 0. */
  RR_TOPO_UNKNOWN = 5 * RR_TOPO_CLASS_STRIDE,
} rr_topo_class;

/* The class a distance falls in. */
static inline rr_topo_class rr_topo_class_of(int distance) {
  if (distance < 0) return RR_TOPO_SAME_DEVICE;
  if (distance >= RR_TOPO_UNKNOWN) return RR_TOPO_UNKNOWN;
  return (rr_topo_class)(distance / RR_TOPO_CLASS_STRIDE * RR_TOPO_CLASS_STRIDE);
}

/* "same-device", "same-switch", ... for logs and the rerail tool. */
const char *rr_topo_class_str(rr_topo_class c);

/* Distance between two NICs of this host, from their pci_path and numa_node
 * (as rr_netif_read_sysfs fills them). Smaller is closer; see rr_topo_class.
 * sysfs_root ("/sys" normally, NULL means "/sys") is where the NUMA distance
 * table is read: <sysfs_root>/devices/system/node/nodeN/distance, and through
 * libnuma's numa_distance() first when sysfs_root is "/sys" and libnuma
 * works. Symmetric: distance(a, b) == distance(b, a). Never fails: NULL or
 * malformed input is RR_TOPO_UNKNOWN. */
int rr_topo_distance(const char *sysfs_root, const rr_netif *a, const rr_netif *b);

/* The failover chain of nifs[dev]: the indices of the other devices, ordered by
 * distance to dev (closest first), then higher speed_mbps first, then lower
 * index, skipping i where healthy && !healthy[i] (healthy may be NULL: all
 * healthy). Writes at most max indices to chain and returns how many it wrote
 * (0 when no other healthy device exists), or RR_ERR_INVALID (< 0) for bad
 * arguments (nifs NULL, n < 0, dev outside [0, n), max < 0, chain NULL with
 * max > 0) or RR_ERR_NOMEM. The order is total, so every call on the same
 * inputs gives the same chain. */
int rr_topo_failover_chain(const char *sysfs_root, const rr_netif *nifs, int n, int dev,
                           const unsigned char *healthy, int *chain, int max);

#endif
