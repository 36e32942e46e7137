/* The net plugin's process-wide health-table writer: reference counted over
 * rr_net_init/rr_net_finalize (one count per context, NCCL creates one per
 * communicator), subscribed to rr_health as a sink while it runs, and fed by
 * the background thread (tick) and the telemetry exporter (figures).
 *
 * Without a usable table every hook here is a no-op: the warning was given
 * once when the table was opened, and data keeps moving. */
#include "rr_health_table_internal.h"
#include "rr_log.h"

#include <pthread.h>
#include <stdatomic.h>

/* guards: refs, writer (and its life); before sinks_lock, names_lock and the writer's lock. */
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static int refs;
static rr_ht_writer *writer;          /* under proc_lock */
static _Atomic(rr_ht_writer *) live;  /* the same, for the lock-free check in tick */
static _Atomic uint64_t last_beat_ns; /* CLOCK_MONOTONIC of the last heartbeat */

/* Called under rr_health's sink lock; the writer only takes its own lock. */
static void sink(void *arg, const rr_health_event *ev) { rr_health_table_event(arg, ev); }

void rr_health_table_start(const rr_netif *nifs, int count) {
  pthread_mutex_lock(&proc_lock);
  if (refs++ == 0) {
    /* The NICs this process pools, for every publisher (telemetry exports a
     * state for each from the start); even when the table cannot be opened. */
    const char *names[RR_MAX_NETIFS];
    int n = 0;
    for (; nifs && n < count && n < RR_MAX_NETIFS; n++) names[n] = nifs[n].name;
    rr_health_nics_set(names, n);
    rr_ht_writer *w = NULL;
    if (rr_health_table_open_writer(NULL, NULL, &w, NULL) == RR_OK) {
      for (int i = 0; nifs && i < count; i++) rr_health_table_claim(w, i, nifs[i].name);
      if (rr_health_subscribe(sink, w) != RR_OK)
        RR_WARN("health table: rr_health has no room for another sink; only figures and "
                "heartbeats are published");
      writer = w;
      atomic_store(&live, w);
    }
  }
  pthread_mutex_unlock(&proc_lock);
}

void rr_health_table_stop(void) {
  pthread_mutex_lock(&proc_lock);
  if (refs > 0 && --refs == 0 && writer) {
    /* Unsubscribe first: once it returns no sink call is running, so the
     * writer can go. */
    rr_health_unsubscribe(sink, writer);
    atomic_store(&live, NULL);
    rr_health_table_close_writer(writer);
    writer = NULL;
  }
  pthread_mutex_unlock(&proc_lock);
}

int rr_health_table_active(void) {
  /* Under the lock: the writer may be closed and freed concurrently. */
  pthread_mutex_lock(&proc_lock);
  int on = writer && rr_health_table_publishing(writer);
  pthread_mutex_unlock(&proc_lock);
  return on;
}

void rr_health_table_tick(uint64_t now_ns) {
  /* Called every few milliseconds: one atomic load and a compare when there
   * is nothing to do. */
  if (!atomic_load_explicit(&live, memory_order_relaxed)) return;
  uint64_t last = atomic_load_explicit(&last_beat_ns, memory_order_relaxed);
  if (now_ns - last < (uint64_t)RR_HT_HEARTBEAT_MS * 1000000ull) return;
  if (!atomic_compare_exchange_strong(&last_beat_ns, &last, now_ns)) return;
  pthread_mutex_lock(&proc_lock);
  if (writer) rr_health_table_heartbeat(writer);
  pthread_mutex_unlock(&proc_lock);
}

void rr_health_table_set_figures(int dev, int dir, double bytes_per_s, uint64_t p50_ns,
                                 uint64_t p99_ns) {
  if (!atomic_load_explicit(&live, memory_order_relaxed)) return;
  /* !(x > 0) also catches NaN; 1.8e19 is the largest double below 2^64. */
  uint64_t bps = !(bytes_per_s > 0) ? 0 : bytes_per_s >= 1.8e19 ? UINT64_MAX
                                                                : (uint64_t)(bytes_per_s + 0.5);
  pthread_mutex_lock(&proc_lock);
  if (writer) rr_health_table_figures(writer, dev, dir, bps, p50_ns, p99_ns);
  pthread_mutex_unlock(&proc_lock);
}

/* NCCL dlclose()s the plugin after its last communicator, and a job may end
 * without finalizing every context: give the rows back on unload so that
 * readers do not show a process that no longer runs rerail. */
__attribute__((destructor)) static void health_table_unload(void) {
  pthread_mutex_lock(&proc_lock);
  if (writer) {
    rr_health_unsubscribe(sink, writer);
    atomic_store(&live, NULL);
    rr_health_table_close_writer(writer);
    writer = NULL;
  }
  refs = 0;
  pthread_mutex_unlock(&proc_lock);
}
