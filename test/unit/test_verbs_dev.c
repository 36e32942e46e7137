/* The verbs device layer's decisions, on any host (the real devices are checked inside the
 * Soft-RoCE lab by rxe_lab): RERAIL_IB_HCA parsing and matching as NCCL_IB_HCA does, the
 * RoCE GID choice, port speed codes, sysfs GID text and types read from a fake sysfs tree,
 * libibverbs opened with dlopen (present, absent, not libibverbs at all), and the RERAIL_IB_*
 * parameters. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rr_params.h"
#include "verbs_ports.h"
#include "verbs_lib.h"
#include "verbs_select.h"

/* ---- RERAIL_IB_HCA ----------------------------------------------------------- */

static int sel(const char *spec, const char *dev, int port) {
  rr_hca_filter f;
  rr_hca_filter_parse(spec, &f);
  return rr_hca_filter_match(&f, dev, port);
}

static void test_hca_empty_selects_all(void **state) {
  (void)state;
  assert_true(sel(NULL, "mlx5_0", 1));
  assert_true(sel("", "mlx5_0", 2));
  assert_true(sel("^", "mlx5_0", 1));  /* excluding nothing */
}

static void test_hca_prefix_and_port(void **state) {
  (void)state;
  const char *spec = "mlx5_0:1,mlx5_1";
  assert_true(sel(spec, "mlx5_0", 1));
  assert_false(sel(spec, "mlx5_0", 2));
  assert_true(sel(spec, "mlx5_1", 1));
  assert_true(sel(spec, "mlx5_1", 2));
  assert_false(sel(spec, "mlx5_2", 1));
  /* Prefixes, as NCCL matches them: mlx5_1 also names mlx5_10. */
  assert_true(sel(spec, "mlx5_10", 1));
  assert_true(sel("mlx5", "mlx5_3", 1));
  assert_false(sel("mlx5", "mlx4_0", 1));
}

static void test_hca_exact(void **state) {
  (void)state;
  assert_true(sel("=mlx5_1", "mlx5_1", 1));
  assert_false(sel("=mlx5_1", "mlx5_10", 1));
  assert_false(sel("=mlx5", "mlx5_1", 1));
  assert_true(sel("=mlx5_1:2", "mlx5_1", 2));
  assert_false(sel("=mlx5_1:2", "mlx5_1", 1));
}

static void test_hca_exclude(void **state) {
  (void)state;
  assert_false(sel("^mlx5_0", "mlx5_0", 1));
  assert_true(sel("^mlx5_0", "mlx5_1", 1));
  assert_false(sel("^mlx5_0", "mlx5_00", 1)); /* a prefix exclusion */
  assert_true(sel("^=mlx5_0", "mlx5_00", 1));
  assert_false(sel("^=mlx5_0", "mlx5_0", 1));
  assert_false(sel("^mlx5_0:2", "mlx5_0", 2));
  assert_true(sel("^mlx5_0:2", "mlx5_0", 1));
}

static void test_hca_malformed_entries_skipped(void **state) {
  (void)state;
  rr_hca_filter f;
  /* Bad ports, an empty name, stray commas: each bad entry goes, the good ones stay. */
  assert_int_equal(rr_hca_filter_parse("mlx5_0:x,mlx5_1:0,mlx5_2:256,:1,mlx5_3:1,,mlx5_4:12345", &f),
                   RR_ERR_INVALID);
  assert_int_equal(f.count, 1);
  assert_string_equal(f.entry[0].name, "mlx5_3");
  assert_int_equal(f.entry[0].port, 1);
  assert_false(rr_hca_filter_match(&f, "mlx5_0", 1));
  assert_true(rr_hca_filter_match(&f, "mlx5_3", 1));
  assert_int_equal(rr_hca_filter_parse("mlx5_0,,mlx5_1,", &f), RR_OK);
  assert_int_equal(f.count, 2);
  /* A name too long for any device, and more entries than the filter holds. */
  char spec[4096] = "";
  memset(spec, 'a', 100);
  assert_int_equal(rr_hca_filter_parse(spec, &f), RR_ERR_INVALID);
  assert_int_equal(f.count, 0);
  spec[0] = '\0';
  for (int i = 0; i < RR_HCA_MAX_ENTRIES + 5; i++) {
    char e[16];
    snprintf(e, sizeof e, "%sd%d", i ? "," : "", i);
    strcat(spec, e);
  }
  assert_int_equal(rr_hca_filter_parse(spec, &f), RR_ERR_INVALID);
  assert_int_equal(f.count, RR_HCA_MAX_ENTRIES);
  assert_string_equal(f.entry[RR_HCA_MAX_ENTRIES - 1].name, "d31");
  assert_true(rr_hca_filter_match(&f, "d0", 1));
  assert_false(rr_hca_filter_match(&f, "e0", 1));
}

/* ---- GIDs ------------------------------------------------------------------------ */

static rr_gid_entry gid(const char *text, int type) {
  rr_gid_entry e;
  memset(&e, 0, sizeof e);
  if (text) assert_int_equal(rr_gid_parse_text(text, e.raw), RR_OK);
  e.type = type;
  return e;
}

#define LL "fe80:0000:0000:0000:0055:00ff:fe00:000a"
#define V4 "0000:0000:0000:0000:0000:ffff:0a37:0001"
#define V6 "2001:0db8:0000:0000:0000:0000:0000:0001"

static void test_gid_text(void **state) {
  (void)state;
  uint8_t raw[16];
  char buf[64];
  assert_int_equal(rr_gid_parse_text(V4 "\n", raw), RR_OK);
  assert_true(rr_gid_is_ipv4(raw));
  assert_string_equal(rr_gid_str(raw, buf, sizeof buf), "::ffff:10.55.0.1");
  assert_int_equal(rr_gid_parse_text(LL, raw), RR_OK);
  assert_false(rr_gid_is_ipv4(raw));
  assert_string_equal(rr_gid_str(raw, buf, sizeof buf), "fe80::55:ff:fe00:a");
  assert_int_equal(rr_gid_parse_text("fe80::1", raw), RR_ERR_INVALID);
  assert_int_equal(rr_gid_parse_text("", raw), RR_ERR_INVALID);
  assert_int_equal(rr_gid_parse_text(V4 "0", raw), RR_ERR_INVALID);
  assert_int_equal(rr_gid_parse_text("g000:0000:0000:0000:0000:ffff:0a37:0001", raw), RR_ERR_INVALID);
  assert_int_equal(rr_gid_type_parse("RoCE v2\n"), RR_GID_TYPE_ROCE_V2);
  assert_int_equal(rr_gid_type_parse("IB/RoCE v1\n"), RR_GID_TYPE_IB_ROCE_V1);
  assert_int_equal(rr_gid_type_parse("RoCE v2 "), RR_GID_TYPE_UNKNOWN);
  assert_int_equal(rr_gid_type_parse("RoCE v3"), RR_GID_TYPE_UNKNOWN);
  assert_int_equal(rr_gid_type_parse(NULL), RR_GID_TYPE_UNKNOWN);
}

static void test_gid_choose_defaults(void **state) {
  (void)state;
  /* The usual RoCE table: link-local v1/v2, then the IPv4 address as v1/v2. */
  rr_gid_entry t1[] = {gid(LL, RR_GID_TYPE_IB_ROCE_V1), gid(LL, RR_GID_TYPE_ROCE_V2),
                       gid(V4, RR_GID_TYPE_IB_ROCE_V1), gid(V4, RR_GID_TYPE_ROCE_V2)};
  assert_int_equal(rr_gid_choose(t1, 4, -1), 3);
  /* rxe: link-local then IPv4, both v2. */
  rr_gid_entry t2[] = {gid(LL, RR_GID_TYPE_ROCE_V2), gid(V4, RR_GID_TYPE_ROCE_V2)};
  assert_int_equal(rr_gid_choose(t2, 2, -1), 1);
  /* The address family comes before the version: IPv4 v1 beats a global IPv6 v2. */
  rr_gid_entry t3[] = {gid(LL, RR_GID_TYPE_ROCE_V2), gid(V6, RR_GID_TYPE_ROCE_V2),
                       gid(V4, RR_GID_TYPE_IB_ROCE_V1)};
  assert_int_equal(rr_gid_choose(t3, 3, -1), 2);
  /* No IPv4: a global IPv6 v2 before link-local. */
  assert_int_equal(rr_gid_choose(t3, 2, -1), 1);
  /* Only link-local: it is taken. Empty slots in between are skipped, first index on ties. */
  rr_gid_entry t4[] = {gid(NULL, 0), gid(LL, RR_GID_TYPE_ROCE_V2), gid(LL, RR_GID_TYPE_ROCE_V2)};
  assert_int_equal(rr_gid_choose(t4, 3, -1), 1);
  /* Nothing usable. */
  rr_gid_entry t5[] = {gid(NULL, RR_GID_TYPE_ROCE_V2), gid(NULL, 0)};
  assert_int_equal(rr_gid_choose(t5, 2, -1), -1);
  assert_int_equal(rr_gid_choose(t5, 0, -1), -1);
  /* Unknown types (sysfs unreadable) stay usable, below known ones. */
  rr_gid_entry t6[] = {gid(V4, RR_GID_TYPE_UNKNOWN), gid(V4, RR_GID_TYPE_ROCE_V2)};
  assert_int_equal(rr_gid_choose(t6, 2, -1), 1);
  assert_int_equal(rr_gid_choose(t6, 1, -1), 0);
}

static void test_gid_choose_override(void **state) {
  (void)state;
  rr_gid_entry t[] = {gid(LL, RR_GID_TYPE_ROCE_V2), gid(V4, RR_GID_TYPE_ROCE_V2), gid(NULL, 0)};
  assert_int_equal(rr_gid_choose(t, 3, 0), 0);   /* taken as is */
  assert_int_equal(rr_gid_choose(t, 3, 2), 1);   /* empty slot: chosen instead */
  assert_int_equal(rr_gid_choose(t, 3, 7), 1);   /* beyond the table */
}

static void test_port_speed(void **state) {
  (void)state;
  assert_int_equal(rr_ib_port_speed_mbps(1, 1), 2500);      /* SDR 1x */
  assert_int_equal(rr_ib_port_speed_mbps(32, 2), 100000);   /* EDR 4x */
  assert_int_equal(rr_ib_port_speed_mbps(64, 2), 200000);   /* HDR 4x */
  assert_int_equal(rr_ib_port_speed_mbps(128, 16), 200000); /* NDR 2x */
  assert_int_equal(rr_ib_port_speed_mbps(128, 2), 400000);  /* NDR 4x */
  assert_int_equal(rr_ib_port_speed_mbps(4, 8), 120000);    /* QDR 12x */
  assert_int_equal(rr_ib_port_speed_mbps(3, 2), 0);         /* not a speed code */
  assert_int_equal(rr_ib_port_speed_mbps(32, 3), 0);        /* not a width code */
}

/* ---- fake sysfs --------------------------------------------------------------------- */

static char sysroot[PATH_MAX];

static void put(const char *rel, const char *content) {
  char path[PATH_MAX];
  assert_true(snprintf(path, sizeof path, "%s/%s", sysroot, rel) < (int)sizeof path);
  for (char *p = path + strlen(sysroot) + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
    *p = '/';
  }
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(content, f);
  fclose(f);
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(p);
}

static int sysfs_setup(void **state) {
  (void)state;
  strcpy(sysroot, "/tmp/rr-verbs-sysfs.XXXXXX");
  return mkdtemp(sysroot) ? 0 : -1;
}

static int sysfs_teardown(void **state) {
  (void)state;
  nftw(sysroot, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
  return 0;
}

static void test_sysfs_gid_table(void **state) {
  (void)state;
  const char *p = "class/infiniband/rxe0/ports/1";
  char rel[256];
  snprintf(rel, sizeof rel, "%s/gids/0", p), put(rel, LL "\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/types/0", p), put(rel, "RoCE v2\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/ndevs/0", p), put(rel, "vethA0\n");
  snprintf(rel, sizeof rel, "%s/gids/1", p), put(rel, V4 "\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/types/1", p), put(rel, "RoCE v2\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/ndevs/1", p), put(rel, "vethA0\n");
  /* An empty slot (its type file reads EINVAL in the kernel: absent here), then garbage. */
  snprintf(rel, sizeof rel, "%s/gids/2", p), put(rel, "0000:0000:0000:0000:0000:0000:0000:0000\n");
  snprintf(rel, sizeof rel, "%s/gids/3", p), put(rel, "not a gid\n");
  snprintf(rel, sizeof rel, "%s/gids/4", p), put(rel, V6 "\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/types/4", p), put(rel, "IB/RoCE v1\n");
  snprintf(rel, sizeof rel, "%s/gid_attrs/ndevs/4", p), put(rel, "an-interface-name-too-long\n");

  rr_gid_entry tbl[8];
  char ndevs[8][IF_NAMESIZE];
  int n = rr_verbs_read_gid_table(sysroot, "rxe0", 1, tbl, ndevs, 8);
  assert_int_equal(n, 5);  /* gids/5 does not exist: the table ends there */
  assert_int_equal(tbl[0].type, RR_GID_TYPE_ROCE_V2);
  assert_string_equal(ndevs[1], "vethA0");
  assert_true(rr_gid_is_ipv4(tbl[1].raw));
  assert_int_equal(tbl[2].type, RR_GID_TYPE_UNKNOWN);
  assert_int_equal(tbl[3].type, RR_GID_TYPE_UNKNOWN);
  assert_int_equal(tbl[4].type, RR_GID_TYPE_IB_ROCE_V1);
  assert_string_equal(ndevs[4], "");
  assert_int_equal(rr_gid_choose(tbl, n, -1), 1);
  /* max bounds the read; a device or port that sysfs does not have reads as no table. */
  assert_int_equal(rr_verbs_read_gid_table(sysroot, "rxe0", 1, tbl, NULL, 2), 2);
  assert_int_equal(rr_verbs_read_gid_table(sysroot, "rxe0", 2, tbl, ndevs, 8), 0);
  assert_int_equal(rr_verbs_read_gid_table(sysroot, "mlx5_0", 1, tbl, ndevs, 8), 0);
}

static void test_sysfs_gdr(void **state) {
  (void)state;
  assert_false(rr_verbs_gdr_present(sysroot));
  put("module/nvidia_peermem/version", "1.0\n");
  assert_true(rr_verbs_gdr_present(sysroot));
}

/* ---- libibverbs ---------------------------------------------------------------------- */

static void test_lib_absent(void **state) {
  (void)state;
  rr_ibv_api api;
  const char *why = NULL;
  assert_int_equal(rr_ibv_open("librerail-no-such-ibverbs.so.1", &api, &why), RR_ERR_UNSUPPORTED);
  assert_non_null(why);
  assert_null(api.get_device_list);
  /* A library that is not libibverbs: the first missing entry point is named. */
  assert_int_equal(rr_ibv_open("libc.so.6", &api, &why), RR_ERR_UNSUPPORTED);
  assert_string_equal(why, "ibv_get_device_list");
  assert_null(api.open_device);
  /* No library means no devices, and that is not an error. */
  rr_verbs_port ports[2];
  int n = -1;
  rr_verbs_opts o = {.hca_spec = NULL, .gid_index = -1, .sysfs_root = sysroot};
  assert_int_equal(rr_verbs_discover(NULL, &o, ports, 2, &n), RR_OK);
  assert_int_equal(n, 0);
}

static void test_lib_present(void **state) {
  (void)state;
  /* libibverbs is installed on every machine that builds rerail (libibverbs-dev). */
  rr_ibv_api api;
  const char *why = NULL;
  assert_int_equal(rr_ibv_open("libibverbs.so.1", &api, &why), RR_OK);
  void *const *slot = (void *const *)&api;
  size_t required = offsetof(rr_ibv_api, reg_mr_iova2) / sizeof(void *);
  for (size_t i = 0; i < required; i++) assert_non_null(slot[i]);
  assert_non_null(rr_ibv_load());
  /* Whatever devices this host has (normally none), discovery must not fail. */
  static rr_verbs_port ports[RR_VERBS_MAX_PORTS];
  int n = -1;
  rr_verbs_opts o = {.hca_spec = "", .gid_index = -1, .sysfs_root = "/sys"};
  assert_int_equal(rr_verbs_discover(rr_ibv_load(), &o, ports, RR_VERBS_MAX_PORTS, &n), RR_OK);
  assert_true(n >= 0 && n <= RR_VERBS_MAX_PORTS);
}

/* ---- parameters ------------------------------------------------------------------------ */

static void test_params(void **state) {
  (void)state;
  unsetenv("RERAIL_IB_HCA"), unsetenv("RERAIL_IB_GID_INDEX"), unsetenv("RERAIL_IB_TIMEOUT");
  unsetenv("RERAIL_IB_RETRY_CNT"), unsetenv("RERAIL_IB_QPS_PER_RAIL");
  rr_params_reload();
  const rr_params *p = rr_params_get();
  assert_string_equal(p->ib_hca, "");
  assert_int_equal(p->ib_gid_index, -1);
  assert_int_equal(p->ib_timeout, 16);
  assert_int_equal(p->ib_retry_cnt, 6);
  assert_int_equal(p->ib_qps_per_rail, 1);
  setenv("RERAIL_IB_HCA", "^mlx5_0:1", 1), setenv("RERAIL_IB_GID_INDEX", "3", 1);
  setenv("RERAIL_IB_TIMEOUT", "14", 1), setenv("RERAIL_IB_RETRY_CNT", "3", 1);
  setenv("RERAIL_IB_QPS_PER_RAIL", "4", 1);
  rr_params_reload();
  assert_string_equal(p->ib_hca, "^mlx5_0:1");
  assert_int_equal(p->ib_gid_index, 3);
  assert_int_equal(p->ib_timeout, 14);
  assert_int_equal(p->ib_retry_cnt, 3);
  assert_int_equal(p->ib_qps_per_rail, 4);
  /* Bad values: reported, defaults kept. */
  static const char *const bad_gid[] = {"-1", "1024", "abc", "1x", "", "99999"};
  for (size_t i = 0; i < sizeof bad_gid / sizeof bad_gid[0]; i++) {
    setenv("RERAIL_IB_GID_INDEX", bad_gid[i], 1);
    rr_params_reload();
    assert_int_equal(p->ib_gid_index, -1);
  }
  setenv("RERAIL_IB_TIMEOUT", "32", 1), setenv("RERAIL_IB_RETRY_CNT", "8", 1);
  setenv("RERAIL_IB_QPS_PER_RAIL", "0", 1);
  char longspec[400];
  memset(longspec, 'm', sizeof longspec - 1);
  longspec[sizeof longspec - 1] = '\0';
  setenv("RERAIL_IB_HCA", longspec, 1);
  rr_params_reload();
  assert_int_equal(p->ib_timeout, 16);
  assert_int_equal(p->ib_retry_cnt, 6);
  assert_int_equal(p->ib_qps_per_rail, 1);
  assert_string_equal(p->ib_hca, "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hca_empty_selects_all),
      cmocka_unit_test(test_hca_prefix_and_port),
      cmocka_unit_test(test_hca_exact),
      cmocka_unit_test(test_hca_exclude),
      cmocka_unit_test(test_hca_malformed_entries_skipped),
      cmocka_unit_test(test_gid_text),
      cmocka_unit_test(test_gid_choose_defaults),
      cmocka_unit_test(test_gid_choose_override),
      cmocka_unit_test(test_port_speed),
      cmocka_unit_test(test_sysfs_gid_table),
      cmocka_unit_test(test_sysfs_gdr),
      cmocka_unit_test(test_lib_absent),
      cmocka_unit_test(test_lib_present),
      cmocka_unit_test(test_params),
  };
  return cmocka_run_group_tests(tests, sysfs_setup, sysfs_teardown);
}
