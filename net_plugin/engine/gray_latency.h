/* The latency criterion of gray failures (engine_gray.c): is a link's
 * request latency many times what a healthy path gives, for long enough?
 * Pure arithmetic over samples, so a unit test drives it with made-up
 * timings (test/unit/test_gray_latency.c).
 *
 * A sample is one burst the sender posted onto an idle rail (nothing in
 * flight), timed until the peer acknowledged all of it (rr_rail_ops.flushed),
 * with nothing posted behind it meanwhile: a request's whole latency, not
 * its wait behind others. Of that time, bytes / rate is the rail's rate at
 * work, which the rate criterion judges; the rest, the *excess*, is the
 * path's latency: round trips, a queue in the fabric, a peer slow to
 * acknowledge. A rail whose excess is many times the reference (the best of
 * its own healthy level and its siblings': the links to the same peer host)
 * is slow per request even when it delivers its full rate (a longer path, a
 * deep switch buffer), and every collective waits on it. */
#ifndef RERAIL_GRAY_LATENCY_H
#define RERAIL_GRAY_LATENCY_H
#include <stdint.h>

typedef struct gray_lat_cfg {
  uint32_t x;               /* degraded: excess at least x times the reference (0: off) */
  uint64_t min_ns;          /* ... and at least min_ns over it (noise of a busy host) */
  uint64_t degraded_ns;     /* ... in most samples for this long */
} gray_lat_cfg;

typedef struct gray_lat {
  double level_ns;          /* healthy excess: the lowest seen, drifting up slowly (0: none yet) */
  uint64_t run_since;       /* the first bad sample of a run (0: none) */
  uint32_t run_n, run_bad;  /* samples in the run, and how many were bad */
  double last_ns;           /* the last sample's excess */
  uint64_t last_at;         /* when it was taken */
  int degraded;             /* the verdict */
} gray_lat;

/* The excess of a sample: duration less what bytes take at rate_bps
 * (bytes/s; 0: unknown, the whole duration), at least 0. */
double gray_lat_excess(uint64_t dur_ns, uint64_t bytes, double rate_bps);
/* Is an excess bad against the reference? */
int gray_lat_bad(const gray_lat_cfg *c, double excess_ns, double ref_ns);
/* One sample's excess at `now` against the reference ref_ns (the best of
 * the link's own level and its siblings'; 0: none known yet, the sample
 * only teaches the level). Returns the verdict (also in g->degraded). */
int gray_lat_sample(gray_lat *g, const gray_lat_cfg *c, double excess_ns, double ref_ns, uint64_t now);
/* Forget the run under way and the verdict (a hard event on the link). */
void gray_lat_reset(gray_lat *g);

#endif
