/* What a run of slow windows is held against for a demotion
 * (engine_gray.c, window_close and run_slow): pure arithmetic, so a unit
 * test replays a bursty rail's windows in virtual time
 * (test/unit/test_gray_level.c).
 *
 * Each 100 ms window is judged against the link's level, its best window,
 * decaying slowly. Where completions come in bursts (an emulated NIC
 * completes a 4 MiB chain at a time) a window that caught two bursts reads
 * twice what the link carries (the Soft-RoCE lab: a level of 78 MB/s where
 * the veth sent 45), and a healed rail, restored and carrying its traffic
 * again at a fraction of its old rate, was demoted again ("delivers 11 % of
 * its level") in two of three runs. Judging each window against the
 * sustained rate instead was tried and is wrong: a slow rail's windows are
 * bursts too (a completion per chain), and a burst measured against an
 * average reads healthy; in the lab both attempts with it never demoted the
 * shaped rail. So windows stay judged against the level, burst against
 * best burst, and a run of them is a demotion only if the run AS A WHOLE,
 * bytes over time with its empty windows, delivered under the same share
 * of what the link SUSTAINS: bytes over time across its healthy loaded
 * windows and the empty ones between their bursts, each decayed per window
 * (gray_sustained), a few seconds' memory (RR_GRAY_JUDGE_KEEP in
 * engine_gray.c). The rule only adds a condition: it never demotes what the
 * windows alone would not. */
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

/* What a run is held against: the sustained rate, or the level where that
 * is less or nothing was sustained yet. */
static inline double gray_judge_ref(double level, double sustained) {
  return sustained > 0 && sustained < level ? sustained : level;
}

/* Did a run deliver under pct % of ref: run_bytes over run_ns? A run of no
 * time says nothing (not slow); no reference (nothing learnt yet) leaves
 * the windows' verdict alone. */
static inline int gray_run_slow(uint64_t run_bytes, uint64_t run_ns, double ref, uint32_t pct) {
  if (ref <= 0) return 1;
  if (!run_ns) return 0;
  return (double)run_bytes * 1e9 / (double)run_ns * 100.0 < (double)pct * ref;
}

#endif
