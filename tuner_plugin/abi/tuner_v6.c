/* ncclTunerPlugin_v6 (NCCL 2.30, used by NCCL as its own table): v5 plus
 * getChunkSize: a matching rule with chunk= sets it, else NCCL's stays. */
#include "tuner_abi.h"
#include "nccl/tuner_v6.h"

static nccl_result_t v6_init(void **ctx, uint64_t comm_id, size_t n_ranks, size_t n_nodes,
                             nccl_logger_t logger, nccl_nvl_domain_info_v6_t *nvl_domains,
                             nccl_tuner_constants_v6_t *constants) {
  return rr_tuner_abi_init(6, ctx, comm_id, n_ranks, n_nodes, logger, nvl_domains, constants);
}

/* NCCL 2.30 calls this per channel part: nbytes is one part, not the collective. */
static nccl_result_t v6_get_chunk_size(void *ctx, nccl_func_t coll, size_t nbytes, int algo,
                                       int proto, int n_channels, size_t *chunk_size) {
  return rr_tuner_abi_result(
      rr_tuner_chunk_size(ctx, (int)coll, nbytes, algo, proto, n_channels, chunk_size));
}

NCCL_ABI_EXPORT const nccl_tuner_v6_t ncclTunerPlugin_v6 = {
    .name = RR_ABI_TUNER_NAME,
    .init = v6_init,
    .get_coll_info = rr_tuner_abi_coll_info,
    .finalize = rr_tuner_abi_finalize,
    .get_chunk_size = v6_get_chunk_size,
};
