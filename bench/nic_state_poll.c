/* What an engine's link-down poll costs: rr_health_nic_get() as each
 * engine's health tick calls it (once per rail per 1 ms tick while a thread
 * drives the engine), and what that comes to for many engines. The figure
 * behind "Link-down events: polled, not pushed" in docs/locking.md.
 *
 * Usage: rerail-nic-state-poll [--calls N] [--rails R] [--engines E]
 * Prints ns per call (best of 5 runs of N calls over R NICs) and the share of
 * one core E engines of R rails each spend on it at 1,000 ticks a second. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rr_nic_state.h"

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  long calls = 100000000, rails = 4, engines = 1000;
  for (int i = 1; i + 1 < argc; i += 2) {
    long v = strtol(argv[i + 1], NULL, 10);
    if (v <= 0) {
      fprintf(stderr, "%s: a positive number, please\n", argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--calls")) calls = v;
    else if (!strcmp(argv[i], "--rails")) rails = v;
    else if (!strcmp(argv[i], "--engines")) engines = v;
    else {
      fprintf(stderr, "usage: %s [--calls N] [--rails R] [--engines E]\n", argv[0]);
      return 2;
    }
  }
  double best = 0;
  unsigned down = 0; /* used, so that the loop is not optimised away */
  for (int run = 0; run < 5; run++) {
    double t0 = now_ns();
    for (long c = 0; c < calls; c++) down += rr_health_nic_get((int)(c % rails)) == RR_LINK_DOWN;
    double per = (now_ns() - t0) / (double)calls;
    if (run == 0 || per < best) best = per;
  }
  double core_share = (double)engines * (double)rails * 1000.0 * best / 1e9;
  printf("rr_health_nic_get: %.2f ns per call (best of 5 x %ld calls over %ld NICs; %u down)\n", best, calls,
         rails, down);
  printf("%ld engines x %ld rails x 1000 ticks/s: %.4f%% of one core\n", engines, rails, 100.0 * core_share);
  return 0;
}
