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

/* The agreement protocol's per-context state (tuner_agree.h), present only
 * when RERAIL_TUNER_AGREE_DIR names a job-wide directory. */
struct agreement {
  rr_agree_dir dir;
  rr_agree proto;
  int leader;
  uint64_t look_every;     /* collectives between looks at the directory */
  uint64_t margin;         /* collectives between a proposal and its activation */
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

/* RERAIL_TUNER_AGREE_DIR set: join the communicator's registers. Any
 * problem leaves the protocol off (the static view: always consistent). */
void rr_tuner_agree_start(rr_tuner_ctx *c) {
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
  rr_agree_init(&a->proto, &m, (uint32_t)c->n_ranks, 0, wait_ms * 1000000ull);
  a->look_every = env_u64("RERAIL_TUNER_AGREE_LOOK", 256, 1, 1u << 20);
  a->margin = env_u64("RERAIL_TUNER_AGREE_MARGIN", 4096, 2, 1u << 30);
  a->leader = rr_agree_dir_claim_leader(&a->dir);
  a->my_view = local_view();
  c->agree = a;
  RR_INFO(RR_SUB_TUNING,
          "tuner: comm 0x%" PRIx64 " plan agreement on in %s as %s (%s); look every %" PRIu64
          " collectives, activate %" PRIu64 " ahead, wait %" PRIu64 " ms",
          c->comm_id, a->dir.path, token, a->leader ? "leader" : "voter", a->look_every,
          a->margin, wait_ms);
}

/* Before collective seq: run the protocol and install a newly agreed plan.
 * The directory is touched only every look_every collectives, and at an
 * activation point this rank voted for. */
void rr_tuner_agree_step(rr_tuner_ctx *c, uint64_t seq) {
  struct agreement *a = c->agree;
  const int look = seq % a->look_every == 0;
  if (look) {
    if (seq % (a->look_every * 16) == 0) a->my_view = local_view();
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
            "tuner: comm 0x%" PRIx64 " agreed plan from collective %" PRIu64
            ": %d rail%s down on the worst host (mask 0x%" PRIx64 ")",
            c->comm_id, seq, c->rails_down, c->rails_down == 1 ? "" : "s",
            (uint64_t)(plan & 0xffffffffu));
  }
}

void rr_tuner_agree_stop(rr_tuner_ctx *c) {
  free(c->agree);
  c->agree = NULL;
}
