/* Plan agreement (tuner_agree.h): the same steps as test/tuner/agree.pml,
 * which Spin checks; keep the two in step. */
#include "tuner_agree.h"

#include <sched.h>
#include <string.h>
#include <time.h>

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
    if (a->m.count_votes(a->m.arg, e, a->n, &worst) == a->n) {
      d = a->m.decide(a->m.arg, e, RR_AGREE_COMMIT + worst);
      break;
    }
    if (mono_ns() - start >= a->wait_ns) {
      /* The wait ran out: ABORT, unless someone decided first. The
       * shortcut (commit what I know) is what agree.pml -DBROKEN shows to
       * split ranks. */
      d = a->m.decide(a->m.arg, e, a->broken_for_test ? RR_AGREE_COMMIT + worst : RR_AGREE_ABORT);
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
