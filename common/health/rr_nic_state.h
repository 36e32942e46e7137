/* The NIC-state store: this process's view of its local NICs. Each one's
 * last reported link state (what the failover chain consults to skip NICs
 * known to be unhealthy, and the monitor to tell a change), the NICs the
 * plugin pools with their names and transports (what the publishers show
 * beside a healthy NIC too), and whether anything went down since load.
 *
 * Its input is the health event bus (rr_health_bus.c), which records every
 * NIC_STATE event here as it passes, and the plugin, which names its NICs
 * once it has opened them. All functions are thread safe; reading a NIC's
 * state is one atomic load (every engine's tick does it). */
#ifndef RERAIL_COMMON_NIC_STATE_H
#define RERAIL_COMMON_NIC_STATE_H

typedef enum rr_link_state {
  RR_LINK_UP = 0,
  RR_LINK_DEGRADED = 1,   /* works, but slower or lossier than it should */
  RR_LINK_DOWN = 2,
  RR_LINK_RECOVERING = 3, /* came back; on probation before traffic returns */
} rr_link_state;

/* The bus's input: NIC dev is now in state st (a dev out of range is ignored). */
void rr_nic_state_record(int dev, rr_link_state st);
/* The bus's input: a NIC or a rail of the process went down. */
void rr_nic_state_note_down(void);

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

#endif
