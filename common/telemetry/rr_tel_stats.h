/* The arithmetic of telemetry, free of threads and files (unit tested alone):
 * the sliding window of W requests, the latency reservoir and its
 * percentiles, and the throughput-drop detector. All of it runs on the
 * exporter thread. */
#ifndef RERAIL_COMMON_TEL_STATS_H
#define RERAIL_COMMON_TEL_STATS_H
#include <stdint.h>

#include "rr_status.h"

/* ---- Sliding window: throughput of the last W requests of a rail.
 *
 * throughput = bytes of the last W / the time the rail was busy with them.
 * A request is busy from its post until its completion, except that a request
 * that was queued behind the one completed before it only starts when that
 * one completes: start_i = max(post_i, done_{i-1}), busy_i = done_i - start_i.
 * For back-to-back traffic the sum of busy_i over the window is exactly
 * "done of the newest - post of the oldest" with the oldest's post clipped to
 * its predecessor's completion, so a deep send queue (posts long before the
 * wire takes them) does not dilute the figure, and an idle gap between
 * bursts (no request outstanding) does not read as a slow rail. Samples of
 * several connections on one rail, merged in completion order, give the
 * rail's aggregate. */
typedef struct rr_tel_window {
  uint32_t w;          /* W */
  uint32_t n;          /* samples held, <= w */
  uint32_t pos;        /* next slot */
  uint64_t prev_done;  /* latest completion seen */
  uint64_t sum_bytes, sum_busy;
  struct rr_tel_win_entry { uint64_t busy; uint32_t bytes; } *e;
} rr_tel_window;

rr_status rr_tel_window_init(rr_tel_window *win, uint32_t w); /* RR_OK, or RR_ERR_NOMEM */
void rr_tel_window_fini(rr_tel_window *win);
/* Add one completed request; returns the window's throughput in bytes/s
 * (0 while the window holds no busy time). */
double rr_tel_window_add(rr_tel_window *win, uint64_t post_ns, uint64_t done_ns, uint32_t bytes);
static inline int rr_tel_window_full(const rr_tel_window *win) { return win->n == win->w; }

/* ---- Latency reservoir: a uniform sample (Vitter's algorithm R) of the
 * latencies seen since the last reset, at most `cap` of them, so that
 * percentiles cost bounded memory and time however many requests arrive. */
typedef struct rr_tel_reservoir {
  uint32_t cap, n;
  uint64_t seen;       /* latencies offered since the reset */
  uint64_t rng;        /* xorshift64 state */
  uint64_t *v;
} rr_tel_reservoir;

rr_status rr_tel_res_init(rr_tel_reservoir *r, uint32_t cap, uint64_t seed); /* RR_OK, or RR_ERR_NOMEM */
void rr_tel_res_fini(rr_tel_reservoir *r);
void rr_tel_res_add(rr_tel_reservoir *r, uint64_t x);
void rr_tel_res_reset(rr_tel_reservoir *r);
/* Sort the reservoir and write the nearest-rank quantile for each q (0 < q <= 1).
 * Returns RR_OK, or RR_AGAIN when the reservoir is empty (out untouched). */
rr_status rr_tel_res_quantiles(rr_tel_reservoir *r, const double *q, int nq, uint64_t *out);
/* Nearest rank on sorted values: the smallest x with at least q*n values <= x. */
uint64_t rr_tel_quantile_sorted(const uint64_t *sorted, uint32_t n, double q);

/* ---- Throughput-drop detector.
 *
 * The "recent average" is the median of the last RR_TEL_DROP_POOL disjoint
 * windows (one every W requests) that ended at least W requests before the
 * current one, so the falling window never drags its own reference down. A
 * median, because window figures have outliers both ways: a send completes
 * when the kernel takes the data, so an empty socket buffer makes a window
 * look absurdly fast, and a descheduled progress thread makes one look slow.
 * A drop is 2W consecutive windows below `fraction` of the reference: one
 * slow request stays in the window for W windows, so a drop must outlast
 * any single request; the reference must hold half a pool of windows first,
 * and holds still while a drop is being confirmed. After a
 * drop the detector re-arms when the window climbs back to the fraction of
 * the (adapting) reference: one drop, one report. */
#define RR_TEL_DROP_POOL 16
typedef struct rr_tel_drop_detector {
  uint32_t w;
  uint32_t count;        /* windows since the last pool entry */
  uint32_t pool_n, pool_pos;
  double pool[RR_TEL_DROP_POOL];
  double ref;            /* median of the pool minus its newest; 0 = not enough yet */
  uint32_t below;        /* consecutive windows under the limit */
  int armed;
} rr_tel_drop_detector;

rr_status rr_tel_drop_init(rr_tel_drop_detector *d, uint32_t w); /* RR_OK */
void rr_tel_drop_fini(rr_tel_drop_detector *d);
/* Feed the throughput of each full window (one per request). Returns 1 when
 * a drop is confirmed (and writes the reference it fell from to *avg_out),
 * else 0. fraction <= 0 disables detection. */
int rr_tel_drop_step(rr_tel_drop_detector *d, double thr, double fraction, double *avg_out);

#endif
