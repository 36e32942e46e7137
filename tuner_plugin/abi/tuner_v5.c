/* ncclTunerPlugin_v5 (NCCL 2.28-2.29): init learns the communicator id and
 * NVLink domains, and may edit NCCL's constants (rerail shifts the network
 * latencies to the rules file's @net figure, when there is one). */
#include "tuner_abi.h"
#include "nccl/tuner_v5.h"

static nccl_result_t v5_init(void **ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                             nccl_logger_t logger, nccl_nvl_domain_info_v5_t *nvl_domains,
                             nccl_tuner_constants_v5_t *constants) {
  return rr_tuner_abi_init(5, ctx, comm_id, n_ranks, n_nodes, logger, nvl_domains, constants);
}

NCCL_ABI_EXPORT const nccl_tuner_v5_t ncclTunerPlugin_v5 = {
    .name = RR_ABI_TUNER_NAME,
    .init = v5_init,
    .get_coll_info = rr_tuner_abi_coll_info,
    .finalize = rr_tuner_abi_finalize,
};
