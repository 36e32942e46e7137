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
 * Before any of that, once per communicator, the ranks agree on their
 * inputs (rr_agree_inputs): each posts fingerprints of what its choices
 * depend on (rules, @net, settings, NCCL, shape) and INPUTS is decided
 * like an epoch: MATCH once all n fingerprints are there and equal, REFUSE
 * on any difference or when the wait runs out.
 *
 * A register this rank lost the race for holds the winner's value, which a
 * medium whose reads are late may not show yet: the rank reads it again
 * (backing off) until it shows, and never guesses, since a guess is the
 * one thing that could make ranks act differently.
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

/* INPUTS decision values. REFUSE carries the kinds of input that differed
 * (bit k: fingerprint k); no bit set: a rank's fingerprints did not arrive
 * within the wait. */
#define RR_AGREE_IN_MATCH 2u
#define RR_AGREE_IN_REFUSE 256u /* above every kind bit */
#define RR_AGREE_INPUT_KINDS 5
_Static_assert(RR_AGREE_INPUT_KINDS <= 8, "the kinds fit below RR_AGREE_IN_REFUSE");

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
  /* Compare-and-swap DECISION[e] from NONE to value; returns what it holds
   * after, or NONE when another writer won and its value is not visible to
   * this reader yet (late reads). */
  uint64_t (*decide)(void *arg, uint32_t epoch, uint64_t value);
  /* INPUTS: this context's fingerprints (write-once); how many contexts'
   * fingerprints are visible, with *differ the kinds in which some visible
   * one differs from mine; the decision, and its compare-and-swap (same
   * contract as decision/decide). */
  void (*post_inputs)(void *arg, const uint64_t fp[RR_AGREE_INPUT_KINDS]);
  uint32_t (*count_inputs)(void *arg, uint32_t n, const uint64_t mine[RR_AGREE_INPUT_KINDS],
                           uint32_t *differ);
  uint64_t (*inputs_decision)(void *arg);
  uint64_t (*inputs_decide)(void *arg, uint64_t value);
} rr_agree_medium;

typedef struct rr_agree {
  rr_agree_medium m;
  uint32_t n;              /* ranks in the communicator */
  uint32_t me;             /* this rank's voter index */
  uint64_t wait_ns;        /* how long a voter waits at A_e before deciding ABORT */
  uint64_t late_ns;        /* how long a lost register may stay invisible before a warning */
  /* state */
  uint32_t epoch;          /* next epoch this rank has not finished */
  int pending;             /* voted in epoch, waiting for A_e */
  uint64_t activate_at;    /* A_e of the pending epoch */
  uint64_t plan;           /* the agreed plan in force (0: the static one) */
  /* leader only */
  uint32_t proposed;       /* epochs proposed */
  uint64_t last_at;        /* the last A_e proposed */
  uint64_t inputs;         /* the INPUTS decision (NONE until rr_agree_inputs) */
  /* counters, for logs and tests */
  uint64_t commits, aborts, skipped, waited_ns;
  uint64_t late_reads;     /* lost registers whose winner was not visible at once */
  uint64_t late_stalls;    /* of those, still invisible after late_ns (warned once) */
  /* 1: the shortcut agree.pml's -DBROKEN plants; 2: the old reading of a
   * lost, not yet visible decision as ABORT (agree.pml -DBROKEN_LATE). */
  int broken_for_test;
} rr_agree;

void rr_agree_init(rr_agree *a, const rr_agree_medium *m, uint32_t n, uint32_t me,
                   uint64_t wait_ns);

/* INPUTS: post fp, then wait (up to wait_ns) for the decision or make it.
 * Returns the decision: RR_AGREE_IN_MATCH, or RR_AGREE_IN_REFUSE | kinds
 * that differed. Every rank of the communicator returns the same value. */
uint64_t rr_agree_inputs(rr_agree *a, const uint64_t fp[RR_AGREE_INPUT_KINDS], uint64_t wait_ns);

/* Leader: open the next epoch activating `margin` collectives past both its
 * position (seq) and the previous activation, if the previous epoch is
 * decided. Returns 1 when it proposed. */
int rr_agree_propose(rr_agree *a, uint64_t seq, uint64_t margin);

/* Before collective seq: run the protocol and
 * return the plan to use for it. my_view: this rank's view, voted when it
 * votes. look: 0 skips looking for a new proposal this time (seeing one
 * late is safe: agree.pml lets any rank miss a proposal for any while), so
 * a costly medium need not be read on every collective. May wait up to
 * wait_ns at an activation point. seq need not step by one: every rank
 * must pass the same non-decreasing sequence of values, and may call again
 * with the same value (NCCL asks again for a collective it only simulates;
 * docs/tuner.md), which changes nothing. */
uint64_t rr_agree_before(rr_agree *a, uint64_t seq, uint64_t my_view, int look);

#endif
