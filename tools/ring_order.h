/* Host order for NCCL's inter-host ring (rerail ring-order).
 *
 * NCCL orders hosts in its ring by their lowest rank and no plugin can
 * change that (docs/tuner.md): only the launcher's host order can. Two ways
 * to choose it:
 *
 *   - ToR labels: hosts under one top-of-rack switch next to each other, so
 *     the ring leaves each rack once instead of at every other hop (the
 *     uplinks are where bandwidth is scarce).
 *   - A measured bandwidth matrix bw[i][j] (GB/s, i sending to j; not
 *     symmetric in general): the directed ring that maximises its slowest
 *     hop (a ring runs at the pace of its slowest link), then minimises the
 *     sum of 1/bw over hops among those. Exact (dynamic programming over
 *     subsets) up to RR_RING_EXACT_MAX hosts; beyond, nearest-neighbour
 *     starts from every host improved by node moves (a heuristic). */
#ifndef RERAIL_TOOLS_RING_ORDER_H
#define RERAIL_TOOLS_RING_ORDER_H
#include <stddef.h>

#define RR_RING_MAX_HOSTS 4096
#define RR_RING_EXACT_MAX 13
#define RR_RING_NAME 128

typedef struct rr_ring_hosts {
  int n;
  char (*name)[RR_RING_NAME];
  char (*tor)[RR_RING_NAME];  /* "" when not given */
  double *bw;                 /* n*n, row = sender; NULL without a matrix */
} rr_ring_hosts;

/* Parsers. Host list: one host per line, optional second word = ToR label;
 * '#' comments. Matrix: first non-comment line the n host names, then n
 * rows of n numbers (diagonal ignored), whitespace or comma separated.
 * On error: -1 and a message "FILE:LINE: why" in err. */
int rr_ring_parse_hosts(const char *text, const char *name, rr_ring_hosts *h, char *err,
                        size_t err_len);
int rr_ring_parse_matrix(const char *text, const char *name, rr_ring_hosts *h, char *err,
                         size_t err_len);
void rr_ring_hosts_free(rr_ring_hosts *h);

/* ToR-grouped order: racks in order of first appearance, hosts within a rack
 * in input order. order[] gets n host indexes. */
void rr_ring_order_tor(const rr_ring_hosts *h, int *order);

/* Bandwidth order (h->bw required). Returns 1 when the answer is exact,
 * 0 when heuristic, -1 when no ring has every hop above 0. */
int rr_ring_order_bw(const rr_ring_hosts *h, int *order);

/* A ring's slowest hop and sum of 1/bw, under h->bw. */
double rr_ring_bottleneck(const rr_ring_hosts *h, const int *order);
double rr_ring_inv_sum(const rr_ring_hosts *h, const int *order);

/* In a two-level tree of racks (every host's NIC nic_gbs, every rack's
 * uplink uplink_gbs each way), what the slowest hop of the ring gets when
 * all hops run at once: a hop inside a rack gets nic_gbs; a hop leaving a
 * rack shares that rack's uplink with the ring's other hops leaving it. */
double rr_ring_tor_bottleneck(const rr_ring_hosts *h, const int *order, double nic_gbs,
                              double uplink_gbs);

#endif
