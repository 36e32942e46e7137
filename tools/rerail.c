/* rerail: the operator's command-line tool.
 *
 *   rerail devices [--json]   the devices the net plugin would pool here (tools/cmd_devices.c)
 *   rerail status [--json]    the shared health table (tools/cmd_status.c)
 *   rerail top                live per-rail throughput and latency (tools/cmd_top.c)
 *   rerail events [--follow]  the event log (tools/cmd_events.c)
 *   rerail ring-order ...     host order for NCCL's ring (tools/cmd_ring_order.c)
 *   rerail version */
#include <stdio.h>
#include <string.h>

#ifndef RERAIL_VERSION
#define RERAIL_VERSION "0.1.0"
#endif

static int usage(FILE *out) {
  fprintf(out,
          "usage: rerail <command>\n"
          "  devices [--json]   the RDMA ports and interfaces rerail would pool here, and why not others\n"
          "  status [--json]    NIC and rail health of every rerail process on this host\n"
          "  top                live per-rail throughput and latency from the telemetry files\n"
          "  events [--follow]  failovers, fail-backs and errors from the telemetry event log\n"
          "  ring-order ...     host order for NCCL's inter-host ring, for mpirun/torchrun/Slurm\n"
          "  version            print the version\n"
          "each command takes --help\n");
  return out == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (!strcmp(argv[1], "devices")) { int cmd_devices(int, char **); return cmd_devices(argc - 1, argv + 1); } /* tools/cmd_devices.c */
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
