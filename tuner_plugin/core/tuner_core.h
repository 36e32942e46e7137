/* The one tuner core behind every exported ncclTuner version.
 *
 * The shims in tuner_plugin/abi/ translate each version's arguments into
 * these calls; nothing here knows NCCL's types (ids: tuner_ids.h).
 *
 * What decides, in order (docs/tuner.md):
 *   1. NCCL's own cost table and channel count are the starting point.
 *   2. The cost model (tuner_model.h) rescales the ring and tree cells and
 *      matches channels to usable rails when the communicator's agreed view
 *      of the network has rails down. The agreed view is the same on every
 *      rank: by default it is the static one (the rules file's @net line, no
 *      rail down), so by default local health changes nothing; only the
 *      agreement protocol (off by default; RERAIL_TUNER_AGREE_DIR) can move
 *      it, and then every rank moves at the same collective.
 *   3. The first matching rule of RERAIL_TUNER_CONFIG overrides both.
 * Every input is checked; anything odd leaves NCCL's choice as it is and
 * still returns success: an error from getCollInfo would fail the
 * collective. */
#ifndef RERAIL_TUNER_CORE_H
#define RERAIL_TUNER_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "rr_log.h"
#include "rr_status.h"
#include "tuner_ids.h"
#include "tuner_model.h"

typedef struct rr_tuner_ctx rr_tuner_ctx;  /* one per communicator */

typedef struct rr_tuner_init_args {
  int abi_version;       /* the ncclTunerPlugin_vN NCCL bound: 2..6 */
  uint64_t comm_id;      /* NCCL's communicator hash (v5+), else 0 */
  size_t n_ranks;
  size_t n_nodes;
  int nvl_domains;       /* NVLink domains (v5+), -1 when NCCL does not say */
  rr_logger_fn logger;   /* NCCL's logger; NULL keeps the current one */
  /* v5+: NCCL's network latencies per algorithm and protocol (its
   * hwLatencies[NET]), which the core may edit in place; NULL otherwise. */
  double (*net_latencies)[RR_NUM_PROTOS];
} rr_tuner_init_args;

/* One collective NCCL is about to plan. A plan is expressed one of two ways:
 * through NCCL's cost table (tuner v3+): cost is a row-major
 * float[num_algo][num_proto] whose cells the core may lower or raise, never
 * resize; or, without a table (tuner v2), by writing algorithm and protocol
 * ids to *algo_out / *proto_out, which enter as -1 ("NCCL decides"). NCCL
 * (2.21) uses those ids unchecked, so the core writes only a pair that
 * version can run for the call. */
typedef struct rr_coll_query {
  int coll;              /* NCCL function id */
  size_t nbytes;
  int num_pipe_ops;
  int reg_buff;          /* -1 when the ABI version does not say */
  float *cost;           /* NULL: no table (v2) */
  int num_algo;
  int num_proto;
  int *algo_out;         /* v2 only, else NULL */
  int *proto_out;        /* v2 only, else NULL */
  int collnet_support;   /* v2 only: 1 when NCCL says CollNet may run for this call */
  int nvls_support;      /* v2 only: 1 when NCCL says NVLS may run for this call */
} rr_coll_query;

/* Allocates the communicator's context (loading the rules file on the first
 * one). Never fails towards NCCL: on bad arguments or no memory *ctx is set
 * to NULL (when it can be) and RR_OK returned; a NULL context later means
 * "leave NCCL's choices alone". */
rr_status rr_tuner_init(const rr_tuner_init_args *args, rr_tuner_ctx **ctx);
/* Frees the context (NULL is accepted and ignored). */
rr_status rr_tuner_finalize(rr_tuner_ctx *ctx);

/* Per collective, on NCCL's enqueue path: allocation-free, lock-free, no
 * logging on success; well under a microsecond. n_channels is in/out (0
 * enters as "NCCL decides"). Always RR_OK: bad input is reported once and
 * leaves everything as NCCL proposed it. */
rr_status rr_tuner_coll_info(rr_tuner_ctx *ctx, const rr_coll_query *q, int *n_channels);
/* Tuner v6 getChunkSize, after NCCL fixed algorithm, protocol and channels.
 * NCCL 2.30 calls it once per channel part of a collective: part_bytes is
 * that part (n_channels 1), not the collective's size, and rules are matched
 * against it. *chunk_size holds NCCL's proposal; a matching rule with chunk=
 * whose pair is NCCL's replaces it, raised to at least the grain of the
 * protocol NCCL picked (NCCL rounds down to the grain and divides by the
 * result). Always RR_OK; on anything odd *chunk_size is left alone. */
rr_status rr_tuner_chunk_size(rr_tuner_ctx *ctx, int coll, size_t part_bytes, int algo, int proto,
                              int n_channels, size_t *chunk_size);

/* What the agreement did on a context, for tests and tools. */
typedef struct rr_tuner_stats {
  int agreement;          /* 1: RERAIL_TUNER_AGREE_DIR in use for this communicator */
  int inputs_refused;     /* 1: the ranks' inputs differed: NCCL's choices on every rank */
  uint32_t inputs_differ; /* the kinds that differed (tuner_inputs.h); 0 with a timeout */
  int replanning;         /* 1: health-driven re-planning on (inputs agreed, tuner v6) */
  uint64_t key;           /* the re-planning sequence key (getChunkSize calls so far) */
  uint64_t commits, aborts, late_reads, late_stalls;
} rr_tuner_stats;
/* Zeroes *out for a NULL or unknown context. */
void rr_tuner_get_stats(const rr_tuner_ctx *ctx, rr_tuner_stats *out);
/* Communicators in this process whose ranks' inputs differed. */
uint64_t rr_tuner_inputs_refusals(void);

/* For tests and the agreement protocol: install an agreed view of the
 * network on a context (the same on every rank, by construction of the
 * caller). NULL restores the static view. */
void rr_tuner_set_view(rr_tuner_ctx *ctx, const rr_net_view *view);

#endif
