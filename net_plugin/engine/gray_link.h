/* What engine_gray.c (the measuring and the verdicts) and
 * engine_gray_probe.c (the probes of a demoted link and its restore) share:
 * a link's state, the table of links, and the few helpers both call. Private
 * to those two files. */
#ifndef RERAIL_GRAY_LINK_H
#define RERAIL_GRAY_LINK_H

#include "engine_internal.h"
#include "gray_latency.h"
#include "gray_level.h"
#include "gray_restore.h"

#include <stdint.h>

#define RR_GRAY_MS 1000000ull
#define RR_GRAY_LINKS 256
#define RR_GRAY_PROBE_SHRINK_MAX 3         /* a failing link's probes shrink down to 8 MiB >> 3 = 1 MiB */
#define RR_GRAY_SIBLING_NS (1000 * RR_GRAY_MS) /* a sibling's loss this recent is compared with */

typedef struct gray_link {
  int dev;
  char peer[48];
  char host[64];            /* the peer host (rr_engine_config.peer): links to it move together */
  uint64_t settle_until;    /* windows starting before this are not judged (0: settled) */
  uint64_t win_start, bytes, loaded_ns, last_loaded_ns;
  double level;             /* healthy level, bytes/s (0: not known yet) */
  double loaded_rate;       /* the last loaded window's rate, bytes/s */
  uint64_t loaded_rate_ns;  /* when it closed (0: none) */
  /* What it delivers over about a second of loaded windows, empty ones of a
   * bursty delivery included: bytes and time, each decayed per window, so the
   * rate is their quotient (gray_link_sustained_rate()), not a mean of window rates. */
  double sus_bytes, sus_ns;
  gray_sustained judge;      /* the same over a few seconds: what a slow run is held against */
  uint64_t below_since;     /* the first window of a run under the threshold (0: none) */
  uint64_t delivered_ns;    /* the last window that delivered anything closed */
  double below_frac;        /* the last such window's rate over the level; at the verdict, the
                             * run's over what the link sustains (run_slow()) */
  uint32_t run_windows, run_below; /* windows in the run, and how many were below */
  uint64_t run_bytes, run_ns; /* what the run delivered, over how long (gray_level.h) */
  int run_spared;           /* run_slow() spared this run once already (said once per run) */
  int degraded;             /* the verdict: connections demote their rails on it */
  int restored;             /* a connection's probes restored it: the others follow once alive */
  int lossy;                /* ... and it was for loss, not for its rate */
  int slowlat;              /* ... or for its latency (gray_latency.h) */
  gray_lat lat;
  /* Loss: this window's transport totals, the run of lossy windows, the
   * link's usual share retransmitted, and its last judged window's share. */
  uint64_t sent, retrans;
  uint64_t loss_since;
  uint32_t loss_windows, loss_bad;
  double loss_frac, loss_norm, last_loss;
  uint64_t last_loss_ns;
  const rr_engine *probe_owner; /* the connection whose probe is in flight (compared only) */
  uint64_t probe_since;
  gray_ok_run ok;           /* the run of probes from a healthy one, judged by its majority (gray_restore.h) */
  uint64_t probe_done_ns;   /* the last probe on this link ended */
  uint32_t probe_shrink;    /* its probes are RR_GRAY_PROBE_BYTES >> this (probe_size()) */
} gray_link;

/* Every connection's links, guarded by engine_gray.c's gray_lock (the probe
 * code runs under it, from engine_gray_tick). */
extern gray_link gray_links[RR_GRAY_LINKS];
extern int gray_nlinks;

/* Bad latency samples a run needs before silence on its rail is taken for
 * a slow path rather than a dead one, when its last sample is older than
 * the silence: one stalled acknowledgement just before a rail dies is
 * noise (gray_latency.c needs three for a verdict). */
#define RR_GRAY_SILENT_LAT_BAD 2

/* Does l's latency judge say its path is slow rather than dead? A run of
 * bad samples under way (most of the run's), and either
 * - RR_GRAY_SILENT_LAT_BAD bad ones at least, the last taken within
 *   lately_ns of now: the rail's own requests grew late until one outlasted
 *   δ (its last sample is then about δ old), or
 * - the last taken within during_ns of now, during_ns well under δ: a
 *   silent rail's own sample is as old as its last life, about δ, so a
 *   newer one is another connection's over the same NIC and peer, a request
 *   the path acknowledged, late, while this rail was silent (the Soft-RoCE
 *   lab, netem 150 ms, 1 MiB: one bad sample 112 ms before the silence).
 * Each sample is a request the peer acknowledged: a dead path gives none. */
static inline int gray_link_lat_slow(const gray_link *l, uint64_t lately_ns, uint64_t during_ns, uint64_t now) {
  const gray_lat *g = &l->lat;
  if (!g->run_since || g->run_bad * 10 < g->run_n * 6 || g->last_at > now) return 0;
  uint64_t age = now - g->last_at;
  return (g->run_bad >= RR_GRAY_SILENT_LAT_BAD && age <= lately_ns) || age <= during_ns;
}

/* Forget the runs under way and start a new window. */
void gray_run_reset(gray_link *l, uint64_t now);
/* What l delivers over about a second of loaded windows, bytes/s (0: none yet). */
double gray_link_sustained_rate(const gray_link *l);
/* The transport's totals now (RR_RAIL_CAP_PATH_STATS), 0 when it cannot say. */
int gray_path_read(engine_rail *rl, rr_rail_path_stats *out);
/* The latency criterion's settings of e's configuration. */
gray_lat_cfg gray_lat_cfg_of(const rr_engine *e);
/* The latency a healthy path to l's peer host gives (0: none known). */
double gray_lat_reference(const gray_link *l);

/* A demoted rail r of e on link l: probe it, and restore it once the probes
 * show it healthy for the hold time (engine_gray_probe.c). */
void gray_probe_and_restore(rr_engine *e, int r, gray_link *l, uint64_t now);
/* A demoted rail of e waiting for a reopen (g_reopen) gives the reopen up
 * once it has waited RR_GRAY_REOPEN_WAIT_NS: it is probed and restored on
 * the endpoint it has again (engine_gray_probe.c). */
void gray_reopen_bound(engine_rail *rl, uint64_t now);

#endif
