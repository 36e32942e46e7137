/* ncclTuner v3 (NCCL 2.22 onwards): exported as ncclTunerPlugin_v3.
 *
 * Changes from v2: the tuner sees NCCL's cost table and steers by editing it.
 * See tuner_v2.h for the rules every version shares. */
#ifndef RERAIL_NCCL_TUNER_V3_H
#define RERAIL_NCCL_TUNER_V3_H
#include "nccl_common.h"

typedef struct nccl_tuner_v3 {
  const char *name;
  nccl_result_t (*init)(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx);
  /* cost_table is NOT an array of row pointers: NCCL passes a contiguous
   * float[num_algo][num_proto] (estimated time per algorithm/protocol pair)
   * cast to float**. Cells holding NCCL_ALGO_PROTO_IGNORE are unusable. NCCL
   * picks the cheapest remaining cell, so a tuner steers by lowering a cell
   * (0.0 forces it) or raising others. *n_channels enters as 0 ("NCCL
   * decides"); a positive value overrides the channel count. */
  nccl_result_t (*get_coll_info)(void *ctx, nccl_func_t coll, size_t nbytes, int num_pipe_ops,
                                 float **cost_table, int num_algo, int num_proto,
                                 int *n_channels);
  nccl_result_t (*destroy)(void *ctx);
} nccl_tuner_v3_t;

#endif
