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
 * Reads are late, as on a file system with caches: a register becomes
 * visible to each reader only some time after it was written (for a
 * quarter of (register, reader) pairs, up to --late-us; the
 * compare-and-swap itself is exact, as link() is on the server), so a rank
 * that loses a decision's race often cannot read the winner's value at
 * once. Some ranks also run the protocol again at a collective they already
 * passed (NCCL's ncclGroupSimulateEnd asks the tuner without launching).
 *
 * Before the collectives, the ranks agree on their inputs (fingerprints);
 * --differ R gives rank R other rules: every rank must then refuse alike.
 *
 * --broken runs the shortcut that agree.pml -DBROKEN plants, --broken-late
 * the old reading of a lost, invisible decision as ABORT (agree.pml
 * -DBROKEN_LATE); each succeeds only if the simulation catches the
 * disagreement it causes (the check can fail).
 *
 * Usage: agree_sim [--ranks N] [--colls M] [--seed S | --seeds A-B]
 *                  [--late-us U] [--differ R] [--broken | --broken-late] */
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
static unsigned late_us = 3000;
static int differ_rank = -1;

static uint32_t max_epochs;
static _Atomic uint64_t *proposal_reg, *decision_reg, *vote_reg;
/* When each register was written (0: not yet), for late reads. */
static _Atomic uint64_t *proposal_at, *decision_at, *vote_at;
static _Atomic uint64_t inputs_reg[64][RR_AGREE_INPUT_KINDS], inputs_at[64];
static _Atomic uint64_t in_decision, in_decision_at;
static uint64_t inputs_result[64];
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

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static __thread int me_rank;

/* How late register `id` shows to this reader: fixed per (seed, register,
 * reader), late for a quarter of the pairs. */
static uint64_t lateness_ns(uint64_t id) {
  uint64_t h = (id * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)seed << 32) ^ (uint64_t)me_rank * 0xbf58476d1ce4e5b9ull;
  h ^= h >> 31;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 29;
  if (late_us == 0 || h % 4 != 0) return 0;
  return (h >> 8) % ((uint64_t)late_us * 1000ull);
}

/* The register's value as this reader sees it now. */
static uint64_t visible(_Atomic uint64_t *reg, _Atomic uint64_t *at, uint64_t id) {
  uint64_t w = atomic_load(at);
  if (w == 0 || now_ns() < w + lateness_ns(id)) return 0;
  return atomic_load(reg);
}

/* Write-once: the value, then its time (a reader that sees the time sees the value). */
static int write_once(_Atomic uint64_t *reg, _Atomic uint64_t *at, uint64_t v) {
  uint64_t none = 0;
  if (!atomic_compare_exchange_strong(reg, &none, v)) return 0;
  atomic_store(at, now_ns());
  return 1;
}

enum { REG_PROPOSAL = 1, REG_DECISION = 2, REG_VOTE = 3, REG_INPUTS = 4, REG_IN_DECISION = 5 };
static uint64_t reg_id(int kind, uint64_t a, uint64_t b) { return ((uint64_t)kind << 56) ^ (a << 20) ^ b; }

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
  return e < max_epochs ? visible(&proposal_reg[e], &proposal_at[e], reg_id(REG_PROPOSAL, e, 0)) : 0;
}
static void m_propose(void *arg, uint32_t e, uint64_t at) {
  (void)arg;
  adversary();
  if (e < max_epochs) write_once(&proposal_reg[e], &proposal_at[e], at);
}
static void m_vote(void *arg, uint32_t e, uint32_t voter, uint64_t view) {
  (void)arg;
  adversary();
  size_t i = (size_t)e * n_ranks + voter;
  if (e < max_epochs) write_once(&vote_reg[i], &vote_at[i], view + 1);
}
static uint32_t m_count(void *arg, uint32_t e, uint32_t n, uint64_t *worst) {
  (void)arg;
  adversary();
  uint32_t c = 0;
  *worst = 0;
  for (uint32_t i = 0; i < n && e < max_epochs; i++) {
    size_t k = (size_t)e * n_ranks + i;
    uint64_t v = visible(&vote_reg[k], &vote_at[k], reg_id(REG_VOTE, e, i));
    if (v == 0) continue;
    c++;
    if (v - 1 > *worst) *worst = v - 1;
  }
  return c;
}
static uint64_t m_decision(void *arg, uint32_t e) {
  (void)arg;
  adversary();
  return e < max_epochs ? visible(&decision_reg[e], &decision_at[e], reg_id(REG_DECISION, e, 0))
                        : RR_AGREE_ABORT;
}
static uint64_t m_decide(void *arg, uint32_t e, uint64_t value) {
  (void)arg;
  adversary();
  if (e >= max_epochs) return RR_AGREE_ABORT;
  if (write_once(&decision_reg[e], &decision_at[e], value)) return value;
  /* Lost: the winner's value, if this reader can see it yet. */
  return visible(&decision_reg[e], &decision_at[e], reg_id(REG_DECISION, e, 0));
}
static void m_post_inputs(void *arg, const uint64_t fp[RR_AGREE_INPUT_KINDS]) {
  (void)arg;
  adversary();
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) atomic_store(&inputs_reg[me_rank][k], fp[k]);
  atomic_store(&inputs_at[me_rank], now_ns());
}
static uint32_t m_count_inputs(void *arg, uint32_t n, const uint64_t mine[RR_AGREE_INPUT_KINDS],
                               uint32_t *differ) {
  (void)arg;
  adversary();
  uint32_t c = 0;
  *differ = 0;
  for (uint32_t r = 0; r < n; r++) {
    uint64_t w = atomic_load(&inputs_at[r]);
    if (w == 0 || now_ns() < w + lateness_ns(reg_id(REG_INPUTS, r, 0))) continue;
    c++;
    for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++)
      if (atomic_load(&inputs_reg[r][k]) != mine[k]) *differ |= 1u << k;
  }
  return c;
}
static uint64_t m_inputs_decision(void *arg) {
  (void)arg;
  adversary();
  return visible(&in_decision, &in_decision_at, reg_id(REG_IN_DECISION, 0, 0));
}
static uint64_t m_inputs_decide(void *arg, uint64_t value) {
  (void)arg;
  adversary();
  if (write_once(&in_decision, &in_decision_at, value)) return value;
  return visible(&in_decision, &in_decision_at, reg_id(REG_IN_DECISION, 0, 0));
}

typedef struct rank_result {
  uint64_t commits, aborts, skipped, waited_ns, late_reads, simulated;
} rank_result;

static rank_result results[64];

static void *rank_main(void *p) {
  int me = (int)(intptr_t)p;
  me_rank = me;
  rng = seed * 2654435761u + (uint32_t)me * 40503u + 1u;
  rr_agree_medium m = {.arg = NULL, .proposal = m_proposal, .propose = m_propose, .vote = m_vote,
                       .count_votes = m_count, .decision = m_decision, .decide = m_decide,
                       .post_inputs = m_post_inputs, .count_inputs = m_count_inputs,
                       .inputs_decision = m_inputs_decision, .inputs_decide = m_inputs_decide};
  rr_agree a;
  rr_agree_init(&a, &m, (uint32_t)n_ranks, (uint32_t)me, 1000000 /* 1 ms */);
  a.broken_for_test = broken;
  while (!atomic_load(&go)) sched_yield();
  /* The inputs: the same everywhere but on --differ's rank (its rules). */
  uint64_t fp[RR_AGREE_INPUT_KINDS] = {0x1111, 0x2222, 0x3333, 0x4444, 0x5555};
  if (me == differ_rank) fp[0] ^= 0xdead;
  inputs_result[me] = rr_agree_inputs(&a, fp, 2000000000ull /* 2 s */);
  uint64_t view = 0, simulated = 0;
  for (int s = 0; s < n_colls; s++) {
    wait_for_window(s);
    if (rnd(&rng) % 8 == 0) view = rnd(&rng) % 4; /* health changes under us */
    if (me == 0 && rnd(&rng) % 4 == 0) rr_agree_propose(&a, (uint64_t)s, 1 + rnd(&rng) % 32);
    if (me % 2 == 1 && rnd(&rng) % 8 == 0) {
      rr_agree_before(&a, (uint64_t)s, view, 1); /* simulated: asked again, same key */
      simulated++;
    }
    used[(size_t)me * n_colls + s] = rr_agree_before(&a, (uint64_t)s, view, rnd(&rng) % 4 != 0);
    if (rnd(&rng) % 16 == 0) adversary(); /* ranks run at different speeds */
    atomic_store(&progress[me], s + 1);
  }
  results[me] = (rank_result){a.commits, a.aborts, a.skipped, a.waited_ns, a.late_reads, simulated};
  return NULL;
}

/* Over all seeds of a run: what happened, which must include commits,
 * aborts and late reads for the run to mean anything. */
static uint64_t total_commits, total_aborts, total_late;

/* One seeded run; 0 when it passes (for --broken*: when it catches). */
static int run_seed(void) {
  size_t regs = max_epochs, votes = (size_t)max_epochs * n_ranks;
  memset((void *)proposal_reg, 0, regs * sizeof(*proposal_reg));
  memset((void *)decision_reg, 0, regs * sizeof(*decision_reg));
  memset((void *)proposal_at, 0, regs * sizeof(*proposal_at));
  memset((void *)decision_at, 0, regs * sizeof(*decision_at));
  memset((void *)vote_reg, 0, votes * sizeof(*vote_reg));
  memset((void *)vote_at, 0, votes * sizeof(*vote_at));
  memset((void *)inputs_reg, 0, sizeof(inputs_reg));
  memset((void *)inputs_at, 0, sizeof(inputs_at));
  atomic_store(&in_decision, 0);
  atomic_store(&in_decision_at, 0);
  for (int r = 0; r < 64; r++) atomic_store(&progress[r], 0);
  atomic_store(&go, 0);

  pthread_t t[64];
  for (int r = 0; r < n_ranks; r++) pthread_create(&t[r], NULL, rank_main, (void *)(intptr_t)r);
  atomic_store(&go, 1);
  for (int r = 0; r < n_ranks; r++) pthread_join(t[r], NULL);

  int disagreements = 0, first_bad = -1, inputs_split = 0;
  for (int s = 0; s < n_colls; s++)
    for (int r = 1; r < n_ranks; r++)
      if (used[(size_t)r * n_colls + s] != used[s]) {
        if (first_bad < 0) first_bad = s;
        disagreements++;
      }
  for (int r = 1; r < n_ranks; r++) inputs_split += inputs_result[r] != inputs_result[0];
  uint32_t epochs = 0, commits = 0, aborts = 0;
  for (uint32_t e = 0; e < max_epochs; e++) {
    uint64_t d = atomic_load(&decision_reg[e]);
    if (atomic_load(&proposal_reg[e]) != 0) epochs++;
    if (d >= RR_AGREE_COMMIT) commits++;
    else if (d == RR_AGREE_ABORT) aborts++;
  }
  uint64_t skipped = 0, waited = 0, late = 0, simulated = 0;
  for (int r = 0; r < n_ranks; r++) {
    skipped += results[r].skipped;
    waited += results[r].waited_ns;
    late += results[r].late_reads;
    simulated += results[r].simulated;
  }
  const uint64_t expect_in = differ_rank >= 0 ? (RR_AGREE_IN_REFUSE | 1u) : RR_AGREE_IN_MATCH;
  printf("agree_sim: %d ranks x %d collectives, seed %u%s: inputs %s%s; %u epochs proposed, "
         "%u committed, %u aborted; %llu late skips, %llu lost decisions read late, %llu "
         "simulated calls; %.1f ms waited in all; %d disagreement%s",
         n_ranks, n_colls, seed, broken == 1 ? " (broken)" : broken == 2 ? " (broken-late)" : "",
         inputs_result[0] == RR_AGREE_IN_MATCH ? "agreed" : "refused",
         inputs_split ? " (NOT ALIKE)" : " alike", epochs, commits, aborts,
         (unsigned long long)skipped, (unsigned long long)late, (unsigned long long)simulated,
         (double)waited / 1e6, disagreements, disagreements == 1 ? "" : "s");
  if (first_bad >= 0) printf(" (first at collective %d)", first_bad);
  printf("\n");
  if (broken) return disagreements > 0 ? 0 : 1;
  total_commits += commits;
  total_aborts += aborts;
  total_late += late;
  return disagreements > 0 || inputs_split > 0 || inputs_result[0] != expect_in;
}

int main(int argc, char **argv) {
  unsigned first = 0, last = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) n_ranks = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--colls") && i + 1 < argc) n_colls = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = (unsigned)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--seeds") && i + 1 < argc && sscanf(argv[++i], "%u-%u", &first, &last) == 2) continue;
    else if (!strcmp(argv[i], "--late-us") && i + 1 < argc) late_us = (unsigned)strtoul(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "--differ") && i + 1 < argc) differ_rank = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--broken")) broken = 1;
    else if (!strcmp(argv[i], "--broken-late")) broken = 2;
    else {
      fprintf(stderr, "usage: %s [--ranks N] [--colls M] [--seed S | --seeds A-B] [--late-us U] "
                      "[--differ R] [--broken | --broken-late]\n", argv[0]);
      return 2;
    }
  }
  if (n_ranks < 2 || n_ranks > 64 || n_colls < 10 || differ_rank >= n_ranks || first > last) {
    fprintf(stderr, "agree_sim: 2..64 ranks, at least 10 collectives, --differ below --ranks\n");
    return 2;
  }
  if (last == 0) first = last = seed;
  max_epochs = (uint32_t)n_colls + 1;
  proposal_reg = calloc(max_epochs, sizeof(*proposal_reg));
  decision_reg = calloc(max_epochs, sizeof(*decision_reg));
  proposal_at = calloc(max_epochs, sizeof(*proposal_at));
  decision_at = calloc(max_epochs, sizeof(*decision_at));
  vote_reg = calloc((size_t)max_epochs * n_ranks, sizeof(*vote_reg));
  vote_at = calloc((size_t)max_epochs * n_ranks, sizeof(*vote_at));
  used = calloc((size_t)n_ranks * n_colls, sizeof(*used));
  if (!proposal_reg || !decision_reg || !proposal_at || !decision_at || !vote_reg || !vote_at || !used)
    return 1;
  /* --broken*: some seed must catch it; otherwise every seed must pass. */
  int caught = 0;
  for (seed = first; seed <= last; seed++) {
    int rc = run_seed();
    if (broken && rc == 0) caught = 1;
    if (broken && caught) break;
    if (!broken && rc != 0) return 1;
  }
  if (broken) return caught ? 0 : 1;
  printf("agree_sim: seeds %u-%u: %llu commits, %llu aborts, %llu lost decisions read late\n", first,
         last, (unsigned long long)total_commits, (unsigned long long)total_aborts,
         (unsigned long long)total_late);
  if (total_commits == 0 || total_aborts == 0 || (late_us > 0 && total_late == 0)) {
    printf("agree_sim: commits, aborts and late reads must all happen for the run to mean anything\n");
    return 1;
  }
  return 0;
}
