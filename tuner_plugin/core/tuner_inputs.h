/* What a rank's choices depend on, as fingerprints the ranks of a
 * communicator compare before the tuner acts (the INPUTS step of the
 * agreement protocol, tuner_agree.h; docs/tuner.md "Inputs agreed").
 *
 * Five kinds, so that a mismatch can be named: the rules (as parsed:
 * comments, spacing and line numbers do not count), the @net line (it
 * shifts NCCL's own latencies, so even NCCL's default choices would
 * diverge), the tuner's settings, NCCL itself (the tuner ABI it bound, its
 * version, its network latencies as it passed them) and the communicator's
 * shape (ranks, nodes, NVLink domains). */
#ifndef RERAIL_TUNER_INPUTS_H
#define RERAIL_TUNER_INPUTS_H
#include <stddef.h>
#include <stdint.h>

#include "tuner_agree.h"
#include "tuner_ids.h"
#include "tuner_rules.h"

enum {
  RR_INPUT_RULES = 0,
  RR_INPUT_NET = 1,
  RR_INPUT_SETTINGS = 2,
  RR_INPUT_NCCL = 3,
  RR_INPUT_SHAPE = 4,
};
_Static_assert(RR_INPUT_SHAPE + 1 == RR_AGREE_INPUT_KINDS, "one fingerprint per kind of input");

typedef struct rr_tuner_input_args {
  const rr_rules *rules;          /* NULL: no rules in force (unset or rejected) */
  const uint64_t *settings;       /* the tuner's settings as it uses them */
  int n_settings;
  int abi_version;                /* ncclTunerPlugin_vN bound */
  int nccl_version;               /* ncclGetVersion's code, 0 when unknown */
  const double (*nccl_latencies)[RR_NUM_PROTOS]; /* before any edit; NULL when not passed */
  size_t n_ranks, n_nodes;
  int nvl_domains;
} rr_tuner_input_args;

void rr_tuner_inputs_fingerprint(const rr_tuner_input_args *in, uint64_t fp[RR_AGREE_INPUT_KINDS]);

/* "rules, @net" for a mask of kinds (bit k: kind k). */
void rr_tuner_inputs_describe(uint32_t mask, char *out, size_t len);

/* The NCCL in this process: ncclGetVersion's code, 0 when not found. */
int rr_tuner_nccl_version(void);

#endif
