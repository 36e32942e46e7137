/* Monotonic nanosecond clock used for timeouts and telemetry. */
#ifndef RERAIL_COMMON_CLOCK_H
#define RERAIL_COMMON_CLOCK_H
#include <stdint.h>
#include <time.h>

static inline uint64_t rr_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The same clock at the resolution of the kernel's tick (1-4 ms), never
 * ahead of rr_now_ns(). It is read from the vDSO's data page whatever the
 * clocksource, so it costs no system call where rr_now_ns() does (a virtual
 * machine whose clocksource the vDSO cannot read, e.g. an emulated HPET: a
 * system call and a trapped device read each time). For decisions on a
 * millisecond scale taken on every poll. */
static inline uint64_t rr_now_coarse_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
#endif
