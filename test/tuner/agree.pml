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
 * First, the inputs: each rank posts a fingerprint of its inputs (the last
 * rank's may differ: both cases are explored) and INPUTS is decided like
 * an epoch: MATCH once all N are there and equal, REFUSE on a difference
 * or when a rank's wait runs out. A rank whose inputs were refused leaves
 * every choice to NCCL; one whose inputs matched uses them.
 *
 * Reads of a decision may be late: a rank may see an empty decision that
 * is written (and then count, time out and lose the compare-and-swap).
 * Having lost, it reads again until it sees the winner's value.
 *
 * A rank may also run its steps again at a sequence number it already
 * reached without using a plan (NCCL's ncclGroupSimulateEnd asks the tuner
 * and launches nothing); the sequence number counts launched collectives
 * only, so it does not move (at most SIM times per rank).
 *
 * Spin explores every interleaving, i.e. any delay of any message and any
 * speed of any rank. Checked: the plan each rank uses for each collective
 * is the same on every rank (the assertion where a rank records it), and
 * no run can get stuck (invalid end states).
 *
 * Planted bugs, each of which the CI test expects Spin to find:
 * -DBROKEN: a voter whose wait runs out commits its own view instead of
 * aborting; -DBROKEN_LATE: a rank that lost a decision's race and cannot
 * see the winner's value yet takes ABORT; -DBROKEN_FP: MATCH on N
 * fingerprints without comparing them; -DBROKEN_SIM: simulated calls move
 * the sequence number (a count of getCollInfo calls). */

#ifndef N
#define N 3
#endif
#ifndef S
#define S 5
#endif
#ifndef E
#define E 2
#endif
#ifndef SIM
#define SIM 1
#endif

byte proposal_at[E];   /* 0: not proposed; else the activation seq A_e (>= 1) */
byte proposed = 0;     /* epochs proposed so far (leader only) */
byte last_at = 0;
byte vote[E * N];      /* 0: none; else view + 1 */
byte decision[E];      /* 0: none; 1: ABORT; 2 + plan: COMMIT(plan) */
byte used[S];          /* 0: no rank did collective c yet; else 1 + what the first used */
byte fp[N];            /* each rank's inputs fingerprint */
bool posted[N];        /* fingerprint visible */
byte indec = 0;        /* INPUTS: 0 none; 1 MATCH; 2 REFUSE */

/* Compare-and-swap; lost (kept only for -DBROKEN_LATE): the register
 * held a value already. */
#ifdef BROKEN_LATE
inline cas_decision(ep, val, lost) {
  atomic { if :: decision[ep] == 0 -> decision[ep] = val; lost = false :: else -> lost = true fi }
}
#define SEEN_EMPTY(ep) true
#else
inline cas_decision(ep, val, lost) {
  atomic { if :: decision[ep] == 0 -> decision[ep] = val :: else -> skip fi }
}
/* A late read sees an empty decision that is written; the rank then
 * counts or times out, loses the compare-and-swap and reads again: steps
 * that change no state (stutter steps), so exploring only the reads of an
 * empty register explores the same states. -DBROKEN_LATE acts on the loss
 * and so needs them. */
#define SEEN_EMPTY(ep) (decision[ep] == 0)
#endif

/* Each atomic block below holds at most one access to a shared register
 * plus the rank's local bookkeeping, so every interleaving of register
 * accesses is still explored; only local steps are merged. */
proctype Rank(byte r) {
  byte s = 0;            /* the sequence number (launched collectives) */
  byte c = 0;            /* the collective (what the assertion compares) */
  byte sims = 0;
  byte plan = 0;
  byte e = 0;
  byte in = 0;           /* the INPUTS decision this rank read */
  bool pending = false;
  bool lost = false;
  byte i, cnt, worst, differ;

  /* Inputs: post, then read the decision or make it. */
  posted[r] = true;
  do
  :: atomic { indec != 0 -> in = indec; break }
  :: indec == 0 ->  /* (a late read of a written one only stutters: see SEEN_EMPTY) */
    d_step {
      cnt = 0; differ = 0; i = 0;
      do
      :: i < N ->
        if :: posted[i] -> cnt++; if :: fp[i] != fp[r] -> differ = 1 :: else -> skip fi
           :: else -> skip fi;
        i++
      :: else -> break
      od
    };
    if
#ifdef BROKEN_FP
    :: cnt == N -> atomic { if :: indec == 0 -> indec = 1 :: else -> skip fi }
#else
    :: differ -> atomic { if :: indec == 0 -> indec = 2 :: else -> skip fi }
    :: !differ && cnt == N -> atomic { if :: indec == 0 -> indec = 1 :: else -> skip fi }
#endif
    :: true -> /* the wait ran out */
       atomic { if :: indec == 0 -> indec = 2 :: else -> skip fi }
    fi;
    cnt = 0; differ = 0; i = 0
    /* lost or not, the loop reads the decision next: never assumed */
  od;

  do
  :: c < S ->
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
      :: SEEN_EMPTY(e) ->
        /* (Seen empty: reads may be late.) Count the votes and commit
         * when all are in, in one step: votes are write-once, so reading
         * them one by one would see the same set or a subset, and a subset
         * never commits. Losing the race is then taken like the timeout's
         * loss below. */
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
          if :: cnt == N -> if :: decision[e] == 0 -> decision[e] = 2 + worst
#ifdef BROKEN_LATE
                                                          ; lost = false
                            :: else -> lost = true
#else
                            :: else -> skip
#endif
                            fi
             :: else -> skip fi;
          cnt = 0; worst = 0; i = 0
        }
#ifdef BROKEN_LATE
        ; if :: lost -> pending = false; lost = false; e++; break :: else -> skip fi
#endif
      :: SEEN_EMPTY(e) ->  /* the wait ran out */
#ifdef BROKEN
        cas_decision(e, 2 + vote[e * N + r] - 1, lost)
#else
        cas_decision(e, 1, lost)
#endif
#ifdef BROKEN_LATE
        ; if :: lost -> pending = false; lost = false; e++; break :: else -> skip fi
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

    /* A simulated call ends here: no plan used, no launch, so the
     * sequence number stays. Otherwise every rank uses, for collective c,
     * what the first used: NCCL's choice (inputs refused) or its inputs'
     * choice under the plan. */
    if
    :: sims < SIM -> sims++;
#ifdef BROKEN_SIM
       s++
#else
       skip
#endif
    :: atomic {
         if
         :: used[c] == 0 -> used[c] = (in == 2 -> 100 : 1 + fp[r] * 10 + plan)
         :: else -> assert(used[c] == (in == 2 -> 100 : 1 + fp[r] * 10 + plan))
         fi;
         s++;
         c++
       }
    fi
  :: else -> break
  od
}

init {
  byte r;
  atomic {
    /* The last rank's inputs may differ (a file edited mid-deploy). */
    if :: fp[N - 1] = 0 :: fp[N - 1] = 1 fi;
    r = 0;
    do
    :: r < N -> run Rank(r); r++
    :: else -> break
    od
  }
}
