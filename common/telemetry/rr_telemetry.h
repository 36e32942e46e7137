/* Telemetry recorder: the data path's side.
 *
 * Every rail endpoint owns one recorder per direction. The data path calls
 * rr_tel_record() once per work request (a chunk write or its arrival) with
 * the post and completion times (rr_now_ns) and the bytes moved. Recording
 * must stay lock-free and cheap (no system call, no allocation, no lock): it
 * pushes into a per-recorder single-producer ring that the exporter thread
 * drains into sliding windows (RERAIL_TELEMETRY_WINDOW requests), latency
 * percentiles, counters, Prometheus text files, JSON-lines events and anomaly
 * snapshots (see rr_telemetry.c, rr_tel_exporter.c, docs/telemetry.md). With
 * telemetry off, open() returns NULL and record() on NULL is a single branch.
 *
 * Telemetry is on when RERAIL_TELEMETRY_DIR is set; the exporter thread
 * starts with the first open() and is joined when the last recorder closes
 * and when the library is unloaded. Nothing needs to be called at init. */
#ifndef RERAIL_COMMON_TELEMETRY_H
#define RERAIL_COMMON_TELEMETRY_H
#include <stdint.h>

#include "rr_status.h"

typedef struct rr_tel_rail rr_tel_rail;

enum rr_tel_dir { RR_TEL_TX = 0, RR_TEL_RX = 1 };

/* A recorder for one rail of one connection. dev/ifname: the local NIC;
 * peer: the remote address; rail: the rail index inside the connection.
 * Returns NULL when telemetry is off or cannot be set up (never fatal). */
rr_tel_rail *rr_tel_rail_open(int dev, const char *ifname, const char *peer, int rail, int dir);
void rr_tel_rail_close(rr_tel_rail *t);

/* A connection to peer has a rail over the local NIC ifname: from the next
 * export on, the rail's state gauge reads up (unless a state was already
 * reported for it) and its failover, fail-back and connection-error counters
 * read 0, so that dashboards see healthy rails and rate() sees the first
 * increment. peer is the connection's peer as its health events name it
 * (rr_health_event.peer), not the rail's remote address. The engine calls it
 * once per rail it adds, after rr_tel_rail_open(); a no-op when telemetry is
 * off. The entries stay for the process's life (counters never go back). */
void rr_tel_conn_rail_add(const char *ifname, const char *peer);

/* Data path. post_ns <= done_ns. */
void rr_tel_record_slow(rr_tel_rail *t, uint64_t post_ns, uint64_t done_ns, uint32_t bytes);
static inline void rr_tel_record(rr_tel_rail *t, uint64_t post_ns, uint64_t done_ns, uint32_t bytes) {
  if (t) rr_tel_record_slow(t, post_ns, done_ns, bytes);
}

/* The host's work on one endpoint's queues, as running totals the
 * transport keeps (rr_rail_ep.cost): what a message costs the CPU and the
 * NIC's doorbell beyond its bytes. Verbs: a doorbell is one ibv_post_send or
 * ibv_post_recv call (a chained list is one), a work request one element of
 * it, a completion one polled work completion (send: signalled requests
 * only). Plain counters, written by the endpoint's owner alone. */
enum rr_tel_cost_kind {
  RR_TEL_COST_DOORBELLS_SEND = 0,
  RR_TEL_COST_DOORBELLS_RECV,
  RR_TEL_COST_WRS_SEND,
  RR_TEL_COST_WRS_RECV,
  RR_TEL_COST_CQES_SEND,
  RR_TEL_COST_CQES_RECV,
  RR_TEL_COST_COUNT
};
typedef struct rr_tel_cost {
  uint64_t n[RR_TEL_COST_COUNT];
} rr_tel_cost;

/* Add what *total gained since *published to the recorder's totals and
 * remember it in *published. Called by the one thread that owns the
 * endpoint (from progress, and before the endpoint goes), so the exporter
 * sees the totals at most one progress call late; a recorder handed to a
 * new endpoint keeps counting from where the old one stopped. Relaxed
 * stores only: no lock, no read-modify-write. */
void rr_tel_cost_publish_slow(rr_tel_rail *t, const rr_tel_cost *total, rr_tel_cost *published);
static inline void rr_tel_cost_publish(rr_tel_rail *t, const rr_tel_cost *total, rr_tel_cost *published) {
  if (t) rr_tel_cost_publish_slow(t, total, published);
}

/* One message finished on the recorder's rail: the engine calls it where a
 * message's last chunk went (tx: its write was posted) or landed (rx: it
 * was accepted into its posted receive), once per message and per round (a
 * message replayed after a rollback counts again where it finished: it cost
 * the queues again). The denominator of the queue-work series: doorbells
 * per message and so on (docs/telemetry.md). Written by the recorder's one
 * data-path thread: a relaxed load and store, no locked add. */
void rr_tel_message_slow(rr_tel_rail *t);
static inline void rr_tel_message(rr_tel_rail *t) {
  if (t) rr_tel_message_slow(t);
}

/* Keep the exporter running with no recorder open, e.g. from the net
 * plugin's init to its finalize, so that health events between connections
 * (a NIC going down before the first one) reach the event log and the .prom
 * file stays between communicators. Optional: recorders start and stop the
 * exporter by themselves. Returns RR_OK (call rr_tel_release() once),
 * RR_ERR_UNSUPPORTED when telemetry is off, or RR_ERR_SYSTEM when the
 * exporter thread cannot start (warned). */
rr_status rr_tel_retain(void);
void rr_tel_release(void);

/* ---- For tests and tools (never the data path). */

/* Run one full exporter cycle now (drain every ring, write every file) and
 * wait for it. Returns RR_OK, or RR_ERR_UNSUPPORTED when no exporter runs. */
rr_status rr_tel_flush(void);

/* 1 while the exporter thread runs. */
int rr_tel_running(void);

/* What the exporter knows of one rail (as of its last drain). */
typedef struct rr_tel_rail_figures {
  uint64_t requests, bytes, dropped, anomalies;
  double throughput;          /* bytes/s over the last window */
  int have_latency;
  uint64_t p50_ns, p90_ns, p99_ns; /* of the last interval with traffic */
  rr_tel_cost cost;           /* the queues' work (rr_tel_cost_publish) */
  uint64_t messages;          /* messages finished on the rail (rr_tel_message) */
} rr_tel_rail_figures;
/* Returns RR_OK, or RR_ERR_INVALID when the rail was never opened. */
rr_status rr_tel_rail_figures_get(const char *nic, const char *peer, int rail, int dir, rr_tel_rail_figures *out);

/* Stop the exporter for good and remove this process's .prom file; later
 * opens return NULL. The library destructor does this. */
void rr_tel_shutdown(void);

/* Forget every rail and event table and allow opening again: tests only,
 * with no recorder open. */
void rr_tel_reset_for_tests(void);

#endif
