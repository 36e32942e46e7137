/* What the five ncclTuner shims share: the name, the status conversion and
 * the argument packing. Header-only: each piece is a few lines. */
#ifndef RERAIL_TUNER_ABI_H
#define RERAIL_TUNER_ABI_H
#include "nccl/abi_layout_checks.h"
#include "nccl/nccl_common.h"
#include "tuner_core.h"

/* The name NCCL logs for the tuner. */
#define RR_ABI_TUNER_NAME "rerail"

/* rr_status -> NCCL's result. A failing getCollInfo fails the collective's
 * enqueue in NCCL, so the core only fails on input NCCL never produces. */
static inline nccl_result_t rr_tuner_abi_result(rr_status s) {
  switch (s) {
  case RR_OK:
  case RR_AGAIN:
    return NCCL_RESULT_SUCCESS;
  case RR_ERR_INVALID:
    return NCCL_RESULT_INVALID_ARGUMENT;
  case RR_ERR_NOMEM:
  case RR_ERR_SYSTEM:
    return NCCL_RESULT_SYSTEM_ERROR;
  default:
    return NCCL_RESULT_INTERNAL_ERROR;
  }
}

/* Create a context for the version that NCCL bound. nvl may be NULL. */
static inline nccl_result_t rr_tuner_abi_init(int version, void **ctx, uint64_t comm_id,
                                              size_t n_ranks, size_t n_nodes,
                                              nccl_logger_t logger,
                                              const nccl_nvl_domain_info_v5_t *nvl) {
  rr_tuner_init_args args = {
      .abi_version = version,
      .comm_id = comm_id,
      .n_ranks = n_ranks,
      .n_nodes = n_nodes,
      .nvl_domains = nvl != NULL ? nvl->n_domains : -1,
      /* Same function; NCCL's enum level is passed as the int rr_log uses. */
      .logger = (rr_logger_fn)logger,
  };
  rr_tuner_ctx *c = NULL;
  rr_status s = rr_tuner_init(&args, ctx != NULL ? &c : NULL);
  if (rr_failed(s)) return rr_tuner_abi_result(s);
  *ctx = c;
  return NCCL_RESULT_SUCCESS;
}

/* getCollInfo of v3+: NCCL's float** is really a contiguous
 * float[num_algo][num_proto]; hand the core the flat array. */
static inline nccl_result_t rr_tuner_abi_coll_info(void *ctx, nccl_func_t coll, size_t nbytes,
                                                   int num_pipe_ops, float **cost_table,
                                                   int num_algo, int num_proto, int reg_buff,
                                                   int *n_channels) {
  rr_coll_query q = {
      .coll = (int)coll,
      .nbytes = nbytes,
      .num_pipe_ops = num_pipe_ops,
      .reg_buff = reg_buff,
      .cost = (float *)cost_table,
      .num_algo = num_algo,
      .num_proto = num_proto,
  };
  return rr_tuner_abi_result(rr_tuner_coll_info(ctx, &q, n_channels));
}

static inline nccl_result_t rr_tuner_abi_finalize(void *ctx) {
  return rr_tuner_abi_result(rr_tuner_finalize(ctx));
}

#endif
