/* A job-wide medium for plan agreement (tuner_agree.h): write-once
 * registers as files in a directory every rank can reach
 * (RERAIL_TUNER_AGREE_DIR, e.g. on the job's shared file system).
 *
 * One subdirectory per communicator (comm-<id>); registers are files:
 * p<e> (proposal), d<e> (decision), v<e>.<token> (votes; the tuner is not
 * told its rank, so a voter is a per-context token and the votes of an
 * epoch are counted by name), i.<token> and di (the inputs step's
 * fingerprints and decision), plus two that are not protocol registers:
 * 'leader' (the first context to create it proposes) and 'hint' (touched by
 * a rank whose view differs from the plan in force, so the leader proposes).
 * A register is written by creating a temporary file with the whole value
 * and link()ing it to its name: link fails if the name exists, which makes
 * every register write-once and a decision a compare-and-swap (also on NFS,
 * where link is atomic). Contents that do not parse read as "not written"
 * (proposals, votes, fingerprints) or ABORT/REFUSE (decisions): the same on
 * every rank. A decision this context lost the race for reads as NONE
 * until the winner's file is visible here (the protocol reads it again). */
#ifndef RERAIL_TUNER_AGREE_DIR_H
#define RERAIL_TUNER_AGREE_DIR_H
#include <limits.h>
#include <stdint.h>

#include "rr_status.h"
#include "tuner_agree.h"

typedef struct rr_agree_dir {
  char path[PATH_MAX];  /* the communicator's subdirectory */
  char token[96];       /* this context's voter name */
  uint64_t tmp_seq;
} rr_agree_dir;

/* Make (or join) base/comm-<comm_id>. token: this context's voter name
 * (letters, digits, '.', '-', '_'). */
rr_status rr_agree_dir_open(rr_agree_dir *d, const char *base, uint64_t comm_id,
                            const char *token);
/* The medium callbacks over d (arg = d). */
rr_agree_medium rr_agree_dir_medium(rr_agree_dir *d);
/* 1 if this context became the leader (created 'leader' first). */
int rr_agree_dir_claim_leader(rr_agree_dir *d);
/* Touch 'hint'; and its modification time in ns (0 when absent). */
void rr_agree_dir_hint(rr_agree_dir *d);
uint64_t rr_agree_dir_hint_ns(rr_agree_dir *d);

#endif
