/* What the tuner core's files share (not an interface for anyone else):
 * the context layout, the model plan, and the agreement glue that
 * tuner_core_agree.c adds to a context. */
#ifndef RERAIL_TUNER_CORE_INTERNAL_H
#define RERAIL_TUNER_CORE_INTERNAL_H
#include <stdatomic.h>
#include <stdint.h>

#include "rr_log.h"
#include "tuner_core.h"
#include "tuner_rules.h"

/* rr_log.h's RR_WARN files under NET; the tuner's warnings belong to TUNING. */
#define TUNER_WARN(...) rr_log_emit(RR_LOG_WARN, RR_SUB_TUNING, __FILE__, __LINE__, __VA_ARGS__)

struct agreement;

/* Marks a live context, so that a stale or foreign pointer (NCCL's net
 * context, a freed tuner context) is refused instead of trusted. */
#define RR_TUNER_CTX_MAGIC 0x72727475u  /* "rrtu" */

/* What the model says for one view, precomputed when the view changes so
 * that the per-collective path is a few multiplications. For each cell:
 * time = lat + bytes * inv_bw. "healthy" is the same network with every
 * rail up and NCCL's default channels, which is what NCCL's own table
 * assumes; the ratio of the two rescales NCCL's cell. */
typedef struct model_plan {
  int active;                                   /* a rail is down and the model applies */
  int channels[RR_NUM_ALGOS][RR_NUM_PROTOS];    /* best count under the view */
  double lat[RR_NUM_COLLS][RR_NUM_ALGOS][RR_NUM_PROTOS];
  double inv_bw[RR_NUM_COLLS][RR_NUM_ALGOS][RR_NUM_PROTOS];
  double inv_bw_healthy[RR_NUM_COLLS][RR_NUM_ALGOS][RR_NUM_PROTOS];
} model_plan;

struct rr_tuner_ctx {
  uint32_t magic;
  int abi_version;
  uint64_t comm_id;
  size_t n_ranks;
  size_t n_nodes;
  int nvl_domains;
  const rr_rules *rules;  /* process-wide, immutable while any context lives */
  int have_net;           /* the rules file described the network */
  rr_net_view view;       /* agreed view (static by default) */
  int rails_down;         /* of the agreed view, as rules see it */
  model_plan plan;
  /* getCollInfo calls (for the log). Relaxed atomics: NCCL enqueues a
   * communicator's collectives from one thread at a time, but nothing
   * forbids threads taking turns. */
  atomic_uint_least64_t colls;
  /* getChunkSize calls: what the agreement protocol keys on. NCCL asks for
   * chunk sizes only when it launches (ncclGroupSimulateEnd asks
   * getCollInfo but launches nothing), once per channel part of each
   * collective, the same on every rank (docs/tuner.md, "Sequence key"). */
  atomic_uint_least64_t parts;
  /* The ranks' inputs differ (agreement INPUTS refused): every choice is
   * left to NCCL, on every rank alike. */
  int inert;
  struct agreement *agree; /* NULL: off (the default); tuner_core_agree.c */
};

/* Recompute ctx->plan and ctx->rails_down from ctx->view. */
void rr_tuner_rebuild_plan(rr_tuner_ctx *c);

/* The agreement protocol on a context (tuner_core_agree.c): start when
 * RERAIL_TUNER_AGREE_DIR is set (else ctx->agree stays NULL): agree on the
 * inputs (sets ctx->inert when they differ; nccl_latencies: NCCL's, before
 * any edit), then run before each collective; free at finalize. */
void rr_tuner_agree_start(rr_tuner_ctx *c, const double (*nccl_latencies)[RR_NUM_PROTOS]);
void rr_tuner_agree_step(rr_tuner_ctx *c);
void rr_tuner_agree_stop(rr_tuner_ctx *c);

#endif
