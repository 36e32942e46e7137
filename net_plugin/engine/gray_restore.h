/* When a demoted rail is restored (engine_gray.c, probe_and_restore): pure
 * arithmetic over judged probes, so a unit test drives it with made-up
 * timings (test/unit/test_gray_restore.c).
 *
 * Two rules, both from a false restore in the Soft-RoCE lab (a rail shaped
 * to 5 % came back while the limit was on, docs/failover.md "Degraded
 * rails"):
 * - the hold must be COVERED by healthy probes: at least two, the last
 *   ending at least the hold after the first started, none bad between. One
 *   probe at 5 % takes 0.5-1 s and probes are one per link at a time, so a
 *   hold timed from one probe's start passed with nothing else judged;
 * - the bar's reference must not fall with the sibling's load. The sibling
 *   link to the same peer host may lower it (a rail at half of what its
 *   healthy siblings deliver now is not the slow one), but not below half
 *   of what the link itself sustained: under load the sibling's rate fell
 *   to about what the shaped rail still delivered, and so did the bar. */
#ifndef RERAIL_GRAY_RESTORE_H
#define RERAIL_GRAY_RESTORE_H

#include <stdint.h>

/* A run of healthy probes of one link. */
typedef struct {
  uint64_t since;  /* the first healthy probe of the run started (valid when probes > 0) */
  uint64_t until;  /* the last one ended */
  uint32_t probes; /* healthy probes in the run (0: no run) */
} gray_ok_run;

/* A judged probe into the run: a bad one (slow, lossy, late, timed out)
 * ends it; a healthy one starts or extends it; one between the bars (noise
 * of a short probe) neither starts nor breaks it. */
static inline void gray_ok_judge(gray_ok_run *o, int ok, int bad, uint64_t start_ns, uint64_t end_ns) {
  if (bad) {
    o->probes = 0;
  } else if (ok) {
    if (!o->probes) o->since = start_ns;
    o->probes++;
    o->until = end_ns;
  }
}

/* Did healthy probes cover hold_ns? */
static inline int gray_ok_covers(const gray_ok_run *o, uint64_t hold_ns) {
  return o->probes >= 2 && o->until >= o->since && o->until - o->since >= hold_ns;
}

/* The reference a probe's rate is held against: what the link sustains
 * (own), lowered to a sibling's current rate (<= 0: none lately) at most
 * to half of own. */
static inline double gray_restore_ref(double own, double sibling) {
  if (sibling <= 0 || own <= 0 || sibling >= own) return own;
  return sibling > own / 2 ? sibling : own / 2;
}

#endif
