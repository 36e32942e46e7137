/* Shared by the health table's unit tests: a fresh directory per test with
 * RERAIL_HEALTH_PATH in it, and a logger that counts the table's own
 * warnings (rr_health's event log warns too) and keeps the last one, so a
 * test can check that a refusal was reported, and reported once. */
#ifndef RERAIL_TEST_HEALTH_TEST_ENV_H
#define RERAIL_TEST_HEALTH_TEST_ENV_H
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "rr_health_table.h"
#include "rr_health_table_internal.h"
#include "rr_log.h"

static char dir[PATH_MAX];
static char path[PATH_MAX + 32];

static int warns;
static char last_warn[1024];

static void count_logger(int level, unsigned long flags, const char *file, int line, const char *fmt,
                         ...) {
  (void)flags, (void)file, (void)line;
  if (level != RR_LOG_WARN) return;
  char msg[sizeof last_warn];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!strstr(msg, "health table ")) return;
  memcpy(last_warn, msg, sizeof msg);
  warns++;
  if (getenv("HT_TEST_VERBOSE")) fprintf(stderr, "WARN: %s\n", last_warn);
}

/* A fresh directory "/tmp/<prefix>-XXXXXX" (mode 0755 when other users must
 * reach it, else mkdtemp's 0700) holding the table path, clean variables,
 * counters at zero, the counting logger installed. */
static int ht_test_dir_setup(const char *prefix, int others_reach) {
  snprintf(dir, sizeof dir, "/tmp/%s-XXXXXX", prefix);
  if (!mkdtemp(dir) || (others_reach && chmod(dir, 0755) != 0)) return -1;
  snprintf(path, sizeof path, "%s/health", dir);
  setenv("RERAIL_HEALTH_PATH", path, 1);
  unsetenv("RERAIL_HEALTH_GROUP");
  unsetenv("RERAIL_HEALTH_STALE_MS");
  rr_ht_reset_warnings();
  warns = 0;
  last_warn[0] = '\0';
  rr_log_set_logger(count_logger);
  return 0;
}

/* The plugin started three times over with no table it may use: every
 * call it makes keeps working, doing nothing (needs cmocka and rr_health_bus.h
 * included first). */
static void start_without_table(void) {
  rr_netif nif;
  memset(&nif, 0, sizeof nif);
  snprintf(nif.name, sizeof nif.name, "rr0");
  for (int round = 0; round < 3; round++) {
    rr_health_table_start(&nif, 1);
    assert_false(rr_health_table_active());
    rr_health_table_set_figures(0, RR_HT_TX, 1, 2, 3);
    rr_health_table_tick(1ull << 62);
    rr_health_nic_state(0, "rr0", RR_LINK_UP, "still moving data");
    rr_health_table_stop();
  }
}

static int teardown(void **state) {
  (void)state;
  rr_log_set_logger(NULL);
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  return system(cmd) == 0 ? 0 : -1;
}

#endif
