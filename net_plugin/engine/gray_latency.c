/* The latency criterion's arithmetic (gray_latency.h). */
#include "gray_latency.h"

#include <string.h>

/* The healthy level drifts towards good samples by this share of each,
 * and drops at once to a lower one: like the rate's level, a lasting
 * change of the path becomes the norm in tens of seconds, a gray failure
 * never within the second it takes to judge. */
#define LAT_DRIFT 0.02
#define LAT_MIN_BAD 3       /* samples: one stalled acknowledgement is no verdict */

double gray_lat_excess(uint64_t dur_ns, uint64_t bytes, double rate_bps) {
  double work = rate_bps > 0 ? (double)bytes * 1e9 / rate_bps : 0;
  double ex = (double)dur_ns - work;
  return ex > 0 ? ex : 0;
}

int gray_lat_bad(const gray_lat_cfg *c, double excess_ns, double ref_ns) {
  return c->x && ref_ns > 0 && excess_ns >= (double)c->x * ref_ns && excess_ns - ref_ns >= (double)c->min_ns;
}

int gray_lat_sample(gray_lat *g, const gray_lat_cfg *c, double excess_ns, double ref_ns, uint64_t now) {
  g->last_ns = excess_ns;
  g->last_at = now;
  if (gray_lat_bad(c, excess_ns, ref_ns)) {
    if (!g->run_since) g->run_since = now;
    g->run_n++, g->run_bad++;
    if (now - g->run_since >= c->degraded_ns && g->run_bad >= LAT_MIN_BAD && g->run_bad * 10 >= g->run_n * 6)
      g->degraded = 1;
    return g->degraded;
  }
  /* Good, or between: it teaches the level; one clearly good (under half
   * the bad bound) ends the run. */
  if (!g->level_ns || excess_ns < g->level_ns) g->level_ns = excess_ns;
  else g->level_ns += (excess_ns - g->level_ns) * LAT_DRIFT;
  if (excess_ns * 2 < (double)c->x * ref_ns) g->run_since = 0, g->run_n = g->run_bad = 0, g->degraded = 0;
  else if (g->run_since) g->run_n++;
  return g->degraded;
}

void gray_lat_reset(gray_lat *g) {
  double level = g->level_ns;
  memset(g, 0, sizeof *g);
  g->level_ns = level; /* what the path gives when healthy stays known */
}
