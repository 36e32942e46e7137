/* The tuner's plan-agreement protocol (docs/tuner.md, "Agreement"), in
 * Promela for Spin.
 *
 * N ranks each enqueue S collectives in the same order. Before each one a
 * rank may take part in re-planning epochs: rank 0 (the leader) proposes
 * epoch e with an activation sequence number A_e; a rank that sees the
 * proposal while still before A_e votes, with its own view of health (any
 * value: every combination of views is explored); at A_e a voter waits for
 * the epoch's decision, and may itself decide it: COMMIT(worst view) once
 * all N votes are in, or ABORT at any time (its timeout; Spin tries every
 * moment). Decisions are write-once (compare-and-swap: the first writer
 * wins). A rank that sees a proposal too late (at or past A_e) does not
 * vote: the epoch cannot commit without it.
 *
 * Spin explores every interleaving, i.e. any delay of any message and any
 * speed of any rank. Checked: the plan each rank uses for each collective
 * is the same on every rank (the assertion where a rank records it), and
 * no run can get stuck (invalid end states).
 *
 * -DBROKEN plants the bug a tempting shortcut makes (a voter whose wait
 * runs out commits its own view instead of aborting); the CI test expects
 * Spin to find the disagreement it causes. */

#ifndef N
#define N 3
#endif
#ifndef S
#define S 5
#endif
#ifndef E
#define E 2
#endif

byte proposal_at[E];   /* 0: not proposed; else the activation seq A_e (>= 1) */
byte proposed = 0;     /* epochs proposed so far (leader only) */
byte last_at = 0;
byte vote[E * N];      /* 0: none; else view + 1 */
byte decision[E];      /* 0: none; 1: ABORT; 2 + plan: COMMIT(plan) */
byte used[S];          /* 0: no rank did collective s yet; else 1 + the plan the first used */

inline cas_decision(ep, val) {
  atomic { if :: decision[ep] == 0 -> decision[ep] = val :: else -> skip fi }
}

/* Each atomic block below holds at most one access to a shared register
 * plus the rank's local bookkeeping, so every interleaving of register
 * accesses is still explored; only local steps are merged. */
proctype Rank(byte r) {
  byte s = 0;
  byte plan = 0;
  byte e = 0;
  bool pending = false;
  byte i, cnt, worst;

  do
  :: s < S ->
    /* The leader may open the next epoch once the previous one is
     * decided, activating strictly after the previous activation and
     * after its own position (gap: how far ahead it plans). */
    if
    :: atomic {
         r == 0 && proposed < E && (proposed == 0 || decision[proposed - 1] != 0) ->
         if
         :: proposal_at[proposed] = (s > last_at -> s : last_at) + 1
         :: proposal_at[proposed] = (s > last_at -> s : last_at) + 2
         fi;
         last_at = proposal_at[proposed];
         proposed++
       }
    :: true -> skip
    fi;

    /* At the activation point of the epoch it voted in: wait for the
     * decision, or make it. */
    if
    :: pending && s == proposal_at[e] ->
      do
      :: atomic { decision[e] != 0 ->
           if :: decision[e] >= 2 -> plan = decision[e] - 2 :: else -> skip fi;
           pending = false;
           e++;
           break }
      :: decision[e] == 0 ->
        /* Count the votes and commit when all are in, in one step: votes
         * are write-once, so reading them one by one would see the same
         * set or a subset, and a subset never commits. */
        d_step {
          cnt = 0; worst = 0; i = 0;
          do
          :: i < N ->
            if
            :: vote[e * N + i] != 0 ->
              cnt++;
              if :: vote[e * N + i] - 1 > worst -> worst = vote[e * N + i] - 1 :: else -> skip fi
            :: else -> skip
            fi;
            i++
          :: else -> break
          od;
          if :: cnt == N && decision[e] == 0 -> decision[e] = 2 + worst :: else -> skip fi;
          cnt = 0; worst = 0; i = 0
        }
      :: decision[e] == 0 ->  /* the wait ran out */
#ifdef BROKEN
        cas_decision(e, 2 + vote[e * N + r] - 1)
#else
        cas_decision(e, 1)
#endif
      od
    :: else -> skip
    fi;

    /* The next epoch's proposal, if this rank sees it yet: vote with any
     * view while before its activation point, else let it abort. */
    if
    :: atomic {
         !pending && e < E && proposal_at[e] != 0 ->
         if
         :: s < proposal_at[e] ->
           if :: vote[e * N + r] = 1 :: vote[e * N + r] = 2 fi;
           pending = true
         :: else -> e++
         fi
       }
    :: true -> skip
    fi;

    /* Agreement: every rank uses the first rank's plan for collective s. */
    atomic {
      if
      :: used[s] == 0 -> used[s] = plan + 1
      :: else -> assert(used[s] == plan + 1)
      fi;
      s++
    }
  :: else -> break
  od
}

init {
  byte r;
  atomic {
    r = 0;
    do
    :: r < N -> run Rank(r); r++
    :: else -> break
    od
  }
}
