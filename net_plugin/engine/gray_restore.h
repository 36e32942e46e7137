/* When a demoted rail is restored (engine_gray_probe.c, gray_probe_and_restore): pure
 * arithmetic over judged probes, so a unit test drives it with made-up
 * timings (test/unit/test_gray_restore.c).
 *
 * Three rules, all from the Soft-RoCE lab's slow rail (docs/failover.md
 * "Degraded rails"):
 * - the hold must be COVERED by healthy probes: at least two, the last
 *   ending at least the hold after the first started. One probe at 5 %
 *   takes 0.5-1 s and probes are one per link at a time, so a hold timed
 *   from one probe's start passed with nothing else judged (a rail shaped to
 *   5 % came back while the limit was on);
 * - the run is judged by its MAJORITY, not by its worst probe: a bad probe
 *   counts against the run instead of ending it; the run ends only when its
 *   bad probes outnumber its healthy ones, and restores only while healthy
 *   ones are more than bad ones and the latest judged probe was healthy.
 *   Right after the limit goes, about half of an emulated NIC's probes are
 *   still under the bar (they compete for the same CPUs as the traffic on
 *   the other rail), and with "any slow probe restarts the run" the healed
 *   rail came back 2.9-4.4 s after the heal. A rail still shaped gives
 *   no healthy majority: its probes are all under the bar (next rule).
 *   The rule tolerates bad probes, so it is safe only where a path still
 *   faulted gives no healthy one at all: two healthy probes among any
 *   number of bad ones make a run. For a link demoted for its latency a
 *   probe's time less what its bytes take at the level did not hold to
 *   that (under light traffic the level is low, and a big probe's
 *   rate-explained time swallowed a 100 ms delay: the Soft-RoCE lab,
 *   bench/RESULTS.md 16c, run 15, restored with the delay on), so such a
 *   probe is held to the latency bar on its whole time
 *   (engine_gray_probe.c, lat_probe_bar), which a path delayed by the bar
 *   or more exceeds whatever the probe's size and rate;
 * - the bar's reference must not fall with the sibling's load. The sibling
 *   link to the same peer host may lower it (a rail at half of what its
 *   healthy siblings deliver now is not the slow one), but not below half
 *   of what the link itself sustained: under load the sibling's rate fell
 *   to about what the shaped rail still delivered, and so did the bar. */
#ifndef RERAIL_GRAY_RESTORE_H
#define RERAIL_GRAY_RESTORE_H

#include <stdint.h>

/* A run of probes of one link that began with a healthy one. */
typedef struct {
  uint64_t since;  /* the first healthy probe of the run started (valid when probes > 0) */
  uint64_t until;  /* the last healthy one ended */
  uint32_t probes; /* healthy probes in the run (0: no run) */
  uint32_t bad;    /* bad probes judged since the run began */
  int last_ok;     /* the latest probe with a verdict was healthy */
} gray_ok_run;

/* A judged probe into the run: a healthy one starts or extends it; a bad
 * one (slow, lossy, late, timed out) counts against it and ends it once bad
 * ones outnumber healthy ones; one between the bars (noise of a short
 * probe) neither starts, extends nor counts against it. */
static inline void gray_ok_judge(gray_ok_run *o, int ok, int bad, uint64_t start_ns, uint64_t end_ns) {
  if (bad) {
    o->last_ok = 0;
    if (o->probes && ++o->bad > o->probes) o->probes = 0, o->bad = 0;
  } else if (ok) {
    if (!o->probes) o->since = start_ns, o->bad = 0;
    o->probes++;
    o->until = end_ns;
    o->last_ok = 1;
  }
}

/* Forget the run (a new demotion, a hard event on the link). */
static inline void gray_ok_reset(gray_ok_run *o) {
  o->probes = o->bad = 0;
  o->last_ok = 0;
}

/* Did healthy probes cover hold_ns, as the run's majority and its latest word? */
static inline int gray_ok_covers(const gray_ok_run *o, uint64_t hold_ns) {
  return o->probes >= 2 && o->probes > o->bad && o->last_ok && o->until >= o->since &&
         o->until - o->since >= hold_ns;
}

/* The reference a probe's rate is held against: what the link sustains
 * (own), lowered to a sibling's current rate (<= 0: none lately) at most
 * to half of own. */
static inline double gray_restore_ref(double own, double sibling) {
  if (sibling <= 0 || own <= 0 || sibling >= own) return own;
  return sibling > own / 2 ? sibling : own / 2;
}

#endif
