/* ncclTuner v5 (NCCL 2.28-2.29): exported as ncclTunerPlugin_v5.
 *
 * Changes from v4: init receives the communicator id, the NVLink domain
 * layout and NCCL's tuning constants (which the tuner may edit in place
 * before NCCL builds its cost model); destroy is renamed finalize. */
#ifndef RERAIL_NCCL_TUNER_V5_H
#define RERAIL_NCCL_TUNER_V5_H
#include "nccl_common.h"

/* How the communicator's ranks spread over NVLink domains. */
typedef struct nccl_nvl_domain_info_v5 {
  int n_domains;
  int min_ranks_per_domain;
  int max_ranks_per_domain;
} nccl_nvl_domain_info_v5_t;

/* NCCL's cost-model constants. Latencies in microseconds, bandwidths in
 * GB/s; indexed by algorithm, protocol, hardware link (NCCL_HW_*), compute
 * capability generation and node-count scale. */
typedef struct nccl_tuner_constants_v5 {
  double base_latencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  double hw_latencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  double ll_max_bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double per_ch_max_ring_ll128_bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double per_ch_max_tree_ll128_bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double per_ch_max_tree_bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double per_ch_max_nvls_tree_bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
} nccl_tuner_constants_v5_t;

typedef struct nccl_tuner_v5 {
  const char *name;
  /* comm_id: NCCL's hash of the communicator, equal on every rank of it. */
  nccl_result_t (*init)(void **ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                        nccl_logger_t logger, nccl_nvl_domain_info_v5_t *nvl_domains,
                        nccl_tuner_constants_v5_t *constants);
  /* As v4 (tuner_v4.h). */
  nccl_result_t (*get_coll_info)(void *ctx, nccl_func_t coll, size_t nbytes, int num_pipe_ops,
                                 float **cost_table, int num_algo, int num_proto, int reg_buff,
                                 int *n_channels);
  nccl_result_t (*finalize)(void *ctx);
} nccl_tuner_v5_t;

#endif
