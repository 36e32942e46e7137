/* The tuner library as NCCL sees it: dlopen()ed by path, each exported
 * ncclTunerPlugin_vN bound and driven with NCCL's arguments. rerail's tuner
 * must leave every NCCL choice as it is (cost table, channel count, chunk
 * size, constants) when it has no rules file, keep one context per
 * communicator, answer success to anything (an error from getCollInfo fails
 * the collective) without touching NCCL's choice, and cost well under a
 * microsecond per collective.
 *
 * Usage: test_tuner PATH/libnccl-tuner-rerail.so  (or RERAIL_TUNER_LIB=PATH)
 *        test_tuner PATH/libnccl-net-rerail.so --net-lib */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "nccl/abi_layout_checks.h"
#include "nccl/tuner_v2.h"
#include "nccl/tuner_v3.h"
#include "nccl/tuner_v4.h"
#include "nccl/tuner_v5.h"
#include "nccl/tuner_v6.h"

static const char *lib_path;
static void *lib;
static int in_net_lib; /* --net-lib: the tuner inside libnccl-net-rerail.so */

/* ---- A logger that remembers what the plugin said ----------------------- */

static char log_text[8192];
static size_t log_len;
static int log_warnings;

static void capture_logger(nccl_log_level_t level, unsigned long flags, const char *file,
                           int line, const char *fmt, ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level == NCCL_LEVEL_WARN) log_warnings++;
  if (log_len + 2 >= sizeof(log_text)) return;
  size_t room = sizeof(log_text) - log_len - 1;  /* keeps a byte for the newline */
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(log_text + log_len, room, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  log_len += (size_t)n < room ? (size_t)n : room - 1;
  log_text[log_len++] = '\n';
  log_text[log_len] = '\0';
}

static void log_reset(void) {
  log_len = 0;
  log_text[0] = '\0';
  log_warnings = 0;
}

/* ---- NCCL-like inputs ---------------------------------------------------- */

/* A cost table as NCCL 2.30 builds it for a 2-node all-reduce: estimated
 * microseconds per algorithm x protocol, NCCL_ALGO_PROTO_IGNORE where the
 * pair cannot run (no CollNet, no NVLS, PAT only for AG/RS). */
static void fill_cost_table(float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS], size_t nbytes) {
  const float scale = (float)nbytes / (1024.0f * 1024.0f);
  const float base[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS] = {
      [NCCL_ALGO_TREE] = {14.6f, 17.9f, 31.2f},
      [NCCL_ALGO_RING] = {11.8f, 15.4f, 28.7f},
  };
  for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
    for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
      table[a][p] = base[a][p] > 0.0f ? base[a][p] + scale * (float)(a + 1) * (float)(3 - p)
                                      : NCCL_ALGO_PROTO_IGNORE;
}

static const nccl_func_t colls[] = {NCCL_FUNC_BROADCAST, NCCL_FUNC_REDUCE, NCCL_FUNC_ALL_GATHER,
                                    NCCL_FUNC_REDUCE_SCATTER, NCCL_FUNC_ALL_REDUCE};
static const size_t sizes[] = {0, 8, 4096, 1 << 20, (size_t)1 << 30};

static void *bind(const char *symbol) {
  void *table = dlsym(lib, symbol);
  if (table == NULL) fail_msg("%s not exported by %s: %s", symbol, lib_path, dlerror());
  return table;
}

/* Drive one v3+ getCollInfo signature over every collective and size, and
 * check that nothing NCCL proposed changed. */
typedef nccl_result_t (*coll_info_v4_fn)(void *, nccl_func_t, size_t, int, float **, int, int, int,
                                         int *);

static void check_table_untouched_v4(coll_info_v4_fn get, void *ctx) {
  for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++) {
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
      float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
      float expect[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
      fill_cost_table(table, sizes[s]);
      memcpy(expect, table, sizeof(table));
      for (int preset = 0; preset <= 24; preset += 24) {  /* NCCL enters 0; any value must stay */
        int n_channels = preset;
        assert_int_equal(get(ctx, colls[c], sizes[s], 1, (float **)table, NCCL_NUM_ALGORITHMS,
                             NCCL_NUM_PROTOCOLS, (int)(s & 1), &n_channels),
                         NCCL_RESULT_SUCCESS);
        assert_memory_equal(table, expect, sizeof(table));
        assert_int_equal(n_channels, preset);
      }
    }
  }
}

/* ---- Tests -------------------------------------------------------------- */

static void test_exports(void **state) {
  (void)state;
  const nccl_tuner_v2_t *v2 = bind("ncclTunerPlugin_v2");
  const nccl_tuner_v3_t *v3 = bind("ncclTunerPlugin_v3");
  const nccl_tuner_v4_t *v4 = bind("ncclTunerPlugin_v4");
  const nccl_tuner_v5_t *v5 = bind("ncclTunerPlugin_v5");
  const nccl_tuner_v6_t *v6 = bind("ncclTunerPlugin_v6");
  assert_string_equal(v2->name, "rerail");
  assert_string_equal(v3->name, "rerail");
  assert_string_equal(v4->name, "rerail");
  assert_string_equal(v5->name, "rerail");
  assert_string_equal(v6->name, "rerail");
  /* NCCL calls these without checking for NULL. */
  const int present[] = {v2->init != NULL, v2->get_coll_info != NULL, v2->destroy != NULL,
                         v3->init != NULL, v3->get_coll_info != NULL, v3->destroy != NULL,
                         v4->init != NULL, v4->get_coll_info != NULL, v4->destroy != NULL,
                         v5->init != NULL, v5->get_coll_info != NULL, v5->finalize != NULL,
                         v6->init != NULL, v6->get_coll_info != NULL, v6->finalize != NULL};
  for (size_t i = 0; i < sizeof(present) / sizeof(present[0]); i++) assert_true(present[i]);
  assert_true(v6->get_chunk_size != NULL);
  if (in_net_lib) {
    /* One library serves both: NCCL_NET_PLUGIN=rerail finds the tuner here. */
    assert_non_null(dlsym(lib, "ncclNetPlugin_v12"));
  } else {
    /* A tuner library must not look like a net plugin to NCCL. */
    assert_null(dlsym(lib, "ncclNetPlugin_v12"));
  }
}

static void test_v2_leaves_choice_to_nccl(void **state) {
  (void)state;
  const nccl_tuner_v2_t *t = bind("ncclTunerPlugin_v2");
  void *ctx = NULL;
  log_reset();
  assert_int_equal(t->init(16, 2, capture_logger, &ctx), NCCL_RESULT_SUCCESS);
  assert_non_null(ctx);
  assert_non_null(strstr(log_text, "ncclTunerPlugin_v2"));
  assert_non_null(strstr(log_text, "nRanks 16 nNodes 2"));
  for (size_t c = 0; c < sizeof(colls) / sizeof(colls[0]); c++) {
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
      int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF, n_channels = 0;
      assert_int_equal(
          t->get_coll_info(ctx, colls[c], sizes[s], 0, 1, 1, &algo, &proto, &n_channels),
          NCCL_RESULT_SUCCESS);
      assert_int_equal(algo, NCCL_ALGO_UNDEF);
      assert_int_equal(proto, NCCL_PROTO_UNDEF);
      assert_int_equal(n_channels, 0);
    }
  }
  assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
  assert_int_equal(log_warnings, 0);
}

static void test_v3_table_untouched(void **state) {
  (void)state;
  const nccl_tuner_v3_t *t = bind("ncclTunerPlugin_v3");
  void *ctx = NULL;
  assert_int_equal(t->init(8, 1, capture_logger, &ctx), NCCL_RESULT_SUCCESS);
  for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    float expect[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    fill_cost_table(table, sizes[s]);
    memcpy(expect, table, sizeof(table));
    int n_channels = 0;
    assert_int_equal(t->get_coll_info(ctx, NCCL_FUNC_ALL_REDUCE, sizes[s], 1, (float **)table,
                                      NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, &n_channels),
                     NCCL_RESULT_SUCCESS);
    assert_memory_equal(table, expect, sizeof(table));
    assert_int_equal(n_channels, 0);
  }
  assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
}

static void test_v4_table_untouched(void **state) {
  (void)state;
  const nccl_tuner_v4_t *t = bind("ncclTunerPlugin_v4");
  void *ctx = NULL;
  assert_int_equal(t->init(8, 2, capture_logger, &ctx), NCCL_RESULT_SUCCESS);
  check_table_untouched_v4(t->get_coll_info, ctx);
  assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
}

static void fill_constants(nccl_tuner_constants_v5_t *k) {
  double *d = (double *)k;
  for (size_t i = 0; i < sizeof(*k) / sizeof(double); i++) d[i] = 0.5 + (double)i;
}

static void test_v5_leaves_everything(void **state) {
  (void)state;
  const nccl_tuner_v5_t *t = bind("ncclTunerPlugin_v5");
  nccl_nvl_domain_info_v5_t nvl = {2, 8, 8};
  nccl_tuner_constants_v5_t k, k_expect;
  fill_constants(&k);
  memcpy(&k_expect, &k, sizeof(k));
  void *ctx = NULL;
  log_reset();
  assert_int_equal(t->init(&ctx, 0xfeedbeefcafe0001ull, 16, 2, capture_logger, &nvl, &k),
                   NCCL_RESULT_SUCCESS);
  assert_non_null(strstr(log_text, "ncclTunerPlugin_v5"));
  assert_non_null(strstr(log_text, "feedbeefcafe0001"));
  assert_memory_equal(&k, &k_expect, sizeof(k));
  check_table_untouched_v4(t->get_coll_info, ctx);
  assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
}

static void test_v6_leaves_everything(void **state) {
  (void)state;
  const nccl_tuner_v6_t *t = bind("ncclTunerPlugin_v6");
  nccl_nvl_domain_info_v6_t nvl = {1, 4, 4};
  nccl_tuner_constants_v6_t k, k_expect;
  fill_constants(&k);
  memcpy(&k_expect, &k, sizeof(k));
  void *ctx = NULL;
  log_reset();
  assert_int_equal(t->init(&ctx, 42, 4, 1, capture_logger, &nvl, &k), NCCL_RESULT_SUCCESS);
  assert_non_null(strstr(log_text, "ncclTunerPlugin_v6"));
  assert_non_null(strstr(log_text, "nRanks 4 nNodes 1"));
  assert_memory_equal(&k, &k_expect, sizeof(k));
  check_table_untouched_v4(t->get_coll_info, ctx);
  const size_t proposals[] = {0, 4096, 131072, (size_t)1 << 21};
  for (size_t i = 0; i < sizeof(proposals) / sizeof(proposals[0]); i++) {
    size_t chunk = proposals[i];
    assert_int_equal(t->get_chunk_size(ctx, NCCL_FUNC_ALL_GATHER, (size_t)1 << 26, NCCL_ALGO_RING,
                                       NCCL_PROTO_SIMPLE, 16, &chunk),
                     NCCL_RESULT_SUCCESS);
    assert_int_equal(chunk, proposals[i]);
  }
  assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
  assert_int_equal(log_warnings, 0);
}

/* One context per communicator: several live at once, each finalized on
 * its own, in any order. */
static void test_contexts_per_communicator(void **state) {
  (void)state;
  const nccl_tuner_v6_t *t = bind("ncclTunerPlugin_v6");
  enum { N = 4 };
  void *ctx[N] = {0};
  for (int i = 0; i < N; i++) {
    assert_int_equal(t->init(&ctx[i], (uint64_t)i + 100, 8, 2, capture_logger, NULL, NULL),
                     NCCL_RESULT_SUCCESS);
    for (int j = 0; j < i; j++) assert_ptr_not_equal(ctx[i], ctx[j]);
  }
  for (int i = 0; i < N; i++) check_table_untouched_v4(t->get_coll_info, ctx[(i * 3) % N]);
  assert_int_equal(t->finalize(ctx[2]), NCCL_RESULT_SUCCESS);
  assert_int_equal(t->finalize(ctx[0]), NCCL_RESULT_SUCCESS);
  check_table_untouched_v4(t->get_coll_info, ctx[3]);
  assert_int_equal(t->finalize(ctx[3]), NCCL_RESULT_SUCCESS);
  assert_int_equal(t->finalize(ctx[1]), NCCL_RESULT_SUCCESS);
}

static void test_bad_input_never_fails(void **state) {
  (void)state;
  const nccl_tuner_v2_t *t2 = bind("ncclTunerPlugin_v2");
  const nccl_tuner_v4_t *t4 = bind("ncclTunerPlugin_v4");
  const nccl_tuner_v6_t *t6 = bind("ncclTunerPlugin_v6");
  float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  fill_cost_table(table, 4096);
  int algo = NCCL_ALGO_UNDEF, proto = NCCL_PROTO_UNDEF, n_channels = 7;
  size_t chunk = 65536;

  log_reset();
  assert_int_equal(t2->init(2, 1, capture_logger, NULL), NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->init(NULL, 1, 2, 1, capture_logger, NULL, NULL), NCCL_RESULT_SUCCESS);
  assert_true(log_warnings > 0);

  void *ctx2 = NULL, *ctx6 = NULL;
  assert_int_equal(t2->init(2, 1, capture_logger, &ctx2), NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->init(&ctx6, 9, 2, 1, capture_logger, NULL, NULL), NCCL_RESULT_SUCCESS);

  assert_int_equal(t4->get_coll_info(NULL, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table,
                                         NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_coll_info(ctx6, NCCL_FUNC_ALL_REDUCE, 4096, 1, NULL,
                                         NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_coll_info(ctx6, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table, 0,
                                         NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_coll_info(ctx6, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table,
                                         NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, NULL),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t2->get_coll_info(ctx2, NCCL_FUNC_ALL_REDUCE, 4096, 0, 0, 1, NULL, &proto,
                                         &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t2->get_coll_info(ctx2, NCCL_FUNC_ALL_REDUCE, 4096, 0, 0, 1, &algo, &proto,
                                         NULL),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_chunk_size(ctx6, NCCL_FUNC_ALL_REDUCE, 4096, NCCL_ALGO_RING,
                                          NCCL_PROTO_LL, 2, NULL),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_chunk_size(NULL, NCCL_FUNC_ALL_REDUCE, 4096, NCCL_ALGO_RING,
                                          NCCL_PROTO_LL, 2, &chunk),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->finalize(NULL), NCCL_RESULT_SUCCESS);
  assert_int_equal(t2->destroy(NULL), NCCL_RESULT_SUCCESS);
  /* A NULL context (what init hands NCCL when it cannot make one) keeps
   * NCCL's choice silently. */
  assert_int_equal(t4->get_coll_info(NULL, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table,
                                     NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  /* A pointer that is not a tuner context (NCCL's net context, a freed one). */
  uint64_t junk[64] = {0};
  assert_int_equal(t4->get_coll_info(junk, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table,
                                     NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_coll_info(ctx6, NCCL_FUNC_ALL_REDUCE, 4096, 1, (float **)table, 1000000,
                                     NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->get_coll_info(ctx6, (nccl_func_t)77, 4096, 1, (float **)table,
                                     NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels),
                   NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->finalize(junk), NCCL_RESULT_SUCCESS);
  /* Nothing was touched, and the problem was said (once). */
  float expect[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  fill_cost_table(expect, 4096);
  assert_memory_equal(table, expect, sizeof(table));
  assert_true(log_warnings > 0);
  assert_int_equal(algo, NCCL_ALGO_UNDEF);
  assert_int_equal(proto, NCCL_PROTO_UNDEF);
  assert_int_equal(n_channels, 7);
  assert_int_equal(chunk, 65536);

  assert_int_equal(t2->destroy(ctx2), NCCL_RESULT_SUCCESS);
  assert_int_equal(t6->finalize(ctx6), NCCL_RESULT_SUCCESS);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* getCollInfo runs once per collective on the enqueue thread. */
static void test_coll_info_is_cheap(void **state) {
  (void)state;
  const nccl_tuner_v6_t *t = bind("ncclTunerPlugin_v6");
  void *ctx = NULL;
  assert_int_equal(t->init(&ctx, 7, 16, 2, capture_logger, NULL, NULL), NCCL_RESULT_SUCCESS);
  float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  fill_cost_table(table, 1 << 20);
  enum { CALLS = 1000000 };
  nccl_result_t worst = NCCL_RESULT_SUCCESS;
  double start = now_ns();
  for (int i = 0; i < CALLS; i++) {
    int n_channels = 0;
    nccl_result_t r = t->get_coll_info(ctx, NCCL_FUNC_ALL_REDUCE, (size_t)i, 1, (float **)table,
                                       NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, 0, &n_channels);
    if (r != NCCL_RESULT_SUCCESS) worst = r;
  }
  double per_call = (now_ns() - start) / CALLS;
  print_message("getCollInfo: %.1f ns per call\n", per_call);
  assert_int_equal(worst, NCCL_RESULT_SUCCESS);
  assert_true(per_call < 1000.0);
  assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
}

static int open_lib(void **state) {
  (void)state;
  lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "cannot dlopen %s: %s\n", lib_path, dlerror());
    return -1;
  }
  return 0;
}

static int close_lib(void **state) {
  (void)state;
  return lib != NULL ? dlclose(lib) : 0;
}

int main(int argc, char **argv) {
  lib_path = argc > 1 ? argv[1] : getenv("RERAIL_TUNER_LIB");
  in_net_lib = argc > 2 && strcmp(argv[2], "--net-lib") == 0;
  if (lib_path == NULL || lib_path[0] == '\0') {
    fprintf(stderr, "usage: %s PATH/libnccl-tuner-rerail.so (or set RERAIL_TUNER_LIB)\n", argv[0]);
    return 77;  /* skipped: nothing to test */
  }
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_exports),
      cmocka_unit_test(test_v2_leaves_choice_to_nccl),
      cmocka_unit_test(test_v3_table_untouched),
      cmocka_unit_test(test_v4_table_untouched),
      cmocka_unit_test(test_v5_leaves_everything),
      cmocka_unit_test(test_v6_leaves_everything),
      cmocka_unit_test(test_contexts_per_communicator),
      cmocka_unit_test(test_bad_input_never_fails),
      cmocka_unit_test(test_coll_info_is_cheap),
  };
  return cmocka_run_group_tests(tests, open_lib, close_lib);
}
