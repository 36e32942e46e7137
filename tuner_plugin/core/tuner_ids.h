/* NCCL's numeric ids of collectives, algorithms and protocols, as the tuner
 * core uses them. The core stays free of NCCL's headers; tuner_abi.h checks
 * at compile time that these equal include/nccl/nccl_common.h's. */
#ifndef RERAIL_TUNER_IDS_H
#define RERAIL_TUNER_IDS_H

enum { RR_COLL_BROADCAST = 0, RR_COLL_REDUCE = 1, RR_COLL_ALL_GATHER = 2,
       RR_COLL_REDUCE_SCATTER = 3, RR_COLL_ALL_REDUCE = 4, RR_NUM_COLLS = 5 };
enum { RR_ALGO_TREE = 0, RR_ALGO_RING = 1, RR_ALGO_COLLNET_DIRECT = 2, RR_ALGO_COLLNET_CHAIN = 3,
       RR_ALGO_NVLS = 4, RR_ALGO_NVLS_TREE = 5, RR_ALGO_PAT = 6, RR_NUM_ALGOS = 7 };
/* NCCL 2.21, the one version that binds tuner v2, has no PAT: its tables
 * hold six algorithms. */
enum { RR_NUM_ALGOS_2_21 = 6 };
enum { RR_PROTO_LL = 0, RR_PROTO_LL128 = 1, RR_PROTO_SIMPLE = 2, RR_NUM_PROTOS = 3 };

/* Each protocol's grain: NCCL rounds a chunk size down to a multiple of it
 * and divides by the result, so a chunk below the grain would be a division
 * by zero inside NCCL. */
enum { RR_PROTO_GRAIN_LL = 16, RR_PROTO_GRAIN_LL128 = 1920, RR_PROTO_GRAIN_SIMPLE = 512 };

/* The grain of proto, 0 for an id NCCL does not have. */
static inline int rr_proto_grain(int proto) {
  return proto == RR_PROTO_LL ? RR_PROTO_GRAIN_LL
         : proto == RR_PROTO_LL128 ? RR_PROTO_GRAIN_LL128
         : proto == RR_PROTO_SIMPLE ? RR_PROTO_GRAIN_SIMPLE
                                   : 0;
}

#endif
