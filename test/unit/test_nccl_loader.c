/* What each stock NCCL release finds in rerail's libraries.
 *
 * NCCL does not negotiate: it dlsym()s a fixed list of table names, newest
 * first, binds the first it finds and reads it through its own declaration
 * of that version. The table below is that list per release, read from
 * NCCL's loaders (2.19-2.25: src/net.cc and src/misc/tuner.cc; 2.26+:
 * src/plugin/net.cc and src/plugin/tuner.cc) at every release tag from
 * v2.19.1-1 to v2.30.7-1; releases whose lists are the same share a row.
 * For each row this test walks the list in NCCL's order over the two
 * libraries as built, checks that the version found is the one the row
 * promises (the README's table says the same), and then uses the table the
 * way that release would: init, devices, getProperties into exactly that
 * version's struct (bytes past it must stay untouched, or NCCL's stack
 * would be overwritten), finalize where the version has one.
 *
 * Usage: test_nccl_loader PATH/libnccl-net-rerail.so PATH/libnccl-tuner-rerail.so */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl/abi_layout_checks.h"

static const char *net_path, *tuner_path;
static void *net_dl, *tuner_dl;

/* ---- What NCCL looks up, per release ------------------------------------ */

#define MAX_TRIES 8
typedef struct nccl_release {
  const char *releases;
  int net_order[MAX_TRIES];    /* ncclNetPlugin_vN tried, first to last (0 ends) */
  int tuner_order[MAX_TRIES];  /* ncclTunerPlugin_vN tried, first to last */
  /* 2.21+: with no tuner library found, NCCL looks for the tuner in the net
   * plugin's library. 2.19/2.20 open only NCCL_TUNER_PLUGIN, as a file. */
  int tuner_in_net_lib;
  int net_bound;               /* the version rerail is bound as (0: not loaded) */
  int tuner_bound;
} nccl_release;

static const nccl_release releases[] = {
    {"2.19.1-2.19.4", {7, 6, 5}, {1}, 0, 7, 0},
    {"2.20.3-2.20.5", {8, 7, 6, 5}, {1}, 0, 8, 0},
    {"2.21.5", {8, 7, 6, 5}, {2}, 1, 8, 2},
    {"2.22.3-2.23.4", {8, 7, 6, 5}, {3, 2}, 1, 8, 3},
    {"2.24.3-2.25.1", {9, 8, 7, 6, 5}, {4, 3, 2}, 1, 9, 4},
    {"2.26.2-2.27.7", {10, 9, 8, 7, 6}, {4, 3, 2}, 1, 10, 4},
    {"2.28.3-2.29.7", {11, 10, 9, 8, 7, 6}, {5, 4, 3, 2}, 1, 11, 5},
    {"2.30.3-2.30.7", {12, 11, 10, 9, 8, 7, 6}, {6, 5, 4, 3, 2}, 1, 12, 6},
};
#define N_RELEASES (sizeof releases / sizeof releases[0])

/* The first table of the list that lib exports, as NCCL walks it. */
static int first_found(void *lib, const char *prefix, const int *order, const void **table) {
  *table = NULL;
  for (int i = 0; i < MAX_TRIES && order[i]; i++) {
    char sym[40];
    snprintf(sym, sizeof sym, "%s%d", prefix, order[i]);
    const void *t = dlsym(lib, sym);
    if (t != NULL) {
      *table = t;
      return order[i];
    }
  }
  return 0;
}

/* ---- What NCCL hands the plugin ----------------------------------------- */

static int warnings;
static void logger(nccl_log_level_t level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...) {
  (void)flags, (void)file, (void)line;
  if (level != NCCL_LEVEL_WARN) return;
  warnings++;
  /* shown, so that a failure says why */
  va_list ap;
  va_start(ap, fmt);
  fputs("plugin WARN: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static nccl_result_t profiler(void **event_handle, int type, void *parent, int64_t plugin_id,
                              void *ext_data) {
  (void)type, (void)parent, (void)plugin_id, (void)ext_data;
  if (event_handle) *event_handle = NULL;
  return NCCL_RESULT_SUCCESS;
}

/* ---- Net ----------------------------------------------------------------- */

/* The entries NCCL calls without checking for NULL (every version has
 * them in the same places). getDeviceMr, irecvConsumed, regMrDmaBuf and
 * makeVDevice are checked by NCCL before use. */
#define REQUIRE_NET_ENTRIES(t)       \
  do {                               \
    assert_non_null((t)->init);      \
    assert_non_null((t)->devices);   \
    assert_non_null((t)->get_properties); \
    assert_non_null((t)->listen);    \
    assert_non_null((t)->connect);   \
    assert_non_null((t)->accept);    \
    assert_non_null((t)->reg_mr);    \
    assert_non_null((t)->dereg_mr);  \
    assert_non_null((t)->isend);     \
    assert_non_null((t)->irecv);     \
    assert_non_null((t)->iflush);    \
    assert_non_null((t)->test);      \
    assert_non_null((t)->close_send); \
    assert_non_null((t)->close_recv); \
    assert_non_null((t)->close_listen); \
  } while (0)

#define GUARD 0xA5
#define GUARD_BYTES 64

/* getProperties into a struct of exactly the version's size, followed by
 * guard bytes: a plugin writing a newer (larger) layout shows up here. */
#define PROPS_BOX(T) \
  struct {           \
    T p;             \
    unsigned char guard[GUARD_BYTES]; \
  }

static void assert_guard_intact(const unsigned char *g) {
  for (int i = 0; i < GUARD_BYTES; i++) assert_int_equal(g[i], GUARD);
}

/* Fields every version carries, with the values NCCL relies on. */
#define CHECK_PROPS_V7(p)                                         \
  do {                                                            \
    assert_non_null((p).name);                                    \
    assert_true((p).name[0] != '\0');                             \
    assert_true((p).ptr_support & NCCL_PTR_HOST);                 \
    assert_true((p).speed > 0);                                   \
    assert_true((p).max_comms > 0);                               \
    /* NCCL groups at most 8 receives in one irecv */             \
    assert_in_range((p).max_recvs, 1, 8);                         \
    /* HOST: no device offload, so NCCL never checks a version */ \
    assert_int_equal((p).net_device_type, NCCL_NET_DEVICE_HOST);  \
  } while (0)

/* v9+: one physical device per NCCL device, and size limits NCCL accepts
 * (2.24+ refuses a plugin above NCCL_NET_MAX_SIZE_BYTES at setup). */
#define CHECK_PROPS_V9(p, dev)                                    \
  do {                                                            \
    CHECK_PROPS_V7(p);                                            \
    assert_in_range((p).reg_is_global, 0, 1);                     \
    assert_in_range((p).force_flush, 0, 1);                       \
    assert_int_equal((p).vprops.ndevs, 1);                        \
    assert_int_equal((p).vprops.devs[0], (dev));                  \
    assert_in_range((p).max_p2p_bytes, 1, NCCL_NET_MAX_SIZE_BYTES);  \
    assert_in_range((p).max_coll_bytes, 1, NCCL_NET_MAX_SIZE_BYTES); \
  } while (0)

#define GET_PROPS(t, dev, box)                                      \
  do {                                                              \
    memset(&(box), GUARD, sizeof(box));                             \
    assert_int_equal((t)->get_properties((dev), &(box).p), NCCL_RESULT_SUCCESS); \
    assert_guard_intact((box).guard);                               \
  } while (0)

/* The device count through the version's devices(); lo at least: the test
 * pools it. */
#define COUNT_DEVICES(t, ndev)                                      \
  do {                                                              \
    assert_int_equal((t)->devices(&(ndev)), NCCL_RESULT_SUCCESS);   \
    assert_true((ndev) >= 1);                                       \
  } while (0)

static void check_net(int version, const void *table) {
  assert_string_equal(*(const char *const *)table, "rerail"); /* NCCL_NET=rerail selects it */
  int ndev = 0;
  switch (version) {
  case 7: {
    const nccl_net_v7_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_int_equal(t->init(logger), NCCL_RESULT_SUCCESS);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v7_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V7(box.p);
    }
    break;
  }
  case 8: {
    const nccl_net_v8_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_int_equal(t->init(logger), NCCL_RESULT_SUCCESS);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v8_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V7(box.p);
      assert_in_range(box.p.reg_is_global, 0, 1);
    }
    break;
  }
  case 9: {
    const nccl_net_v9_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_int_equal(t->init(logger), NCCL_RESULT_SUCCESS);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v9_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V9(box.p, d);
    }
    break;
  }
  case 10: {
    const nccl_net_v10_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_int_equal(t->init(logger, profiler), NCCL_RESULT_SUCCESS);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v10_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V9(box.p, d);
    }
    break;
  }
  case 11: {
    const nccl_net_v11_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_non_null(t->finalize);
    void *ctx = NULL;
    nccl_net_comm_config_v11_t cfg = {.traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    assert_int_equal(t->init(&ctx, 0x1111, &cfg, logger, profiler), NCCL_RESULT_SUCCESS);
    assert_non_null(ctx);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v11_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V9(box.p, d);
      assert_true(box.p.max_multi_request_size >= 1);
    }
    assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  case 12: {
    const nccl_net_v12_t *t = table;
    REQUIRE_NET_ENTRIES(t);
    assert_non_null(t->finalize);
    void *ctx = NULL;
    nccl_net_comm_config_v12_t cfg = {.traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    assert_int_equal(t->init(&ctx, 0x1212, &cfg, logger, profiler), NCCL_RESULT_SUCCESS);
    assert_non_null(ctx);
    COUNT_DEVICES(t, ndev);
    for (int d = 0; d < ndev; d++) {
      PROPS_BOX(nccl_net_props_v12_t) box;
      GET_PROPS(t, d, box);
      CHECK_PROPS_V9(box.p, d);
      assert_true(box.p.max_multi_request_size >= 1);
      /* a rail or plane id, or NCCL_NET_ID_UNDEF: never the guard's junk */
      assert_true(box.p.rail_id >= NCCL_NET_ID_UNDEF);
      assert_true(box.p.plane_id >= NCCL_NET_ID_UNDEF);
    }
    assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  default:
    fail_msg("no check written for net v%d", version);
  }
}

/* ---- Tuner --------------------------------------------------------------- */

#define TUNER_INIT_V2(t, ctx) (t)->init(8, 2, logger, &(ctx))
#define TUNER_INIT_V5(t, ctx, id)                                               \
  do {                                                                          \
    nccl_nvl_domain_info_v5_t nvl = {.n_domains = 2, .min_ranks_per_domain = 4, \
                                     .max_ranks_per_domain = 4};                \
    static nccl_tuner_constants_v5_t constants;                                 \
    assert_int_equal((t)->init(&(ctx), (id), 8, 2, logger, &nvl, &constants),   \
                     NCCL_RESULT_SUCCESS);                                      \
  } while (0)

static void check_tuner(int version, const void *table) {
  assert_string_equal(*(const char *const *)table, "rerail");
  void *ctx = NULL;
  switch (version) {
  case 2: {
    const nccl_tuner_v2_t *t = table;
    assert_non_null(t->get_coll_info);
    assert_int_equal(TUNER_INIT_V2(t, ctx), NCCL_RESULT_SUCCESS);
    assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  case 3: {
    const nccl_tuner_v3_t *t = table;
    assert_non_null(t->get_coll_info);
    assert_int_equal(TUNER_INIT_V2(t, ctx), NCCL_RESULT_SUCCESS);
    assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  case 4: {
    const nccl_tuner_v4_t *t = table;
    assert_non_null(t->get_coll_info);
    assert_int_equal(TUNER_INIT_V2(t, ctx), NCCL_RESULT_SUCCESS);
    assert_int_equal(t->destroy(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  case 5: {
    const nccl_tuner_v5_t *t = table;
    assert_non_null(t->get_coll_info);
    TUNER_INIT_V5(t, ctx, 0x55);
    assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  case 6: {
    const nccl_tuner_v6_t *t = table;
    assert_non_null(t->get_coll_info);
    TUNER_INIT_V5(t, ctx, 0x66);
    assert_int_equal(t->finalize(ctx), NCCL_RESULT_SUCCESS);
    break;
  }
  default:
    fail_msg("no check written for tuner v%d", version);
  }
}

/* ---- Per release ---------------------------------------------------------- */

static void release_binds_what_it_promises(void **state) {
  const nccl_release *r = *state;
  const void *table;
  int warn_before = warnings;

  int net = first_found(net_dl, "ncclNetPlugin_v", r->net_order, &table);
  assert_int_equal(net, r->net_bound);
  if (net) check_net(net, table);

  /* NCCL_TUNER_PLUGIN names the tuner library. */
  int tuner = first_found(tuner_dl, "ncclTunerPlugin_v", r->tuner_order, &table);
  assert_int_equal(tuner, r->tuner_bound);
  if (tuner) check_tuner(tuner, table);

  /* Only NCCL_NET_PLUGIN set: where 2.21+ looks, the same version. */
  if (r->tuner_in_net_lib) {
    tuner = first_found(net_dl, "ncclTunerPlugin_v", r->tuner_order, &table);
    assert_int_equal(tuner, r->tuner_bound);
    if (tuner) check_tuner(tuner, table);
  }
  assert_int_equal(warnings, warn_before); /* none of this is worth a warning */
}

/* Every table rerail exports is bound by some release in the table above:
 * an export no row reaches is either dead or missing from the README. */
static void every_export_has_a_release(void **state) {
  (void)state;
  for (int v = 1; v <= 20; v++) {
    char sym[40];
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    int exported = dlsym(net_dl, sym) != NULL, bound = 0;
    for (size_t i = 0; i < N_RELEASES; i++) bound |= releases[i].net_bound == v;
    if (exported != bound) fail_msg("%s: exported %d, bound by a release %d", sym, exported, bound);
    snprintf(sym, sizeof sym, "ncclTunerPlugin_v%d", v);
    exported = dlsym(tuner_dl, sym) != NULL;
    bound = 0;
    for (size_t i = 0; i < N_RELEASES; i++) bound |= releases[i].tuner_bound == v;
    if (exported != bound) fail_msg("%s: exported %d, bound by a release %d", sym, exported, bound);
  }
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBNCCL-NET-RERAIL LIBNCCL-TUNER-RERAIL\n", argv[0]);
    return 2;
  }
  net_path = argv[1];
  tuner_path = argv[2];
  /* Pool loopback only, keep a health table of our own, and no rules file:
   * the result must not depend on this host's NICs or on other tests. */
  const char *tmp = getenv("TMPDIR");
  char dir[512], health[600];
  snprintf(dir, sizeof dir, "%s/rerail-loader-XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  snprintf(health, sizeof health, "%s/health", dir);
  setenv("RERAIL_SOCKET_IFNAME", "lo", 1);
  setenv("RERAIL_TRANSPORT", "tcp", 1);
  setenv("RERAIL_HEALTH_PATH", health, 1);
  unsetenv("RERAIL_TUNER_CONFIG");
  unsetenv("RERAIL_TELEMETRY_DIR");

  /* NCCL's flags: everything resolved now, nothing leaked into the process. */
  net_dl = dlopen(net_path, RTLD_NOW | RTLD_LOCAL);
  tuner_dl = dlopen(tuner_path, RTLD_NOW | RTLD_LOCAL);
  if (net_dl == NULL || tuner_dl == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }

  struct CMUnitTest tests[N_RELEASES + 1];
  for (size_t i = 0; i < N_RELEASES; i++)
    tests[i] = (struct CMUnitTest){.name = releases[i].releases,
                                   .test_func = release_binds_what_it_promises,
                                   .initial_state = (void *)&releases[i]};
  tests[N_RELEASES] = (struct CMUnitTest){.name = "every_export_has_a_release",
                                          .test_func = every_export_has_a_release};
  int failed = _cmocka_run_group_tests("nccl_loader", tests, N_RELEASES + 1, NULL, NULL);
  unlink(health);
  rmdir(dir);
  return failed;
}
