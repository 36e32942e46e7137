/* The receiver's expectation of its rails' inbound traffic (engine_inbound.c):
 * what it invited and has not seen arrive, and how fast each rail has been
 * bringing it, so that the silence judge (engine_rails.c) does not doubt a
 * rail that cannot have brought the bytes yet. */
#ifndef RERAIL_ENGINE_INBOUND_H
#define RERAIL_ENGINE_INBOUND_H
#include <stdint.h>

typedef struct rr_engine rr_engine;

/* Per rail, receiver only (zero: nothing seen since the endpoint was installed). */
typedef struct engine_inbound {
  uint64_t last_arrival_ns; /* when a write of the peer's last landed on the rail */
  double rate;              /* bytes per ns its writes came at, smoothed; 0 until measured */
  uint64_t win_start_ns;    /* the rate's current window began (at an arrival) */
  uint64_t win_bytes;       /* bytes landed since */
  int out_after_last;       /* invitations were still out when the last write landed */
} engine_inbound;

/* A write of `bytes` landed on rail r at now (receiver). */
void engine_inbound_on_arrival(rr_engine *e, int r, uint64_t bytes, uint64_t now);

/* When the bytes invited and not yet arrived are due over ACTIVE rail r at
 * the earliest, at its measured rate, counted from the later of `life` (the
 * rail's last answer) and its last arrival (receiver): until then its
 * silence is expected, and doubt is judged from then on, as from life.
 * Never more than 3δ/8 after that. 0: nothing is expected. */
uint64_t engine_inbound_due(const rr_engine *e, int r, uint64_t life);

#endif
