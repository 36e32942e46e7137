/* The tuner core with plan agreement on, end to end, across processes:
 * each process is one rank on its own "host" (its own health table), all
 * share RERAIL_TUNER_AGREE_DIR. Host 2 starts with NIC 1 down; host 1 loses
 * NIC 0 and NIC 3 mid-run. Ranks run at different, randomly varying speeds,
 * up to WINDOW collectives apart.
 * Every rank records what the tuner chose for each collective; the choices
 * must be identical on every rank, collective by collective, and the plan
 * must have followed the worst host (rails down by the end).
 *
 * As NCCL 2.30 does, each collective is one getCollInfo followed by
 * getChunkSize once per channel part (1-3 here, the same on every rank);
 * ranks 1 and 3 also ask getCollInfo again now and then for a collective
 * they only simulate (ncclGroupSimulateEnd: no launch, so no chunk query).
 *
 * Then the same communicator shape with rank 3 deployed a different rules
 * file: every rank must refuse alike (the counter), and leave every choice
 * to NCCL.
 *
 * Usage: agree_plugin WORKDIR */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rr_health_bus.h"
#include "rr_health_table.h"
#include "tuner_core.h"
#include "tuner_ids.h"

#define RANKS 4
#define COLLS 12000
#define COLLS_REFUSED 400

static const char *work;
/* Ranks drift apart, but only so far: a collective completes only once
 * every rank took part, and applications wait on results. Shared between
 * the processes (mapped before fork). */
#define WINDOW 64
static _Atomic int *progress;

static void wait_for_window(int s) {
  for (;;) {
    int slowest = s;
    for (int r = 0; r < RANKS; r++) {
      int p = atomic_load(&progress[r]);
      if (p < slowest) slowest = p;
    }
    if (s - slowest <= WINDOW) return;
    sched_yield();
  }
}

static void table(float t[RR_NUM_ALGOS][RR_NUM_PROTOS]) {
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++)
      t[a][p] = a == RR_ALGO_RING ? (float)(100.0 - 10.0 * p) : -1.0f;
}

static void set_down(rr_ht_writer *w, int dev) {
  rr_health_event ev = {.kind = RR_HEV_NIC_STATE, .dev = dev, .to_dev = -1, .state = RR_LINK_DOWN};
  snprintf(ev.ifname, sizeof(ev.ifname), "rail%d", dev);
  snprintf(ev.reason, sizeof(ev.reason), "test");
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ev.time_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  clock_gettime(CLOCK_REALTIME, &ts);
  ev.wall_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  rr_health_table_event(w, &ev);
}

static int colls = COLLS;
static int scenario; /* 0: health re-planning; 1: rank 3's rules differ */

static void ask(rr_tuner_ctx *ctx, int s, float t[RR_NUM_ALGOS][RR_NUM_PROTOS], int *ch) {
  table(t);
  int coll = s % 2 ? RR_COLL_ALL_GATHER : RR_COLL_ALL_REDUCE;
  uint64_t nbytes = s % 2 ? (1ull << 30) : 256;
  rr_coll_query q = {.coll = coll, .nbytes = nbytes, .num_pipe_ops = 1, .reg_buff = 0,
                     .cost = &t[0][0], .num_algo = RR_NUM_ALGOS, .num_proto = RR_NUM_PROTOS};
  *ch = 0;
  rr_tuner_coll_info(ctx, &q, ch);
}

static int rank_main(int rank) {
  char path[512];
  if (scenario == 1 && rank == 3) {
    snprintf(path, sizeof(path), "%s/rules-other.conf", work);
    setenv("RERAIL_TUNER_CONFIG", path, 1);
  }
  snprintf(path, sizeof(path), "%s/health-%d", work, rank);
  setenv("RERAIL_HEALTH_PATH", path, 1);
  rr_ht_writer *w = NULL;
  if (rr_health_table_open_writer(path, NULL, &w, NULL) != RR_OK) return 10;
  for (int d = 0; d < 4; d++) {
    char ifn[16];
    snprintf(ifn, sizeof(ifn), "rail%d", d);
    rr_health_table_claim(w, d, ifn);
  }
  if (rank == 2) set_down(w, 1);

  rr_tuner_init_args args = {.abi_version = 6, .comm_id = 0xa9eedull + (uint64_t)scenario,
                             .n_ranks = RANKS,
                             .n_nodes = RANKS, .nvl_domains = -1};
  rr_tuner_ctx *ctx = NULL;
  rr_tuner_init(&args, &ctx);
  if (ctx == NULL) return 11;
  unsigned char *rec = calloc((size_t)colls + 1, 1);
  uint32_t rng = 0x9e3779b9u * (uint32_t)(rank + 1);
  int simulated = 0;
  for (int s = 0; s < colls; s++) {
    if (rank == 1 && s == colls / 3) {
      set_down(w, 0);
      set_down(w, 3);
    }
    if (s % 256 == 0) rr_health_table_heartbeat(w);
    wait_for_window(s);
    float t[RR_NUM_ALGOS][RR_NUM_PROTOS];
    int ch = 0;
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    if ((rank == 1 || rank == 3) && rng % 8 == 0) {
      ask(ctx, s, t, &ch); /* simulated: asked, never launched */
      simulated++;
    }
    ask(ctx, s, t, &ch);
    int ll_forced = t[RR_ALGO_RING][RR_PROTO_LL] == 0.0f; /* the rails_down rule fired */
    rec[s] = (unsigned char)((ch & 0x7f) | (ll_forced << 7));
    /* launched: one chunk query per channel part */
    for (int part = 0; part < 1 + s % 3; part++) {
      size_t chunk = 65536;
      rr_tuner_chunk_size(ctx, s % 2 ? RR_COLL_ALL_GATHER : RR_COLL_ALL_REDUCE, 4096, RR_ALGO_RING,
                          RR_PROTO_SIMPLE, 1, &chunk);
    }
    if (rng % 64 == 0) usleep(rng % 400); /* ranks drift */
    atomic_store(&progress[rank], s + 1);
  }
  atomic_store(&progress[rank], colls + WINDOW + 1);
  rr_tuner_stats st;
  rr_tuner_get_stats(ctx, &st);
  rr_tuner_finalize(ctx);
  /* The last byte: this rank's refusal counter, which every rank must share. */
  rec[colls] = (unsigned char)(rr_tuner_inputs_refusals() + (st.inputs_refused ? 0x10 : 0));
  if ((rank == 1 || rank == 3) && simulated == 0) return 13; /* the run must mean something */
  snprintf(path, sizeof(path), "%s/rec-%d", work, rank);
  FILE *f = fopen(path, "wb");
  if (f == NULL || fwrite(rec, 1, (size_t)colls + 1, f) != (size_t)colls + 1) return 12;
  fclose(f);
  free(rec);
  rr_health_table_close_writer(w);
  return 0;
}

/* One scenario: fork the ranks, collect and compare their records. */
static int run(int which) {
  scenario = which;
  colls = which == 0 ? COLLS : COLLS_REFUSED;
  for (int r = 0; r < RANKS; r++) atomic_store(&progress[r], 0);
  pid_t pid[RANKS];
  for (int r = 0; r < RANKS; r++) {
    pid[r] = fork();
    if (pid[r] == 0) _exit(rank_main(r));
  }
  int bad = 0;
  for (int r = 0; r < RANKS; r++) {
    int st = 0;
    waitpid(pid[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("agree_plugin: rank %d failed (status %d)\n", r, st);
      bad = 1;
    }
  }
  if (bad) return 1;
  unsigned char *rec[RANKS];
  for (int r = 0; r < RANKS; r++) {
    char path[600];
    snprintf(path, sizeof(path), "%s/rec-%d", work, r);
    rec[r] = calloc((size_t)colls + 1, 1);
    FILE *in = fopen(path, "rb");
    if (in == NULL || fread(rec[r], 1, (size_t)colls + 1, in) != (size_t)colls + 1) return 1;
    fclose(in);
  }
  int differ = 0, switches = 0, first = -1, acted = 0;
  for (int s = 0; s <= colls; s++) {
    for (int r = 1; r < RANKS; r++)
      if (rec[r][s] != rec[0][s]) {
        if (first < 0) first = s;
        differ++;
      }
    if (s >= 2 && s < colls && rec[0][s] != rec[0][s - 2]) switches++;
    if (s < colls && rec[0][s] != 0) acted++;
  }
  const int end_ch = rec[0][colls - 1] & 0x7f, end_ll = rec[0][colls - 2] >> 7;
  const int refused = rec[0][colls];
  for (int r = 0; r < RANKS; r++) free(rec[r]);
  if (which == 1) {
    printf("agree_plugin: rank 3's rules differ, %d ranks x %d collectives: refused on rank 0 "
           "%s (counter %d), %d collective%s where the tuner acted, %d disagreement%s\n",
           RANKS, colls, refused & 0x10 ? "yes" : "no", refused & 0x0f, acted,
           acted == 1 ? "" : "s", differ, differ == 1 ? "" : "s");
    if (differ || refused != 0x11 || acted != 0) {
      printf("agree_plugin: FAILED: every rank must refuse alike and leave NCCL's choices\n");
      return 1;
    }
    return 0;
  }
  printf("agree_plugin: %d ranks x %d collectives: %d plan switch%s, %d disagreement%s; at the end "
         "all-gather runs on %d channels (NCCL's: 0 = its own) and the rails_down rule %s\n",
         RANKS, colls, switches, switches == 1 ? "" : "es", differ, differ == 1 ? "" : "s",
         end_ch, end_ll ? "applies" : "does not apply");
  if (differ) {
    printf("agree_plugin: FAILED: ranks chose differently (first at collective %d)\n", first);
    return 1;
  }
  if (switches < 2 || !end_ll || end_ch == 0 || refused != 0) {
    printf("agree_plugin: FAILED: the plan did not follow the hosts' health\n");
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s WORKDIR\n", argv[0]);
    return 2;
  }
  work = argv[1];
  char dir[512], cfg[512];
  snprintf(dir, sizeof(dir), "%s/agree", work);
  snprintf(cfg, sizeof(cfg), "%s/rules.conf", work);
  if (mkdir(work, 0700) != 0 && errno != EEXIST) return 2;
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return 2;
  FILE *f = fopen(cfg, "w");
  if (f == NULL) return 2;
  fprintf(f, "@net,nics=4,gbps=400,lat_us=2\nallreduce,0,1K,ring,ll,-1,-1,-1,-1,-1,rails_down=1-3\n");
  fclose(f);
  setenv("RERAIL_TUNER_CONFIG", cfg, 1);
  setenv("RERAIL_TUNER_AGREE_DIR", dir, 1);
  setenv("RERAIL_TUNER_AGREE_LOOK", "16", 1);
  setenv("RERAIL_TUNER_AGREE_MARGIN", "96", 1);
  setenv("RERAIL_TUNER_AGREE_WAIT_MS", "20", 1);
  setenv("RERAIL_LOG_LEVEL", "warn", 1);

  progress = mmap(NULL, sizeof(int) * RANKS, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  if (progress == MAP_FAILED) return 2;
  int rc = run(0);
  if (rc != 0) return rc;
  /* Rank 3's file differs in one channel count: a file edited mid-deploy. */
  snprintf(cfg, sizeof(cfg), "%s/rules-other.conf", work);
  f = fopen(cfg, "w");
  if (f == NULL) return 2;
  fprintf(f, "@net,nics=4,gbps=400,lat_us=2\nallreduce,0,1K,ring,ll,2,-1,-1,-1,-1,rails_down=1-3\n");
  fclose(f);
  return run(1);
}

