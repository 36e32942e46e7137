/* Helpers shared by the network benchmarks (rerail-raw-socket-bench and
 * rerail-net-bench): clock, size parsing, size sweeps, percentiles, payload
 * patterns and checksums, and the small output helpers both use.
 *
 * Units: GB/s is 1e9 bytes per second (what NCCL and nccl-tests print);
 * sizes are in bytes, powers of 1024 when printed (KiB, MiB). */
#ifndef RERAIL_BENCH_COMMON_H
#define RERAIL_BENCH_COMMON_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define BC_MAX_SIZES 64

#include <time.h>

static inline uint64_t bc_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Prints "prog: message" to stderr and exits with status 1. */
void bc_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
/* Sets the program name bc_die and bc_warn print. */
void bc_set_prog(const char *prog);
void bc_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "4096", "4K", "4k", "4KiB", "64M", "1G" -> bytes. Returns 0 on success. */
int bc_parse_size(const char *s, size_t *out);
/* Decimal integer in [min, max]. Returns 0 on success. */
int bc_parse_int(const char *s, long min, long max, long *out);

/* A sweep of message sizes: either min..max by factor (2 or 4), or an explicit
 * comma separated list ("4K,64K,1M"). */
typedef struct bc_sizes {
  size_t v[BC_MAX_SIZES];
  int n;
} bc_sizes;
int bc_sizes_range(bc_sizes *s, size_t min, size_t max, unsigned factor);
int bc_sizes_list(bc_sizes *s, const char *list);
size_t bc_sizes_max(const bc_sizes *s);

/* "4 KiB", "64 MiB", "1000 B" into buf (>= 16 bytes). */
const char *bc_fmt_size(size_t bytes, char *buf, size_t len);

/* Sorts v (n values) in place and returns the p-th percentile (0..100) with
 * the nearest-rank method. n must be > 0. */
double bc_percentile_sorted(const double *v, size_t n, double p);
void bc_sort_doubles(double *v, size_t n);

/* Payload: a deterministic pattern per (seed) and a 64-bit checksum. The
 * pattern covers any length (tail bytes included). */
void bc_fill_pattern(void *buf, size_t len, uint64_t seed);
uint64_t bc_checksum(const void *buf, size_t len);
/* First offset where a and b differ, or len when equal. */
size_t bc_first_diff(const void *a, const void *b, size_t len);

/* Message stamps: the sequence number written in the first and last 8 bytes of
 * a message (one stamp for messages shorter than 16 bytes). Cheap enough for
 * every message on the timed path; stamps catch misordered or stale data. */
void bc_stamp(void *msg, size_t len, uint64_t seq);
/* Returns 1 when both stamps equal seq. */
int bc_stamp_ok(const void *msg, size_t len, uint64_t seq);

/* Touches every page (first-touch allocation before timing). Returns NULL on
 * failure. Aligned to 4 KiB. */
void *bc_alloc(size_t len);
void bc_free(void *p);

#endif
