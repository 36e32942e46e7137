/* The agreement protocol inside the tuner core: a job-wide directory as
 * the medium (tuner_agree_dir.h), this host's view from the health table,
 * the leader's proposals, and installing an agreed plan on the context at
 * the collective every rank switches on (docs/tuner.md, "In the plugin"). */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rr_health_table.h"
#include "tuner_agree.h"
#include "tuner_agree_dir.h"
#include "tuner_core_internal.h"
#include "tuner_inputs.h"

/* The agreement protocol's per-context state (tuner_agree.h), present only
 * when RERAIL_TUNER_AGREE_DIR names a job-wide directory. */
struct agreement {
  rr_agree_dir dir;
  rr_agree proto;
  int replan;              /* health-driven re-planning on (inputs agreed, tuner v6) */
  int leader;
  uint64_t look_every;     /* key steps between looks at the directory */
  uint64_t next_look;      /* the key at which to look next */
  uint64_t looks;
  uint64_t margin;         /* key steps between a proposal and its activation */
  uint64_t my_view;        /* this host's view: (rails down << 32) | down mask */
  uint64_t voted_view;     /* the view of this rank's last vote */
  uint64_t seen_aborts;
  uint64_t hint_seen_ns;   /* leader: the last hint acted on */
  uint64_t seen_commits;
  unsigned abort_streak;   /* leader: epochs aborted in a row (widens the margin) */
  uint64_t applied;        /* the agreed plan the context's view holds */
};

static int popcount64(uint64_t v) { return __builtin_popcountll(v); }

/* An agreed plan (the worst host's down mask in the low 32 bits) becomes
 * the context's view: the static network with those rails down. Rules see
 * the rails-down count even without @net. */
static void apply_agreed(rr_tuner_ctx *c, uint64_t plan) {
  rr_tuner_set_view(c, NULL);
  c->view.down_mask = plan & 0xffffffffu;
  if (c->have_net && c->view.nics < 64) c->view.down_mask &= (1ull << c->view.nics) - 1;
  rr_tuner_rebuild_plan(c);
}

/* This host's view from the shared health table: the NICs some live
 * process on this host reports down. */
static uint64_t local_view(void) {
  rr_ht_snapshot snap;
  memset(&snap, 0, sizeof(snap));
  uint64_t mask = 0;
  if (rr_health_table_read(NULL, &snap) == RR_OK) {
    for (int i = 0; i < snap.nic_count; i++) {
      const rr_ht_nic_entry *e = &snap.nic[i];
      if (e->liveness == RR_HT_LIVE && e->row.state == RR_HT_DOWN && e->row.dev >= 0 &&
          e->row.dev < 32)
        mask |= 1ull << e->row.dev;
    }
  }
  rr_health_table_snapshot_free(&snap);
  return ((uint64_t)popcount64(mask) << 32) | mask;
}

static uint64_t env_u64(const char *name, uint64_t def, uint64_t lo, uint64_t hi) {
  const char *v = getenv(name);
  if (v == NULL || v[0] == '\0') return def;
  char *end = NULL;
  unsigned long long x = strtoull(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    TUNER_WARN("tuner: %s='%s' is not in %" PRIu64 "..%" PRIu64 "; using %" PRIu64, name, v, lo,
               hi, def);
    return def;
  }
  return (uint64_t)x;
}

static atomic_uint_least64_t refusals;      /* communicators refused, process-wide */
static atomic_int warned_refusal;

uint64_t rr_tuner_inputs_refusals(void) { return atomic_load(&refusals); }

/* The ranks' inputs differ (or one did not arrive): say so once per
 * process (WARN; later communicators at INFO), and count it. */
static void report_refusal(const rr_tuner_ctx *c, uint64_t decision, uint64_t init_ms) {
  atomic_fetch_add(&refusals, 1);
  const uint32_t differ = (uint32_t)(decision & ~(uint64_t)RR_AGREE_IN_REFUSE);
  char what[256];
  if (differ != 0) rr_tuner_inputs_describe(differ, what, sizeof(what));
  else snprintf(what, sizeof(what), "a rank's inputs did not arrive within %" PRIu64 " ms", init_ms);
  const int first = atomic_exchange(&warned_refusal, 1) == 0;
  rr_log_emit(first ? RR_LOG_WARN : RR_LOG_INFO, RR_SUB_TUNING, __FILE__, __LINE__,
              "tuner: comm 0x%" PRIx64 ": the ranks' inputs differ (%s); rerail's tuner leaves "
              "every choice to NCCL on every rank of this communicator%s",
              c->comm_id, what, first ? " (said once; later communicators at INFO)" : "");
}

/* RERAIL_TUNER_AGREE_DIR set: join the communicator's registers and agree
 * on the inputs; on a match, re-plan with health (tuner v6). A directory
 * that cannot be used leaves the protocol off (the static view: NCCL's
 * choices and the rules, as without it). */
void rr_tuner_agree_start(rr_tuner_ctx *c, const double (*nccl_latencies)[RR_NUM_PROTOS]) {
  const char *base = getenv("RERAIL_TUNER_AGREE_DIR");
  if (base == NULL || base[0] == '\0') return;
  if (c->comm_id == 0 || c->n_ranks < 1 || c->n_ranks > (1u << 20)) {
    TUNER_WARN("tuner: RERAIL_TUNER_AGREE_DIR needs tuner v5+ (a communicator id); agreement off");
    return;
  }
  struct agreement *a = calloc(1, sizeof(*a));
  if (a == NULL) return;
  char host[64] = "host", token[96];
  gethostname(host, sizeof(host) - 1);
  for (char *h = host; *h; h++)
    if (!((*h >= 'a' && *h <= 'z') || (*h >= 'A' && *h <= 'Z') || (*h >= '0' && *h <= '9') ||
          *h == '-'))
      *h = '_';
  static atomic_uint token_seq;
  snprintf(token, sizeof(token), "%s-%d-%u", host, (int)getpid(), atomic_fetch_add(&token_seq, 1));
  rr_status st = rr_agree_dir_open(&a->dir, base, c->comm_id, token);
  if (st != RR_OK) {
    TUNER_WARN("tuner: cannot use RERAIL_TUNER_AGREE_DIR=%s (%s); agreement off", base,
               rr_status_str(st));
    free(a);
    return;
  }
  rr_agree_medium m = rr_agree_dir_medium(&a->dir);
  uint64_t wait_ms = env_u64("RERAIL_TUNER_AGREE_WAIT_MS", 5, 1, 10000);
  a->look_every = env_u64("RERAIL_TUNER_AGREE_LOOK", 256, 1, 1u << 20);
  a->margin = env_u64("RERAIL_TUNER_AGREE_MARGIN", 4096, 2, 1u << 30);
  /* Timing of the agreement itself, not of any choice: not fingerprinted. */
  const uint64_t init_ms = env_u64("RERAIL_TUNER_AGREE_INIT_MS", 10000, 1, 600000);
  const uint64_t late_ms = env_u64("RERAIL_TUNER_AGREE_LATE_MS", 1000, 1, 600000);
  rr_agree_init(&a->proto, &m, (uint32_t)c->n_ranks, 0, wait_ms * 1000000ull);
  a->proto.late_ns = late_ms * 1000000ull;
  c->agree = a;

  const uint64_t settings[] = {a->look_every, a->margin, wait_ms};
  rr_tuner_input_args in = {.rules = c->rules, .settings = settings, .n_settings = 3,
                            .abi_version = c->abi_version, .nccl_version = rr_tuner_nccl_version(),
                            .nccl_latencies = nccl_latencies, .n_ranks = c->n_ranks,
                            .n_nodes = c->n_nodes, .nvl_domains = c->nvl_domains};
  uint64_t fp[RR_AGREE_INPUT_KINDS];
  rr_tuner_inputs_fingerprint(&in, fp);
  const uint64_t d = rr_agree_inputs(&a->proto, fp, init_ms * 1000000ull);
  if (d != RR_AGREE_IN_MATCH) {
    c->inert = 1;
    report_refusal(c, d, init_ms);
    return;
  }
  /* Health-driven re-planning keys on getChunkSize calls, which only tuner
   * v6 (NCCL 2.30+) receives: a count of getCollInfo calls drifts apart on
   * ranks that call ncclGroupSimulateEnd (docs/tuner.md, "Sequence key"). */
  if (c->abi_version < 6) {
    RR_INFO(RR_SUB_TUNING,
            "tuner: comm 0x%" PRIx64 " inputs agreed by all %zu ranks in %s; health re-planning "
            "needs tuner v6 (NCCL 2.30+), off",
            c->comm_id, c->n_ranks, a->dir.path);
    return;
  }
  a->replan = 1;
  a->leader = rr_agree_dir_claim_leader(&a->dir);
  a->my_view = local_view();
  RR_INFO(RR_SUB_TUNING,
          "tuner: comm 0x%" PRIx64 " inputs agreed by all %zu ranks; plan agreement on in %s as "
          "%s (%s); look every %" PRIu64 " chunk queries, activate %" PRIu64
          " ahead, wait %" PRIu64 " ms",
          c->comm_id, c->n_ranks, a->dir.path, token, a->leader ? "leader" : "voter",
          a->look_every, a->margin, wait_ms);
}

/* Before a collective: run the protocol at the current key and install a
 * newly agreed plan. The directory is touched only when the key has moved
 * look_every past the last look, and at an activation point this rank
 * voted for. */
void rr_tuner_agree_step(rr_tuner_ctx *c) {
  struct agreement *a = c->agree;
  if (!a->replan) return;
  const uint64_t seq = atomic_load_explicit(&c->parts, memory_order_relaxed);
  const int look = seq >= a->next_look;
  if (look) {
    a->next_look = seq + a->look_every;
    if (a->looks++ % 16 == 0) a->my_view = local_view();
    /* Something to re-plan: this host's view moved since its last vote, or
     * its last epoch aborted (so its vote never counted). */
    int want = a->my_view != a->voted_view || a->proto.aborts != a->seen_aborts;
    if (a->leader) {
      uint64_t hint = rr_agree_dir_hint_ns(&a->dir);
      /* Epochs abort when some rank is already past A_e on seeing the
       * proposal: after each abort in a row, plan twice as far ahead. */
      if (a->proto.commits != a->seen_commits) a->abort_streak = 0;
      else if (a->proto.aborts != a->seen_aborts && a->abort_streak < 10) a->abort_streak++;
      a->seen_commits = a->proto.commits;
      if ((want || hint > a->hint_seen_ns) &&
          rr_agree_propose(&a->proto, seq, a->margin << a->abort_streak))
        a->hint_seen_ns = hint;
    } else if (want) {
      rr_agree_dir_hint(&a->dir);
    }
  }
  int was_pending = a->proto.pending;
  uint64_t plan = rr_agree_before(&a->proto, seq, a->my_view, look);
  if (!was_pending && a->proto.pending) {
    a->voted_view = a->my_view;
    a->seen_aborts = a->proto.aborts;
  }
  if (plan != a->applied) {
    a->applied = plan;
    apply_agreed(c, plan);
    RR_INFO(RR_SUB_TUNING,
            "tuner: comm 0x%" PRIx64 " agreed plan from chunk query %" PRIu64
            ": %d rail%s down on the worst host (mask 0x%" PRIx64 ")",
            c->comm_id, seq, c->rails_down, c->rails_down == 1 ? "" : "s",
            (uint64_t)(plan & 0xffffffffu));
  }
}

void rr_tuner_get_stats(const rr_tuner_ctx *c, rr_tuner_stats *out) {
  memset(out, 0, sizeof(*out));
  if (c == NULL || c->magic != RR_TUNER_CTX_MAGIC) return;
  out->key = atomic_load_explicit(&c->parts, memory_order_relaxed);
  out->inputs_refused = c->inert;
  const struct agreement *a = c->agree;
  if (a == NULL) return;
  out->agreement = 1;
  if (c->inert) out->inputs_differ = (uint32_t)(a->proto.inputs & ~(uint64_t)RR_AGREE_IN_REFUSE);
  out->replanning = a->replan;
  out->commits = a->proto.commits;
  out->aborts = a->proto.aborts;
  out->late_reads = a->proto.late_reads;
  out->late_stalls = a->proto.late_stalls;
}

void rr_tuner_agree_stop(rr_tuner_ctx *c) {
  free(c->agree);
  c->agree = NULL;
}
