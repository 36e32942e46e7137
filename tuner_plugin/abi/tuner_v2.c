/* ncclTunerPlugin_v2 (NCCL 2.21): no cost table; the tuner names an
 * algorithm and protocol, or leaves NCCL's "undefined" to let NCCL pick. */
#include "tuner_abi.h"
#include "nccl/tuner_v2.h"

static nccl_result_t v2_init(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx) {
  return rr_tuner_abi_init(2, ctx, 0, n_ranks, n_nodes, logger, NULL, NULL);
}

/* A matching rule that names both answers in algorithm/protocol, if NCCL 2.21 can run
 * that pair for this call (it uses them unchecked); else they stay as NCCL entered them
 * (undefined: NCCL picks), and *n_channels too. */
static nccl_result_t v2_get_coll_info(void *ctx, nccl_func_t coll, size_t nbytes,
                                      int collnet_support, int nvls_support, int num_pipe_ops,
                                      int *algorithm, int *protocol, int *n_channels) {
  rr_coll_query q = {
      .coll = (int)coll,
      .nbytes = nbytes,
      .num_pipe_ops = num_pipe_ops,
      .reg_buff = -1,
      .algo_out = algorithm,
      .proto_out = protocol,
      .collnet_support = collnet_support,
      .nvls_support = nvls_support,
  };
  return rr_tuner_abi_result(rr_tuner_coll_info(ctx, &q, n_channels));
}

NCCL_ABI_EXPORT const nccl_tuner_v2_t ncclTunerPlugin_v2 = {
    .name = RR_ABI_TUNER_NAME,
    .init = v2_init,
    .get_coll_info = v2_get_coll_info,
    .destroy = rr_tuner_abi_finalize,
};
