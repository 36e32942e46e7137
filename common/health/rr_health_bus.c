/* The health event bus (rr_health_bus.h). */
#include "rr_health_bus.h"
#include "rr_clock.h"
#include "rr_counters.h"
#include "rr_log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define MAX_SINKS 8

/* guards: sinks, nsinks; held while the sinks run, so a sink takes only a leaf lock.
 * Taken under nearly every lock of the plugin (docs/locking.md). */
static pthread_mutex_t sinks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { rr_health_sink_fn fn; void *arg; } sinks[MAX_SINKS];
static int nsinks;

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

rr_status rr_health_subscribe(rr_health_sink_fn fn, void *arg) {
  rr_status rc = RR_ERR_INTERNAL; /* more publishers than rerail has */
  pthread_mutex_lock(&sinks_lock);
  if (nsinks < MAX_SINKS) {
    sinks[nsinks].fn = fn;
    sinks[nsinks].arg = arg;
    nsinks++;
    rc = RR_OK;
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
  /* The store first: a sink, or an engine woken by one, reads it. */
  if (ev->kind == RR_HEV_NIC_STATE) rr_nic_state_record(ev->dev, ev->state);
  if ((ev->kind == RR_HEV_NIC_STATE || ev->kind == RR_HEV_RAIL_STATE) && ev->state == RR_LINK_DOWN)
    rr_nic_state_note_down();
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

