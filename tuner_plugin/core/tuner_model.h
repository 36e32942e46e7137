/* A static alpha-beta cost model of one collective across hosts.
 *
 * It models the inter-host part only (intra-host links are taken as
 * faster than the network): N hosts in a ring or a binary tree, each host
 * with `nics` rails of `nic_gbs` GB/s and `lat_us` latency per hop. NCCL's
 * channel c leaves a host on NIC c mod nics (one ring per NIC, repeated);
 * a channel whose NIC is down on a host is carried, as rerail's failover
 * chain does, by the next NIC that is up (in index order). Data is split
 * evenly over channels, so a collective ends when its slowest channel does:
 * a rail shared by m channels gives each of them nic_gbs / m.
 *
 *   time = steps * (lat_us + proto_lat) + volume / (C * min(nic_gbs / m, cap) * eff)
 *
 * steps/volume per collective: ring all-reduce 2(N-1) steps, 2(N-1)/N * S;
 * ring all-gather/reduce-scatter N-1, (N-1)/N * S; ring broadcast/reduce
 * N-1, S (pipelined chain); tree all-reduce 2*ceil(log2 N), S. Protocol
 * efficiency and per-channel caps are NCCL-like (LL moves half its bytes as
 * flags; LL128 about 92%). The figures are a model, not a measurement. */
#ifndef RERAIL_TUNER_MODEL_H
#define RERAIL_TUNER_MODEL_H
#include <stddef.h>
#include <stdint.h>

#define RR_MODEL_MAX_NICS 64
#define RR_MODEL_MAX_CHANNELS 64

/* The network of a communicator as every rank must see it (agreed). */
typedef struct rr_net_view {
  int nodes;          /* hosts */
  int nics;           /* NICs per host (1..64) */
  double nic_gbs;     /* GB/s per NIC */
  double lat_us;      /* per hop */
  uint64_t down_mask; /* NICs down on the worst host (bit i: NIC i) */
} rr_net_view;

int rr_model_rails_down(const rr_net_view *v);

/* Seconds*1e6 (microseconds) the collective takes; a huge value when the
 * pair cannot run in the model (no NIC up, tree for anything but
 * all-reduce, algorithms the model does not know). */
double rr_model_time_us(const rr_net_view *v, int coll, int algo, int proto, int channels,
                        uint64_t nbytes);

/* Channels NCCL builds by default in the model: two per NIC, at most 32. */
int rr_model_default_channels(const rr_net_view *v);

/* The channel count in 1..max_channels with the lowest modelled time for
 * this algorithm and protocol (the largest count among equals, so that a
 * healthy network keeps max_channels). *time_us (may be NULL) gets the time. */
int rr_model_best_channels(const rr_net_view *v, int coll, int algo, int proto, int max_channels,
                           uint64_t nbytes, double *time_us);

/* Does the model know this pair (ring any protocol; tree for all-reduce)? */
int rr_model_knows(int coll, int algo, int proto);

#endif
