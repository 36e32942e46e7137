/* Tuner core: per-communicator contexts over a reference-counted process
 * state (the rules file), and a getCollInfo that starts from NCCL's table,
 * applies the cost model under the agreed view, then the rules (see
 * tuner_core.h for the order and why). */
#include "tuner_core.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner_core_internal.h"

/* Process-wide state shared by every context: the rules file, loaded when
 * the first context is made and dropped with the last. Init and finalize
 * are rare; the lock never touches the per-collective path. */
static struct {
  /* guards: live, rules (init and finalize only; reads the rules file under it); a leaf. */
  pthread_mutex_t lock;
  int live;
  rr_rules *rules;
} process = {PTHREAD_MUTEX_INITIALIZER, 0, NULL};

/* Each rule says once, at INFO under TUNING, the first time it decides a
 * collective (NCCL_DEBUG_SUBSYS=TUNING shows what rerail chose and why),
 * then stays quiet: no logging per collective. Indexed like the rules;
 * cleared when a new file is loaded. */
static atomic_uchar rule_announced[RR_RULES_MAX];

static void announce_rule(const rr_rule *r, int coll, size_t nbytes, int channels) {
  int idx = (int)(r - process.rules->rule);
  /* A plain load first: the locked exchange only on the first time. */
  if (idx < 0 || idx >= RR_RULES_MAX ||
      atomic_load_explicit(&rule_announced[idx], memory_order_relaxed) != 0 ||
      atomic_exchange_explicit(&rule_announced[idx], 1, memory_order_relaxed) != 0)
    return;
  const char *cn = rr_rules_coll_name(coll), *an = rr_rules_algo_name(r->algo),
             *pn = rr_rules_proto_name(r->proto);
  RR_INFO(RR_SUB_TUNING,
          "tuner: rule at line %d first applied (%s, %zu bytes): algorithm %s, protocol %s, "
          "channels %d%s (reported once per rule)",
          r->line, cn != NULL ? cn : "?", nbytes, an != NULL ? an : "NCCL's",
          pn != NULL ? pn : "NCCL's", channels, channels == 0 ? " (NCCL's)" : "");
}

/* Bad input on the per-collective path is reported once per process, not
 * once per collective. */
static atomic_int warned_bad_query;

static void warn_bad_query_once(const char *what) {
  if (atomic_exchange_explicit(&warned_bad_query, 1, memory_order_relaxed) == 0)
    TUNER_WARN("tuner: %s; NCCL's choice is kept (reported once)", what);
}

static int ctx_valid(const rr_tuner_ctx *ctx) {
  return ctx != NULL && ctx->magic == RR_TUNER_CTX_MAGIC;
}

/* Called with process.lock held, by the first live context. A bad file is
 * reported with its line and leaves no rules: NCCL's choices stand. */
static void load_rules_locked(void) {
  const char *path = getenv("RERAIL_TUNER_CONFIG");
  if (path == NULL || path[0] == '\0') return;
  rr_rules *r = malloc(sizeof(*r));
  if (r == NULL) {
    TUNER_WARN("tuner: out of memory loading RERAIL_TUNER_CONFIG=%s; no rules in force", path);
    return;
  }
  char err[512];
  if (rr_failed(rr_rules_load(path, r, err, sizeof(err)))) {
    TUNER_WARN("tuner: RERAIL_TUNER_CONFIG rejected, no rules in force: %s", err);
    free(r);
    return;
  }
  RR_INFO(RR_SUB_TUNING, "tuner: %d rule%s from %s%s", r->count, r->count == 1 ? "" : "s", path,
          r->net.present ? " (with @net)" : "");
  for (int i = 0; i < RR_RULES_MAX; i++) atomic_store(&rule_announced[i], 0);
  process.rules = r;
}

static int popcount64(uint64_t v) { return __builtin_popcountll(v); }

void rr_tuner_rebuild_plan(rr_tuner_ctx *c) {
  model_plan *p = &c->plan;
  memset(p, 0, sizeof(*p));
  c->rails_down = popcount64(c->view.down_mask);
  if (!c->have_net || c->view.nodes < 2 || c->rails_down == 0) return;
  rr_net_view healthy = c->view;
  healthy.down_mask = 0;
  const int c0 = rr_model_default_channels(&c->view);
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int pr = 0; pr < RR_NUM_PROTOS; pr++) {
      /* The best count does not depend on size or collective: only the
       * bandwidth term depends on channels. */
      int coll = a == RR_ALGO_TREE ? RR_COLL_ALL_REDUCE : RR_COLL_ALL_GATHER;
      p->channels[a][pr] = rr_model_knows(coll, a, pr)
                               ? rr_model_best_channels(&c->view, coll, a, pr, c0, 1u << 30, NULL)
                               : 0;
      for (int k = 0; k < RR_NUM_COLLS; k++) {
        if (!rr_model_knows(k, a, pr)) continue;
        double lat = rr_model_time_us(&c->view, k, a, pr, p->channels[a][pr], 0);
        double big = rr_model_time_us(&c->view, k, a, pr, p->channels[a][pr], 1u << 30);
        double big_h = rr_model_time_us(&healthy, k, a, pr, c0, 1u << 30);
        p->lat[k][a][pr] = lat;
        p->inv_bw[k][a][pr] = (big - lat) / (double)(1u << 30);
        p->inv_bw_healthy[k][a][pr] = (big_h - lat) / (double)(1u << 30);
      }
    }
  p->active = 1;
}

void rr_tuner_set_view(rr_tuner_ctx *ctx, const rr_net_view *view) {
  if (!ctx_valid(ctx)) return;
  if (view != NULL && view->nics >= 1 && view->nics <= RR_MODEL_MAX_NICS && view->nic_gbs > 0.0) {
    ctx->view = *view;
    ctx->view.nodes = (int)ctx->n_nodes;
    ctx->have_net = 1;
  } else {
    const rr_rules *r = ctx->rules;
    ctx->have_net = r != NULL && r->net.present;
    memset(&ctx->view, 0, sizeof(ctx->view));
    if (ctx->have_net) {
      ctx->view.nodes = (int)ctx->n_nodes;
      ctx->view.nics = r->net.nics;
      ctx->view.nic_gbs = r->net.gbps / 8.0;
      ctx->view.lat_us = r->net.lat_us;
    }
  }
  rr_tuner_rebuild_plan(ctx);
}

/* v5+: NCCL's network latencies follow the operator's figure: shift every
 * ring and tree entry by the difference between the measured latency and
 * NCCL's ring/LL assumption, keeping NCCL's protocol structure. */
static void set_net_latencies(const rr_rules *r, double (*lat)[RR_NUM_PROTOS]) {
  if (r == NULL || !r->net.present || lat == NULL) return;
  double delta = r->net.lat_us - lat[RR_ALGO_RING][RR_PROTO_LL];
  const int algos[] = {RR_ALGO_TREE, RR_ALGO_RING};
  for (int i = 0; i < 2; i++)
    for (int p = 0; p < RR_NUM_PROTOS; p++) {
      double v = lat[algos[i]][p] + delta;
      lat[algos[i]][p] = v > 0.0 ? v : 0.0;
    }
  RR_INFO(RR_SUB_TUNING, "tuner: network latencies shifted by %+.2f us to the @net figure %.2f us",
          delta, r->net.lat_us);
}

rr_status rr_tuner_init(const rr_tuner_init_args *args, rr_tuner_ctx **ctx) {
  if (args != NULL && args->logger != NULL) rr_log_set_logger(args->logger);
  if (ctx != NULL) *ctx = NULL;
  if (args == NULL || ctx == NULL) {
    TUNER_WARN("tuner: init called with a NULL %s; NCCL's choices are kept",
               args == NULL ? "argument" : "context pointer");
    return RR_OK;
  }
  rr_tuner_ctx *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    TUNER_WARN("tuner: out of memory allocating a communicator context; NCCL's choices are kept");
    return RR_OK;
  }
  c->magic = RR_TUNER_CTX_MAGIC;
  c->abi_version = args->abi_version;
  c->comm_id = args->comm_id;
  c->n_ranks = args->n_ranks;
  c->n_nodes = args->n_nodes;
  c->nvl_domains = args->nvl_domains;
  atomic_init(&c->colls, 0);
  atomic_init(&c->parts, 0);

  pthread_mutex_lock(&process.lock);
  if (process.live++ == 0) load_rules_locked();
  int live = process.live;
  c->rules = process.rules;
  pthread_mutex_unlock(&process.lock);

  rr_tuner_set_view(c, NULL);
  /* Before NCCL's latencies are edited: they are one of the inputs the
   * ranks compare, and on a mismatch they must stay NCCL's. */
  rr_tuner_agree_start(c, (const double(*)[RR_NUM_PROTOS])args->net_latencies);
  if (!c->inert) set_net_latencies(c->rules, args->net_latencies);

  char nvl[32] = "";
  if (args->nvl_domains >= 0) snprintf(nvl, sizeof(nvl), " nvlDomains %d", args->nvl_domains);
  RR_INFO(RR_SUB_TUNING,
          "tuner: bound as ncclTunerPlugin_v%d; comm 0x%" PRIx64
          " nRanks %zu nNodes %zu%s; %d rule%s, cost model %s%s (%d live comm%s)",
          c->abi_version, c->comm_id, c->n_ranks, c->n_nodes, nvl,
          c->rules != NULL ? c->rules->count : 0,
          c->rules != NULL && c->rules->count == 1 ? "" : "s",
          c->have_net ? "on (static view)" : "off (no @net)",
          c->inert ? "; standing aside (inputs differ between ranks)" : "", live,
          live == 1 ? "" : "s");
  *ctx = c;
  return RR_OK;
}

rr_status rr_tuner_finalize(rr_tuner_ctx *ctx) {
  if (ctx == NULL) return RR_OK; /* init gave NCCL no context */
  if (!ctx_valid(ctx)) {
    TUNER_WARN("tuner: finalize called with an unknown or already finalized context");
    return RR_OK;
  }
  pthread_mutex_lock(&process.lock);
  if (--process.live == 0) {
    free(process.rules);
    process.rules = NULL;
  }
  pthread_mutex_unlock(&process.lock);

  RR_INFO(RR_SUB_TUNING, "tuner: comm 0x%" PRIx64 " finalized after %" PRIu64 " collectives",
          ctx->comm_id, (uint64_t)atomic_load_explicit(&ctx->colls, memory_order_relaxed));
  ctx->magic = 0;
  rr_tuner_agree_stop(ctx);
  free(ctx);
  return RR_OK;
}

/* The model's rescaling of NCCL's ring and tree cells, then the channel
 * count of the cell NCCL will pick. */
static void apply_model(const rr_tuner_ctx *c, const rr_coll_query *q, int *n_channels) {
  const model_plan *p = &c->plan;
  if (!p->active || q->coll < 0 || q->coll >= RR_NUM_COLLS) return;
  const double bytes = (double)q->nbytes;
  int best_a = -1, best_p = -1;
  float best = 0.0f;
  for (int a = 0; a < q->num_algo && a < RR_NUM_ALGOS; a++)
    for (int pr = 0; pr < q->num_proto && pr < RR_NUM_PROTOS; pr++) {
      float *cell = &q->cost[a * q->num_proto + pr];
      if (*cell < 0.0f) continue; /* NCCL ruled it out */
      if (rr_model_knows(q->coll, a, pr)) {
        double healthy = p->lat[q->coll][a][pr] + bytes * p->inv_bw_healthy[q->coll][a][pr];
        double now = p->lat[q->coll][a][pr] + bytes * p->inv_bw[q->coll][a][pr];
        if (healthy > 0.0 && now > 0.0) *cell = (float)((double)*cell * (now / healthy));
      }
      if (best_a < 0 || *cell < best) {
        best = *cell;
        best_a = a;
        best_p = pr;
      }
    }
  if (best_a >= 0 && rr_model_knows(q->coll, best_a, best_p) && p->channels[best_a][best_p] > 0)
    *n_channels = p->channels[best_a][best_p];
}

/* Make (algo, proto) NCCL's pick: its cell becomes 0 (the cheapest possible)
 * if NCCL allows the pair. With one part kept, the cheapest allowed cell
 * with the other part fixed is chosen. Returns 0 when NCCL rules it out. */
static int force_cell(const rr_coll_query *q, int algo, int proto) {
  int best_a = -1, best_p = -1;
  float best = 0.0f;
  for (int a = 0; a < q->num_algo; a++) {
    if (algo != RR_RULE_KEEP && a != algo) continue;
    for (int p = 0; p < q->num_proto; p++) {
      if (proto != RR_RULE_KEEP && p != proto) continue;
      float v = q->cost[a * q->num_proto + p];
      if (v < 0.0f) continue;
      if (best_a < 0 || v < best) {
        best = v;
        best_a = a;
        best_p = p;
      }
    }
  }
  if (best_a < 0) return 0;
  q->cost[best_a * q->num_proto + best_p] = 0.0f;
  return 1;
}

/* Can NCCL 2.21 run (algo, proto) for this call? Tuner v2 is bound by 2.21
 * alone (later versions bind v3+, or check a v2 answer against their cost
 * table themselves), and 2.21 indexes its tables and kernels with the pair
 * as given: a pair it lacks reads out of bounds. What 2.21 has: six
 * algorithms (no PAT); kernels for broadcast and reduce on ring only,
 * all-gather and reduce-scatter on ring, CollNet direct and NVLS, all-reduce
 * on all six; LL and LL128 on ring and tree only. CollNet needs
 * collnet_support and NVLS needs nvls_support (NCCL's arguments); NVLS
 * across hosts needs CollNet and does all-reduce only; NVLS tree needs
 * several hosts. CollNet direct is refused: 2.21 turns it off on hosts
 * without NVSwitch and for multi-host all-gather/reduce-scatter without the
 * CollNet plugin's support, neither of which the tuner can see. */
static int v2_pair_runs(const rr_tuner_ctx *c, const rr_coll_query *q, int algo, int proto) {
  if (algo < 0 || algo >= RR_NUM_ALGOS_2_21 || proto < 0 || proto >= RR_NUM_PROTOS) return 0;
  if (algo != RR_ALGO_RING && algo != RR_ALGO_TREE && proto != RR_PROTO_SIMPLE) return 0;
  if (algo == RR_ALGO_COLLNET_DIRECT) return 0;
  const int multi_host = c->n_nodes > 1;
  switch (q->coll) {
  case RR_COLL_BROADCAST:
  case RR_COLL_REDUCE:
    return algo == RR_ALGO_RING;
  case RR_COLL_ALL_GATHER:
  case RR_COLL_REDUCE_SCATTER:
    return algo == RR_ALGO_RING || (algo == RR_ALGO_NVLS && q->nvls_support == 1 && !multi_host);
  case RR_COLL_ALL_REDUCE:
    if (algo == RR_ALGO_COLLNET_CHAIN) return q->collnet_support == 1;
    if (algo == RR_ALGO_NVLS) return q->nvls_support == 1 && (!multi_host || q->collnet_support == 1);
    if (algo == RR_ALGO_NVLS_TREE) return q->nvls_support == 1 && multi_host;
    return 1; /* ring, tree */
  default:
    return 0;
  }
}

rr_status rr_tuner_coll_info(rr_tuner_ctx *ctx, const rr_coll_query *q, int *n_channels) {
  if (!ctx_valid(ctx) || q == NULL || n_channels == NULL) {
    if (ctx != NULL || q == NULL || n_channels == NULL)
      warn_bad_query_once(!ctx_valid(ctx) ? "getCollInfo with an unknown context"
                                          : "getCollInfo with a NULL argument");
    return RR_OK;
  }
  if (q->cost != NULL ? (q->num_algo <= 0 || q->num_proto <= 0 ||
                         q->num_algo > 64 || q->num_proto > 64)
                      : (q->algo_out == NULL || q->proto_out == NULL)) {
    warn_bad_query_once(q->cost != NULL
                            ? "getCollInfo with a cost table of impossible shape"
                            : "getCollInfo with neither a cost table nor algorithm/protocol ids");
    return RR_OK;
  }
  atomic_fetch_add_explicit(&ctx->colls, 1, memory_order_relaxed);
  if (ctx->inert) return RR_OK; /* the ranks' inputs differ: NCCL's choice on every rank */
  if (ctx->agree != NULL) rr_tuner_agree_step(ctx);
  int channels = *n_channels;
  if (q->cost != NULL) apply_model(ctx, q, &channels);

  const rr_rules *rules = ctx->rules;
  if (rules != NULL && rules->count > 0) {
    rr_rule_query rq = {.coll = q->coll, .nbytes = q->nbytes, .nodes = (int64_t)ctx->n_nodes,
                        .ranks = (int64_t)ctx->n_ranks, .pipe_ops = q->num_pipe_ops,
                        .reg_buff = q->reg_buff, .rails_down = ctx->rails_down};
    const rr_rule *r = rr_rules_match(rules, &rq);
    if (r != NULL) {
      if (q->cost != NULL) {
        if ((r->algo != RR_RULE_KEEP || r->proto != RR_RULE_KEEP) &&
            !force_cell(q, r->algo, r->proto))
          warn_bad_query_once("a rule names an algorithm/protocol NCCL cannot run for this call");
      } else if (r->algo != RR_RULE_KEEP && r->proto != RR_RULE_KEEP) {
        /* v2: no table; NCCL takes the pair as given, so only one it can run. */
        if (v2_pair_runs(ctx, q, r->algo, r->proto)) {
          *q->algo_out = r->algo;
          *q->proto_out = r->proto;
        } else {
          warn_bad_query_once("a rule names an algorithm/protocol NCCL cannot run for this call");
        }
      }
      if (r->channels != RR_RULE_KEEP) channels = r->channels;
      announce_rule(r, q->coll, q->nbytes, channels);
    }
  }
  *n_channels = channels;
  return RR_OK;
}

rr_status rr_tuner_chunk_size(rr_tuner_ctx *ctx, int coll, size_t part_bytes, int algo, int proto,
                              int n_channels, size_t *chunk_size) {
  (void)n_channels;
  if (!ctx_valid(ctx) || chunk_size == NULL) {
    if (ctx != NULL || chunk_size == NULL)
      warn_bad_query_once(!ctx_valid(ctx) ? "getChunkSize with an unknown context"
                                          : "getChunkSize with a NULL chunk-size pointer");
    return RR_OK;
  }
  /* The agreement's key: counted before anything else, on every rank alike. */
  atomic_fetch_add_explicit(&ctx->parts, 1, memory_order_relaxed);
  if (ctx->inert) return RR_OK;
  const rr_rules *rules = ctx->rules;
  const int grain = rr_proto_grain(proto);
  if (rules == NULL || rules->count == 0 || grain == 0) return RR_OK;
  rr_rule_query rq = {.coll = coll, .nbytes = part_bytes, .nodes = (int64_t)ctx->n_nodes,
                      .ranks = (int64_t)ctx->n_ranks, .rails_down = ctx->rails_down,
                      .shape_unknown = 1};
  const rr_rule *r = rr_rules_match(rules, &rq);
  /* Only the rule that chose this call's plan may size its chunks. */
  if (r == NULL || r->chunk == RR_RULE_KEEP) return RR_OK;
  if ((r->algo != RR_RULE_KEEP && r->algo != algo) || (r->proto != RR_RULE_KEEP && r->proto != proto))
    return RR_OK;
  /* A rule's chunk (512 B and up) may be below LL128's grain. */
  *chunk_size = r->chunk < grain ? (size_t)grain : (size_t)r->chunk;
  return RR_OK;
}
