/* A stand-in for one process of a job, for rerail_status.sh: publishes two
 * NICs into the health table at RERAIL_HEALTH_PATH through the plugin's own
 * hook (rr_health_table_start, rr_health events, figures), prints "ready",
 * and keeps its rows until stdin closes (then stops cleanly) or it is killed.
 *
 * With "faults": rails that failed and were demoted instead, for the fault
 * lines: rrtest1's rails to 10.99.0.2 and 10.99.0.3 down, rrtest0's to
 * 10.99.0.3 demoted.
 *
 * usage: ht_writer_helper [faults]  (RERAIL_HEALTH_PATH names the table) */
#include "rr_clock.h"
#include "rr_health_bus.h"
#include "rr_health_table.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void event_to(const char *peer, rr_health_event_kind kind, int dev, const char *ifname, int to_dev,
                     const char *to_ifname, rr_link_state st, const char *reason) {
  rr_health_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = kind;
  ev.dev = dev;
  ev.to_dev = to_dev;
  ev.state = st;
  snprintf(ev.ifname, sizeof ev.ifname, "%s", ifname);
  snprintf(ev.to_ifname, sizeof ev.to_ifname, "%s", to_ifname);
  snprintf(ev.peer, sizeof ev.peer, "%s", peer);
  snprintf(ev.reason, sizeof ev.reason, "%s", reason);
  rr_health_report(&ev);
}

static void event(rr_health_event_kind kind, int dev, const char *ifname, int to_dev,
                  const char *to_ifname, rr_link_state st, const char *reason) {
  event_to("10.99.0.2", kind, dev, ifname, to_dev, to_ifname, st, reason);
}

int main(int argc, char **argv) {
  int faults = argc > 1 && !strcmp(argv[1], "faults");
  rr_netif nifs[2];
  memset(nifs, 0, sizeof nifs);
  snprintf(nifs[0].name, sizeof nifs[0].name, "rrtest0");
  snprintf(nifs[1].name, sizeof nifs[1].name, "rrtest1");
  rr_health_table_start(nifs, 2);
  if (!rr_health_table_active()) return 1;
  rr_health_table_set_figures(0, RR_HT_TX, 1.25e9, 8000, 21000);
  rr_health_table_set_figures(0, RR_HT_RX, 1.20e9, 9000, 25000);
  if (faults) {
    event_to("10.99.0.2", RR_HEV_RAIL_STATE, 1, "rrtest1", -1, "", RR_LINK_DOWN,
             "send rail1 (rrtest1 -> 10.99.0.2): silent for 1002 ms; path");
    event_to("10.99.0.3", RR_HEV_RAIL_STATE, 1, "rrtest1", -1, "", RR_LINK_DOWN,
             "send rail1 (rrtest1 -> 10.99.0.3): silent for 1001 ms; path");
    event_to("10.99.0.3", RR_HEV_RAIL_STATE, 0, "rrtest0", -1, "", RR_LINK_DEGRADED,
             "send rail0 (rrtest0 -> 10.99.0.3): delivers 4 % of its level for 3.1 s; path");
  } else {
    rr_health_nic_state(1, "rrtest1", RR_LINK_DOWN, "link down (netlink)");
    event(RR_HEV_RAIL_STATE, 1, "rrtest1", -1, "", RR_LINK_DOWN, "send rail1: connection reset");
    event(RR_HEV_FAILOVER, 1, "rrtest1", 0, "rrtest0", RR_LINK_UP, "resumed in epoch 2 on rail0");
  }
  printf("ready\n");
  fflush(stdout);
  char buf[64];
  while (read(0, buf, sizeof buf) > 0) rr_health_table_tick(rr_now_ns());
  rr_health_table_stop();
  return 0;
}
