/* The devices rerail pools, as the core holds them once per process: what
 * each transport opened, what they left out and why, and the out-of-band
 * interface. The plugin's core and `rerail devices` read the same table,
 * filled by the same discovery (net_core.c, transport.c). */
#ifndef RERAIL_CORE_DEVICES_H
#define RERAIL_CORE_DEVICES_H
#include "rail.h"
#include "rr_netif.h"

/* A candidate a transport or the core left out (rail.h, rr_rail_probe.left_out). */
typedef struct rr_left_out {
  char transport[8];                   /* "verbs", "tcp", "core" */
  char name[RR_RAIL_DEV_NAME_MAX];     /* "mlx5_1:1", "docker0", "verbs" (a whole transport) */
  char reason[24];                     /* RR_LEFT_OUT_* */
  char why[160];
} rr_left_out;

#define RR_LEFT_OUT_MAX 64

/* Process-wide: the devices rerail pools, each opened by the transport
 * that found it (transport.c). nif[i] is device i as an interface: its name,
 * and the device's own IP address when it has one (family AF_UNSPEC when it
 * has none, as an InfiniBand port). */
typedef struct rr_devices {
  int count;
  rr_netif nif[RR_MAX_NETIFS];
  rr_rail_dev *rail[RR_MAX_NETIFS];
  /* The out-of-band interface (oob.c): setup, authentication and reopening
   * of rails of every device whose setup sockets are not its data path
   * travel over it, so they outlive that device's own failure. need_oob:
   * some device needs one; has_oob: one was found. */
  int need_oob, has_oob;
  rr_netif oob;
  /* What was left out, in the order it was met (the first RR_LEFT_OUT_MAX). */
  int nleft;
  rr_left_out left[RR_LEFT_OUT_MAX];
} rr_devices;

/* The table as it stands (empty before discovery). */
const rr_devices *rr_core_devices(void);

/* Discover and open the devices once per process, as the plugin's first
 * init does (without a context, the health table or telemetry), and return
 * the table. Thread safe. */
const rr_devices *rr_core_devices_discover(void);

/* mr.c: the memory NCCL may register for device dev (RR_PTR_*): host, plus
 * GPU memory by address (CUDA) or by DMA-BUF when that device can register
 * it, which only verbs NICs can; dev < 0: what any pooled device can. */
int rr_core_ptr_support(int dev);

#endif
