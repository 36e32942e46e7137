/* Shared by the health table's unit tests: a logger that counts the table's
 * own warnings (rr_health's event log warns too) and keeps the last one, so
 * a test can check that a refusal was reported, and reported once. */
#ifndef RERAIL_TEST_HEALTH_TEST_LOG_H
#define RERAIL_TEST_HEALTH_TEST_LOG_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rr_log.h"

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

#endif
