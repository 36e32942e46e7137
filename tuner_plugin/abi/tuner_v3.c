/* ncclTunerPlugin_v3 (NCCL 2.22-2.23): the cost table appears. */
#include "tuner_abi.h"
#include "nccl/tuner_v3.h"

static nccl_result_t v3_init(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx) {
  return rr_tuner_abi_init(3, ctx, 0, n_ranks, n_nodes, logger, NULL, NULL);
}

static nccl_result_t v3_get_coll_info(void *ctx, nccl_func_t coll, size_t nbytes,
                                      int num_pipe_ops, float **cost_table, int num_algo,
                                      int num_proto, int *n_channels) {
  return rr_tuner_abi_coll_info(ctx, coll, nbytes, num_pipe_ops, cost_table, num_algo, num_proto,
                                -1, n_channels);
}

NCCL_ABI_EXPORT const nccl_tuner_v3_t ncclTunerPlugin_v3 = {
    .name = RR_ABI_TUNER_NAME,
    .init = v3_init,
    .get_coll_info = v3_get_coll_info,
    .destroy = rr_tuner_abi_finalize,
};
