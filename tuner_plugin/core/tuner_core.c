/* Tuner core: per-communicator contexts over a reference-counted process
 * state, and a getCollInfo that observes without steering (see
 * tuner_core.h for why). */
#include "tuner_core.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

/* rr_log.h's RR_WARN files under NET; the tuner's warnings belong to TUNING. */
#define TUNER_WARN(...) rr_log_emit(RR_LOG_WARN, RR_SUB_TUNING, __FILE__, __LINE__, __VA_ARGS__)

/* Marks a live context, so that a stale or foreign pointer (NCCL's net
 * context, a freed tuner context) is refused instead of trusted. */
#define RR_TUNER_CTX_MAGIC 0x72727475u  /* "rrtu" */

struct rr_tuner_ctx {
  uint32_t magic;
  int abi_version;
  uint64_t comm_id;
  size_t n_ranks;
  size_t n_nodes;
  /* Collectives planned. Relaxed atomic: NCCL enqueues a communicator's
   * collectives from one thread at a time, but nothing forbids threads
   * taking turns. */
  atomic_uint_least64_t colls;
};

/* Process-wide state shared by every context: today only the count of live
 * contexts (where the health-table reader will hang). Init and finalize are
 * rare; the lock never touches the per-collective path. */
static struct {
  pthread_mutex_t lock;
  int live;
} process = {PTHREAD_MUTEX_INITIALIZER, 0};

/* Bad input on the per-collective path is reported once per process, not
 * once per collective. */
static atomic_int warned_bad_query;

static void warn_bad_query_once(const char *what) {
  if (atomic_exchange_explicit(&warned_bad_query, 1, memory_order_relaxed) == 0)
    TUNER_WARN("tuner: %s (reported once)", what);
}

static int ctx_valid(const rr_tuner_ctx *ctx) {
  return ctx != NULL && ctx->magic == RR_TUNER_CTX_MAGIC;
}

rr_status rr_tuner_init(const rr_tuner_init_args *args, rr_tuner_ctx **ctx) {
  if (args != NULL && args->logger != NULL) rr_log_set_logger(args->logger);
  if (args == NULL || ctx == NULL) {
    TUNER_WARN("tuner: init called with a NULL %s",
               args == NULL ? "argument" : "context pointer");
    return RR_ERR_INVALID;
  }
  rr_tuner_ctx *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    TUNER_WARN("tuner: out of memory allocating a communicator context");
    return RR_ERR_NOMEM;
  }
  c->magic = RR_TUNER_CTX_MAGIC;
  c->abi_version = args->abi_version;
  c->comm_id = args->comm_id;
  c->n_ranks = args->n_ranks;
  c->n_nodes = args->n_nodes;
  atomic_init(&c->colls, 0);

  pthread_mutex_lock(&process.lock);
  process.live++;
  int live = process.live;
  pthread_mutex_unlock(&process.lock);

  char nvl[32] = "";
  if (args->nvl_domains >= 0) snprintf(nvl, sizeof(nvl), " nvlDomains %d", args->nvl_domains);
  RR_INFO(RR_SUB_TUNING,
          "tuner: bound as ncclTunerPlugin_v%d; comm 0x%" PRIx64
          " nRanks %zu nNodes %zu%s; NCCL's choices are kept (%d live comm%s)",
          c->abi_version, c->comm_id, c->n_ranks, c->n_nodes, nvl, live, live == 1 ? "" : "s");
  *ctx = c;
  return RR_OK;
}

rr_status rr_tuner_finalize(rr_tuner_ctx *ctx) {
  if (!ctx_valid(ctx)) {
    TUNER_WARN("tuner: finalize called with %s context",
               ctx == NULL ? "a NULL" : "an unknown or already finalized");
    return RR_ERR_INVALID;
  }
  pthread_mutex_lock(&process.lock);
  process.live--;
  pthread_mutex_unlock(&process.lock);

  RR_INFO(RR_SUB_TUNING, "tuner: comm 0x%" PRIx64 " finalized after %" PRIu64 " collectives",
          ctx->comm_id, (uint64_t)atomic_load_explicit(&ctx->colls, memory_order_relaxed));
  ctx->magic = 0;
  free(ctx);
  return RR_OK;
}

rr_status rr_tuner_coll_info(rr_tuner_ctx *ctx, const rr_coll_query *q, int *n_channels) {
  if (!ctx_valid(ctx) || q == NULL || n_channels == NULL) {
    warn_bad_query_once(!ctx_valid(ctx) ? "getCollInfo with a NULL or unknown context"
                                        : "getCollInfo with a NULL channel-count pointer");
    return RR_ERR_INVALID;
  }
  if (q->cost != NULL ? (q->num_algo <= 0 || q->num_proto <= 0)
                      : (q->algo_out == NULL || q->proto_out == NULL)) {
    warn_bad_query_once(q->cost != NULL
                            ? "getCollInfo with an empty cost table"
                            : "getCollInfo with neither a cost table nor algorithm/protocol ids");
    return RR_ERR_INVALID;
  }
  atomic_fetch_add_explicit(&ctx->colls, 1, memory_order_relaxed);
  /* Deliberately nothing else: the cost table, the algorithm/protocol ids
   * and *n_channels stay as NCCL proposed them (see tuner_core.h). */
  return RR_OK;
}

rr_status rr_tuner_chunk_size(rr_tuner_ctx *ctx, int coll, size_t nbytes, int algo, int proto,
                              int n_channels, size_t *chunk_size) {
  (void)coll;
  (void)nbytes;
  (void)algo;
  (void)proto;
  (void)n_channels;
  if (!ctx_valid(ctx) || chunk_size == NULL) {
    warn_bad_query_once(!ctx_valid(ctx) ? "getChunkSize with a NULL or unknown context"
                                        : "getChunkSize with a NULL chunk-size pointer");
    return RR_ERR_INVALID;
  }
  /* *chunk_size already holds NCCL's choice; leaving it keeps it. */
  return RR_OK;
}
