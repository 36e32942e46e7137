/* What the tuner core decides (tuner_plugin/core/tuner_core.h): rules from
 * RERAIL_TUNER_CONFIG override NCCL's table, channels and chunk size; the
 * cost model acts only under an agreed view with rails down; local health
 * never enters by default; a bad rules file leaves NCCL alone. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tuner_core.h"
#include "tuner_ids.h"
#include "tuner_inputs.h"
#include "tuner_model.h"

static int warnings;
static char last_warning[512];
static char infos[4096];

/* Ranks made on threads log at once. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void logger(int level, unsigned long flags, const char *file, int line, const char *fmt,
                   ...) {
  (void)flags;
  (void)file;
  (void)line;
  va_list ap;
  pthread_mutex_lock(&log_lock);
  if (level == RR_LOG_INFO) {
    size_t len = strlen(infos);
    va_start(ap, fmt);
    if (len + 2 < sizeof(infos)) vsnprintf(infos + len, sizeof(infos) - len - 1, fmt, ap);
    va_end(ap);
    len = strlen(infos);
    if (len + 1 < sizeof(infos)) strcat(infos, "\n");
  } else if (level == RR_LOG_WARN) {
    warnings++;
    va_start(ap, fmt);
    vsnprintf(last_warning, sizeof(last_warning), fmt, ap);
    va_end(ap);
  }
  pthread_mutex_unlock(&log_lock);
}

static char cfg_path[64];

static void write_rules(const char *text) {
  snprintf(cfg_path, sizeof(cfg_path), "/tmp/rr-tuner-cfg-%d", (int)getpid());
  FILE *f = fopen(cfg_path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  setenv("RERAIL_TUNER_CONFIG", cfg_path, 1);
}

static rr_tuner_ctx *make_ctx(size_t ranks, size_t nodes, double (*lat)[RR_NUM_PROTOS]) {
  rr_tuner_init_args a = {.abi_version = 6, .comm_id = 1, .n_ranks = ranks, .n_nodes = nodes,
                          .nvl_domains = -1, .logger = logger, .net_latencies = lat};
  rr_tuner_ctx *c = NULL;
  assert_int_equal(rr_tuner_init(&a, &c), RR_OK);
  assert_non_null(c);
  return c;
}

/* NCCL-like costs: ring and tree usable, the rest ruled out. */
static void fill_for(int coll, float t[RR_NUM_ALGOS][RR_NUM_PROTOS], size_t nbytes) {
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++)
      t[a][p] = (a == RR_ALGO_RING || (a == RR_ALGO_TREE && coll == RR_COLL_ALL_REDUCE))
                    ? (float)(10.0 + a + p * 3 + (double)nbytes / (1000.0 * (1 + p)))
                    : -1.0f;
}

static void fill(float t[RR_NUM_ALGOS][RR_NUM_PROTOS], size_t nbytes) {
  fill_for(RR_COLL_ALL_REDUCE, t, nbytes);
}

static int pick(float t[RR_NUM_ALGOS][RR_NUM_PROTOS], int *algo, int *proto) {
  float best = 0;
  *algo = -1;
  for (int a = 0; a < RR_NUM_ALGOS; a++)
    for (int p = 0; p < RR_NUM_PROTOS; p++)
      if (t[a][p] >= 0 && (*algo < 0 || t[a][p] < best)) {
        best = t[a][p];
        *algo = a;
        *proto = p;
      }
  return *algo >= 0;
}

static int coll_info(rr_tuner_ctx *c, int coll, size_t nbytes, float t[RR_NUM_ALGOS][RR_NUM_PROTOS],
                     int channels_in) {
  rr_coll_query q = {.coll = coll, .nbytes = nbytes, .num_pipe_ops = 1, .reg_buff = 0,
                     .cost = &t[0][0], .num_algo = RR_NUM_ALGOS, .num_proto = RR_NUM_PROTOS};
  int ch = channels_in;
  assert_int_equal(rr_tuner_coll_info(c, &q, &ch), RR_OK);
  return ch;
}

static int teardown(void **state) {
  (void)state;
  unsetenv("RERAIL_TUNER_CONFIG");
  if (cfg_path[0]) unlink(cfg_path);
  warnings = 0;
  return 0;
}

static void test_rules_override_table_and_channels(void **state) {
  (void)state;
  write_rules("allreduce,0,64K,tree,ll,-1,-1,-1\n"
              "allreduce,64K,-1,ring,simple,6,-1,-1\n"
              "allgather,0,-1,keep,ll128,-1,-1,-1\n"
              "broadcast,0,-1,nvls,simple,-1,-1,-1\n");
  rr_tuner_ctx *c = make_ctx(16, 2, NULL);
  float t[RR_NUM_ALGOS][RR_NUM_PROTOS];
  int a, p;

  fill(t, 1000);
  assert_int_equal(coll_info(c, RR_COLL_ALL_REDUCE, 1000, t, 0), 0);
  assert_true(pick(t, &a, &p));
  assert_int_equal(a, RR_ALGO_TREE);
  assert_int_equal(p, RR_PROTO_LL);

  infos[0] = '\0';
  fill(t, 1 << 20);
  assert_int_equal(coll_info(c, RR_COLL_ALL_REDUCE, 1 << 20, t, 0), 6);
  /* NCCL_DEBUG_SUBSYS=TUNING shows a rule's first decision, once. */
  assert_non_null(strstr(infos, "rule at line 2 first applied (allreduce, 1048576 bytes): "
                                "algorithm ring, protocol simple, channels 6"));
  fill(t, 1 << 21);
  coll_info(c, RR_COLL_ALL_REDUCE, 1 << 21, t, 0);
  assert_null(strstr(strstr(infos, "line 2 first") + 1, "line 2 first"));
  pick(t, &a, &p);
  assert_int_equal(a, RR_ALGO_RING);
  assert_int_equal(p, RR_PROTO_SIMPLE);

  /* 'keep' algorithm: NCCL's cheaper algorithm with LL128. */
  fill(t, 4096);
  coll_info(c, RR_COLL_ALL_GATHER, 4096, t, 0);
  pick(t, &a, &p);
  assert_int_equal(p, RR_PROTO_LL128);
  assert_int_equal(a, RR_ALGO_TREE); /* fill() makes tree cheaper */

  /* NCCL ruled NVLS out: the table stays as NCCL made it, with success. */
  float expect[RR_NUM_ALGOS][RR_NUM_PROTOS];
  fill(t, 4096);
  memcpy(expect, t, sizeof(t));
  assert_int_equal(coll_info(c, RR_COLL_BROADCAST, 4096, t, 3), 3);
  assert_memory_equal(t, expect, sizeof(t));
  assert_true(warnings > 0);

  /* No rule for reduce: nothing changes. */
  fill(t, 4096);
  assert_int_equal(coll_info(c, RR_COLL_REDUCE, 4096, t, 0), 0);
  assert_memory_equal(t, expect, sizeof(t));
  assert_int_equal(rr_tuner_finalize(c), RR_OK);
}

static void test_v2_answers_in_ids(void **state) {
  (void)state;
  write_rules("reduce,0,-1,ring,ll128,4,-1,-1\nallreduce,0,-1,keep,ll,-1,-1,-1\n");
  rr_tuner_ctx *c = make_ctx(8, 2, NULL);
  int algo = -1, proto = -1, ch = 0;
  rr_coll_query q = {.coll = RR_COLL_REDUCE, .nbytes = 10, .num_pipe_ops = 1, .reg_buff = -1,
                     .algo_out = &algo, .proto_out = &proto};
  assert_int_equal(rr_tuner_coll_info(c, &q, &ch), RR_OK);
  assert_int_equal(algo, RR_ALGO_RING);
  assert_int_equal(proto, RR_PROTO_LL128);
  assert_int_equal(ch, 4);
  /* v2 cannot take half a pair: a 'keep' rule leaves NCCL's undefined. */
  algo = proto = -1;
  q.coll = RR_COLL_ALL_REDUCE;
  assert_int_equal(rr_tuner_coll_info(c, &q, &ch), RR_OK);
  assert_int_equal(algo, -1);
  assert_int_equal(proto, -1);
  assert_int_equal(rr_tuner_finalize(c), RR_OK);
}

/* What NCCL 2.21 (the one version binding tuner v2) can run, from its
 * sources: kernels exist for broadcast/reduce on ring, all-gather and
 * reduce-scatter on ring, CollNet direct and NVLS, all-reduce on its six
 * algorithms (no PAT); LL and LL128 on ring and tree only. CollNet needs
 * collNetSupport, NVLS nvlsSupport; NVLS on several hosts needs CollNet and
 * all-reduce; NVLS tree needs several hosts. CollNet direct also needs
 * NVSwitch (and, across hosts, the CollNet plugin's all-gather), which a
 * tuner cannot see: never safe to name. */
static int nccl_2_21_runs(int coll, int algo, int proto, int collnet, int nvls, int nodes) {
  static const int kernels[RR_NUM_COLLS][RR_NUM_ALGOS] = {
      [RR_COLL_BROADCAST] = {[RR_ALGO_RING] = 1},
      [RR_COLL_REDUCE] = {[RR_ALGO_RING] = 1},
      [RR_COLL_ALL_GATHER] = {[RR_ALGO_RING] = 1, [RR_ALGO_COLLNET_DIRECT] = 1, [RR_ALGO_NVLS] = 1},
      [RR_COLL_REDUCE_SCATTER] = {[RR_ALGO_RING] = 1, [RR_ALGO_COLLNET_DIRECT] = 1, [RR_ALGO_NVLS] = 1},
      [RR_COLL_ALL_REDUCE] = {1, 1, 1, 1, 1, 1, 0},
  };
  if (!kernels[coll][algo]) return 0;
  if (proto != RR_PROTO_SIMPLE && algo != RR_ALGO_RING && algo != RR_ALGO_TREE) return 0;
  switch (algo) {
  case RR_ALGO_COLLNET_DIRECT: return 0;
  case RR_ALGO_COLLNET_CHAIN: return collnet == 1;
  case RR_ALGO_NVLS: return nvls == 1 && (nodes == 1 || (collnet == 1 && coll == RR_COLL_ALL_REDUCE));
  case RR_ALGO_NVLS_TREE: return nvls == 1 && nodes > 1;
  default: return 1;
  }
}

/* Tuner v2 has no cost table and NCCL 2.21 uses the pair it returns as
 * given: whatever the rules name (PAT, NVLS or CollNet without support, a
 * pair without a kernel), the answer is a pair 2.21 runs or NCCL's own. */
static void test_v2_only_pairs_nccl_2_21_runs(void **state) {
  (void)state;
  static const char *const colls[] = {"broadcast", "reduce", "allgather", "reducescatter", "allreduce"};
  static const char *const algos[] = {"tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
  static const char *const protos[] = {"ll", "ll128", "simple"};
  /* One rule per (collective, algorithm, protocol), told apart by size: rule i covers [10i, 10i+9]. */
  char text[16384] = "";
  int n = 0;
  for (int c = 0; c < RR_NUM_COLLS; c++)
    for (int a = 0; a < RR_NUM_ALGOS; a++)
      for (int p = 0; p < RR_NUM_PROTOS; p++, n++) {
        size_t len = strlen(text);
        snprintf(text + len, sizeof text - len, "%s,%d,%d,%s,%s,-1,-1,-1\n", colls[c], 10 * n, 10 * n + 9,
                 algos[a], protos[p]);
      }
  write_rules(text);
  int granted = 0, refused = 0;
  for (int nodes = 1; nodes <= 2; nodes++) {
    rr_tuner_ctx *ctx = make_ctx(8 * (size_t)nodes, (size_t)nodes, NULL);
    for (int support = 0; support < 4; support++) {
      int collnet = support & 1, nvls = support >> 1;
      n = 0;
      for (int c = 0; c < RR_NUM_COLLS; c++)
        for (int a = 0; a < RR_NUM_ALGOS; a++)
          for (int p = 0; p < RR_NUM_PROTOS; p++, n++) {
            int algo = -1, proto = -1, ch = 0;
            rr_coll_query q = {.coll = c, .nbytes = (size_t)(10 * n + 5), .num_pipe_ops = 1, .reg_buff = -1,
                               .algo_out = &algo, .proto_out = &proto, .collnet_support = collnet,
                               .nvls_support = nvls};
            assert_int_equal(rr_tuner_coll_info(ctx, &q, &ch), RR_OK);
            if (nccl_2_21_runs(c, a, p, collnet, nvls, nodes)) {
              assert_int_equal(algo, a);
              assert_int_equal(proto, p);
              granted++;
            } else {
              assert_int_equal(algo, -1); /* NCCL's to choose */
              assert_int_equal(proto, -1);
              refused++;
            }
          }
    }
    assert_int_equal(rr_tuner_finalize(ctx), RR_OK);
  }
  assert_true(granted > 0 && refused > 0);
}

static void test_chunk_rules(void **state) {
  (void)state;
  write_rules("allreduce,1M,-1,ring,simple,-1,-1,-1,chunk=1M\n"
              "allgather,0,-1,keep,keep,-1,-1,-1,-1,-1,chunk=-1\n");
  /* chunk=-1 with everything kept changes nothing: rejected. */
  rr_tuner_ctx *c = make_ctx(8, 2, NULL);
  size_t chunk = 131072;
  assert_int_equal(rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 4 << 20, RR_ALGO_RING,
                                       RR_PROTO_SIMPLE, 8, &chunk),
                   RR_OK);
  assert_int_equal(chunk, 131072); /* the file was rejected: no rules */
  assert_non_null(strstr(last_warning, ":2: the rule changes nothing"));
  rr_tuner_finalize(c);

  /* As NCCL 2.30 calls it: once per channel part, n_channels 1, the part's
   * bytes. A 32 MiB all-reduce on 8 channels asks with 4 MiB parts. */
  write_rules("allreduce,1M,-1,ring,simple,-1,-1,-1,chunk=1M\n");
  c = make_ctx(8, 2, NULL);
  assert_int_equal(rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 4 << 20, RR_ALGO_RING,
                                       RR_PROTO_SIMPLE, 1, &chunk),
                   RR_OK);
  assert_int_equal(chunk, 1 << 20);
  chunk = 131072; /* NCCL picked another protocol: not this rule's plan */
  rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 4 << 20, RR_ALGO_RING, RR_PROTO_LL128, 1, &chunk);
  assert_int_equal(chunk, 131072);
  /* The rule is matched on the part: a 4 MiB all-reduce (in getCollInfo's
   * range) on 8 channels has 512 KiB parts, outside it. */
  rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 512 << 10, RR_ALGO_RING, RR_PROTO_SIMPLE, 1, &chunk);
  assert_int_equal(chunk, 131072);
  assert_int_equal(rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 1000, 0, 0, 1, NULL), RR_OK);
  assert_int_equal(rr_tuner_finalize(c), RR_OK);
}

/* NCCL rounds the chunk down to the grain of the protocol it picked (LL 16 B,
 * LL128 1920 B, Simple 512 B) and divides by the result: whatever a rule says,
 * the chunk returned is NCCL's own or at least that grain, for every
 * collective, algorithm, protocol and part size. */
static void test_chunk_never_below_grain(void **state) {
  (void)state;
  write_rules("*,0,-1,keep,keep,-1,-1,-1,chunk=1K\n");
  rr_tuner_ctx *c = make_ctx(16, 2, NULL);
  const size_t parts[] = {0, 1, 1000, 1 << 20, (size_t)1 << 33};
  const int grain[RR_NUM_PROTOS] = {16, 1920, 512};
  int changed = 0;
  for (int coll = 0; coll < RR_NUM_COLLS; coll++)
    for (int a = 0; a < RR_NUM_ALGOS; a++)
      for (int p = 0; p < RR_NUM_PROTOS; p++)
        for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
          const size_t nccl_choice = 3 * 1920 * 512; /* a multiple of every grain */
          size_t chunk = nccl_choice;
          assert_int_equal(rr_tuner_chunk_size(c, coll, parts[i], a, p, 1, &chunk), RR_OK);
          assert_true(chunk == nccl_choice || chunk >= (size_t)grain[p]);
          assert_true(chunk / (size_t)grain[p] * (size_t)grain[p] > 0); /* NCCL's divisor */
          changed += chunk != nccl_choice;
          if (chunk != nccl_choice) assert_int_equal(chunk, p == RR_PROTO_LL128 ? 1920 : 1024);
        }
  assert_int_equal(changed, RR_NUM_COLLS * RR_NUM_ALGOS * RR_NUM_PROTOS * 5);
  /* A protocol NCCL does not have: nothing to size. */
  size_t chunk = 4096;
  rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 1 << 20, RR_ALGO_RING, RR_NUM_PROTOS, 1, &chunk);
  assert_int_equal(chunk, 4096);
  rr_tuner_chunk_size(c, RR_COLL_ALL_REDUCE, 1 << 20, RR_ALGO_RING, -1, 1, &chunk);
  assert_int_equal(chunk, 4096);
  assert_int_equal(rr_tuner_finalize(c), RR_OK);
}

static void test_bad_file_keeps_nccl(void **state) {
  (void)state;
  write_rules("allreduce,0,-1,ring,simple,4,-1,-1\nallreduce,0,-1,rong,simple,4,-1,-1\n");
  rr_tuner_ctx *c = make_ctx(8, 2, NULL);
  assert_non_null(strstr(last_warning, "rejected"));
  assert_non_null(strstr(last_warning, ":2: unknown algorithm 'rong'"));
  float t[RR_NUM_ALGOS][RR_NUM_PROTOS], expect[RR_NUM_ALGOS][RR_NUM_PROTOS];
  fill(t, 1 << 20);
  memcpy(expect, t, sizeof(t));
  assert_int_equal(coll_info(c, RR_COLL_ALL_REDUCE, 1 << 20, t, 0), 0);
  assert_memory_equal(t, expect, sizeof(t));
  rr_tuner_finalize(c);
  /* A missing file too. */
  setenv("RERAIL_TUNER_CONFIG", "/nonexistent/rules.conf", 1);
  c = make_ctx(8, 2, NULL);
  assert_non_null(strstr(last_warning, "cannot open"));
  rr_tuner_finalize(c);
}

/* The model moves nothing under the static view (no rail down), and under
 * an agreed view with a rail down rescales ring/tree and matches channels
 * to the rails left. rails_down rules follow the agreed view only. */
static void test_model_under_agreed_view(void **state) {
  (void)state;
  write_rules("@net,nics=4,gbps=200,lat_us=3\n"
              "allreduce,0,1K,ring,ll,-1,-1,-1,-1,-1,rails_down=1-3\n");
  rr_tuner_ctx *c = make_ctx(32, 8, NULL);
  float t[RR_NUM_ALGOS][RR_NUM_PROTOS], expect[RR_NUM_ALGOS][RR_NUM_PROTOS];
  fill(t, 256);
  memcpy(expect, t, sizeof(t));
  assert_int_equal(coll_info(c, RR_COLL_ALL_REDUCE, 256, t, 0), 0);
  assert_memory_equal(t, expect, sizeof(t)); /* the rails_down rule needs an agreed rail down */

  rr_net_view v = {.nodes = 8, .nics = 4, .nic_gbs = 25.0, .lat_us = 3.0, .down_mask = 1u << 3};
  rr_tuner_set_view(c, &v);
  fill(t, 256);
  coll_info(c, RR_COLL_ALL_REDUCE, 256, t, 0);
  int a, p;
  pick(t, &a, &p);
  assert_int_equal(a, RR_ALGO_RING); /* now the rule applies */
  assert_int_equal(p, RR_PROTO_LL);

  /* 1 GiB all-gather: 8 channels over 3 rails would put 4 on NIC 0 (its own
   * two plus NIC 3's); the model finds a count with 1 per rail or balanced. */
  fill_for(RR_COLL_ALL_GATHER, t, (size_t)1 << 30);
  memcpy(expect, t, sizeof(t));
  int ch = coll_info(c, RR_COLL_ALL_GATHER, (size_t)1 << 30, t, 0);
  double t8 = rr_model_time_us(&v, RR_COLL_ALL_GATHER, RR_ALGO_RING, RR_PROTO_SIMPLE, 8, 1u << 30);
  double tch = rr_model_time_us(&v, RR_COLL_ALL_GATHER, RR_ALGO_RING, RR_PROTO_SIMPLE, ch, 1u << 30);
  assert_true(ch >= 1 && ch < 8);
  assert_true(tch < t8);
  assert_true(t[RR_ALGO_RING][RR_PROTO_SIMPLE] > expect[RR_ALGO_RING][RR_PROTO_SIMPLE]);
  assert_true(t[RR_ALGO_NVLS][0] == -1.0f); /* ruled-out cells stay ruled out */

  /* Back to the static view: NCCL's table again. */
  rr_tuner_set_view(c, NULL);
  fill_for(RR_COLL_ALL_GATHER, t, (size_t)1 << 30);
  assert_int_equal(coll_info(c, RR_COLL_ALL_GATHER, (size_t)1 << 30, t, 0), 0);
  assert_memory_equal(t, expect, sizeof(t));
  assert_int_equal(rr_tuner_finalize(c), RR_OK);
}

static void test_net_latency_constants(void **state) {
  (void)state;
  double lat[RR_NUM_ALGOS][RR_NUM_PROTOS] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
  lat[RR_ALGO_NVLS][0] = 1.0;
  rr_tuner_ctx *c = make_ctx(8, 2, lat); /* no rules file: untouched */
  assert_true(lat[RR_ALGO_RING][RR_PROTO_LL] == 2.7);
  rr_tuner_finalize(c);
  write_rules("@net,nics=2,gbps=100,lat_us=1.7\n");
  c = make_ctx(8, 2, lat);
  assert_true(lat[RR_ALGO_RING][RR_PROTO_LL] > 1.69 && lat[RR_ALGO_RING][RR_PROTO_LL] < 1.71);
  assert_true(lat[RR_ALGO_RING][RR_PROTO_SIMPLE] > 12.99 && lat[RR_ALGO_RING][RR_PROTO_SIMPLE] < 13.01);
  assert_true(lat[RR_ALGO_TREE][RR_PROTO_LL] > 3.99 && lat[RR_ALGO_TREE][RR_PROTO_LL] < 4.01);
  assert_true(lat[RR_ALGO_NVLS][0] == 1.0); /* only the network's ring and tree rows */
  rr_tuner_finalize(c);
}

/* RERAIL_TUNER_AGREE_DIR that cannot be used: a warning, the protocol
 * off, the static view (NCCL's choices), never a failure. */
static void test_agreement_dir_problems(void **state) {
  (void)state;
  setenv("RERAIL_TUNER_AGREE_DIR", "/nonexistent/rerail-agree", 1);
  warnings = 0;
  rr_tuner_ctx *c = make_ctx(4, 2, NULL);
  assert_true(warnings > 0);
  assert_non_null(strstr(last_warning, "cannot use RERAIL_TUNER_AGREE_DIR"));
  float t[RR_NUM_ALGOS][RR_NUM_PROTOS], expect[RR_NUM_ALGOS][RR_NUM_PROTOS];
  fill(t, 4096);
  memcpy(expect, t, sizeof(t));
  for (int i = 0; i < 600; i++) assert_int_equal(coll_info(c, RR_COLL_ALL_REDUCE, 4096, t, 0), 0);
  assert_memory_equal(t, expect, sizeof(t));
  rr_tuner_finalize(c);

  /* No communicator id (tuner v2-v4): nothing to key the registers on. */
  setenv("RERAIL_TUNER_AGREE_DIR", "/tmp", 1);
  warnings = 0;
  rr_tuner_init_args a = {.abi_version = 4, .comm_id = 0, .n_ranks = 4, .n_nodes = 2,
                          .nvl_domains = -1, .logger = logger};
  assert_int_equal(rr_tuner_init(&a, &c), RR_OK);
  assert_non_null(c);
  assert_non_null(strstr(last_warning, "needs tuner v5+"));
  rr_tuner_finalize(c);

  /* Bad tuning values fall back to their defaults with a warning. */
  char dir[] = "/tmp/rr-agree-XXXXXX";
  assert_non_null(mkdtemp(dir));
  setenv("RERAIL_TUNER_AGREE_DIR", dir, 1);
  setenv("RERAIL_TUNER_AGREE_LOOK", "0", 1);
  warnings = 0;
  c = make_ctx(1, 1, NULL); /* one rank: its inputs agree with themselves at once */
  assert_non_null(strstr(last_warning, "RERAIL_TUNER_AGREE_LOOK='0'"));
  rr_tuner_stats st;
  rr_tuner_get_stats(c, &st);
  assert_int_equal(st.agreement, 1);
  assert_int_equal(st.inputs_refused, 0);
  assert_int_equal(st.replanning, 1);
  rr_tuner_finalize(c);
  unsetenv("RERAIL_TUNER_AGREE_LOOK");
  unsetenv("RERAIL_TUNER_AGREE_DIR");
  char cmd[64];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}


/* Fingerprints: the rules as parsed (not comments, spacing or line
 * numbers), @net, settings, NCCL and shape each have their own, so that a
 * mismatch can be named. */
static void test_input_fingerprints(void **state) {
  (void)state;
  rr_rules a, b;
  char err[256];
  assert_int_equal(rr_rules_parse("allreduce,0,4K,ring,ll,4,-1,-1\n@net,nics=2,gbps=100,lat_us=2\n",
                                  "a", &a, err, sizeof(err)), RR_OK);
  assert_int_equal(rr_rules_parse("# same rules, said differently\n\n@net,nics=2,gbps=100,lat_us=2\n"
                                  "allreduce,0,4096,ring,ll,4,-1,-1\n", "b", &b, err, sizeof(err)),
                   RR_OK);
  const uint64_t settings[] = {256, 4096, 5};
  double lat[RR_NUM_ALGOS][RR_NUM_PROTOS] = {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}};
  rr_tuner_input_args in = {.rules = &a, .settings = settings, .n_settings = 3, .abi_version = 6,
                            .nccl_version = 23007, .nccl_latencies = (const double(*)[RR_NUM_PROTOS])lat,
                            .n_ranks = 16, .n_nodes = 2, .nvl_domains = 2};
  uint64_t fa[RR_AGREE_INPUT_KINDS], fb[RR_AGREE_INPUT_KINDS];
  rr_tuner_inputs_fingerprint(&in, fa);
  in.rules = &b;
  rr_tuner_inputs_fingerprint(&in, fb);
  assert_memory_equal(fa, fb, sizeof(fa));

  /* Each change moves exactly its own fingerprint. */
  b.rule[0].channels = 8;
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_RULES));
  b.rule[0].channels = 4;
  b.net.lat_us = 2.5;
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_NET));
  b.net.lat_us = 2.0;
  in.rules = NULL; /* a file rejected on one node: no rules there */
  rr_tuner_inputs_fingerprint(&in, fb);
  assert_true(fa[RR_INPUT_RULES] != fb[RR_INPUT_RULES] && fa[RR_INPUT_NET] != fb[RR_INPUT_NET]);
  in.rules = &b;
  const uint64_t other[] = {256, 8192, 5};
  in.settings = other;
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_SETTINGS));
  in.settings = settings;
  in.nccl_version = 22809;
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_NCCL));
  in.nccl_version = 23007;
  lat[RR_ALGO_RING][RR_PROTO_LL] = 2.8; /* NCCL's own constants differ */
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_NCCL));
  lat[RR_ALGO_RING][RR_PROTO_LL] = 2.7;
  in.n_nodes = 4;
  rr_tuner_inputs_fingerprint(&in, fb);
  for (int k = 0; k < RR_AGREE_INPUT_KINDS; k++) assert_true((fa[k] != fb[k]) == (k == RR_INPUT_SHAPE));

  char what[256];
  rr_tuner_inputs_describe((1u << RR_INPUT_RULES) | (1u << RR_INPUT_SHAPE), what, sizeof(what));
  assert_non_null(strstr(what, "rules"));
  assert_non_null(strstr(what, "ranks"));
  assert_null(strstr(what, "@net"));
}

/* Two ranks of one communicator (same id, same directory; threads here)
 * whose inputs differ: both stand aside alike (NCCL's table untouched,
 * NCCL's latencies unedited, NCCL's chunk size), the refusal is counted
 * and names what differed. Then the same with equal inputs: both act. */
typedef struct rank_arg {
  size_t nodes;
  double lat[RR_NUM_ALGOS][RR_NUM_PROTOS];
  rr_tuner_ctx *ctx;
} rank_arg;

static void *rank_init(void *p) {
  rank_arg *r = p;
  rr_tuner_init_args a = {.abi_version = 6, .comm_id = 0x5eedu, .n_ranks = 2, .n_nodes = r->nodes,
                          .nvl_domains = -1, .logger = logger, .net_latencies = r->lat};
  rr_tuner_init(&a, &r->ctx);
  return NULL;
}

static void two_ranks(size_t nodes0, size_t nodes1, rank_arg r[2]) {
  char dir[] = "/tmp/rr-agree-XXXXXX";
  assert_non_null(mkdtemp(dir));
  setenv("RERAIL_TUNER_AGREE_DIR", dir, 1);
  pthread_t t[2];
  for (int i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof(r[i]));
    r[i].nodes = i == 0 ? nodes0 : nodes1;
    r[i].lat[RR_ALGO_RING][RR_PROTO_LL] = 2.7;
    assert_int_equal(pthread_create(&t[i], NULL, rank_init, &r[i]), 0);
  }
  for (int i = 0; i < 2; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  unsetenv("RERAIL_TUNER_AGREE_DIR");
  char cmd[64];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

static void test_inputs_refused_alike(void **state) {
  (void)state;
  write_rules("allreduce,0,-1,ring,ll,3,-1,-1,-1,-1,chunk=64K\n@net,nics=2,gbps=100,lat_us=1.7\n");
  const uint64_t before = rr_tuner_inputs_refusals();
  rank_arg r[2];
  two_ranks(2, 4, r); /* the ranks see different node counts */
  assert_int_equal(rr_tuner_inputs_refusals(), before + 2);
  for (int i = 0; i < 2; i++) {
    assert_non_null(r[i].ctx);
    rr_tuner_stats st;
    rr_tuner_get_stats(r[i].ctx, &st);
    assert_int_equal(st.inputs_refused, 1);
    assert_int_equal(st.inputs_differ, 1u << RR_INPUT_SHAPE);
    assert_int_equal(st.replanning, 0);
    assert_true(r[i].lat[RR_ALGO_RING][RR_PROTO_LL] == 2.7); /* NCCL's, unedited */
    float t[RR_NUM_ALGOS][RR_NUM_PROTOS], expect[RR_NUM_ALGOS][RR_NUM_PROTOS];
    fill(t, 4096);
    memcpy(expect, t, sizeof(t));
    assert_int_equal(coll_info(r[i].ctx, RR_COLL_ALL_REDUCE, 4096, t, 0), 0);
    assert_memory_equal(t, expect, sizeof(t));
    size_t chunk = 131072;
    rr_tuner_chunk_size(r[i].ctx, RR_COLL_ALL_REDUCE, 4096, RR_ALGO_RING, RR_PROTO_LL, 1, &chunk);
    assert_int_equal(chunk, 131072);
    rr_tuner_finalize(r[i].ctx);
  }

  two_ranks(2, 2, r); /* equal inputs: both act */
  assert_int_equal(rr_tuner_inputs_refusals(), before + 2);
  for (int i = 0; i < 2; i++) {
    rr_tuner_stats st;
    rr_tuner_get_stats(r[i].ctx, &st);
    assert_int_equal(st.agreement, 1);
    assert_int_equal(st.inputs_refused, 0);
    assert_int_equal(st.replanning, 1);
    assert_true(r[i].lat[RR_ALGO_RING][RR_PROTO_LL] > 1.69 && r[i].lat[RR_ALGO_RING][RR_PROTO_LL] < 1.71);
    float t[RR_NUM_ALGOS][RR_NUM_PROTOS];
    fill(t, 4096);
    assert_int_equal(coll_info(r[i].ctx, RR_COLL_ALL_REDUCE, 4096, t, 0), 3);
    rr_tuner_finalize(r[i].ctx);
  }
}

static void test_null_and_foreign_contexts(void **state) {
  (void)state;
  rr_tuner_init_args a = {.abi_version = 6, .n_ranks = 2, .n_nodes = 1, .logger = logger};
  assert_int_equal(rr_tuner_init(&a, NULL), RR_OK);
  assert_int_equal(rr_tuner_init(NULL, NULL), RR_OK);
  float t[RR_NUM_ALGOS][RR_NUM_PROTOS];
  fill(t, 10);
  assert_int_equal(coll_info(NULL, RR_COLL_ALL_REDUCE, 10, t, 5), 5);
  assert_int_equal(rr_tuner_finalize(NULL), RR_OK);
  rr_tuner_set_view(NULL, NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_teardown(test_rules_override_table_and_channels, teardown),
      cmocka_unit_test_teardown(test_v2_answers_in_ids, teardown),
      cmocka_unit_test_teardown(test_v2_only_pairs_nccl_2_21_runs, teardown),
      cmocka_unit_test_teardown(test_chunk_rules, teardown),
      cmocka_unit_test_teardown(test_chunk_never_below_grain, teardown),
      cmocka_unit_test_teardown(test_bad_file_keeps_nccl, teardown),
      cmocka_unit_test_teardown(test_model_under_agreed_view, teardown),
      cmocka_unit_test_teardown(test_net_latency_constants, teardown),
      cmocka_unit_test_teardown(test_agreement_dir_problems, teardown),
      cmocka_unit_test_teardown(test_input_fingerprints, teardown),
      cmocka_unit_test_teardown(test_inputs_refused_alike, teardown),
      cmocka_unit_test_teardown(test_null_and_foreign_contexts, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
