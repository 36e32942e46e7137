/* ncclTuner v2 (NCCL 2.21 onwards): exported as ncclTunerPlugin_v2.
 *
 * The tuner picks algorithm, protocol and channel count for one collective.
 * NCCL calls getCollInfo once per collective, on the thread that enqueues it,
 * so it must stay well under a microsecond. A non-success return from
 * getCollInfo fails the enqueue in current NCCL versions (older headers
 * promised a fallback to NCCL's defaults; do not rely on it). */
#ifndef RERAIL_NCCL_TUNER_V2_H
#define RERAIL_NCCL_TUNER_V2_H
#include "nccl_common.h"

typedef struct nccl_tuner_v2 {
  /* Tuner name, for logs. */
  const char *name;
  /* Once per communicator: n_ranks ranks on n_nodes nodes. *ctx receives the
   * per-communicator context every other entry gets. */
  nccl_result_t (*init)(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx);
  /* v2 has no cost table: it is told whether CollNet / NVLS could run and
   * answers with an algorithm and a protocol (both or neither; NCCL enters
   * NCCL_ALGO_UNDEF / NCCL_PROTO_UNDEF, which mean "NCCL decides") and a
   * channel count (NCCL enters 0, which means "NCCL decides"). */
  nccl_result_t (*get_coll_info)(void *ctx, nccl_func_t coll, size_t nbytes,
                                 int collnet_support, int nvls_support, int num_pipe_ops,
                                 int *algorithm, int *protocol, int *n_channels);
  /* Free the context. */
  nccl_result_t (*destroy)(void *ctx);
} nccl_tuner_v2_t;

#endif
