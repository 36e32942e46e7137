/* ncclTunerPlugin_v4 (NCCL 2.24-2.27): v3 plus reg_buff. */
#include "tuner_abi.h"
#include "nccl/tuner_v4.h"

static nccl_result_t v4_init(size_t n_ranks, size_t n_nodes, nccl_logger_t logger, void **ctx) {
  return rr_tuner_abi_init(4, ctx, 0, n_ranks, n_nodes, logger, NULL, NULL);
}

NCCL_ABI_EXPORT const nccl_tuner_v4_t ncclTunerPlugin_v4 = {
    .name = RR_ABI_TUNER_NAME,
    .init = v4_init,
    .get_coll_info = rr_tuner_abi_coll_info,
    .destroy = rr_tuner_abi_finalize,
};
