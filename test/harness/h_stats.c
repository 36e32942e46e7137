/* Timing of every plugin call, counters, error reporting and the watchdog
 * that turns a hang into a clear failure (exit 3). */
#include "harness.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

h_counters g_cnt;
_Atomic int g_abort;

const char *const h_api_names[A_NAPI] = {"connect", "accept", "listen", "regMr", "deregMr",
                                         "isend", "irecv", "test", "iflush", "close",
                                         "irecvConsumed"};

uint64_t h_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double h_now(void) { return (double)h_now_ns() * 1e-9; }

void h_note_call(int api, uint64_t ns) {
  atomic_fetch_add_explicit(&g_cnt.calls[api], 1, memory_order_relaxed);
  if (ns >= 1000000) {
    atomic_fetch_add_explicit(&g_cnt.slow[api][0], 1, memory_order_relaxed);
    if (ns >= 10000000) atomic_fetch_add_explicit(&g_cnt.slow[api][1], 1, memory_order_relaxed);
    if (ns >= 100000000) atomic_fetch_add_explicit(&g_cnt.slow[api][2], 1, memory_order_relaxed);
  }
  uint64_t cur = atomic_load_explicit(&g_cnt.max_ns[api], memory_order_relaxed);
  while (ns > cur &&
         !atomic_compare_exchange_weak_explicit(&g_cnt.max_ns[api], &cur, ns, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
}

static pthread_mutex_t print_lock = PTHREAD_MUTEX_INITIALIZER;

static void vprint(const char *tag, const char *fmt, va_list ap) {
  char msg[2048];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&print_lock);
  fprintf(stderr, "harness[%s %d] %s%s\n", h_role_name(g_opt.role), (int)getpid(), tag, msg);
  pthread_mutex_unlock(&print_lock);
}

void h_error(const char *fmt, ...) {
  atomic_fetch_add(&g_cnt.errors, 1);
  h_report_error();
  va_list ap;
  va_start(ap, fmt);
  vprint("ERROR: ", fmt, ap);
  va_end(ap);
}

void h_info(const char *fmt, ...) {
  if (g_opt.quiet) return;
  va_list ap;
  va_start(ap, fmt);
  vprint("", fmt, ap);
  va_end(ap);
}

/* ---- watchdog ------------------------------------------------------------ */

static double wd_timeout;
static void (*wd_dump)(void);
static _Atomic(const char *) wd_phase = "start";

void h_watchdog_set_dump(void (*dump)(void)) { wd_dump = dump; }
void h_watchdog_phase(const char *phase) { atomic_store(&wd_phase, phase); }

static void *watchdog_main(void *arg) {
  (void)arg;
  double end = h_now() + wd_timeout;
  for (;;) {
    double left = end - h_now();
    if (left <= 0) break;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
    if (left < 0.1) ts.tv_nsec = (long)(left * 1e9) + 1;
    nanosleep(&ts, NULL);
  }
  pthread_mutex_lock(&print_lock);
  fprintf(stderr,
          "harness[%s %d] HANG: the watchdog fired after %.0f s in phase '%s' (a plugin call or the "
          "peer never progressed); state follows\n",
          h_role_name(g_opt.role), (int)getpid(), wd_timeout, atomic_load(&wd_phase));
  for (int a = 0; a < A_NAPI; a++)
    fprintf(stderr, "  %-8s calls %llu, longest %.3f ms\n", h_api_names[a],
            (unsigned long long)atomic_load(&g_cnt.calls[a]),
            (double)atomic_load(&g_cnt.max_ns[a]) * 1e-6);
  pthread_mutex_unlock(&print_lock);
  if (wd_dump) wd_dump();
  fflush(stderr);
  if (g_opt.rdv) h_rdv_put_flag(g_opt.role, "abort", "watchdog");
  _exit(H_EXIT_HANG);
  return NULL;
}

void h_watchdog_start(double timeout_s) {
  if (timeout_s <= 0) return;
  wd_timeout = timeout_s;
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &attr, watchdog_main, NULL);
  pthread_attr_destroy(&attr);
}
