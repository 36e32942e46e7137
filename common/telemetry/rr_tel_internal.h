/* Telemetry internals shared by the recorder (rr_telemetry.c), the exporter
 * thread (rr_tel_exporter.c), the per-rail series (rr_tel_series.c) and the
 * exporters (rr_tel_prom.c, rr_tel_events.c, rr_tel_anomaly.c).
 *
 * Ownership and locks:
 *   life   serializes starting and stopping the exporter thread (open/close/
 *          destructor); never taken by the exporter thread itself.
 *   lock   the recorder lists, the series, the event-derived tables and the
 *          flush handshake. The exporter holds it while it drains rings and
 *          does arithmetic, never while it touches a file.
 *   evq    the queue between health sinks (any thread) and the exporter.
 * The data path takes none of them: it only pushes into its recorder's ring. */
#ifndef RERAIL_COMMON_TEL_INTERNAL_H
#define RERAIL_COMMON_TEL_INTERNAL_H
#include "rr_health_bus.h"
#include "rr_tel_io.h"
#include "rr_tel_ring.h"
#include "rr_tel_stats.h"
#include "rr_telemetry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define RR_TEL_MAX_SERIES 4096
/* Every rail a connection adds takes a link (NIC, peer) and a peer entry,
 * events find theirs there: as many as rails can be recorded, so that a big
 * job's failovers still find room. */
#define RR_TEL_MAX_LINKS RR_TEL_MAX_SERIES
#define RR_TEL_MAX_NICS 64
#define RR_TEL_MAX_PEERS RR_TEL_MAX_SERIES
#define RR_TEL_EVQ 1024          /* health events waiting for the exporter */
#define RR_TEL_RESERVOIR 1024    /* latencies kept per rail per interval */
#define RR_TEL_ANOMALY_KEEP 16   /* snapshots kept per process */
#define RR_TEL_ANOMALY_QUIET_NS (10ull * 1000000000ull) /* per rail, between two snapshots */
/* How often rings are emptied (<= the interval). Each wake-up takes a core
 * from a busy-polling rank for a moment: rarely, with rings sized for it.
 * A ring that filled beyond RR_TEL_DRAIN_FILL between two drains shortens
 * the period in proportion (down to RR_TEL_DRAIN_MIN_MS), so a fast rail
 * does not drop samples while the exporter, at the lowest priority, waits
 * for a core; quiet rings let it grow back. */
#define RR_TEL_DRAIN_MS 50
#define RR_TEL_DRAIN_MIN_MS 5
#define RR_TEL_DRAIN_FILL 0.25
#define RR_TEL_TRACE_MAX (256ull << 20)

typedef struct rr_tel_config {
  char dir[1024];             /* RERAIL_TELEMETRY_DIR */
  uint64_t interval_ms;       /* RERAIL_TELEMETRY_INTERVAL, default 1000 */
  uint32_t window;            /* RERAIL_TELEMETRY_WINDOW (W), default 8 */
  uint32_t ring_slots;        /* RERAIL_TELEMETRY_RING, default 8192 (power of two) */
  double anomaly_fraction;    /* RERAIL_TELEMETRY_ANOMALY percent / 100, default 0.5; 0 = off */
  uint64_t events_max;        /* RERAIL_TELEMETRY_EVENTS_MAX bytes, default 4 MiB */
  int trace;                  /* RERAIL_TELEMETRY_TRACE=1 */
  int keep;                   /* RERAIL_TELEMETRY_KEEP=1: the last .prom stays after unload */
  char host[64];
  int pid;
} rr_tel_config;

/* Reads the RERAIL_TELEMETRY_* variables. Returns RR_OK when telemetry is
 * on (a directory is set), RR_ERR_UNSUPPORTED when off (no directory, or
 * one too long: warned). */
rr_status rr_tel_config_read(rr_tel_config *c);

typedef struct rr_tel_series rr_tel_series;

/* A recorder: one rail of one connection, one direction. */
struct rr_tel_rail {
  rr_tel_series *series;
  rr_tel_rail *next;          /* in its series' list */
  uint64_t drops_seen;        /* exporter: ring drops already counted */
  /* The endpoint's queue work (rr_tel_cost_publish): written by the data
   * path's thread, read by the exporter, relaxed both ways. */
  _Atomic uint64_t cost[RR_TEL_COST_COUNT];
  uint64_t cost_seen[RR_TEL_COST_COUNT]; /* exporter: already added to the series */
  _Atomic uint64_t messages;  /* rr_tel_message: data path writes, exporter reads, relaxed */
  uint64_t messages_seen;     /* exporter: already added to the series */
  int closed;                 /* under lock: no more records; free after the last drain */
  rr_tel_ring ring;           /* last: the slots follow */
};

/* An anomaly being captured: the samples before the drop are copied at once,
 * the ones after are appended as they arrive. */
typedef struct rr_tel_capture {
  uint64_t seq;
  uint64_t wall_ns, mono_ns;  /* when the drop was seen */
  double thr, avg;
  uint32_t before, want_after, after;
  rr_tel_sample s[];          /* before + want_after */
} rr_tel_capture;

/* What the exporter knows of one rail: all connections whose recorders carry
 * the same (nic, peer, rail, direction). Counters live as long as the process
 * (Prometheus counters must never go back). */
struct rr_tel_series {
  int dev, rail, dir;
  char nic[16];
  char peer[64];
  rr_tel_rail *recs;          /* open recorders */
  int nrec;
  /* counters */
  uint64_t requests, bytes, drops, lat_sum_ns, anomalies;
  rr_tel_cost cost;           /* queue work of every recorder it had (rr_tel_cost_kind) */
  uint64_t messages;          /* messages finished, every recorder it had (rr_tel_message) */
  /* window */
  rr_tel_window win;
  double thr;                 /* last window throughput, bytes/s */
  uint64_t requests_at_export;/* to tell an idle interval */
  int active;                 /* completed a request in the last interval */
  /* latency */
  rr_tel_reservoir res;
  uint64_t q_ns[3];           /* p50, p90, p99 of the last interval with traffic */
  int have_q;
  /* anomalies */
  rr_tel_drop_detector det;
  rr_tel_sample *raw;         /* the last raw_cap samples */
  uint32_t raw_cap, raw_n, raw_pos;
  rr_tel_capture *cap;
  uint64_t requests_at_cap_check;
  uint64_t last_anomaly_ns;   /* done time of the last drop reported */
  uint32_t max_bytes;         /* largest request seen: the rail's chunk size, in effect */
  struct rr_tel_devagg *agg;  /* this NIC and direction, for the health table; may be NULL */
};

/* State reported by health events, keyed as the events name things. */
typedef struct rr_tel_link {
  char nic[16], peer[64];
  int state;                  /* rr_link_state, -1 = never reported */
  uint64_t failovers, failbacks;
  uint64_t demotions;         /* times it was demoted as degraded */
  int demoted;                /* a demotion was counted and the link has not been up since */
  uint64_t faults[RR_WHERE_COUNT]; /* failures and demotions, by where (index rr_fault_where) */
} rr_tel_link;
typedef struct rr_tel_nic { char nic[16]; int state; } rr_tel_nic;
typedef struct rr_tel_peer { char peer[64]; uint64_t errors; } rr_tel_peer;

/* Everything the .prom file shows (under lock). */
typedef struct rr_tel_tables {
  rr_tel_link links[RR_TEL_MAX_LINKS];
  int nlinks;
  rr_tel_nic nics[RR_TEL_MAX_NICS];
  int nnics;
  rr_tel_peer peers[RR_TEL_MAX_PEERS];
  int npeers;
  uint64_t events_by_kind[RR_HEV_ANOMALY + 1];
  uint64_t events_dropped;    /* queue full, or the events file could not take them */
  uint64_t table_full;        /* events whose key found no room */
} rr_tel_tables;

/* Aggregate per (local NIC, direction) for the health table. */
typedef struct rr_tel_devagg {
  int dev, dir;
  rr_tel_reservoir res;
  double thr;                 /* sum of the active series' windows */
  int active;
} rr_tel_devagg;

typedef struct rr_tel_global {
  /* guards: running, shutdown, refs, the exporter thread's start and join (held across
   * the join: the exporter never takes it). Before lock. */
  pthread_mutex_t life;
  /* guards: cfg, stop, flush_req/flush_done, series, tables; the exporter computes under
   * it and writes files after it. Before evq_lock. */
  pthread_mutex_t lock;
  pthread_cond_t wake;        /* with lock: stop, flush, events */
  pthread_cond_t flushed;     /* with lock */
  rr_tel_config cfg;
  int running;                /* the exporter thread exists (life) */
  int stop;                   /* asked to stop (lock) */
  int shutdown;               /* the library is being unloaded: stay off (life) */
  pthread_t thread;
  int refs;                   /* open recorders (life) */
  uint64_t flush_req, flush_done;
  rr_tel_series **series;
  int nseries, series_cap;
  rr_tel_devagg devagg[2 * RR_TEL_MAX_NICS];
  int ndevagg;
  rr_tel_tables t;
  uint64_t anomaly_seq;
  int warned_series_full;
} rr_tel_global;

extern rr_tel_global rr_tel_g;

/* What one exporter cycle produces under the lock and writes after it. */
#define RR_TEL_MAX_NOTES 32
#define RR_TEL_MAX_SNAPS 8
typedef struct rr_tel_drop_note {
  rr_health_event ev;         /* RR_HEV_ANOMALY, reported once the lock is released */
} rr_tel_drop_note;
typedef struct rr_tel_cycle {
  uint64_t wall_off;          /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns */
  int trace_on;
  rr_tel_buf trace;           /* CSV lines, when RERAIL_TELEMETRY_TRACE is on */
  rr_tel_drop_note notes[RR_TEL_MAX_NOTES];
  int nnotes;
  struct { uint64_t seq; rr_tel_buf json; } snaps[RR_TEL_MAX_SNAPS];
  int nsnaps;
  uint64_t snaps_lost;        /* captures finished while RR_TEL_MAX_SNAPS were pending */
} rr_tel_cycle;

/* ---- series (rr_tel_series.c), under lock */
rr_tel_series *rr_tel_series_get(rr_tel_global *g, int dev, const char *nic, const char *peer,
                                 int rail, int dir);
void rr_tel_series_free_all(rr_tel_global *g);
/* Feed one completed request (the samples of a series in completion order). */
void rr_tel_series_feed(rr_tel_global *g, rr_tel_series *s, const rr_tel_sample *x, rr_tel_cycle *cy);
/* At an export: close the interval (percentiles, idleness, stalled captures). */
void rr_tel_series_interval(rr_tel_global *g, rr_tel_series *s, rr_tel_cycle *cy);
const char *rr_tel_dir_str(int dir);

/* ---- exporter thread (rr_tel_exporter.c) */
void *rr_tel_exporter_main(void *arg);

/* ---- Prometheus text (rr_tel_prom.c), under lock */
void rr_tel_prom_render(rr_tel_buf *b, const rr_tel_config *cfg, rr_tel_series *const *series,
                        int nseries, const rr_tel_tables *t, uint64_t wall_ns);
void rr_tel_prom_name(const rr_tel_config *cfg, char *buf, size_t len);

/* ---- events (rr_tel_events.c) */
void rr_tel_health_sink(void *arg, const rr_health_event *ev);
/* Move queued events out (exporter): returns how many, at most max. */
int rr_tel_events_take(rr_health_event *out, int max, uint64_t *dropped);
void rr_tel_events_apply(rr_tel_tables *t, const rr_health_event *ev);  /* under lock */
/* Entries that exist before anything happens (under lock): a rail of a
 * connection (state up unless reported, counters at 0), and every NIC the
 * process pools (rr_health_nics_set) with its current state. */
void rr_tel_tables_conn_rail(rr_tel_tables *t, const char *nic, const char *peer);
void rr_tel_tables_pooled_nics(rr_tel_tables *t);
void rr_tel_event_json(rr_tel_buf *b, const rr_tel_config *cfg, const rr_health_event *ev);
/* The events file with rotation at cfg->events_max (one old file kept). */
typedef struct rr_tel_evfile {
  int fd;
  off_t size;
  rr_tel_io_state io;
} rr_tel_evfile;
void rr_tel_evfile_init(rr_tel_evfile *f);
void rr_tel_evfile_close(rr_tel_evfile *f);
/* Append whole lines; RR_OK, or RR_ERR_SYSTEM (warned once per episode). */
rr_status rr_tel_evfile_write(rr_tel_evfile *f, const rr_tel_config *cfg, const char *lines, size_t len);
void rr_tel_events_name(const rr_tel_config *cfg, char *buf, size_t len);

/* ---- anomaly snapshots (rr_tel_anomaly.c) */
void rr_tel_anomaly_json(rr_tel_buf *b, const rr_tel_config *cfg, const rr_tel_series *s,
                         const rr_tel_capture *c, uint64_t wall_off);
/* Write the snapshot and delete the one RR_TEL_ANOMALY_KEEP older; a
 * failure is warned once per episode (io). */
rr_status rr_tel_anomaly_write(const rr_tel_config *cfg, uint64_t seq, const rr_tel_buf *b,
                               rr_tel_io_state *io);

/* ---- health table figures (rr_tel_health_feed.c) */
void rr_tel_feed_health_table(int dev, int dir, double bytes_per_s, uint64_t p50_ns, uint64_t p99_ns);

#endif
