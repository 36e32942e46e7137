#include "rr_health.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define MAX_SINKS 8
#define MAX_NICS 64

/* guards: sinks, nsinks; held while the sinks run, so a sink takes only a leaf lock.
 * Taken under nearly every lock of the plugin (docs/locking.md). */
static pthread_mutex_t sinks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { rr_health_sink_fn fn; void *arg; } sinks[MAX_SINKS];
static int nsinks;
/* Lock-free: each NIC's link state, written on a change, read by every engine's tick. */
static _Atomic int nic_state[MAX_NICS];
/* Whether any NIC or rail of the process was reported down since load. */
static _Atomic int down_seen;
/* The pooled NICs' names (rr_health_nics_set); read by the telemetry exporter. */
/* guards: nic_names, nnic_names, nic_transport; a leaf. */
static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;
static char nic_names[MAX_NICS][16];
static int nnic_names;
/* Their transports (rr_health_nic_transport_set), under names_lock too. */
static struct { char transport[8]; char rdma_dev[32]; int rdma_port; } nic_transport[MAX_NICS];

const char *rr_link_state_str(rr_link_state st) {
  switch (st) {
  case RR_LINK_UP: return "up";
  case RR_LINK_DEGRADED: return "degraded";
  case RR_LINK_DOWN: return "down";
  case RR_LINK_RECOVERING: return "recovering";
  }
  return "unknown";
}

const char *rr_fault_where_str(rr_fault_where w) {
  switch (w) {
  case RR_WHERE_LOCAL: return "local";
  case RR_WHERE_PEER: return "peer";
  case RR_WHERE_PATH: return "path";
  case RR_WHERE_PROCESS: return "process";
  default: return "";
  }
}

const char *rr_health_event_str(rr_health_event_kind kind) {
  switch (kind) {
  case RR_HEV_NIC_STATE: return "nic_state";
  case RR_HEV_RAIL_STATE: return "rail_state";
  case RR_HEV_FAILOVER: return "failover";
  case RR_HEV_FAILBACK: return "failback";
  case RR_HEV_ERROR: return "error";
  case RR_HEV_ANOMALY: return "anomaly";
  }
  return "unknown";
}

int rr_health_subscribe(rr_health_sink_fn fn, void *arg) {
  int rc = -1;
  pthread_mutex_lock(&sinks_lock);
  if (nsinks < MAX_SINKS) {
    sinks[nsinks].fn = fn;
    sinks[nsinks].arg = arg;
    nsinks++;
    rc = 0;
  }
  pthread_mutex_unlock(&sinks_lock);
  return rc;
}

void rr_health_unsubscribe(rr_health_sink_fn fn, void *arg) {
  pthread_mutex_lock(&sinks_lock);
  for (int i = 0; i < nsinks; i++)
    if (sinks[i].fn == fn && sinks[i].arg == arg) {
      sinks[i] = sinks[--nsinks];
      break;
    }
  pthread_mutex_unlock(&sinks_lock);
}

void rr_health_report(rr_health_event *ev) {
  if (!ev->time_ns) ev->time_ns = rr_now_ns();
  if (!ev->wall_ns) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ev->wall_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  }
  if (ev->kind == RR_HEV_NIC_STATE && ev->dev >= 0 && ev->dev < MAX_NICS)
    atomic_store(&nic_state[ev->dev], (int)ev->state);
  if ((ev->kind == RR_HEV_NIC_STATE || ev->kind == RR_HEV_RAIL_STATE) && ev->state == RR_LINK_DOWN)
    atomic_store(&down_seen, 1);
  /* Counted here, where every transport's events pass, for tests that run
   * without telemetry (the .prom file has them per NIC and peer). */
  if (ev->kind == RR_HEV_FAILOVER) rr_counter_inc(RR_CTR_FAILOVERS);
  else if (ev->kind == RR_HEV_FAILBACK) rr_counter_inc(RR_CTR_FAILBACKS);
  else if (ev->kind == RR_HEV_ERROR) rr_counter_inc(RR_CTR_CONNECTION_ERRORS);
  /* Rail states change per connection (many of them per NIC): INFO. What an
   * operator must see is the NIC going down, the failover and a hard error. */
  int warn = ev->kind == RR_HEV_FAILOVER || ev->kind == RR_HEV_FAILBACK ||
             ev->kind == RR_HEV_ERROR || ev->kind == RR_HEV_NIC_STATE;
  char what[160];
  switch (ev->kind) {
  case RR_HEV_FAILOVER:
  case RR_HEV_FAILBACK:
    snprintf(what, sizeof what, "%s -> %s, stalled %.3f ms", ev->ifname[0] ? ev->ifname : "?",
             ev->to_ifname[0] ? ev->to_ifname : "?", (double)ev->stall_ns / 1e6);
    break;
  default:
    snprintf(what, sizeof what, "%s %s", ev->ifname[0] ? ev->ifname : "-", rr_link_state_str(ev->state));
  }
  rr_log_emit(warn ? RR_LOG_WARN : RR_LOG_INFO, RR_SUB_NET, __FILE__, __LINE__, "health: %s %s%s%s (%s)",
              rr_health_event_str(ev->kind), what, ev->peer[0] ? " peer " : "", ev->peer, ev->reason);
  pthread_mutex_lock(&sinks_lock);
  for (int i = 0; i < nsinks; i++) sinks[i].fn(sinks[i].arg, ev);
  pthread_mutex_unlock(&sinks_lock);
}

void rr_health_nic_state(int dev, const char *ifname, rr_link_state st, const char *reason) {
  rr_health_event ev;
  memset(&ev, 0, sizeof ev);
  ev.kind = RR_HEV_NIC_STATE;
  ev.dev = dev;
  ev.to_dev = -1;
  ev.state = st;
  snprintf(ev.ifname, sizeof ev.ifname, "%s", ifname ? ifname : "");
  snprintf(ev.reason, sizeof ev.reason, "%s", reason ? reason : "");
  rr_health_report(&ev);
}

rr_link_state rr_health_nic_get(int dev) {
  if (dev < 0 || dev >= MAX_NICS) return RR_LINK_UP;
  return (rr_link_state)atomic_load(&nic_state[dev]);
}

int rr_health_down_seen(void) { return atomic_load(&down_seen); }

void rr_health_nics_set(const char *const *names, int count) {
  if (count < 0 || !names) count = 0;
  if (count > MAX_NICS) count = MAX_NICS;
  pthread_mutex_lock(&names_lock);
  for (int i = 0; i < count; i++) snprintf(nic_names[i], sizeof nic_names[i], "%s", names[i] ? names[i] : "");
  nnic_names = count;
  pthread_mutex_unlock(&names_lock);
}

int rr_health_nic_count(void) {
  pthread_mutex_lock(&names_lock);
  int n = nnic_names;
  pthread_mutex_unlock(&names_lock);
  return n;
}

void rr_health_nic_transport_set(int dev, const char *transport, const char *rdma_dev, int rdma_port) {
  if (dev < 0 || dev >= MAX_NICS) return;
  pthread_mutex_lock(&names_lock);
  snprintf(nic_transport[dev].transport, sizeof nic_transport[dev].transport, "%s", transport ? transport : "");
  snprintf(nic_transport[dev].rdma_dev, sizeof nic_transport[dev].rdma_dev, "%s", rdma_dev ? rdma_dev : "");
  nic_transport[dev].rdma_port = rdma_port > 0 ? rdma_port : 0;
  pthread_mutex_unlock(&names_lock);
}

void rr_health_nic_transport(int dev, char *transport, int tlen, char *rdma_dev, int dlen, int *rdma_port) {
  int in = dev >= 0 && dev < MAX_NICS;
  pthread_mutex_lock(&names_lock);
  if (transport && tlen > 0) snprintf(transport, (size_t)tlen, "%s", in ? nic_transport[dev].transport : "");
  if (rdma_dev && dlen > 0) snprintf(rdma_dev, (size_t)dlen, "%s", in ? nic_transport[dev].rdma_dev : "");
  if (rdma_port) *rdma_port = in ? nic_transport[dev].rdma_port : 0;
  pthread_mutex_unlock(&names_lock);
}

void rr_health_nic_name(int dev, char *buf, int len) {
  if (len <= 0) return;
  pthread_mutex_lock(&names_lock);
  snprintf(buf, (size_t)len, "%s", dev >= 0 && dev < nnic_names ? nic_names[dev] : "");
  pthread_mutex_unlock(&names_lock);
}
