/* Health out: the one interface through which the net plugin reports the
 * state of NICs and of the rails to each peer, and the failovers between
 * them. Publishers (the shared health table, the telemetry event log)
 * subscribe as sinks; the plugin never talks to them directly.
 *
 * The module also keeps this process's view of every local NIC, which the
 * failover chain consults to skip NICs known to be unhealthy. All functions
 * are thread safe and cheap enough to call from the progress thread on a
 * state change (never per message). */
#ifndef RERAIL_COMMON_HEALTH_H
#define RERAIL_COMMON_HEALTH_H
#include <stdint.h>

typedef enum rr_link_state {
  RR_LINK_UP = 0,
  RR_LINK_DEGRADED = 1,   /* works, but slower or lossier than it should */
  RR_LINK_DOWN = 2,
  RR_LINK_RECOVERING = 3, /* came back; on probation before traffic returns */
} rr_link_state;

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

/* Subscribe a publisher; up to 8. Returns 0, or -1 when full. */
int rr_health_subscribe(rr_health_sink_fn fn, void *arg);
void rr_health_unsubscribe(rr_health_sink_fn fn, void *arg);

/* Report an event (time fields are filled in when zero). Logged at INFO
 * (WARN for DOWN, FAILOVER and ERROR) and forwarded to every sink. */
void rr_health_report(rr_health_event *ev);

/* Convenience for the common case of a local NIC. */
void rr_health_nic_state(int dev, const char *ifname, rr_link_state st, const char *reason);

/* This process's last known state of local NIC dev (RR_LINK_UP when never reported). */
rr_link_state rr_health_nic_get(int dev);

/* 1 once a NIC or a rail of this process was reported down (NIC_STATE or
 * RAIL_STATE into RR_LINK_DOWN), for counting what happens after the first
 * failure (verbs registrations: none should). */
int rr_health_down_seen(void);

/* The local NICs this process pools, by device index: dashboards must show a
 * healthy NIC's state too, not only the ones that reported a change. Set once
 * the plugin knows its devices (rr_health_table_start does it); a later call
 * replaces the list. Names longer than 15 characters are cut. */
void rr_health_nics_set(const char *const *names, int count);
/* How many NICs were set (0 before), and the name of device dev ("" when none). */
int rr_health_nic_count(void);
void rr_health_nic_name(int dev, char *buf, int len);
/* The transport serving pooled NIC dev ("verbs" or "tcp") and, on the verbs
 * rail, its RDMA device and port, for the publishers to show beside the
 * NIC's name. Set by the plugin once it has opened its devices; kept across
 * rr_health_nics_set. Unknown until then: "", "" and 0. */
void rr_health_nic_transport_set(int dev, const char *transport, const char *rdma_dev, int rdma_port);
void rr_health_nic_transport(int dev, char *transport, int tlen, char *rdma_dev, int dlen, int *rdma_port);

const char *rr_link_state_str(rr_link_state st);
/* "local", "peer", "path", "process"; "" for RR_WHERE_NONE. */
const char *rr_fault_where_str(rr_fault_where w);
const char *rr_health_event_str(rr_health_event_kind kind);

#endif
