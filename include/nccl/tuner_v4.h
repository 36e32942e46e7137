/* ncclTuner v4 (NCCL 2.24 onwards): exported as ncclTunerPlugin_v4.
 *
 * Changes from v3: getCollInfo learns whether the user buffers are registered
 * (reg_buff), which makes some algorithms cheaper. */
#ifndef RERAIL_NCCL_TUNER_V4_H
#define RERAIL_NCCL_TUNER_V4_H
#include "nccl_common.h"

typedef struct nccl_tuner_v4 {
  const char *name;
  nccl_result_t (*init)(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx);
  /* As v3 (tuner_v3.h), plus reg_buff: 1 if the buffers are registered or
   * the call is being captured into a CUDA graph that registers them. */
  nccl_result_t (*get_coll_info)(void *ctx, nccl_func_t coll, size_t nbytes, int num_pipe_ops,
                                 float **cost_table, int num_algo, int num_proto, int reg_buff,
                                 int *n_channels);
  nccl_result_t (*destroy)(void *ctx);
} nccl_tuner_v4_t;

#endif
