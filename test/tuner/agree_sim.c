/* Multi-rank simulation of the tuner's plan agreement (tuner_agree.h) with
 * adversarial delays: one thread per rank runs the real protocol code over
 * a shared-memory medium whose every access may be delayed (a yield, up to
 * 300 us, or now and then a stall longer than the voters' wait, which
 * forces timeouts and aborts); the leader proposes at random moments with
 * random margins, and every rank's view of health changes at random. At
 * ranks drift apart by up to WINDOW collectives. At
 * the end the plan each rank used for each collective must be the same on
 * every rank, and both commits and aborts must have happened.
 *
 * --broken runs the shortcut that agree.pml -DBROKEN plants and succeeds
 * only if the simulation catches the disagreement it causes (the check can
 * fail).
 *
 * Usage: agree_sim [--ranks N] [--colls M] [--seed S] [--broken] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sched.h>

#include "tuner_agree.h"

static int n_ranks = 6;
static int n_colls = 1500;
static unsigned seed = 1;
static int broken;

static uint32_t max_epochs;
static _Atomic uint64_t *proposal_reg, *decision_reg, *vote_reg;
static uint64_t *used; /* [rank][coll] */
static atomic_int go;
/* How far ranks may drift apart: NCCL lets a rank enqueue ahead of the
 * network, but not forever (a collective completes only once every rank
 * took part, and applications wait on results). */
#define WINDOW 24
static atomic_int progress[64];

static void wait_for_window(int s) {
  for (;;) {
    int slowest = s;
    for (int r = 0; r < n_ranks; r++) {
      int p = atomic_load(&progress[r]);
      if (p < slowest) slowest = p;
    }
    if (s - slowest <= WINDOW) return;
    sched_yield();
  }
}

/* xorshift per thread: reproducible from the seed, no shared state */
static uint32_t rnd(uint32_t *s) {
  uint32_t x = *s;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return *s = x;
}

static __thread uint32_t rng;

static void adversary(void) {
  uint32_t r = rnd(&rng) % 1000;
  if (r < 650) return;
  if (r < 900) { sched_yield(); return; }
  if (r < 995) { usleep(1 + rnd(&rng) % 300); return; }
  usleep(2000 + rnd(&rng) % 3000); /* longer than the 1 ms wait: forces aborts */
}

static uint64_t m_proposal(void *arg, uint32_t e) {
  (void)arg;
  adversary();
  return e < max_epochs ? atomic_load(&proposal_reg[e]) : 0;
}
static void m_propose(void *arg, uint32_t e, uint64_t at) {
  (void)arg;
  adversary();
  uint64_t none = 0;
  if (e < max_epochs) atomic_compare_exchange_strong(&proposal_reg[e], &none, at);
}
static void m_vote(void *arg, uint32_t e, uint32_t voter, uint64_t view) {
  (void)arg;
  adversary();
  uint64_t none = 0;
  if (e < max_epochs) atomic_compare_exchange_strong(&vote_reg[(size_t)e * n_ranks + voter], &none, view + 1);
}
static uint32_t m_count(void *arg, uint32_t e, uint32_t n, uint64_t *worst) {
  (void)arg;
  adversary();
  uint32_t c = 0;
  *worst = 0;
  for (uint32_t i = 0; i < n && e < max_epochs; i++) {
    uint64_t v = atomic_load(&vote_reg[(size_t)e * n_ranks + i]);
    if (v == 0) continue;
    c++;
    if (v - 1 > *worst) *worst = v - 1;
  }
  return c;
}
static uint64_t m_decision(void *arg, uint32_t e) {
  (void)arg;
  adversary();
  return e < max_epochs ? atomic_load(&decision_reg[e]) : RR_AGREE_ABORT;
}
static uint64_t m_decide(void *arg, uint32_t e, uint64_t value) {
  (void)arg;
  adversary();
  if (e >= max_epochs) return RR_AGREE_ABORT;
  uint64_t expect = RR_AGREE_NONE;
  if (atomic_compare_exchange_strong(&decision_reg[e], &expect, value)) return value;
  return expect;
}

typedef struct rank_result {
  uint64_t commits, aborts, skipped, waited_ns;
} rank_result;

static rank_result results[64];

static void *rank_main(void *p) {
  int me = (int)(intptr_t)p;
  rng = seed * 2654435761u + (uint32_t)me * 40503u + 1u;
  rr_agree_medium m = {.arg = NULL, .proposal = m_proposal, .propose = m_propose, .vote = m_vote,
                       .count_votes = m_count, .decision = m_decision, .decide = m_decide};
  rr_agree a;
  rr_agree_init(&a, &m, (uint32_t)n_ranks, (uint32_t)me, 1000000 /* 1 ms */);
  a.broken_for_test = broken;
  while (!atomic_load(&go)) sched_yield();
  uint64_t view = 0;
  for (int s = 0; s < n_colls; s++) {
    wait_for_window(s);
    if (rnd(&rng) % 8 == 0) view = rnd(&rng) % 4; /* health changes under us */
    if (me == 0 && rnd(&rng) % 4 == 0) rr_agree_propose(&a, (uint64_t)s, 1 + rnd(&rng) % 32);
    used[(size_t)me * n_colls + s] = rr_agree_before(&a, (uint64_t)s, view, rnd(&rng) % 4 != 0);
    if (rnd(&rng) % 16 == 0) adversary(); /* ranks run at different speeds */
    atomic_store(&progress[me], s + 1);
  }
  results[me] = (rank_result){a.commits, a.aborts, a.skipped, a.waited_ns};
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) n_ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--colls") && i + 1 < argc) n_colls = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (unsigned)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--broken")) broken = 1;
    else {
      fprintf(stderr, "usage: %s [--ranks N] [--colls M] [--seed S] [--broken]\n", argv[0]);
      return 2;
    }
  }
  if (n_ranks < 2 || n_ranks > 64 || n_colls < 10) {
    fprintf(stderr, "agree_sim: 2..64 ranks and at least 10 collectives\n");
    return 2;
  }
  max_epochs = (uint32_t)n_colls + 1;
  proposal_reg = calloc(max_epochs, sizeof(*proposal_reg));
  decision_reg = calloc(max_epochs, sizeof(*decision_reg));
  vote_reg = calloc((size_t)max_epochs * n_ranks, sizeof(*vote_reg));
  used = calloc((size_t)n_ranks * n_colls, sizeof(*used));
  if (!proposal_reg || !decision_reg || !vote_reg || !used) return 1;

  pthread_t t[64];
  for (int r = 0; r < n_ranks; r++) pthread_create(&t[r], NULL, rank_main, (void *)(intptr_t)r);
  atomic_store(&go, 1);
  for (int r = 0; r < n_ranks; r++) pthread_join(t[r], NULL);

  int disagreements = 0, first_bad = -1;
  for (int s = 0; s < n_colls; s++)
    for (int r = 1; r < n_ranks; r++)
      if (used[(size_t)r * n_colls + s] != used[s]) {
        if (first_bad < 0) first_bad = s;
        disagreements++;
      }
  uint32_t epochs = 0, commits = 0, aborts = 0;
  for (uint32_t e = 0; e < max_epochs; e++) {
    uint64_t d = atomic_load(&decision_reg[e]);
    if (atomic_load(&proposal_reg[e]) != 0) epochs++;
    if (d >= RR_AGREE_COMMIT) commits++;
    else if (d == RR_AGREE_ABORT) aborts++;
  }
  uint64_t skipped = 0, waited = 0;
  for (int r = 0; r < n_ranks; r++) {
    skipped += results[r].skipped;
    waited += results[r].waited_ns;
  }
  printf("agree_sim: %d ranks x %d collectives, seed %u%s: %u epochs proposed, %u committed, "
         "%u aborted; %llu late skips; %.1f ms waited in all; %d disagreement%s",
         n_ranks, n_colls, seed, broken ? " (broken)" : "", epochs, commits, aborts,
         (unsigned long long)skipped, (double)waited / 1e6, disagreements,
         disagreements == 1 ? "" : "s");
  if (first_bad >= 0) printf(" (first at collective %d)", first_bad);
  printf("\n");
  if (broken) return disagreements > 0 ? 0 : 1;
  if (disagreements > 0) return 1;
  if (commits == 0 || aborts == 0) {
    printf("agree_sim: both commits and aborts must happen for the run to mean anything\n");
    return 1;
  }
  return 0;
}
