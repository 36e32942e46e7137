/* What every rerail fuzz target shares: a silent logger (messages are still
 * formatted, so a bad format argument is found too) and a hard stop for a
 * broken invariant (libFuzzer records the input that did it). */
#ifndef RERAIL_FUZZ_COMMON_H
#define RERAIL_FUZZ_COMMON_H
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "rr_log.h"

static void fuzz_quiet_logger(int level, unsigned long flags, const char *file, int line,
                              const char *fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
}

#define FUZZ_CHECK(cond)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz invariant broken: %s (%s:%d)\n", #cond, __FILE__, __LINE__);          \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

#endif
