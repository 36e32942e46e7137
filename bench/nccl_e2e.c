/* rerail-nccl-e2e: the stock-NCCL end-to-end driver for GPU machines.
 *
 * One process per rank. It builds one NCCL communicator from a unique id
 * passed through a file, then either
 *   - sweeps all-reduce (sum, float), all-gather and reduce-scatter over a
 *     range of sizes, checks on the host every element of the result of each
 *     warm-up run and of the last timed run of each size, and prints an
 *     nccl-tests style table (time, algbw, busbw), or
 *   - (--loop-seconds) runs all-reduce of --max-bytes for S seconds, checking
 *     each result and printing a line per second: the failover test takes a
 *     rail down while this loop runs.
 *
 * Nothing here knows about rerail: which net plugin carries the traffic is
 * chosen by NCCL's environment (NCCL_NET_PLUGIN, NCCL_NET, ...). The program
 * only calls the CUDA runtime's host API and NCCL, so the C compiler builds it.
 *
 * Failure handling: the communicator is non-blocking (config.blocking = 0) and
 * the host never blocks in CUDA or NCCL without a deadline: it polls events
 * and ncclCommGetAsyncError. A step that runs past --timeout, an NCCL error or
 * a CUDA error prints the communicator's async error state, aborts the
 * communicator (ncclCommAbort) and exits non-zero. A watchdog thread covers
 * the case where the main thread is stuck inside a call anyway.
 *
 * Exit status: 0 all results correct; 1 data mismatches; 2 CUDA/NCCL error;
 * 3 timeout (hang); 64 usage error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PROG "rerail-nccl-e2e"

enum {
  E2E_EXIT_OK = 0,
  E2E_EXIT_MISMATCH = 1,
  E2E_EXIT_RUNTIME = 2,
  E2E_EXIT_TIMEOUT = 3,
  E2E_EXIT_USAGE = 64,
};

/* How long the watchdog lets a main thread that is stuck inside a call run
 * past its step deadline before it aborts from its own thread, and how long
 * ncclCommAbort may take before SIGALRM ends the process regardless. */
#define WATCHDOG_GRACE_S 5
#define ABORT_GRACE_S 30

/* ------------------------------------------------------------------------ */
/* Options                                                                  */

enum e2e_op { OP_ALLREDUCE, OP_ALLGATHER, OP_REDUCESCATTER, OP_COUNT };

static const char *const op_names[OP_COUNT] = {
    [OP_ALLREDUCE] = "allreduce",
    [OP_ALLGATHER] = "allgather",
    [OP_REDUCESCATTER] = "reducescatter",
};

struct e2e_opts {
  int rank;
  int nranks;
  int device;
  const char *rendezvous;
  size_t min_bytes;
  size_t max_bytes;
  unsigned factor;
  int iters;
  int warmup;
  unsigned ops_mask;
  double loop_seconds; /* 0: table mode */
  double timeout_s;
};

static struct e2e_opts g_opt = {
    .rank = -1,
    .nranks = 0,
    .device = 0,
    .rendezvous = NULL,
    .min_bytes = 1024,
    .max_bytes = 64u << 20,
    .factor = 4,
    .iters = 20,
    .warmup = 5,
    .ops_mask = (1u << OP_COUNT) - 1,
    .loop_seconds = 0,
    .timeout_s = 120,
};

static void usage(FILE *f) {
  fprintf(f,
"Usage: " PROG " --rank R --nranks N --rendezvous PATH [options]\n"
"\n"
"Stock-NCCL end-to-end driver: one process per rank. Runs all-reduce (sum,\n"
"float), all-gather and reduce-scatter over a range of sizes, checks every\n"
"element of the results on the host and prints an nccl-tests style table\n"
"(time, algbw, busbw).\n"
"\n"
"Required:\n"
"  --rank R             this process's rank, 0..N-1\n"
"  --nranks N           number of ranks (processes)\n"
"  --rendezvous PATH    file through which rank 0 hands its ncclUniqueId to the\n"
"                       others: rank 0 writes PATH.tmp and renames it to PATH;\n"
"                       the others poll for PATH (up to --timeout). Use a fresh\n"
"                       path per run (rank 0 removes it once all ranks joined).\n"
"                       Optional when N is 1.\n"
"Options:\n"
"  --device D           CUDA device (default 0). Several ranks on ONE GPU all use\n"
"                       device 0; each rank then needs a distinct NCCL_HOSTID\n"
"                       (e.g. NCCL_HOSTID=e2e-host$R), which makes NCCL treat the\n"
"                       ranks as separate hosts (no \"Duplicate GPU\" refusal) and\n"
"                       route between them through the net transport/plugin.\n"
"  --min-bytes B        smallest size (default 1K); suffixes K, M, G (binary)\n"
"  --max-bytes B        largest size (default 64M)\n"
"  --step-factor F      multiply the size by F each step (default 4)\n"
"  --iters I            timed iterations per size (default 20)\n"
"  --warmup W           untimed iterations per size, each result checked\n"
"                       (default 5); of the timed ones the last is checked\n"
"  --ops LIST           comma list of allreduce,allgather,reducescatter\n"
"                       (or ar,ag,rs; default all three)\n"
"  --loop-seconds S     instead of the table: all-reduce of --max-bytes over and\n"
"                       over for S seconds, checking each result; rank 0 prints a\n"
"                       line per second (iterations, errors, bandwidth)\n"
"  --timeout S          watchdog: a step (init, one size, one loop iteration,\n"
"                       rendezvous) that takes longer than S seconds aborts the\n"
"                       communicator (ncclCommAbort) and exits 3 (default 120)\n"
"  -h, --help           this text\n"
"\n"
"Sizes are the nccl-tests 'size': the all-reduce buffer, the all-gather output\n"
"and the reduce-scatter input. busbw = algbw * 2(n-1)/n for all-reduce and\n"
"(n-1)/n for all-gather and reduce-scatter, as nccl-tests defines it.\n"
"\n"
"Which net transport NCCL used is visible with NCCL_DEBUG=INFO: look for the\n"
"'NET/Plugin' lines (plugin loaded or not), 'Using network <name>' and the\n"
"channel lines '... via NET/<name>/<dev>'. Useful variables: NCCL_NET_PLUGIN=rerail\n"
"(loads libnccl-net-rerail.so from LD_LIBRARY_PATH), NCCL_TUNER_PLUGIN=rerail,\n"
"NCCL_NET=Socket (NCCL's own TCP transport), NCCL_SOCKET_IFNAME=lo,\n"
"NCCL_SHM_DISABLE=1 NCCL_P2P_DISABLE=1. See bench/run_gpu_e2e.sh.\n"
"\n"
"Exit status: 0 all results correct, 1 data mismatches, 2 CUDA or NCCL error,\n"
"3 timeout (a hang turned into an error), 64 usage error.\n");
}

static bool parse_size(const char *s, size_t *out) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno != 0 || end == s || s[0] == '-') return false;
  unsigned long long mult = 1;
  if (*end != '\0') {
    static const struct { const char *suffix; unsigned long long mult; } sfx[] = {
        {"b", 1ull},           {"k", 1ull << 10},   {"kb", 1ull << 10}, {"kib", 1ull << 10},
        {"m", 1ull << 20},     {"mb", 1ull << 20},  {"mib", 1ull << 20}, {"g", 1ull << 30},
        {"gb", 1ull << 30},    {"gib", 1ull << 30},
    };
    bool found = false;
    for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
      if (strcasecmp(end, sfx[i].suffix) == 0) {
        mult = sfx[i].mult;
        found = true;
        break;
      }
    }
    if (!found) return false;
  }
  if (v > ULLONG_MAX / mult || v * mult > SIZE_MAX) return false;
  *out = (size_t)(v * mult);
  return true;
}

static bool parse_int(const char *s, int min, int max, int *out) {
  char *end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < min || v > max) return false;
  *out = (int)v;
  return true;
}

static bool parse_seconds(const char *s, double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v >= 0) || v > 1e7) return false;
  *out = v;
  return true;
}

static bool parse_ops(const char *s, unsigned *mask) {
  char buf[256];
  if (strlen(s) >= sizeof(buf)) return false;
  strcpy(buf, s);
  unsigned m = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    if (!strcasecmp(tok, "allreduce") || !strcasecmp(tok, "ar")) m |= 1u << OP_ALLREDUCE;
    else if (!strcasecmp(tok, "allgather") || !strcasecmp(tok, "ag")) m |= 1u << OP_ALLGATHER;
    else if (!strcasecmp(tok, "reducescatter") || !strcasecmp(tok, "rs"))
      m |= 1u << OP_REDUCESCATTER;
    else if (!strcasecmp(tok, "all")) m |= (1u << OP_COUNT) - 1;
    else return false;
  }
  if (m == 0) return false;
  *mask = m;
  return true;
}

static void usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nTry '" PROG " --help'.\n");
  va_end(ap);
  exit(E2E_EXIT_USAGE);
}

static void parse_args(int argc, char **argv) {
  enum { O_RANK = 256, O_NRANKS, O_RDV, O_DEVICE, O_MIN, O_MAX, O_FACTOR, O_ITERS, O_WARMUP,
         O_OPS, O_LOOP, O_TIMEOUT };
  static const struct option longopts[] = {
      {"rank", required_argument, NULL, O_RANK},
      {"nranks", required_argument, NULL, O_NRANKS},
      {"rendezvous", required_argument, NULL, O_RDV},
      {"device", required_argument, NULL, O_DEVICE},
      {"min-bytes", required_argument, NULL, O_MIN},
      {"max-bytes", required_argument, NULL, O_MAX},
      {"step-factor", required_argument, NULL, O_FACTOR},
      {"iters", required_argument, NULL, O_ITERS},
      {"warmup", required_argument, NULL, O_WARMUP},
      {"ops", required_argument, NULL, O_OPS},
      {"loop-seconds", required_argument, NULL, O_LOOP},
      {"timeout", required_argument, NULL, O_TIMEOUT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0},
  };
  int c, factor;
  while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
    switch (c) {
    case 'h': usage(stdout); exit(E2E_EXIT_OK);
    case O_RANK:
      if (!parse_int(optarg, 0, INT_MAX, &g_opt.rank)) usage_error("bad --rank '%s'", optarg);
      break;
    case O_NRANKS:
      /* Bounded so that sums of the test pattern stay exact in float. */
      if (!parse_int(optarg, 1, 65536, &g_opt.nranks)) usage_error("bad --nranks '%s'", optarg);
      break;
    case O_RDV: g_opt.rendezvous = optarg; break;
    case O_DEVICE:
      if (!parse_int(optarg, 0, 1023, &g_opt.device)) usage_error("bad --device '%s'", optarg);
      break;
    case O_MIN:
      if (!parse_size(optarg, &g_opt.min_bytes)) usage_error("bad --min-bytes '%s'", optarg);
      break;
    case O_MAX:
      if (!parse_size(optarg, &g_opt.max_bytes)) usage_error("bad --max-bytes '%s'", optarg);
      break;
    case O_FACTOR:
      if (!parse_int(optarg, 2, 1024, &factor)) usage_error("bad --step-factor '%s'", optarg);
      g_opt.factor = (unsigned)factor;
      break;
    case O_ITERS:
      if (!parse_int(optarg, 1, 1000000, &g_opt.iters)) usage_error("bad --iters '%s'", optarg);
      break;
    case O_WARMUP:
      if (!parse_int(optarg, 0, 1000000, &g_opt.warmup)) usage_error("bad --warmup '%s'", optarg);
      break;
    case O_OPS:
      if (!parse_ops(optarg, &g_opt.ops_mask)) usage_error("bad --ops '%s'", optarg);
      break;
    case O_LOOP:
      if (!parse_seconds(optarg, &g_opt.loop_seconds) || g_opt.loop_seconds <= 0)
        usage_error("bad --loop-seconds '%s'", optarg);
      break;
    case O_TIMEOUT:
      if (!parse_seconds(optarg, &g_opt.timeout_s) || g_opt.timeout_s <= 0)
        usage_error("bad --timeout '%s'", optarg);
      break;
    default: usage_error("unknown option");
    }
  }
  if (optind < argc) usage_error("unexpected argument '%s'", argv[optind]);
  if (g_opt.nranks < 1) usage_error("--nranks is required");
  if (g_opt.rank < 0) usage_error("--rank is required");
  if (g_opt.rank >= g_opt.nranks) usage_error("--rank must be below --nranks");
  if (g_opt.nranks > 1 && !g_opt.rendezvous) usage_error("--rendezvous is required");
  if (g_opt.min_bytes < sizeof(float)) usage_error("--min-bytes must be at least 4");
  if (g_opt.max_bytes < g_opt.min_bytes) usage_error("--max-bytes is below --min-bytes");
  if (g_opt.max_bytes > ((size_t)16 << 30)) usage_error("--max-bytes is above 16 GiB");
  if (g_opt.rendezvous && strlen(g_opt.rendezvous) + 5 > PATH_MAX)
    usage_error("--rendezvous path is too long");
}

/* ------------------------------------------------------------------------ */
/* Time, deadlines, watchdog and the single failure path                    */

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ns(long ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static _Atomic(ncclComm_t) g_comm;          /* set once init started; NULL after destroy */
static _Atomic int64_t g_step_deadline_ns;  /* main thread's deadline for the step; 0 = none */
static _Atomic int64_t g_watch_deadline_ns; /* watchdog's deadline; 0 = none */
static _Atomic(const char *) g_step = "startup";
static _Atomic size_t g_step_bytes;
static atomic_int g_aborting;
static atomic_int g_exit_code;
static atomic_bool g_rdv_published; /* rank 0 wrote the rendezvous file */

static void step_begin(const char *what, size_t bytes) {
  int64_t now = now_ns();
  int64_t budget = (int64_t)(g_opt.timeout_s * 1e9);
  atomic_store(&g_step, what);
  atomic_store(&g_step_bytes, bytes);
  atomic_store(&g_step_deadline_ns, now + budget);
  atomic_store(&g_watch_deadline_ns, now + budget + (int64_t)WATCHDOG_GRACE_S * 1000000000);
}

static void step_end(void) {
  atomic_store(&g_watch_deadline_ns, 0);
  atomic_store(&g_step_deadline_ns, 0);
}

static void remove_rendezvous(void) {
  if (g_opt.rendezvous && atomic_exchange(&g_rdv_published, false)) unlink(g_opt.rendezvous);
}

static void report_comm_state(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &async);
  if (r != ncclSuccess) {
    fprintf(stderr, PROG "[rank %d]: ncclCommGetAsyncError itself failed: %s (%d)\n", g_opt.rank,
            ncclGetErrorString(r), (int)r);
  } else {
    fprintf(stderr, PROG "[rank %d]: ncclCommGetAsyncError: %s (%d)\n", g_opt.rank,
            ncclGetErrorString(async), (int)async);
  }
  const char *last = ncclGetLastError(comm);
  if (last && last[0]) fprintf(stderr, PROG "[rank %d]: NCCL last error: %s\n", g_opt.rank, last);
}

static void on_sigalrm(int sig) {
  (void)sig;
  static const char msg[] = PROG ": ncclCommAbort did not return in time; exiting\n";
  ssize_t w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
  (void)w;
  _exit(atomic_load(&g_exit_code));
}

/* Abort the communicator (if any) and leave. The caller has won g_aborting. */
static _Noreturn void abort_and_exit(int code) {
  atomic_store(&g_exit_code, code);
  ncclComm_t comm = atomic_load(&g_comm);
  if (comm) {
    report_comm_state(comm);
    fprintf(stderr, PROG "[rank %d]: aborting the communicator (ncclCommAbort)\n", g_opt.rank);
    alarm(ABORT_GRACE_S);
    ncclCommAbort(comm);
  }
  remove_rendezvous();
  fflush(stdout);
  fflush(stderr);
  _exit(code);
}

/* The one failure path of the main thread: print, abort, exit. */
static _Noreturn void die(int code, const char *fmt, ...) {
  if (atomic_exchange(&g_aborting, 1)) {
    /* The watchdog is already tearing the process down: let it finish. */
    for (;;) pause();
  }
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG "[rank %d]: error: ", g_opt.rank);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  abort_and_exit(code);
}

static void *watchdog_main(void *arg) {
  (void)arg;
  for (;;) {
    sleep_ns(50 * 1000 * 1000);
    int64_t dl = atomic_load(&g_watch_deadline_ns);
    if (dl == 0 || now_ns() < dl) continue;
    if (atomic_exchange(&g_aborting, 1)) continue; /* main thread is aborting; SIGALRM backs it */
    fprintf(stderr,
            PROG "[rank %d]: watchdog: step '%s' (%zu bytes) still running %d s past the "
                 "%.0f s timeout, main thread blocked\n",
            g_opt.rank, atomic_load(&g_step), atomic_load(&g_step_bytes), WATCHDOG_GRACE_S,
            g_opt.timeout_s);
    abort_and_exit(E2E_EXIT_TIMEOUT);
  }
  return NULL;
}

static void check_deadline(void) {
  int64_t dl = atomic_load(&g_step_deadline_ns);
  if (dl != 0 && now_ns() > dl)
    die(E2E_EXIT_TIMEOUT, "timeout: step '%s' (%zu bytes) took longer than %.0f s (hang?)",
        atomic_load(&g_step), atomic_load(&g_step_bytes), g_opt.timeout_s);
}

/* Back off while polling: spin briefly, then sleep in small steps. */
static void relax(unsigned *polls) {
  if (++*polls < 256) sched_yield();
  else sleep_ns(20 * 1000);
}

/* ------------------------------------------------------------------------ */
/* CUDA and NCCL helpers: nothing blocks without a deadline                  */

#define CUDA_CHECK(call)                                                                     \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess)                                                                   \
      die(E2E_EXIT_RUNTIME, "%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,                 \
          cudaGetErrorName(e_), cudaGetErrorString(e_));                                     \
  } while (0)

/* Wait until the non-blocking communicator has finished the last call. */
static void nccl_wait_ready(const char *what) {
  ncclComm_t comm = atomic_load(&g_comm);
  unsigned polls = 0;
  for (;;) {
    ncclResult_t st = ncclInProgress;
    ncclResult_t r = ncclCommGetAsyncError(comm, &st);
    if (r != ncclSuccess)
      die(E2E_EXIT_RUNTIME, "%s: ncclCommGetAsyncError failed: %s", what, ncclGetErrorString(r));
    if (st == ncclSuccess) return;
    if (st != ncclInProgress)
      die(E2E_EXIT_RUNTIME, "%s: NCCL error: %s (%d)", what, ncclGetErrorString(st), (int)st);
    check_deadline();
    relax(&polls);
  }
}

#define NCCL_CHECK(call)                                                                     \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ == ncclInProgress) nccl_wait_ready(#call);                                        \
    else if (r_ != ncclSuccess)                                                              \
      die(E2E_EXIT_RUNTIME, "%s:%d: %s: %s (%d)", __FILE__, __LINE__, #call,                 \
          ncclGetErrorString(r_), (int)r_);                                                  \
  } while (0)

static void check_async_error(const char *what) {
  ncclComm_t comm = atomic_load(&g_comm);
  ncclResult_t st = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &st);
  if (r != ncclSuccess)
    die(E2E_EXIT_RUNTIME, "%s: ncclCommGetAsyncError failed: %s", what, ncclGetErrorString(r));
  if (st != ncclSuccess && st != ncclInProgress)
    die(E2E_EXIT_RUNTIME, "%s: NCCL async error: %s (%d)", what, ncclGetErrorString(st), (int)st);
}

/* Poll an event (or, with ev NULL, the stream) to completion, watching the
 * communicator's async error and the step deadline. */
static void wait_gpu(cudaStream_t stream, cudaEvent_t ev, const char *what) {
  unsigned polls = 0;
  for (;;) {
    cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(stream);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady)
      die(E2E_EXIT_RUNTIME, "%s: CUDA error while waiting: %s (%s)", what, cudaGetErrorName(e),
          cudaGetErrorString(e));
    if ((polls & 63) == 0) check_async_error(what);
    check_deadline();
    relax(&polls);
  }
  check_async_error(what);
}

/* ------------------------------------------------------------------------ */
/* Rendezvous through a file                                                */

static void rendezvous_publish(const ncclUniqueId *id) {
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof(tmp), "%s.tmp", g_opt.rendezvous);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die(E2E_EXIT_RUNTIME, "cannot create %s: %s", tmp, strerror(errno));
  const char *p = (const char *)id;
  size_t left = sizeof(*id);
  while (left > 0) {
    ssize_t w = write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      close(fd);
      unlink(tmp);
      die(E2E_EXIT_RUNTIME, "cannot write %s: %s", tmp, strerror(err));
    }
    p += w;
    left -= (size_t)w;
  }
  if (close(fd) != 0) die(E2E_EXIT_RUNTIME, "cannot write %s: %s", tmp, strerror(errno));
  if (rename(tmp, g_opt.rendezvous) != 0) {
    int err = errno;
    unlink(tmp);
    die(E2E_EXIT_RUNTIME, "cannot rename %s to %s: %s", tmp, g_opt.rendezvous, strerror(err));
  }
  atomic_store(&g_rdv_published, true);
}

static void rendezvous_fetch(ncclUniqueId *id) {
  step_begin("rendezvous", 0);
  for (;;) {
    int fd = open(g_opt.rendezvous, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char *p = (char *)id;
      size_t got = 0;
      while (got < sizeof(*id)) {
        ssize_t r = read(fd, p + got, sizeof(*id) - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
      }
      close(fd);
      if (got != sizeof(*id))
        die(E2E_EXIT_RUNTIME, "rendezvous file %s holds %zu bytes, expected %zu", g_opt.rendezvous,
            got, sizeof(*id));
      step_end();
      return;
    }
    if (errno != ENOENT)
      die(E2E_EXIT_RUNTIME, "cannot open rendezvous file %s: %s", g_opt.rendezvous,
          strerror(errno));
    if (now_ns() > atomic_load(&g_step_deadline_ns))
      die(E2E_EXIT_TIMEOUT, "timed out after %.0f s waiting for rendezvous file %s (rank 0 not "
          "started or failed?)", g_opt.timeout_s, g_opt.rendezvous);
    sleep_ns(20 * 1000 * 1000);
  }
}

/* ------------------------------------------------------------------------ */
/* Test pattern: small integers, so every sum is exact in float             */

/* Value of element i on rank r: an integer in [-48, 48]. Variant v adds
 * VARIANT_OFFSET[v]; consecutive runs alternate variants so a result left over
 * from the previous one never passes for the current one. With |value| <= 148
 * and at most 65536 ranks every partial sum stays below 2^24, so any reduction
 * order gives the exact, bit-identical result. */
static const float VARIANT_OFFSET[2] = {0.0f, 100.0f};

static inline float pattern(int rank, uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)rank + 1) * 0xC2B2AE3D27D4EB4Full;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (float)((int)(x % 97) - 48);
}

struct e2e_bufs {
  size_t max_elems;
  float *h_in;       /* this rank's pattern, variant 0 */
  float *h_sum;      /* sum over all ranks of the pattern, variant 0 */
  float *h_out;      /* pinned: results copied back */
  int64_t *h_ctl;    /* pinned: 2 control words (stop vote, error count) */
  float *d_send[2];  /* input, variants 0 and 1 */
  float *d_recv;
  int64_t *d_ctl;
  cudaStream_t stream;
  cudaEvent_t ev_start, ev_stop;
};

static void bufs_init(struct e2e_bufs *b) {
  size_t n = g_opt.max_bytes / sizeof(float);
  b->max_elems = n;
  b->h_in = malloc(n * sizeof(float));
  b->h_sum = malloc(n * sizeof(float));
  float *tmp = malloc(n * sizeof(float));
  if (!b->h_in || !b->h_sum || !tmp)
    die(E2E_EXIT_RUNTIME, "out of host memory for %zu-byte buffers", g_opt.max_bytes);
  for (size_t i = 0; i < n; i++) {
    float s = 0;
    for (int r = 0; r < g_opt.nranks; r++) s += pattern(r, i);
    b->h_in[i] = pattern(g_opt.rank, i);
    b->h_sum[i] = s;
  }
  CUDA_CHECK(cudaMallocHost((void **)&b->h_out, n * sizeof(float)));
  CUDA_CHECK(cudaMallocHost((void **)&b->h_ctl, 2 * sizeof(int64_t)));
  for (int v = 0; v < 2; v++) {
    CUDA_CHECK(cudaMalloc((void **)&b->d_send[v], n * sizeof(float)));
    for (size_t i = 0; i < n; i++) tmp[i] = b->h_in[i] + VARIANT_OFFSET[v];
    CUDA_CHECK(cudaMemcpy(b->d_send[v], tmp, n * sizeof(float), cudaMemcpyHostToDevice));
  }
  free(tmp);
  CUDA_CHECK(cudaMalloc((void **)&b->d_recv, n * sizeof(float)));
  CUDA_CHECK(cudaMalloc((void **)&b->d_ctl, 2 * sizeof(int64_t)));
  CUDA_CHECK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreate(&b->ev_start));
  CUDA_CHECK(cudaEventCreate(&b->ev_stop));
}

static void bufs_free(struct e2e_bufs *b) {
  cudaEventDestroy(b->ev_stop);
  cudaEventDestroy(b->ev_start);
  cudaStreamDestroy(b->stream);
  cudaFree(b->d_ctl);
  cudaFree(b->d_recv);
  cudaFree(b->d_send[1]);
  cudaFree(b->d_send[0]);
  cudaFreeHost(b->h_ctl);
  cudaFreeHost(b->h_out);
  free(b->h_sum);
  free(b->h_in);
}

/* ------------------------------------------------------------------------ */
/* Collectives                                                              */

/* Element counts for an nccl-tests 'size' of `bytes`. Returns false when the
 * size is too small for this op and rank count. */
struct op_shape {
  size_t count;      /* the count argument NCCL takes */
  size_t send_elems; /* input buffer elements */
  size_t recv_elems; /* output buffer elements */
  size_t bytes;      /* size reported: bytes rounded to what was run */
};

static bool op_shape(enum e2e_op op, size_t bytes, struct op_shape *s) {
  size_t n = (size_t)g_opt.nranks;
  switch (op) {
  case OP_ALLREDUCE:
    s->count = bytes / sizeof(float);
    s->send_elems = s->recv_elems = s->count;
    break;
  case OP_ALLGATHER:
    s->count = bytes / sizeof(float) / n;
    s->send_elems = s->count;
    s->recv_elems = s->count * n;
    break;
  case OP_REDUCESCATTER:
    s->count = bytes / sizeof(float) / n;
    s->send_elems = s->count * n;
    s->recv_elems = s->count;
    break;
  default: return false;
  }
  s->bytes = (op == OP_ALLREDUCE ? s->count : s->count * n) * sizeof(float);
  return s->count > 0;
}

static double busbw_factor(enum e2e_op op) {
  double n = g_opt.nranks;
  return op == OP_ALLREDUCE ? 2.0 * (n - 1) / n : (n - 1) / n;
}

static void launch(enum e2e_op op, const struct e2e_bufs *b, int variant, size_t count) {
  ncclComm_t comm = atomic_load(&g_comm);
  const float *send = b->d_send[variant];
  switch (op) {
  case OP_ALLREDUCE:
    NCCL_CHECK(ncclAllReduce(send, b->d_recv, count, ncclFloat, ncclSum, comm, b->stream));
    break;
  case OP_ALLGATHER:
    NCCL_CHECK(ncclAllGather(send, b->d_recv, count, ncclFloat, comm, b->stream));
    break;
  case OP_REDUCESCATTER:
    NCCL_CHECK(ncclReduceScatter(send, b->d_recv, count, ncclFloat, ncclSum, comm, b->stream));
    break;
  default: break;
  }
}

/* Compare every element of h_out with what `op` must produce. Returns the
 * number of wrong elements and prints the first few. */
static size_t check_result(enum e2e_op op, const struct e2e_bufs *b, int variant,
                           const struct op_shape *s) {
  const float off = VARIANT_OFFSET[variant];
  const float noff = off * (float)g_opt.nranks;
  const float *out = b->h_out;
  size_t bad = 0;
  for (size_t k = 0; k < s->recv_elems; k++) {
    float want;
    switch (op) {
    case OP_ALLREDUCE: want = b->h_sum[k] + noff; break;
    case OP_ALLGATHER: want = pattern((int)(k / s->count), k % s->count) + off; break;
    default: want = b->h_sum[(size_t)g_opt.rank * s->count + k] + noff; break;
    }
    if (out[k] != want) {
      if (bad < 5)
        fprintf(stderr,
                PROG "[rank %d]: MISMATCH %s %zu bytes: element %zu is %g, expected %g\n",
                g_opt.rank, op_names[op], s->bytes, k, (double)out[k], (double)want);
      bad++;
    }
  }
  if (bad > 5)
    fprintf(stderr, PROG "[rank %d]: MISMATCH %s %zu bytes: %zu of %zu elements wrong\n",
            g_opt.rank, op_names[op], s->bytes, bad, s->recv_elems);
  return bad;
}

/* Sum two int64 control words over all ranks (in place in h_ctl). */
static void ctl_allreduce(struct e2e_bufs *b, const char *what) {
  ncclComm_t comm = atomic_load(&g_comm);
  CUDA_CHECK(cudaMemcpyAsync(b->d_ctl, b->h_ctl, 2 * sizeof(int64_t), cudaMemcpyHostToDevice,
                             b->stream));
  NCCL_CHECK(ncclAllReduce(b->d_ctl, b->d_ctl, 2, ncclInt64, ncclSum, comm, b->stream));
  CUDA_CHECK(cudaMemcpyAsync(b->h_ctl, b->d_ctl, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost,
                             b->stream));
  wait_gpu(b->stream, NULL, what);
}

/* Copy the output back and check it against variant `variant`. */
static size_t fetch_and_check(struct e2e_bufs *b, enum e2e_op op, int variant,
                              const struct op_shape *s) {
  CUDA_CHECK(cudaMemcpyAsync(b->h_out, b->d_recv, s->recv_elems * sizeof(float),
                             cudaMemcpyDeviceToHost, b->stream));
  wait_gpu(b->stream, NULL, op_names[op]);
  return check_result(op, b, variant, s);
}

/* One table row: `warmup` runs, each checked on its own, then `iters` timed
 * runs back to back of which the last result is checked (the timed runs all
 * write the same output). Before each checked result the output is poisoned
 * (NaN) and consecutive checked runs use different inputs, so a result left
 * over from an earlier run never passes. The ranks then agree on the error
 * count. Returns the global number of wrong elements. */
static int64_t run_size(struct e2e_bufs *b, enum e2e_op op, const struct op_shape *s,
                        double *time_us) {
  size_t bad = 0;
  step_begin(op_names[op], s->bytes);
  for (int w = 0; w < g_opt.warmup; w++) {
    const int variant = (w + 1) & 1; /* 1, 0, 1, ...: the timed runs use 0 */
    CUDA_CHECK(cudaMemsetAsync(b->d_recv, 0xff, s->recv_elems * sizeof(float), b->stream));
    launch(op, b, variant, s->count);
    bad += fetch_and_check(b, op, variant, s);
  }
  /* Poisoned again: only the timed runs can make the output right. */
  CUDA_CHECK(cudaMemsetAsync(b->d_recv, 0xff, s->recv_elems * sizeof(float), b->stream));
  CUDA_CHECK(cudaEventRecord(b->ev_start, b->stream));
  for (int it = 0; it < g_opt.iters; it++) launch(op, b, 0, s->count);
  CUDA_CHECK(cudaEventRecord(b->ev_stop, b->stream));
  wait_gpu(b->stream, b->ev_stop, op_names[op]);
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, b->ev_start, b->ev_stop));
  *time_us = (double)ms * 1000.0 / g_opt.iters;
  bad += fetch_and_check(b, op, 0, s);
  b->h_ctl[0] = (int64_t)bad;
  b->h_ctl[1] = 0;
  ctl_allreduce(b, "error-count allreduce");
  step_end();
  return b->h_ctl[0];
}

static int run_table(struct e2e_bufs *b) {
  int64_t total_bad = 0;
  double busbw_sum = 0;
  int rows = 0;
  if (g_opt.rank == 0) {
    printf("#\n# %-13s %12s %12s %12s %11s %11s %8s\n", "op", "bytes", "count", "time_us",
           "algbw_GB/s", "busbw_GB/s", "errors");
  }
  for (int op = 0; op < OP_COUNT; op++) {
    if (!(g_opt.ops_mask & (1u << op))) continue;
    for (size_t bytes = g_opt.min_bytes; bytes <= g_opt.max_bytes;) {
      struct op_shape s;
      if (op_shape((enum e2e_op)op, bytes, &s)) {
        double us = 0;
        int64_t bad = run_size(b, (enum e2e_op)op, &s, &us);
        double algbw = us > 0 ? (double)s.bytes / us / 1e3 : 0;
        double busbw = algbw * busbw_factor((enum e2e_op)op);
        total_bad += bad;
        busbw_sum += busbw;
        rows++;
        if (g_opt.rank == 0)
          printf("  %-13s %12zu %12zu %12.1f %11.3f %11.3f %8" PRId64 "\n", op_names[op], s.bytes,
                 s.count, us, algbw, busbw, bad);
      } else if (g_opt.rank == 0) {
        printf("# %-13s %12zu skipped: smaller than one float per rank\n", op_names[op], bytes);
      }
      if (bytes > g_opt.max_bytes / g_opt.factor) break;
      bytes *= g_opt.factor;
    }
  }
  if (g_opt.rank == 0) {
    printf("# rows: %d, wrong elements (all ranks): %" PRId64 "\n", rows, total_bad);
    printf("# avg busbw: %.3f GB/s\n", rows ? busbw_sum / rows : 0.0);
    printf("# result: %s\n", total_bad ? "FAIL (data mismatches)" : "OK (all checked results correct)");
  }
  return total_bad ? E2E_EXIT_MISMATCH : E2E_EXIT_OK;
}

/* All-reduce of --max-bytes for --loop-seconds, each result checked. All
 * ranks must run the same number of collectives, so every iteration also sums
 * a stop vote and the error counts; everyone stops after the same iteration. */
static int run_loop(struct e2e_bufs *b) {
  struct op_shape s;
  if (!op_shape(OP_ALLREDUCE, g_opt.max_bytes, &s))
    die(E2E_EXIT_RUNTIME, "--max-bytes too small");
  ncclComm_t comm = atomic_load(&g_comm);
  const double factor = busbw_factor(OP_ALLREDUCE);
  const int64_t t0 = now_ns();
  int64_t last_print = t0;
  uint64_t iters = 0, iters_at_print = 0;
  int64_t bad_iters = 0, bad_elems = 0, global_bad_iters = 0;
  double gpu_us_window = 0;
  if (g_opt.rank == 0)
    printf("# loop: allreduce of %zu bytes for %.1f s, every result checked\n", s.bytes,
           g_opt.loop_seconds);
  for (;;) {
    const int variant = (int)(iters & 1);
    step_begin("loop allreduce", s.bytes);
    b->h_ctl[0] = (now_ns() - t0) >= (int64_t)(g_opt.loop_seconds * 1e9); /* stop vote */
    b->h_ctl[1] = bad_iters;
    CUDA_CHECK(cudaMemcpyAsync(b->d_ctl, b->h_ctl, 2 * sizeof(int64_t), cudaMemcpyHostToDevice,
                               b->stream));
    CUDA_CHECK(cudaMemsetAsync(b->d_recv, 0xff, s.recv_elems * sizeof(float), b->stream));
    CUDA_CHECK(cudaEventRecord(b->ev_start, b->stream));
    launch(OP_ALLREDUCE, b, variant, s.count);
    CUDA_CHECK(cudaEventRecord(b->ev_stop, b->stream));
    NCCL_CHECK(ncclAllReduce(b->d_ctl, b->d_ctl, 2, ncclInt64, ncclSum, comm, b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_out, b->d_recv, s.recv_elems * sizeof(float),
                               cudaMemcpyDeviceToHost, b->stream));
    CUDA_CHECK(cudaMemcpyAsync(b->h_ctl, b->d_ctl, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost,
                               b->stream));
    wait_gpu(b->stream, NULL, "loop allreduce");
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, b->ev_start, b->ev_stop));
    gpu_us_window += (double)ms * 1000.0;
    size_t bad = check_result(OP_ALLREDUCE, b, variant, &s);
    if (bad) {
      bad_iters++;
      bad_elems += (int64_t)bad;
    }
    iters++;
    step_end();
    const bool stop = b->h_ctl[0] > 0;
    global_bad_iters = b->h_ctl[1]; /* cumulative, up to the previous iteration */
    int64_t now = now_ns();
    if (g_opt.rank == 0 && (now - last_print >= 1000000000 || stop)) {
      uint64_t n = iters - iters_at_print;
      double avg_us = n ? gpu_us_window / (double)n : 0;
      double busbw = avg_us > 0 ? (double)s.bytes / avg_us / 1e3 * factor : 0;
      printf("loop t=%.1fs iters=%" PRIu64 " (+%" PRIu64 ") avg_us=%.1f busbw_GB/s=%.3f "
             "errors=%" PRId64 "\n",
             (double)(now - t0) / 1e9, iters, n, avg_us, busbw,
             global_bad_iters > bad_iters ? global_bad_iters : bad_iters);
      last_print = now;
      iters_at_print = iters;
      gpu_us_window = 0;
    }
    if (stop) break;
  }
  /* Final exact count of bad iterations over all ranks. */
  step_begin("final error count", 0);
  b->h_ctl[0] = 0;
  b->h_ctl[1] = bad_iters;
  ctl_allreduce(b, "final error count");
  step_end();
  global_bad_iters = b->h_ctl[1];
  if (bad_iters)
    fprintf(stderr, PROG "[rank %d]: %" PRId64 " of %" PRIu64 " iterations wrong (%" PRId64
            " elements)\n", g_opt.rank, bad_iters, iters, bad_elems);
  if (g_opt.rank == 0) {
    printf("# loop done: iters=%" PRIu64 " seconds=%.1f errors=%" PRId64 " (iterations with a "
           "wrong element, all ranks)\n", iters, (double)(now_ns() - t0) / 1e9, global_bad_iters);
    printf("# result: %s\n", global_bad_iters ? "FAIL (data mismatches)" : "OK (every element "
           "checked)");
  }
  return global_bad_iters ? E2E_EXIT_MISMATCH : E2E_EXIT_OK;
}

/* ------------------------------------------------------------------------ */

static const char *env_or_unset(const char *name) {
  const char *v = getenv(name);
  return v ? v : "<unset>";
}

static void print_header(void) {
  int nccl_ver = 0, rt_ver = 0, drv_ver = 0;
  ncclGetVersion(&nccl_ver);
  cudaRuntimeGetVersion(&rt_ver);
  cudaDriverGetVersion(&drv_ver);
  struct cudaDeviceProp prop;
  char bus[32] = "?";
  if (cudaGetDeviceProperties(&prop, g_opt.device) != cudaSuccess) strcpy(prop.name, "?");
  cudaDeviceGetPCIBusId(bus, (int)sizeof(bus), g_opt.device);
  printf("# " PROG ": nranks=%d device=%d (%s, %s)\n", g_opt.nranks, g_opt.device, prop.name, bus);
  printf("# NCCL %d.%d.%d (built against %d.%d.%d), CUDA runtime %d.%d, driver %d.%d\n",
         nccl_ver / 10000, nccl_ver / 100 % 100, nccl_ver % 100, NCCL_MAJOR, NCCL_MINOR,
         NCCL_PATCH, rt_ver / 1000, rt_ver % 1000 / 10, drv_ver / 1000, drv_ver % 1000 / 10);
  printf("# NCCL_NET_PLUGIN=%s NCCL_TUNER_PLUGIN=%s NCCL_NET=%s NCCL_HOSTID=%s\n",
         env_or_unset("NCCL_NET_PLUGIN"), env_or_unset("NCCL_TUNER_PLUGIN"),
         env_or_unset("NCCL_NET"), env_or_unset("NCCL_HOSTID"));
  printf("# iters=%d warmup=%d timeout=%.0fs\n", g_opt.iters, g_opt.warmup, g_opt.timeout_s);
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  parse_args(argc, argv);

  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_sigalrm;
  sigaction(SIGALRM, &sa, NULL);
  atomic_store(&g_exit_code, E2E_EXIT_TIMEOUT);

  /* CUDA first, so a machine without a GPU fails here with a clear message. */
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess || ndev == 0) {
    fprintf(stderr,
            PROG "[rank %d]: error: CUDA initialisation failed: %s (%s). This program needs an "
                 "NVIDIA GPU and its driver; on a machine without one this error is expected.\n",
            g_opt.rank, ce != cudaSuccess ? cudaGetErrorName(ce) : "no device",
            ce != cudaSuccess ? cudaGetErrorString(ce) : "cudaGetDeviceCount returned 0");
    return E2E_EXIT_RUNTIME;
  }
  if (g_opt.device >= ndev) {
    fprintf(stderr, PROG "[rank %d]: error: --device %d but only %d CUDA device(s) visible\n",
            g_opt.rank, g_opt.device, ndev);
    return E2E_EXIT_RUNTIME;
  }
  CUDA_CHECK(cudaSetDevice(g_opt.device));

  pthread_t wd;
  if (pthread_create(&wd, NULL, watchdog_main, NULL) != 0)
    die(E2E_EXIT_RUNTIME, "cannot start the watchdog thread");
  pthread_detach(wd);

  if (g_opt.rank == 0) print_header();

  struct e2e_bufs bufs;
  memset(&bufs, 0, sizeof(bufs));
  step_begin("buffer setup", g_opt.max_bytes);
  bufs_init(&bufs);
  step_end();

  ncclUniqueId id;
  if (g_opt.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    if (g_opt.rendezvous) rendezvous_publish(&id);
  } else {
    rendezvous_fetch(&id);
  }

  step_begin("ncclCommInitRankConfig", 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = "rerail-e2e";
  ncclComm_t comm = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&comm, g_opt.nranks, id, g_opt.rank, &config);
  atomic_store(&g_comm, comm);
  if (r != ncclSuccess && r != ncclInProgress)
    die(E2E_EXIT_RUNTIME, "ncclCommInitRankConfig: %s (%d)", ncclGetErrorString(r), (int)r);
  nccl_wait_ready("ncclCommInitRankConfig");
  step_end();
  remove_rendezvous(); /* every rank has joined: the file has served its purpose */

  int rc = g_opt.loop_seconds > 0 ? run_loop(&bufs) : run_table(&bufs);

  step_begin("ncclCommFinalize", 0);
  NCCL_CHECK(ncclCommFinalize(comm));
  atomic_store(&g_comm, NULL); /* from here on the watchdog must not abort it */
  ncclResult_t dr = ncclCommDestroy(comm);
  if (dr != ncclSuccess && dr != ncclInProgress)
    die(E2E_EXIT_RUNTIME, "ncclCommDestroy: %s", ncclGetErrorString(dr));
  step_end();
  bufs_free(&bufs);
  return rc;
}
