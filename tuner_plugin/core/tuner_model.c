/* The alpha-beta model (tuner_model.h). Pure arithmetic: no state, no
 * allocation, safe from any thread. */
#include "tuner_model.h"

#include "tuner_ids.h"

#define MODEL_INFINITE 1e30

/* Per protocol: latency added per step (us), share of the wire that carries
 * data, and what one channel can move (GB/s) whatever the network. NCCL-like
 * orders of magnitude; the model compares choices, it does not predict. */
static const double proto_lat_us[RR_NUM_PROTOS] = {0.6, 1.2, 4.0};
static const double proto_eff[RR_NUM_PROTOS] = {0.5, 0.92, 1.0};
static const double proto_cap_gbs[RR_NUM_PROTOS] = {6.0, 18.0, 24.0};
#define TREE_EFF 0.9

int rr_model_rails_down(const rr_net_view *v) {
  int n = 0;
  for (int i = 0; i < v->nics && i < RR_MODEL_MAX_NICS; i++) n += (int)((v->down_mask >> i) & 1u);
  return n;
}

int rr_model_knows(int coll, int algo, int proto) {
  if (proto < 0 || proto >= RR_NUM_PROTOS || coll < 0 || coll >= RR_NUM_COLLS) return 0;
  if (algo == RR_ALGO_RING) return 1;
  return algo == RR_ALGO_TREE && coll == RR_COLL_ALL_REDUCE;
}

/* Most channels any one NIC carries on the worst host; 0 when no NIC is up. */
static int max_channels_per_nic(const rr_net_view *v, int channels) {
  int load[RR_MODEL_MAX_NICS] = {0};
  int nics = v->nics;
  int worst = 0;
  for (int c = 0; c < channels; c++) {
    int nic = c % nics, hops = 0;
    while (((v->down_mask >> nic) & 1u) && hops < nics) {
      nic = (nic + 1) % nics;
      hops++;
    }
    if (hops == nics) return 0;
    if (++load[nic] > worst) worst = load[nic];
  }
  return worst;
}

static int ceil_log2(int n) {
  int l = 0;
  while ((1 << l) < n) l++;
  return l;
}

double rr_model_time_us(const rr_net_view *v, int coll, int algo, int proto, int channels,
                        uint64_t nbytes) {
  if (v == NULL || v->nics < 1 || v->nics > RR_MODEL_MAX_NICS || v->nic_gbs <= 0.0 ||
      v->nodes < 1 || channels < 1 || channels > RR_MODEL_MAX_CHANNELS ||
      !rr_model_knows(coll, algo, proto))
    return MODEL_INFINITE;
  if (v->nodes == 1) return 0.0; /* nothing crosses the network */
  int m = max_channels_per_nic(v, channels);
  if (m == 0) return MODEL_INFINITE;
  const double n = (double)v->nodes, s = (double)nbytes;
  double steps, volume, eff = proto_eff[proto];
  if (algo == RR_ALGO_TREE) {
    steps = 2.0 * ceil_log2(v->nodes);
    volume = s;
    eff *= TREE_EFF;
  } else if (coll == RR_COLL_ALL_REDUCE) {
    steps = 2.0 * (n - 1.0);
    volume = 2.0 * (n - 1.0) / n * s;
  } else if (coll == RR_COLL_ALL_GATHER || coll == RR_COLL_REDUCE_SCATTER) {
    steps = n - 1.0;
    volume = (n - 1.0) / n * s;
  } else { /* broadcast, reduce: a pipelined chain */
    steps = n - 1.0;
    volume = s;
  }
  double per_channel = v->nic_gbs / (double)m;
  if (per_channel > proto_cap_gbs[proto]) per_channel = proto_cap_gbs[proto];
  double gbs = (double)channels * per_channel * eff; /* GB/s = 1e3 bytes per us */
  return steps * (v->lat_us + proto_lat_us[proto]) + volume / (gbs * 1e3);
}

int rr_model_default_channels(const rr_net_view *v) {
  int c = v != NULL && v->nics > 0 ? 2 * v->nics : 2;
  return c > 32 ? 32 : c;
}

int rr_model_best_channels(const rr_net_view *v, int coll, int algo, int proto, int max_channels,
                           uint64_t nbytes, double *time_us) {
  if (max_channels > RR_MODEL_MAX_CHANNELS) max_channels = RR_MODEL_MAX_CHANNELS;
  int best = max_channels > 0 ? max_channels : 1;
  double best_t = rr_model_time_us(v, coll, algo, proto, best, nbytes);
  for (int c = max_channels - 1; c >= 1; c--) {
    double t = rr_model_time_us(v, coll, algo, proto, c, nbytes);
    if (t < best_t * (1.0 - 1e-9)) { /* strictly better: ties keep more channels */
      best_t = t;
      best = c;
    }
  }
  if (time_us != NULL) *time_us = best_t;
  return best;
}
