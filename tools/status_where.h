/* Where a fault is, as only a reader of the whole host can tell (issue:
 * "a NIC that fails towards every peer is local"): one connection sees one
 * peer, and blames the path when its rail fails with both links up; the
 * health table holds every connection of the host. A NIC whose rails to
 * every peer it serves are down or degraded (at least two peers) is this
 * host's NIC or port, whatever each connection concluded.
 *
 * Which peers a NIC serves comes from the telemetry files of the table's
 * live processes (rerail_rail_degraded{nic,peer} lists every rail from the
 * first export, docs/telemetry.md): the health table only holds rails that
 * failed. Without those files nothing is concluded. */
#ifndef RERAIL_TOOLS_STATUS_WHERE_H
#define RERAIL_TOOLS_STATUS_WHERE_H
#include "rr_health_table.h"

typedef struct status_nic_reach {
  char nic[16];
  int served;               /* distinct peers it has a rail to */
  int failing;              /* of them, whose latest row here is down or degraded */
} status_nic_reach;

/* Every NIC of the snapshot's live processes (all rows with all) that has a
 * rail in their telemetry files in dir, into out (at most max). Returns the
 * count. */
int status_nic_reach_of(const char *dir, const rr_ht_snapshot *s, int all, status_nic_reach *out, int max);

/* The NIC fails towards every peer it serves: a local fault. */
static inline int status_nic_fails_everywhere(const status_nic_reach *r) {
  return r->served >= 2 && r->failing == r->served;
}

#endif
