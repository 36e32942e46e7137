/* What the five ncclTuner shims share: the name, the status conversion and
 * the argument packing. Header-only: each piece is a few lines. */
#ifndef RERAIL_TUNER_ABI_H
#define RERAIL_TUNER_ABI_H
#include "nccl/abi_layout_checks.h"
#include "nccl/nccl_common.h"
#include "nccl/tuner_v5.h"
#include "tuner_core.h"

/* The name NCCL logs for the tuner. */
#define RR_ABI_TUNER_NAME "rerail"

/* The core's ids are NCCL's (tuner_ids.h keeps it free of NCCL headers). */
_Static_assert((int)RR_COLL_ALL_REDUCE == (int)NCCL_FUNC_ALL_REDUCE && RR_NUM_COLLS == NCCL_NUM_COLL_FUNCS,
               "collective ids");
_Static_assert(RR_ALGO_TREE == NCCL_ALGO_TREE && RR_ALGO_RING == NCCL_ALGO_RING &&
                   RR_ALGO_PAT == NCCL_ALGO_PAT && RR_NUM_ALGOS == NCCL_NUM_ALGORITHMS,
               "algorithm ids");
_Static_assert(RR_NUM_ALGOS_2_21 == NCCL_ALGO_PAT, "NCCL 2.21's algorithms are the ones before PAT");
_Static_assert(RR_PROTO_LL == NCCL_PROTO_LL && RR_PROTO_SIMPLE == NCCL_PROTO_SIMPLE &&
                   RR_NUM_PROTOS == NCCL_NUM_PROTOCOLS,
               "protocol ids");
_Static_assert(RR_PROTO_GRAIN_LL == NCCL_PROTO_GRAIN_LL && RR_PROTO_GRAIN_LL128 == NCCL_PROTO_GRAIN_LL128 &&
                   RR_PROTO_GRAIN_SIMPLE == NCCL_PROTO_GRAIN_SIMPLE,
               "protocol grains");

/* rr_status -> NCCL's result. Every tuner entry answers success: NCCL
 * checks getCollInfo's result (despite its header's comment) and fails the
 * collective on anything else, and a failing init or finalize would fail
 * the communicator. The core keeps NCCL's choices on any problem and says
 * so in the log; the return value stays success. */
static inline nccl_result_t rr_tuner_abi_result(rr_status s) {
  (void)s;
  return NCCL_RESULT_SUCCESS;
}

/* Create a context for the version that NCCL bound. nvl may be NULL. */
static inline nccl_result_t rr_tuner_abi_init(int version, void **ctx, uint64_t comm_id,
                                              size_t n_ranks, size_t n_nodes,
                                              nccl_logger_t logger,
                                              const nccl_nvl_domain_info_v5_t *nvl,
                                              nccl_tuner_constants_v5_t *constants) {
  rr_tuner_init_args args = {
      .abi_version = version,
      .comm_id = comm_id,
      .n_ranks = n_ranks,
      .n_nodes = n_nodes,
      .nvl_domains = nvl != NULL ? nvl->n_domains : -1,
      /* Same function; NCCL's enum level is passed as the int rr_log uses. */
      .logger = (rr_logger_fn)logger,
      .net_latencies = constants != NULL ? constants->hw_latencies[NCCL_HW_NET] : NULL,
  };
  rr_tuner_ctx *c = NULL;
  rr_status s = rr_tuner_init(&args, ctx != NULL ? &c : NULL);
  if (ctx != NULL) *ctx = c; /* NULL on any problem: every later call keeps NCCL's choice */
  return rr_tuner_abi_result(s);
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
