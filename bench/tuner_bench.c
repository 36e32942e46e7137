/* The tuner's choices against an alpha-beta model of the same network, and
 * the cost of getCollInfo.
 *
 * Scenario table: 2-64 hosts, 1-8 NICs per host, 0-3 rails down (on the
 * worst host), every collective the tuner sees, 1 KiB - 4 GiB. For each,
 * NCCL's default is the cheapest algorithm/protocol of a cost table built
 * for the healthy network (what NCCL's own model assumes: it does not know
 * a rail is down) with its default channel count; rerail's choice is what
 * the real tuner core answers when handed that same table under an agreed
 * view with the rails down. Both are then timed in the model of the
 * degraded network. This is a model, not a measurement: it shows the
 * decisions are never worse than NCCL's within the model, and where they
 * gain.
 *
 * Usage: rerail-tuner-bench [--quick] [--calls N] [--no-speed-check]
 * Exit status 1 if any choice is slower than NCCL's in the model, or a
 * getCollInfo call costs more than 1 us (not checked with --no-speed-check:
 * the ctest smoke run, which may run under sanitizers, checks the choices
 * only; speed figures belong in bench/RESULTS.md, not in a timed test). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tuner_core.h"
#include "tuner_ids.h"
#include "tuner_model.h"

static const char *const coll_names[RR_NUM_COLLS] = {"broadcast", "reduce", "allgather",
                                                     "reducescatter", "allreduce"};
static const char *const algo_names[RR_NUM_ALGOS] = {"tree", "ring", "cn_direct", "cn_chain",
                                                     "nvls", "nvls_tree", "pat"};
static const char *const proto_names[RR_NUM_PROTOS] = {"LL", "LL128", "Simple"};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* NCCL's table in the model: healthy network, default channels. */
static void nccl_table(const rr_net_view *healthy, int coll, uint64_t nbytes,
                       float t[RR_NUM_ALGOS][RR_NUM_PROTOS]) {
  int c0 = rr_model_default_channels(healthy);
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++)
      t[a][p] = rr_model_knows(coll, a, p)
                    ? (float)rr_model_time_us(healthy, coll, a, p, c0, nbytes)
                    : -1.0f;
}

/* NCCL's pick: the cheapest usable cell; -1, -1 when none is usable (both
 * set either way: GCC at -O3 cannot tell a table always has one). */
static void argmin(float t[RR_NUM_ALGOS][RR_NUM_PROTOS], int *algo, int *proto) {
  *algo = -1;
  *proto = -1;
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++)
      if (t[a][p] >= 0.0f && (*algo < 0 || t[a][p] < t[*algo][*proto])) {
        *algo = a;
        *proto = p;
      }
}

typedef struct best_case {
  double gain;
  int nodes, nics, down, coll;
  uint64_t nbytes;
  int na, np, nc, ra, rp, rc;
} best_case;

int main(int argc, char **argv) {
  int quick = 0, speed_check = 1;
  long calls = 2000000;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) quick = 1;
    else if (!strcmp(argv[i], "--calls") && i + 1 < argc) calls = atol(argv[++i]);
    else if (!strcmp(argv[i], "--no-speed-check")) speed_check = 0;
    else {
      fprintf(stderr, "usage: %s [--quick] [--calls N] [--no-speed-check]\n", argv[0]);
      return 2;
    }
  }
  unsetenv("RERAIL_TUNER_CONFIG"); /* the model alone, no operator rules */
  const int nodes_list[] = {2, 4, 8, 16, 32, 64};
  const int nics_list[] = {1, 2, 4, 8};
  const double nic_gbs = 50.0, lat_us = 2.0; /* 400 Gbit/s NICs */

  long scenarios = 0, slower = 0, faster = 0, changed = 0;
  double worst_ratio = 0.0;
  best_case best = {0};
  /* per rails-down summary */
  long n_down[4] = {0}, faster_down[4] = {0};
  double sum_log_gain[4] = {0}, max_gain[4] = {0};

  for (size_t ni = 0; ni < sizeof(nodes_list) / sizeof(nodes_list[0]); ni++)
    for (size_t ki = 0; ki < sizeof(nics_list) / sizeof(nics_list[0]); ki++)
      for (int down = 0; down <= 3; down++) {
        int nodes = nodes_list[ni], nics = nics_list[ki];
        if (down >= nics) continue; /* a host with no rail left is not a plan, it is a failure */
        rr_net_view healthy = {.nodes = nodes, .nics = nics, .nic_gbs = nic_gbs, .lat_us = lat_us};
        rr_net_view real = healthy;
        for (int d = 0; d < down; d++) real.down_mask |= 1ull << (nics - 1 - d);
        rr_tuner_init_args args = {.abi_version = 6, .n_ranks = (size_t)nodes * 8,
                                   .n_nodes = (size_t)nodes, .nvl_domains = -1};
        rr_tuner_ctx *ctx = NULL;
        rr_tuner_init(&args, &ctx);
        rr_tuner_set_view(ctx, &real); /* the agreed view: every rank the same */
        const int c0 = rr_model_default_channels(&healthy);
        for (int coll = 0; coll < RR_NUM_COLLS; coll++)
          for (uint64_t nbytes = 1024; nbytes <= (4ull << 30); nbytes *= quick ? 64 : 4) {
            float t[RR_NUM_ALGOS][RR_NUM_PROTOS];
            nccl_table(&healthy, coll, nbytes, t);
            int na, np;
            argmin(t, &na, &np);
            double t_nccl = rr_model_time_us(&real, coll, na, np, c0, nbytes);

            rr_coll_query q = {.coll = coll, .nbytes = nbytes, .num_pipe_ops = 1, .reg_buff = 0,
                               .cost = &t[0][0], .num_algo = RR_NUM_ALGOS,
                               .num_proto = RR_NUM_PROTOS};
            int ch = 0;
            rr_tuner_coll_info(ctx, &q, &ch);
            int ra, rp;
            argmin(t, &ra, &rp);
            int rc = ch > 0 ? (ch < c0 ? ch : c0) : c0; /* NCCL caps at what it built */
            double t_rr = rr_model_time_us(&real, coll, ra, rp, rc, nbytes);

            scenarios++;
            double ratio = t_rr / t_nccl;
            if (ratio > worst_ratio) worst_ratio = ratio;
            if (ratio > 1.0 + 1e-6) {
              slower++;
              printf("SLOWER: %d nodes %d nics %d down %s %llu B: rerail %s/%s/%d %.1f us vs NCCL "
                     "%s/%s/%d %.1f us\n",
                     nodes, nics, down, coll_names[coll], (unsigned long long)nbytes,
                     algo_names[ra], proto_names[rp], rc, t_rr, algo_names[na], proto_names[np],
                     c0, t_nccl);
            }
            if (ra != na || rp != np || rc != c0) changed++;
            n_down[down]++;
            double gain = t_nccl / t_rr;
            if (gain > 1.0 + 1e-6) {
              faster++;
              faster_down[down]++;
            }
            sum_log_gain[down] += __builtin_log(gain);
            if (gain > max_gain[down]) max_gain[down] = gain;
            if (gain > best.gain)
              best = (best_case){gain, nodes, nics, down, coll, nbytes, na, np, c0, ra, rp, rc};
          }
        rr_tuner_finalize(ctx);
      }

  printf("scenarios: %ld (%d host counts x NIC counts x 0-3 rails down x %d collectives x sizes)\n",
         scenarios, (int)(sizeof(nodes_list) / sizeof(nodes_list[0])), RR_NUM_COLLS);
  printf("rerail differs from NCCL's default in %ld, is faster in %ld, slower in %ld "
         "(worst ratio %.6f)\n",
         changed, faster, slower, worst_ratio);
  printf("| rails down | scenarios | rerail faster | geo-mean speedup | best speedup |\n");
  printf("|---|---|---|---|---|\n");
  for (int d = 0; d <= 3; d++)
    if (n_down[d])
      printf("| %d | %ld | %ld | %.3fx | %.2fx |\n", d, n_down[d], faster_down[d],
             __builtin_exp(sum_log_gain[d] / (double)n_down[d]), max_gain[d]);
  if (best.gain > 1.0)
    printf("largest gain: %.2fx at %d hosts, %d NICs, %d down, %s %llu B: NCCL %s/%s/%d ch -> "
           "rerail %s/%s/%d ch\n",
           best.gain, best.nodes, best.nics, best.down, coll_names[best.coll],
           (unsigned long long)best.nbytes, algo_names[best.na], proto_names[best.np], best.nc,
           algo_names[best.ra], proto_names[best.rp], best.rc);

  /* getCollInfo cost: a static view (rules only, none here), an agreed view
   * with a rail down (the model on every call), and 64 rules to scan. The
   * baseline is an indirect call doing nothing, in the same run. */
  char cfg[64];
  snprintf(cfg, sizeof(cfg), "/tmp/rr-tuner-bench-%d.conf", (int)getpid());
  FILE *f = fopen(cfg, "w");
  if (f != NULL) {
    for (int i = 0; i < 63; i++) fprintf(f, "allgather,%d,%d,ring,ll,-1,-1,-1\n", i, i);
    fprintf(f, "allreduce,0,-1,ring,simple,-1,-1,-1\n");
    fclose(f);
  }
  struct {
    const char *name;
    int down;
    int rules;
    int agree;
  } modes[] = {{"static view, no rules", 0, 0, 0},
               {"agreed view, 1 of 8 rails down (model)", 1, 0, 0},
               {"64 rules, match on the last", 0, 1, 0},
               {"agreement on, nothing to re-plan (a look every 256; getCollInfo + getChunkSize)", 0, 0, 1}};
  char agree_dir[64];
  snprintf(agree_dir, sizeof(agree_dir), "/tmp/rr-tuner-bench-agree-%d", (int)getpid());
  int too_slow = 0;
  rr_status (*volatile fn)(rr_tuner_ctx *, const rr_coll_query *, int *) = rr_tuner_coll_info;
  for (size_t m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
    if (modes[m].rules) setenv("RERAIL_TUNER_CONFIG", cfg, 1);
    else unsetenv("RERAIL_TUNER_CONFIG");
    if (modes[m].agree) {
      mkdir(agree_dir, 0700);
      setenv("RERAIL_TUNER_AGREE_DIR", agree_dir, 1);
      setenv("RERAIL_HEALTH_PATH", "/nonexistent/rerail-health", 1); /* a healthy view */
    } else {
      unsetenv("RERAIL_TUNER_AGREE_DIR");
    }
    rr_tuner_init_args args = {.abi_version = 6, .comm_id = 0xbe7c4, .n_ranks = 1, .n_nodes = 16,
                               .nvl_domains = -1};
    rr_tuner_ctx *ctx = NULL;
    rr_tuner_init(&args, &ctx);
    rr_net_view v = {.nodes = 16, .nics = 8, .nic_gbs = nic_gbs, .lat_us = lat_us,
                     .down_mask = modes[m].down ? 1u : 0u};
    if (modes[m].down) rr_tuner_set_view(ctx, &v);
    float base[RR_NUM_ALGOS][RR_NUM_PROTOS], t[RR_NUM_ALGOS][RR_NUM_PROTOS];
    nccl_table(&v, RR_COLL_ALL_REDUCE, 1 << 20, base);
    double start = now_ns();
    for (long i = 0; i < calls; i++) {
      memcpy(t, base, sizeof(t)); /* NCCL hands a fresh table each time */
      rr_coll_query q = {.coll = RR_COLL_ALL_REDUCE, .nbytes = (size_t)(i & 0xfffff),
                         .num_pipe_ops = 1, .reg_buff = 0, .cost = &t[0][0],
                         .num_algo = RR_NUM_ALGOS, .num_proto = RR_NUM_PROTOS};
      int ch = 0;
      fn(ctx, &q, &ch);
      /* NCCL 2.30 asks for the chunk of every collective it launches, and
       * those calls are the agreement's sequence: without them it never
       * looks again and this mode would time only the first look. */
      if (modes[m].agree) {
        size_t chunk = 131072;
        rr_tuner_chunk_size(ctx, RR_COLL_ALL_REDUCE, (size_t)(i & 0xfffff), RR_ALGO_RING, RR_PROTO_SIMPLE, ch > 0 ? ch : 1, &chunk);
      }
    }
    double per = (now_ns() - start) / (double)calls;
    start = now_ns();
    for (long i = 0; i < calls; i++) memcpy(t, base, sizeof(t));
    double copy = (now_ns() - start) / (double)calls;
    printf("getCollInfo (%s): %.1f ns per call (%.1f ns of it NCCL's table copy in this loop)\n",
           modes[m].name, per, copy);
    if (per > 1000.0 && speed_check) too_slow = 1;
    rr_tuner_finalize(ctx);
  }
  unlink(cfg);
  unsetenv("RERAIL_TUNER_CONFIG");
  unsetenv("RERAIL_TUNER_AGREE_DIR");
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", agree_dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", agree_dir);
  if (slower || too_slow) {
    printf("FAIL: %s\n", slower ? "a choice is slower than NCCL's in the model"
                                : "getCollInfo over 1 us");
    return 1;
  }
  printf("PASS: never slower than NCCL's default in the model%s\n",
         speed_check ? "; getCollInfo under 1 us" : "");
  return 0;
}
