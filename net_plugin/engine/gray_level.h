/* What a link's 100 ms windows are judged against for a demotion
 * (engine_gray.c, window_close): pure arithmetic, so a unit test replays a
 * bursty rail's windows in virtual time (test/unit/test_gray_level.c).
 *
 * The link's level is its best window, decaying slowly: it keeps the
 * fastest the link ever went, which is what makes a drop to a few percent
 * stand out within a second. Where completions come in bursts (an emulated
 * NIC completes a 4 MiB chain at a time) a window that caught two bursts
 * reads twice what the link carries: in the Soft-RoCE lab the level stood at
 * 78 MB/s where the veth sent 45, and a healed rail, restored and carrying
 * its traffic again at a fifth of that level, was demoted again ("delivers
 * 11 % of its level") in two of three runs. So a window is judged against
 * what the link SUSTAINS under load, bytes over time across its healthy
 * loaded windows and the empty ones between bursts, each decayed per window
 * (gray_sustained), when that is less than the level. Its memory is a few
 * seconds (RR_GRAY_JUDGE_KEEP in engine_gray.c): longer than a burst cycle,
 * short enough that the level still stands in when a rail declines fast
 * over seconds rather than at once. */
#ifndef RERAIL_GRAY_LEVEL_H
#define RERAIL_GRAY_LEVEL_H

#include <stdint.h>

/* Bytes and time, each decayed by `keep` per window added: their quotient
 * is a rate weighted by time, not a mean of window rates. */
typedef struct {
  double bytes, ns;
} gray_sustained;

static inline void gray_sustained_add(gray_sustained *s, double keep, uint64_t bytes, uint64_t dur_ns) {
  s->bytes = s->bytes * keep + (double)bytes;
  s->ns = s->ns * keep + (double)dur_ns;
}

/* bytes/s; 0 when nothing was added. */
static inline double gray_sustained_rate(const gray_sustained *s) {
  return s->ns > 0 ? s->bytes * 1e9 / s->ns : 0;
}

/* The rate a window is judged against: the sustained rate, or the level
 * where that is less or nothing was sustained yet. */
static inline double gray_judge_ref(double level, double sustained) {
  return sustained > 0 && sustained < level ? sustained : level;
}

#endif
