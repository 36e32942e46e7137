/* rerail: the operator's command-line tool.
 *
 *   rerail devices [--json]   the NICs the net plugin would pool here
 *   rerail status [--json]    the shared health table (tools/cmd_status.c)
 *   rerail top                live per-rail throughput and latency (tools/cmd_top.c)
 *   rerail events [--follow]  the event log (tools/cmd_events.c)
 *   rerail ring-order ...     host order for NCCL's ring (tools/cmd_ring_order.c)
 *   rerail version */
#include "rr_log.h"
#include "rr_netif.h"
#include "rr_params.h"

#include <stdio.h>
#include <string.h>

#ifndef RERAIL_VERSION
#define RERAIL_VERSION "0.1.0"
#endif

static int usage(FILE *out) {
  fprintf(out,
          "usage: rerail <command>\n"
          "  devices [--json]   list the network interfaces rerail would use here\n"
          "  status [--json]    NIC and rail health of every rerail process on this host\n"
          "  top                live per-rail throughput and latency from the telemetry files\n"
          "  events [--follow]  failovers, fail-backs and errors from the telemetry event log\n"
          "  ring-order ...     host order for NCCL's inter-host ring, for mpirun/torchrun/Slurm\n"
          "  version            print the version\n"
          "each command takes --help\n");
  return out == stderr ? 2 : 0;
}

static int cmd_devices(int json) {
  const rr_params *p = rr_params_get();
  rr_netif nif[RR_MAX_NETIFS];
  int n = 0;
  if (rr_netif_discover(p->socket_ifname, nif, RR_MAX_NETIFS, &n) != RR_OK) {
    fprintf(stderr, "rerail: cannot list network interfaces\n");
    return 1;
  }
  if (json) printf("{\"ifname_filter\":\"%s\",\"devices\":[", p->socket_ifname);
  else printf("RERAIL_SOCKET_IFNAME=%s  ->  %d device(s)\n", p->socket_ifname[0] ? p->socket_ifname : "(default)", n);
  if (!json && n) printf("%-4s %-16s %-40s %-10s %-5s %s\n", "dev", "interface", "address", "speed", "numa", "pci");
  for (int i = 0; i < n; i++) {
    char abuf[64];
    rr_sockaddr_str((struct sockaddr *)&nif[i].addr, abuf, sizeof abuf);
    if (json)
      printf("%s{\"dev\":%d,\"name\":\"%s\",\"address\":\"%s\",\"speed_mbps\":%d,\"numa_node\":%d,"
             "\"pci_path\":\"%s\"}", i ? "," : "", i, nif[i].name, abuf, nif[i].speed_mbps,
             nif[i].numa_node, nif[i].pci_path);
    else
      printf("%-4d %-16s %-40s %-10d %-5d %s\n", i, nif[i].name, abuf, nif[i].speed_mbps,
             nif[i].numa_node, nif[i].pci_path[0] ? nif[i].pci_path : "-");
  }
  if (json) printf("]}\n");
  else if (n == 0) printf("no usable interface: NCCL would fall back to its own transports\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "devices")) return cmd_devices(argc > 2 && !strcmp(argv[2], "--json"));
  if (!strcmp(argv[1], "status")) { int cmd_status(int, char **); return cmd_status(argc, argv); } /* tools/cmd_status.c */
  if (!strcmp(argv[1], "top")) { int cmd_top(int, char **); return cmd_top(argc - 1, argv + 1); } /* tools/cmd_top.c */
  if (!strcmp(argv[1], "events")) { int cmd_events(int, char **); return cmd_events(argc - 1, argv + 1); } /* tools/cmd_events.c */
  if (!strcmp(argv[1], "ring-order")) { int cmd_ring_order(int, char **); return cmd_ring_order(argc - 1, argv + 1); } /* tools/cmd_ring_order.c */
  if (!strcmp(argv[1], "version")) {
    printf("rerail %s\n", RERAIL_VERSION);
    return 0;
  }
  if (!strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) return usage(stdout);
  fprintf(stderr, "rerail: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
