/* The NIC-state store (rr_nic_state.h). */
#include "rr_nic_state.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define MAX_NICS 64

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

void rr_nic_state_record(int dev, rr_link_state st) {
  if (dev >= 0 && dev < MAX_NICS) atomic_store(&nic_state[dev], (int)st);
}

void rr_nic_state_note_down(void) { atomic_store(&down_seen, 1); }

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
