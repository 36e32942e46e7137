/* The rules file (RERAIL_TUNER_CONFIG): operator overrides, identical on
 * every node because the operator deploys one file everywhere.
 *
 * NCCL's example tuner CSV is accepted unchanged, one rule per line:
 *
 *   collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks[,numPipeOps[,regBuff]]
 *
 * collective: broadcast reduce allgather reducescatter allreduce; algorithm:
 * tree ring collnet_direct collnet_chain nvls nvls_tree pat; protocol: ll
 * ll128 simple; channels -1 keeps NCCL's count; nNodes, nRanks, numPipeOps,
 * regBuff -1 match anything. '#' starts a comment line; blank lines are
 * skipped. The first matching rule wins; a size matches when
 * min_bytes <= nbytes <= max_bytes.
 *
 * rerail's extensions (a file using none of them is NCCL's format):
 *   - collective '*' matches every collective; algorithm or protocol 'keep'
 *     (or '-') leaves NCCL's choice of that part;
 *   - sizes may carry a binary suffix (4K, 16M, 1G, 1T); max_bytes -1 means
 *     no upper bound;
 *   - nNodes, nRanks, numPipeOps, regBuff may be ranges 'A-B';
 *   - trailing key=value fields: rails_down=N or A-B (the agreed number of
 *     rails down on the worst host: see docs/tuner.md for why only an agreed
 *     number can be used), chunk=SIZE (tuner v6 chunk size, -1 keeps NCCL's);
 *   - one line '@net,nics=N,gbps=G,lat_us=L' describes the hosts' network
 *     (NICs per host, line rate per NIC, one-way latency) for the cost model
 *     and the v5/v6 constants, e.g. figures measured with 'rerail status'.
 *
 * Any error rejects the whole file (with FILE:LINE: why): a half-loaded file
 * would be a different rule set than the operator wrote. */
#ifndef RERAIL_TUNER_RULES_H
#define RERAIL_TUNER_RULES_H
#include <stddef.h>
#include <stdint.h>

#include "rr_status.h"

#define RR_RULES_MAX 1024
#define RR_RULE_ANY_COLL (-1)
#define RR_RULE_KEEP (-1) /* algorithm, protocol, channels, chunk: leave NCCL's */

/* An inclusive range of ints; lo > hi never happens after parsing. */
typedef struct rr_rule_range {
  int64_t lo, hi;
} rr_rule_range;

typedef struct rr_rule {
  int line;                /* where it came from, for messages */
  int coll;                /* NCCL function id, or RR_RULE_ANY_COLL */
  uint64_t min_bytes, max_bytes;
  int algo, proto;         /* NCCL ids or RR_RULE_KEEP */
  int channels;            /* > 0, or RR_RULE_KEEP */
  rr_rule_range nodes, ranks, pipe_ops, reg_buff, rails_down;
  int64_t chunk;           /* bytes > 0, or RR_RULE_KEEP */
} rr_rule;

/* The network as the operator describes it (@net line). */
typedef struct rr_rules_net {
  int present;
  int nics;                /* NICs per host */
  double gbps;             /* line rate per NIC, Gbit/s */
  double lat_us;           /* one-way latency per hop, microseconds */
} rr_rules_net;

typedef struct rr_rules {
  int count;
  rr_rule rule[RR_RULES_MAX];
  rr_rules_net net;
} rr_rules;

/* Parse a whole file's text. name labels messages ("FILE:LINE: why").
 * On error returns RR_ERR_INVALID, writes the message to err and leaves
 * out->count 0 (no rules). */
rr_status rr_rules_parse(const char *text, const char *name, rr_rules *out, char *err,
                         size_t err_len);
/* Read and parse a file (at most 1 MiB). RR_ERR_SYSTEM when it cannot be read. */
rr_status rr_rules_load(const char *path, rr_rules *out, char *err, size_t err_len);

/* What the rules are matched against: NCCL's arguments plus the agreed
 * number of rails down (0 unless the agreement protocol says otherwise).
 * reg_buff and pipe_ops: -1 when NCCL's version does not pass them, which
 * matches only rules that accept anything there. */
typedef struct rr_rule_query {
  int coll;
  uint64_t nbytes;
  int64_t nodes, ranks, pipe_ops, reg_buff, rails_down;
  int shape_unknown; /* 1: pipe_ops and reg_buff unknown (getChunkSize): not compared */
} rr_rule_query;

/* The first rule matching q, or NULL. */
const rr_rule *rr_rules_match(const rr_rules *rules, const rr_rule_query *q);

/* Names NCCL's example uses; NULL for an unknown id. */
const char *rr_rules_coll_name(int coll);
const char *rr_rules_algo_name(int algo);
const char *rr_rules_proto_name(int proto);

#endif
