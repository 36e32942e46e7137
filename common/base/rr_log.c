#include "rr_log.h"
#include "rr_status.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic(rr_logger_fn) nccl_logger;

/* -1: not read yet. Read once; a bad value keeps the default (warn). */
static int stderr_level = -1;

static int stderr_threshold(void) {
  if (stderr_level < 0) {
    const char *v = getenv("RERAIL_LOG_LEVEL");
    int level = RR_LOG_WARN;
    if (v) {
      if (!strcmp(v, "none")) level = RR_LOG_NONE;
      else if (!strcmp(v, "warn")) level = RR_LOG_WARN;
      else if (!strcmp(v, "info")) level = RR_LOG_INFO;
      else if (!strcmp(v, "trace")) level = RR_LOG_TRACE;
    }
    stderr_level = level;
  }
  return stderr_level;
}

void rr_log_set_logger(rr_logger_fn fn) { atomic_store(&nccl_logger, fn); }

void rr_log_emit(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  rr_logger_fn fn = atomic_load(&nccl_logger);
  if (fn) {
    fn(level, flags, file, line, "NET/rerail: %s", msg);
    return;
  }
  if (level > stderr_threshold() || level == RR_LOG_NONE) return;
  const char *tag = level == RR_LOG_WARN ? "WARN" : level == RR_LOG_INFO ? "INFO" : "TRACE";
  fprintf(stderr, "rerail[%d] %s %s\n", (int)getpid(), tag, msg);
}

const char *rr_status_str(rr_status s) {
  switch (s) {
  case RR_OK: return "ok";
  case RR_AGAIN: return "try again";
  case RR_ERR_INVALID: return "invalid argument";
  case RR_ERR_SYSTEM: return "system error";
  case RR_ERR_NOMEM: return "out of memory";
  case RR_ERR_PEER: return "peer closed or died";
  case RR_ERR_RAIL: return "rail failed";
  case RR_ERR_UNSUPPORTED: return "unsupported";
  case RR_ERR_INTERNAL: return "internal error";
  case RR_ERR_PROTOCOL: return "protocol violation";
  }
  return "unknown status";
}
