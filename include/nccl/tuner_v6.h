/* ncclTuner v6 (NCCL 2.30): exported as ncclTunerPlugin_v6.
 *
 * Changes from v5: an optional getChunkSize entry. Init arguments and the
 * constants are v5's. NCCL 2.30 uses this table as its own, directly. */
#ifndef RERAIL_NCCL_TUNER_V6_H
#define RERAIL_NCCL_TUNER_V6_H
#include "nccl_common.h"
#include "tuner_v5.h"

typedef nccl_nvl_domain_info_v5_t nccl_nvl_domain_info_v6_t;
typedef nccl_tuner_constants_v5_t nccl_tuner_constants_v6_t;

typedef struct nccl_tuner_v6 {
  const char *name;
  nccl_result_t (*init)(void **ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                        nccl_logger_t logger, nccl_nvl_domain_info_v6_t *nvl_domains,
                        nccl_tuner_constants_v6_t *constants);
  nccl_result_t (*get_coll_info)(void *ctx, nccl_func_t coll, size_t nbytes, int num_pipe_ops,
                                 float **cost_table, int num_algo, int num_proto, int reg_buff,
                                 int *n_channels);
  nccl_result_t (*finalize)(void *ctx);
  /* Optional (NULL: NCCL keeps its own). Called after algorithm, protocol
   * and channels are fixed, once per channel part of the collective: nbytes
   * is that part's size and n_channels 1 (CollNet: the collective, with its
   * channels). *chunk_size enters holding NCCL's choice, and whatever it
   * holds on return is used (clamped to the buffer limit, then rounded down
   * to the protocol's grain, NCCL_PROTO_GRAIN_*, and divided by it: a value
   * below the grain is a division by zero). Leaving it alone keeps NCCL's. */
  nccl_result_t (*get_chunk_size)(void *ctx, nccl_func_t coll, size_t nbytes, int algo,
                                  int proto, int n_channels, size_t *chunk_size);
} nccl_tuner_v6_t;

#endif
