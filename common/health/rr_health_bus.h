/* The health event bus: the one interface through which the net plugin
 * reports the state of NICs and of the rails to each peer, and the failovers
 * between them. Publishers (the shared health table, the telemetry event
 * log) subscribe as sinks; the plugin never talks to them directly. Each
 * NIC_STATE event is also recorded in the NIC-state store (rr_nic_state.h),
 * the process's view of its NICs that the failover chain reads. All
 * functions are thread safe and cheap enough to call from the progress
 * thread on a state change (never per message). */
#ifndef RERAIL_COMMON_HEALTH_BUS_H
#define RERAIL_COMMON_HEALTH_BUS_H
#include <stdint.h>

#include "rr_nic_state.h"  /* an event carries a rr_link_state */
#include "rr_status.h"

typedef enum rr_health_event_kind {
  RR_HEV_NIC_STATE = 1,   /* a local NIC changed state */
  RR_HEV_RAIL_STATE,      /* a rail to a peer changed state */
  RR_HEV_FAILOVER,        /* traffic to a peer moved off a rail */
  RR_HEV_FAILBACK,        /* traffic returned to a healed rail */
  RR_HEV_ERROR,           /* a connection failed for good (no rail left, peer dead) */
  RR_HEV_ANOMALY,         /* telemetry saw a throughput drop */
} rr_health_event_kind;

#define RR_HEALTH_TEXT 96

/* Where a rail's failure or demotion is (docs/failover.md, "Where a fault
 * is"): this host's NIC or port, the peer's, the path between two working
 * ends (cable, optics, switch), or the peer process. */
typedef enum rr_fault_where {
  RR_WHERE_NONE = 0,
  RR_WHERE_LOCAL,
  RR_WHERE_PEER,
  RR_WHERE_PATH,
  RR_WHERE_PROCESS,
  RR_WHERE_COUNT
} rr_fault_where;

typedef struct rr_health_event {
  rr_health_event_kind kind;
  uint64_t time_ns;          /* CLOCK_MONOTONIC */
  uint64_t wall_ns;          /* CLOCK_REALTIME, for humans and dashboards */
  int dev;                   /* local NIC (device index), -1 when none */
  int to_dev;                /* FAILOVER/FAILBACK: where traffic went, -1 when none */
  rr_link_state state;       /* NIC_STATE/RAIL_STATE: the new state */
  char ifname[16];
  char to_ifname[16];
  char peer[64];             /* the remote end ("10.77.0.2"), "" when local only */
  char reason[RR_HEALTH_TEXT];
  uint64_t stall_ns;         /* FAILOVER: how long traffic stood still */
  rr_fault_where where;      /* RAIL_STATE into down/degraded, ERROR: where the fault is */
} rr_health_event;

typedef void (*rr_health_sink_fn)(void *arg, const rr_health_event *ev);

/* Subscribe a publisher; up to 8. Returns RR_OK, or RR_ERR_INTERNAL when
 * full (more publishers than rerail has). */
rr_status rr_health_subscribe(rr_health_sink_fn fn, void *arg);
void rr_health_unsubscribe(rr_health_sink_fn fn, void *arg);

/* Report an event (time fields are filled in when zero). Logged at INFO
 * (WARN for DOWN, FAILOVER and ERROR) and forwarded to every sink. */
void rr_health_report(rr_health_event *ev);

/* Convenience for the common case of a local NIC. */
void rr_health_nic_state(int dev, const char *ifname, rr_link_state st, const char *reason);

/* "local", "peer", "path", "process"; "" for RR_WHERE_NONE. */
const char *rr_fault_where_str(rr_fault_where w);
const char *rr_health_event_str(rr_health_event_kind kind);

#endif
