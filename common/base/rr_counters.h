/* Process-wide event counters: what happened in this process, summed over
 * every connection, for the .prom file and for tests.
 *
 * Each connection's engine keeps its own counts (rr_engine_stats, which the
 * simulation reads per engine); a connection ends, its counts go with it.
 * These are the process's totals since load and never go back, which is what
 * a Prometheus counter must be and what a test needs to ask "did the
 * receiver refuse that write" without reading log wording.
 *
 * Counting is one relaxed atomic add: allowed anywhere, the data path
 * included (every counted event is rare next to a chunk write). */
#ifndef RERAIL_COMMON_COUNTERS_H
#define RERAIL_COMMON_COUNTERS_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

typedef enum rr_counter {
  RR_CTR_PROTOCOL_VIOLATIONS = 0, /* peer input that broke the wire protocol (rail failed over) */
  RR_CTR_ROLLBACKS,               /* epochs started (receiver) or adopted (sender) */
  RR_CTR_CLOSES_OWED,             /* closes that gave up with something owed undelivered */
  RR_CTR_PARKED_SENDS,            /* eager sends parked (no receive with their tag) */
  RR_CTR_PLACED_SENDS,            /* sends completed on their writes' placement */
  RR_CTR_PLACED_CLAIMS,           /* sub-receives completed on a PLACED claim */
  RR_CTR_DEMOTIONS,               /* rails demoted as degraded */
  RR_CTR_RAIL_RECONNECTS,         /* rails given a fresh transport endpoint */
  RR_CTR_FAILOVERS,               /* health events: traffic moved off a rail */
  RR_CTR_FAILBACKS,               /* health events: traffic returned to a healed rail */
  RR_CTR_CONNECTION_ERRORS,       /* health events: a connection failed for good */
  RR_CTR_SETTINGS_REFUSED,        /* RERAIL_* values refused or matching nothing: a default used */
  RR_CTR_TEST_FORGED_WRITES,      /* writes forged by RERAIL_TEST_FORGE_WRITE (tests only) */
  RR_CTR_COUNT
} rr_counter;

typedef struct rr_counter_info {
  const char *name; /* the .prom name without the rerail_ prefix, e.g. "rollbacks_total" */
  const char *help; /* the .prom HELP text */
  /* 0: the .prom file already has the family under this name per NIC or
   * peer (from health events), whose sum this is; rr_counters_format() still
   * gives it, for tests that run without telemetry. */
  int in_prom;
} rr_counter_info;

extern _Atomic uint64_t rr_counter_values[RR_CTR_COUNT];

static inline void rr_counter_inc(rr_counter c) {
  atomic_fetch_add_explicit(&rr_counter_values[c], 1, memory_order_relaxed);
}

uint64_t rr_counter_get(rr_counter c);
const rr_counter_info *rr_counter_info_of(rr_counter c);

/* Every counter as "name value\n" lines (names as in rr_counter_info), in
 * enum order. Returns the length written, or -1 when buf is too small (it
 * then holds nothing useful). */
int rr_counters_format(char *buf, size_t len);

#endif
