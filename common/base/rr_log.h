/* The one logging path of rerail.
 *
 * Inside NCCL every message goes through the logger NCCL hands to init();
 * outside NCCL (the rerail tool, tests, benchmarks) a plain stderr logger with
 * the same signature is used, filtered by RERAIL_LOG_LEVEL. */
#ifndef RERAIL_COMMON_LOG_H
#define RERAIL_COMMON_LOG_H

/* Levels and subsystems share NCCL's numeric values so that the NCCL logger
 * can be called with them unchanged. */
enum rr_log_level { RR_LOG_NONE = 0, RR_LOG_VERSION = 1, RR_LOG_WARN = 2, RR_LOG_INFO = 3,
                    RR_LOG_ABORT = 4, RR_LOG_TRACE = 5 };
enum rr_log_subsys { RR_SUB_INIT = 1, RR_SUB_NET = 16, RR_SUB_TUNING = 64, RR_SUB_ENV = 128 };

typedef void (*rr_logger_fn)(int level, unsigned long flags, const char *file, int line,
                             const char *fmt, ...);

/* Install NCCL's logger (NULL restores the stderr logger). Thread safe. */
void rr_log_set_logger(rr_logger_fn fn);

void rr_log_emit(int level, unsigned long flags, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#define RR_WARN(...) rr_log_emit(RR_LOG_WARN, RR_SUB_NET, __FILE__, __LINE__, __VA_ARGS__)
#define RR_INFO(sub, ...) rr_log_emit(RR_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__)
#define RR_TRACE(...) rr_log_emit(RR_LOG_TRACE, RR_SUB_NET, __FILE__, __LINE__, __VA_ARGS__)

#endif
