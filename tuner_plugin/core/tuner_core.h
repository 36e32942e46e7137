/* The one tuner core behind every exported ncclTuner version.
 *
 * The shims in tuner_plugin/abi/ translate each version's arguments into
 * these calls; nothing here knows NCCL's types. Today the core observes and
 * leaves every NCCL choice as it is: until ranks share a consistent view of
 * health (design notes, section 7), local information must not change a
 * plan, or ranks of one communicator could pick different ones and hang. */
#ifndef RERAIL_TUNER_CORE_H
#define RERAIL_TUNER_CORE_H
#include <stddef.h>
#include <stdint.h>

#include "rr_log.h"
#include "rr_status.h"

typedef struct rr_tuner_ctx rr_tuner_ctx;  /* one per communicator */

typedef struct rr_tuner_init_args {
  int abi_version;       /* the ncclTunerPlugin_vN NCCL bound: 2..6 */
  uint64_t comm_id;      /* NCCL's communicator hash (v5+), else 0 */
  size_t n_ranks;
  size_t n_nodes;
  int nvl_domains;       /* NVLink domains (v5+), -1 when NCCL does not say */
  rr_logger_fn logger;   /* NCCL's logger; NULL keeps the current one */
} rr_tuner_init_args;

/* One collective NCCL is about to plan. A plan is expressed one of two ways:
 * through NCCL's cost table (tuner v3+): cost is a row-major
 * float[num_algo][num_proto] whose cells the core may lower or raise, never
 * resize; or, without a table (tuner v2), by writing algorithm and protocol
 * ids to *algo_out / *proto_out, which enter as -1 ("NCCL decides"). */
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
} rr_coll_query;

/* Allocates the communicator's context and takes a reference on the
 * process-wide state. Logs which version NCCL bound and the comm's shape. */
rr_status rr_tuner_init(const rr_tuner_init_args *args, rr_tuner_ctx **ctx);
/* Frees the context; the last one releases the process-wide state. */
rr_status rr_tuner_finalize(rr_tuner_ctx *ctx);

/* Per collective, on NCCL's enqueue path: allocation-free, lock-free, no
 * logging on success; tens of nanoseconds. n_channels is in/out (0 enters
 * as "NCCL decides"). Today it leaves the table, the ids and *n_channels as
 * NCCL proposed them. */
rr_status rr_tuner_coll_info(rr_tuner_ctx *ctx, const rr_coll_query *q, int *n_channels);
/* Per collective (tuner v6): *chunk_size holds NCCL's proposal and is left
 * as it is. */
rr_status rr_tuner_chunk_size(rr_tuner_ctx *ctx, int coll, size_t nbytes, int algo, int proto,
                              int n_channels, size_t *chunk_size);

#endif
