/* Plan agreement (tuner_agree.h): the same steps as test/tuner/agree.pml,
 * which Spin checks; keep the two in step. */
#include "tuner_agree.h"

#include <inttypes.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "rr_log.h"

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void rr_agree_init(rr_agree *a, const rr_agree_medium *m, uint32_t n, uint32_t me,
                   uint64_t wait_ns) {
  memset(a, 0, sizeof(*a));
  a->m = *m;
  a->n = n;
  a->me = me;
  a->wait_ns = wait_ns;
  a->late_ns = 1000000000ull; /* 1 s: far beyond a coherent file system's lateness */
}

static void pause_ns(uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
  nanosleep(&ts, NULL);
}

/* The value of a register this rank lost the race for (decide returned
 * NONE: the winner's value is not visible here yet). Read it again, backing
 * off from 20 us to 50 ms, until it shows. There is no bounded way out that
 * keeps ranks together: whatever a rank assumed instead (ABORT, the old
 * plan, NCCL's choices) may differ from what the winner wrote and the other
 * ranks read, and acting on it would split them. So past late_ns the rank
 * says so once and keeps reading; a medium that never shows a register that
 * exists breaks the protocol's assumption (docs/tuner.md). epoch UINT32_MAX
 * is the INPUTS register. */
static uint64_t read_winner(rr_agree *a, uint32_t epoch) {
  uint64_t d = epoch == UINT32_MAX ? a->m.inputs_decision(a->m.arg) : a->m.decision(a->m.arg, epoch);
  if (d != RR_AGREE_NONE) return d;
  a->late_reads++;
  const uint64_t start = mono_ns();
  uint64_t pause = 20000;
  int warned = 0;
  for (;;) {
    pause_ns(pause);
    if (pause < 50000000ull) pause *= 2;
    d = epoch == UINT32_MAX ? a->m.inputs_decision(a->m.arg) : a->m.decision(a->m.arg, epoch);
    if (d != RR_AGREE_NONE) return d;
    if (!warned && mono_ns() - start >= a->late_ns) {
      warned = 1;
      a->late_stalls++;
      rr_log_emit(RR_LOG_WARN, RR_SUB_TUNING, __FILE__, __LINE__,
                  "tuner: agreement register %s%" PRIu32
                  " exists but is still not readable after %" PRIu64
                  " ms; waiting for it (acting without it could split ranks)",
                  epoch == UINT32_MAX ? "inputs" : "decision ", epoch == UINT32_MAX ? 0 : epoch,
                  (uint64_t)(a->late_ns / 1000000ull));
    }
  }
}

uint64_t rr_agree_inputs(rr_agree *a, const uint64_t fp[RR_AGREE_INPUT_KINDS], uint64_t wait_ns) {
  a->m.post_inputs(a->m.arg, fp);
  const uint64_t start = mono_ns();
  uint64_t pause = 20000, d;
  for (;;) {
    d = a->m.inputs_decision(a->m.arg);
    if (d != RR_AGREE_NONE) break;
    uint32_t differ = 0;
    const uint32_t seen = a->m.count_inputs(a->m.arg, a->n, fp, &differ);
    uint64_t want = RR_AGREE_NONE;
    /* A difference is final (fingerprints are write-once), so it may be
     * decided at once; MATCH needs every rank's. */
    if (differ != 0) want = RR_AGREE_IN_REFUSE | differ;
    else if (seen >= a->n) want = RR_AGREE_IN_MATCH;
    else if (mono_ns() - start >= wait_ns) want = RR_AGREE_IN_REFUSE;
    if (want != RR_AGREE_NONE) {
      d = a->m.inputs_decide(a->m.arg, want);
      if (d == RR_AGREE_NONE) d = read_winner(a, UINT32_MAX);
      break;
    }
    pause_ns(pause);
    if (pause < 5000000ull) pause *= 2;
  }
  a->inputs = d;
  return d;
}

int rr_agree_propose(rr_agree *a, uint64_t seq, uint64_t margin) {
  if (margin == 0) margin = 1;
  if (a->proposed > 0 && a->m.decision(a->m.arg, a->proposed - 1) == RR_AGREE_NONE) return 0;
  uint64_t at = (seq > a->last_at ? seq : a->last_at) + margin;
  a->m.propose(a->m.arg, a->proposed, at);
  a->last_at = at;
  a->proposed++;
  return 1;
}

/* At A_e: the decision, waited for or made. */
static void settle(rr_agree *a) {
  const uint32_t e = a->epoch;
  const uint64_t start = mono_ns();
  uint64_t d;
  for (;;) {
    d = a->m.decision(a->m.arg, e);
    if (d != RR_AGREE_NONE) break;
    uint64_t worst = 0;
    uint64_t want = RR_AGREE_NONE;
    if (a->m.count_votes(a->m.arg, e, a->n, &worst) == a->n) {
      want = RR_AGREE_COMMIT + worst;
    } else if (mono_ns() - start >= a->wait_ns) {
      /* The wait ran out: ABORT, unless someone decided first. The
       * shortcut (commit what I know) is what agree.pml -DBROKEN shows to
       * split ranks. */
      want = a->broken_for_test == 1 ? RR_AGREE_COMMIT + worst : RR_AGREE_ABORT;
    }
    if (want != RR_AGREE_NONE) {
      d = a->m.decide(a->m.arg, e, want);
      /* Lost to a writer whose value is not visible yet: read it, never
       * assume it (agree.pml -DBROKEN_LATE: assuming ABORT splits ranks). */
      if (d == RR_AGREE_NONE) d = a->broken_for_test == 2 ? RR_AGREE_ABORT : read_winner(a, e);
      break;
    }
    sched_yield();
  }
  a->waited_ns += mono_ns() - start;
  if (d >= RR_AGREE_COMMIT) {
    a->plan = d - RR_AGREE_COMMIT;
    a->commits++;
  } else {
    a->aborts++;
  }
  a->pending = 0;
  a->epoch++;
}

uint64_t rr_agree_before(rr_agree *a, uint64_t seq, uint64_t my_view, int look) {
  if (a->pending && seq >= a->activate_at) settle(a);
  if (!a->pending && look) {
    uint64_t at = a->m.proposal(a->m.arg, a->epoch);
    if (at != 0) {
      if (seq < at) {
        a->m.vote(a->m.arg, a->epoch, a->me, my_view);
        a->pending = 1;
        a->activate_at = at;
      } else {
        /* Too late to vote: the epoch cannot commit without this rank. */
        a->skipped++;
        a->epoch++;
      }
    }
  }
  return a->plan;
}
