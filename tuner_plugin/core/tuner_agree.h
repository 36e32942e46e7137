/* Plan agreement: how every rank of a communicator switches to a
 * health-driven plan at the same collective (docs/tuner.md, "Agreement";
 * model-checked in test/tuner/agree.pml, simulated in test/tuner/agree_sim.c).
 *
 * Per epoch e: the leader writes PROPOSAL[e] = A_e, an activation sequence
 * number ahead of every earlier one; a rank that reads it while its next
 * collective is before A_e writes VOTE[e][me] = its view; at collective A_e a
 * voter waits for DECISION[e] and may write it itself: COMMIT(worst view)
 * once all n votes are there, ABORT when its wait runs out. DECISION is
 * write-once (compare-and-swap), so every rank that reads it reads the same.
 * A rank that reads PROPOSAL[e] at or past A_e does not vote, and without
 * its vote the epoch can never commit, so it may skip the epoch unread.
 *
 * The medium (where the registers live) is abstract: a job-wide store with
 * write-once registers. The simulation uses shared memory; the plugin uses
 * a shared directory (tuner_agree_dir.h) when RERAIL_TUNER_AGREE_DIR is set. */
#ifndef RERAIL_TUNER_AGREE_H
#define RERAIL_TUNER_AGREE_H
#include <stdint.h>

#include "rr_status.h"

#define RR_AGREE_NONE 0u   /* register not written yet */
#define RR_AGREE_ABORT 1u  /* decision: keep the current plan */
#define RR_AGREE_COMMIT 2u /* decision values >= this: COMMIT(value - 2) */

typedef struct rr_agree_medium {
  void *arg;
  /* PROPOSAL[e]: 0 while not visible, else A_e (>= 1). */
  uint64_t (*proposal)(void *arg, uint32_t epoch);
  /* Write PROPOSAL[e] if empty (leader only). */
  void (*propose)(void *arg, uint32_t epoch, uint64_t activate_at);
  /* Write VOTE[e][voter] = view if empty. */
  void (*vote)(void *arg, uint32_t epoch, uint32_t voter, uint64_t view);
  /* How many of voters 0..n-1 have voted in e; *worst = the largest view
   * among them (views are encoded so that larger is worse). */
  uint32_t (*count_votes)(void *arg, uint32_t epoch, uint32_t n, uint64_t *worst);
  /* DECISION[e] (RR_AGREE_NONE while undecided). */
  uint64_t (*decision)(void *arg, uint32_t epoch);
  /* Compare-and-swap DECISION[e] from NONE to value; returns what it holds after. */
  uint64_t (*decide)(void *arg, uint32_t epoch, uint64_t value);
} rr_agree_medium;

typedef struct rr_agree {
  rr_agree_medium m;
  uint32_t n;              /* ranks in the communicator */
  uint32_t me;             /* this rank's voter index */
  uint64_t wait_ns;        /* how long a voter waits at A_e before deciding ABORT */
  /* state */
  uint32_t epoch;          /* next epoch this rank has not finished */
  int pending;             /* voted in epoch, waiting for A_e */
  uint64_t activate_at;    /* A_e of the pending epoch */
  uint64_t plan;           /* the agreed plan in force (0: the static one) */
  /* leader only */
  uint32_t proposed;       /* epochs proposed */
  uint64_t last_at;        /* the last A_e proposed */
  /* counters, for logs and tests */
  uint64_t commits, aborts, skipped, waited_ns;
  int broken_for_test;     /* 1: the shortcut agree.pml's -DBROKEN plants */
} rr_agree;

void rr_agree_init(rr_agree *a, const rr_agree_medium *m, uint32_t n, uint32_t me,
                   uint64_t wait_ns);

/* Leader: open the next epoch activating `margin` collectives past both its
 * position (seq) and the previous activation, if the previous epoch is
 * decided. Returns 1 when it proposed. */
int rr_agree_propose(rr_agree *a, uint64_t seq, uint64_t margin);

/* Before collective seq (0, 1, 2, ... with no gap): run the protocol and
 * return the plan to use for it. my_view: this rank's view, voted when it
 * votes. look: 0 skips looking for a new proposal this time (seeing one
 * late is safe: agree.pml lets any rank miss a proposal for any while), so
 * a costly medium need not be read on every collective. May wait up to
 * wait_ns at an activation point. */
uint64_t rr_agree_before(rr_agree *a, uint64_t seq, uint64_t my_view, int look);

#endif
