/* The background thread: one per process, started with the first
 * connection. It turns netlink link events into NIC states (a port going
 * down is known within a millisecond, not after a TCP timeout), and drives
 * connections NCCL is not calling into, so a failure is noticed, the peer
 * is answered and a rollback completes even while NCCL waits elsewhere. */
#include "core_internal.h"
#include "rr_clock.h"
#include "rr_health_bus.h"
#include "rr_health_table.h"
#include "rr_log.h"

#include <errno.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>


/* guards: starting and joining the thread; held across the join, so never taken with
 * another lock held except a listener's (accept: rr_monitor_add). Before registry_lock. */
static pthread_mutex_t lifecycle_lock = PTHREAD_MUTEX_INITIALIZER; /* start and stop */
/* guards: engines, listeners (and their counts and capacities), started, stop_requested;
 * the thread holds it while it tries each engine's and listener's lock (docs/locking.md). */
static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;  /* the engine list */
/* Both lists grow as needed: every connection and every listener that
 * reconnects come through is driven, however many there are. */
static rr_engine **engines;
static int nengines, engines_cap;
static rr_listen_comm **listeners;
static int nlisteners, listeners_cap;
/* guards: the incoming lists; a leaf under registry_lock (level 3b), held
 * only to append or move a few pointers. A comm that connect() or accept()
 * completes is queued here, not in the lists above: those are held for a
 * whole round, which drives every idle connection (thousands of syscalls
 * with thousands of connections, longer than the 5 ms between rounds), and
 * setting up N connections at once made each of them wait for a round to
 * end (bench/RESULTS.md, "Thousands of connections"). The monitor moves
 * them into its lists at the start of its next round. */
static pthread_mutex_t incoming_lock = PTHREAD_MUTEX_INITIALIZER;
static rr_engine **incoming_engines;
static int nincoming_engines, incoming_engines_cap;
static rr_listen_comm **incoming_listeners;
static int nincoming_listeners, incoming_listeners_cap;
/* Send comms handed out before the listener's ACCEPTs (conn_confirm.c):
 * confirmed here when NCCL does not call isend first, then driven as any
 * (registry_lock; the incoming ones under incoming_lock). */
static rr_send_comm **confirming;
static int nconfirming, confirming_cap;
static rr_send_comm **incoming_confirming;
static int nincoming_confirming, incoming_confirming_cap;

/* Room for one more entry in a list (caller holds registry_lock). */
#define GROW(list, n, cap)                                                   \
  ((n) < (cap) || ({                                                         \
     int _c = (cap) ? 2 * (cap) : 64;                                        \
     __typeof__(list) _p = realloc((list), (size_t)_c * sizeof *(list));     \
     if (_p) (list) = _p, (cap) = _c;                                        \
     _p != NULL;                                                             \
   }))
/* The thread runs while connections exist, and is joined when the last one
 * closes and when the library is unloaded: NCCL dlclose()s the plugin after
 * its last communicator, and a thread left running would execute unmapped
 * code. */
static pthread_t thread;
static int started;
static volatile int stop_requested;

static int link_is_up(unsigned flags) { return (flags & IFF_UP) && (flags & IFF_RUNNING); }

/* Devices closed by a fatal event (rail.h, RR_RAIL_DEV_EV_FATAL): down
 * until their transport reports them reopened, whatever their interface
 * says (a Soft-RoCE device deleted under an interface that stays up). */
/* Lock-free: the monitor writes, rr_monitor_read_links (init's thread too) reads. */
static _Atomic int dev_closed[RR_MAX_NETIFS];

/* Link changes the monitor made: a change wakes the idle connections at
 * once (rr_engine_background's wake_idle), so their rails go down within
 * the millisecond docs/failover.md promises, not at the idle cadence.
 * Written by the monitor's thread, and by rr_monitor_read_links on init's. */
static _Atomic unsigned link_changes;

static void set_link(int dev, int up, const char *why) {
  if (up && atomic_load(&dev_closed[dev])) return;
  rr_link_state st = up ? RR_LINK_UP : RR_LINK_DOWN;
  if (rr_health_nic_get(dev) == st) return;
  rr_health_nic_state(dev, rr_core_devices()->nif[dev].name, st, why);
  atomic_fetch_add(&link_changes, 1);
}

static int dev_by_name(const char *name) {
  const rr_devices *d = rr_core_devices();
  for (int i = 0; i < d->count; i++)
    if (!strcmp(d->nif[i].name, name)) return i;
  return -1;
}

/* Initial states: whatever the interfaces say now. */
void rr_monitor_read_links(const char *why) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  const rr_devices *d = rr_core_devices();
  for (int i = 0; i < d->count; i++) {
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", d->nif[i].name);
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) == 0)
      set_link(i, link_is_up((unsigned)ifr.ifr_flags), why);
  }
  close(fd);
}

static int netlink_open(void) {
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_ROUTE);
  if (fd < 0) return -1;
  struct sockaddr_nl sa = {.nl_family = AF_NETLINK, .nl_groups = RTMGRP_LINK};
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void netlink_drain(int fd) {
  char buf[8192] __attribute__((aligned(4)));
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) return;
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_type != RTM_NEWLINK && h->nlmsg_type != RTM_DELLINK) continue;
      struct ifinfomsg *ifi = NLMSG_DATA(h);
      int len = (int)IFLA_PAYLOAD(h);
      for (struct rtattr *a = IFLA_RTA(ifi); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
        if (a->rta_type != IFLA_IFNAME) continue;
        int dev = dev_by_name((const char *)RTA_DATA(a));
        if (dev < 0) break;
        int up = h->nlmsg_type == RTM_NEWLINK && link_is_up(ifi->ifi_flags);
        set_link(dev, up, up ? "link up (netlink)" : "link down (netlink)");
        break;
      }
    }
  }
}

/* Each device's own event source (verbs: async events such as a port going
 * down or a fatal device error; TCP has none beyond netlink) and its shared
 * completion progress, which files completions into their endpoints. */
static void poll_devices(void) {
  const rr_devices *d = rr_core_devices();
  for (int i = 0; i < d->count; i++) {
    rr_rail_dev *dev = d->rail[i];
    rr_rail_dev_event ev;
    while (dev->ops->dev_event(dev, &ev) != RR_RAIL_DEV_EV_NONE) {
      if (ev.kind == RR_RAIL_DEV_EV_FATAL) atomic_store(&dev_closed[i], 1);
      if (ev.kind == RR_RAIL_DEV_EV_PORT_UP) atomic_store(&dev_closed[i], 0);
      set_link(i, ev.kind == RR_RAIL_DEV_EV_PORT_UP, ev.why);
    }
    dev->ops->dev_progress(dev);
  }
}

/* The comms registered since the last round join the lists (caller holds
 * registry_lock). One that cannot (out of memory) stays queued for the
 * next round. */
static void take_incoming(void) {
  pthread_mutex_lock(&incoming_lock);
  while (nincoming_engines && GROW(engines, nengines, engines_cap))
    engines[nengines++] = incoming_engines[--nincoming_engines];
  while (nincoming_listeners && GROW(listeners, nlisteners, listeners_cap))
    listeners[nlisteners++] = incoming_listeners[--nincoming_listeners];
  while (nincoming_confirming && GROW(confirming, nconfirming, confirming_cap))
    confirming[nconfirming++] = incoming_confirming[--nincoming_confirming];
  pthread_mutex_unlock(&incoming_lock);
}

/* The comms waiting for their ACCEPTs (caller holds registry_lock): each
 * confirmed, by this thread or by NCCL's isend since, joins the engines
 * driven; one that failed is left to NCCL, which learns it from isend. */
static void confirm_round(void) {
  for (int i = 0; i < nconfirming;) {
    rr_send_comm *s = confirming[i];
    if (rr_connect_confirm_background(s)) {
      i++;
      continue;
    }
    if (s->confirm_status == RR_OK && !GROW(engines, nengines, engines_cap)) {
      i++; /* out of memory: tried again next round */
      continue;
    }
    confirming[i] = confirming[--nconfirming];
    if (s->confirm_status == RR_OK) engines[nengines++] = &s->engine;
  }
}

/* Take p out of list (n entries): 1 when it was there. */
#define LIST_REMOVE(list, n, p)                                              \
  ({                                                                         \
    int _found = 0;                                                          \
    for (int _i = 0; _i < (n) && !_found; _i++)                              \
      if ((list)[_i] == (p)) (list)[_i] = (list)[--(n)], _found = 1;         \
    _found;                                                                  \
  })

static void *monitor_main(void *arg) {
  (void)arg;
  int nl = netlink_open();
  if (nl < 0) RR_WARN("netlink unavailable (%s): link failures are found by timeouts only", strerror(errno));
  rr_monitor_read_links("link state when monitoring began");
  unsigned links_seen = atomic_load(&link_changes);
  for (;;) {
    pthread_mutex_lock(&registry_lock);
    take_incoming();
    int busy = nengines > 0 || nconfirming > 0;
    pthread_mutex_unlock(&registry_lock);
    struct pollfd p = {.fd = nl, .events = POLLIN};
    int timeout_ms = busy ? 5 : 50;
    if (nl >= 0) poll(&p, 1, timeout_ms);
    else usleep((useconds_t)timeout_ms * 1000);
    if (nl >= 0 && (p.revents & POLLIN)) netlink_drain(nl);
    poll_devices();
    unsigned links_now = atomic_load(&link_changes);
    int wake_idle = links_now != links_seen;
    links_seen = links_now;
    uint64_t now = rr_now_ns();
    pthread_mutex_lock(&registry_lock);
    take_incoming();
    int stop = stop_requested;
    if (!stop) confirm_round();
    for (int i = 0; i < nengines && !stop; i++) rr_engine_background(engines[i], now, wake_idle);
    /* Reconnected rails arrive at listeners NCCL no longer calls accept() on. */
    for (int i = 0; i < nlisteners && !stop; i++) rr_listen_service(listeners[i]);
    pthread_mutex_unlock(&registry_lock);
    rr_health_table_tick(now); /* heartbeat: at most once a second */
    if (stop) break;
  }
  if (nl >= 0) close(nl);
  return NULL;
}

/* Caller holds registry_lock. */
static void monitor_start_locked(void) {
  stop_requested = 0;
  if (pthread_create(&thread, NULL, monitor_main, NULL) == 0) started = 1;
  else RR_WARN("cannot start the monitor thread: failures are found only while NCCL calls in");
}

/* Caller holds lifecycle_lock. */
static void monitor_stop_locked(void) {
  pthread_mutex_lock(&registry_lock);
  int join = started;
  stop_requested = 1;
  started = 0;
  pthread_mutex_unlock(&registry_lock);
  if (join) pthread_join(thread, NULL);
}

/* started changes only under lifecycle_lock (and registry_lock): read
 * under the first, it needs the second only to start the thread. */
static void monitor_ensure_started_locked(void) {
  if (!started) {
    pthread_mutex_lock(&registry_lock);
    monitor_start_locked();
    pthread_mutex_unlock(&registry_lock);
  }
}

void rr_monitor_add(rr_engine *e) {
  pthread_mutex_lock(&lifecycle_lock);
  monitor_ensure_started_locked();
  pthread_mutex_lock(&incoming_lock);
  if (GROW(incoming_engines, nincoming_engines, incoming_engines_cap)) incoming_engines[nincoming_engines++] = e;
  else RR_WARN("monitor: out of memory: a connection is driven only while NCCL calls into it");
  pthread_mutex_unlock(&incoming_lock);
  pthread_mutex_unlock(&lifecycle_lock);
}

void rr_monitor_add_confirming(rr_send_comm *s) {
  pthread_mutex_lock(&lifecycle_lock);
  monitor_ensure_started_locked();
  pthread_mutex_lock(&incoming_lock);
  if (GROW(incoming_confirming, nincoming_confirming, incoming_confirming_cap))
    incoming_confirming[nincoming_confirming++] = s;
  else RR_WARN("monitor: out of memory: a connection is driven only while NCCL calls into it");
  pthread_mutex_unlock(&incoming_lock);
  pthread_mutex_unlock(&lifecycle_lock);
}

/* A send comm waiting for its ACCEPTs is listed by itself, not its engine. */
static int confirming_remove(rr_send_comm **list, int *n, const rr_engine *e) {
  for (int i = 0; i < *n; i++)
    if (&list[i]->engine == e) {
      list[i] = list[--*n];
      return 1;
    }
  return 0;
}

void rr_monitor_remove(rr_engine *e) {
  pthread_mutex_lock(&lifecycle_lock);
  pthread_mutex_lock(&registry_lock);
  pthread_mutex_lock(&incoming_lock);
  if (!LIST_REMOVE(engines, nengines, e)) LIST_REMOVE(incoming_engines, nincoming_engines, e);
  if (!confirming_remove(confirming, &nconfirming, e))
    confirming_remove(incoming_confirming, &nincoming_confirming, e);
  int last = nengines == 0 && nincoming_engines == 0 && nconfirming == 0 && nincoming_confirming == 0;
  pthread_mutex_unlock(&incoming_lock);
  pthread_mutex_unlock(&registry_lock);
  if (last) monitor_stop_locked();
  pthread_mutex_unlock(&lifecycle_lock);
}

void rr_monitor_shutdown(void) {
  pthread_mutex_lock(&lifecycle_lock);
  monitor_stop_locked();
  pthread_mutex_unlock(&lifecycle_lock);
}

/* Each list the monitor keeps is an array `name`, its count `nname` and
 * its capacity `name_cap`: emptied and freed as one. */
#define LIST_DROP(name)                                                                            \
  do {                                                                                             \
    free(name);                                                                                    \
    name = NULL;                                                                                   \
    n##name = name##_cap = 0;                                                                      \
  } while (0)

__attribute__((destructor)) static void monitor_unload(void) {
  pthread_mutex_lock(&lifecycle_lock);
  monitor_stop_locked();
  LIST_DROP(engines);
  LIST_DROP(listeners);
  LIST_DROP(incoming_engines);
  LIST_DROP(incoming_listeners);
  LIST_DROP(confirming);
  LIST_DROP(incoming_confirming);
  pthread_mutex_unlock(&lifecycle_lock);
}

void rr_monitor_add_listener(rr_listen_comm *l) {
  pthread_mutex_lock(&incoming_lock);
  if (GROW(incoming_listeners, nincoming_listeners, incoming_listeners_cap))
    incoming_listeners[nincoming_listeners++] = l;
  else RR_WARN("monitor: out of memory: reconnects reach a listener only while NCCL calls accept()");
  pthread_mutex_unlock(&incoming_lock);
}

void rr_monitor_remove_listener(rr_listen_comm *l) {
  pthread_mutex_lock(&registry_lock);
  pthread_mutex_lock(&incoming_lock);
  if (!LIST_REMOVE(listeners, nlisteners, l)) LIST_REMOVE(incoming_listeners, nincoming_listeners, l);
  pthread_mutex_unlock(&incoming_lock);
  pthread_mutex_unlock(&registry_lock);
}
