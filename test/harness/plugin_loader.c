/* Load an ncclNet plugin the way NCCL does and present it as an hnet.
 *
 * How NCCL finds the library (src/plugin/net.cc and plugin_open.cc, 2.19-2.30),
 * in our words:
 *  - NCCL_NET_PLUGIN unset: the file "libnccl-net.so". Set: a comma-separated
 *    list of names, each tried in turn ("none" disables external plugins).
 *  - For one name X, NCCL first hands X to dlopen() unchanged (so a path
 *    with '/' is opened as a path, and a bare file name goes through the
 *    normal search: LD_LIBRARY_PATH, the run path, the ld.so cache).
 *  - If that fails, and X contains no '/' and is not already shaped like a
 *    library file name (starting with "lib" AND ending in ".so"), NCCL tries
 *    "libnccl-net-X.so" the same way. So "rerail" becomes
 *    libnccl-net-rerail.so, "/opt/x/libfoo.so" and "libfoo.so" are used as
 *    given, and "foo.so" is tried as given and then as libnccl-net-foo.so.
 *  - dlopen() flags are RTLD_NOW | RTLD_LOCAL: every undefined symbol must
 *    resolve at load time, and the plugin's symbols stay private.
 *  - NCCL then looks for the newest table it knows: ncclNetPlugin_v12, then
 *    _v11 ... _v7 (and v6/v5, which this harness does not drive), and uses
 *    the first found. NCCL 2.19 knows nothing newer than v7.
 *  - v11+ init(&ctx, commId, &config, logger, profiler) runs once per
 *    communicator and yields a context; finalize(ctx) ends it. v10
 *    init(logger, profiler) and v7-v9 init(logger) run once per process (NCCL's
 *    compatibility layer counts references), and their connect gets the comm
 *    config (v10) or nothing.
 *  - When the last communicator using the library is finalized, NCCL
 *    dlclose()s it. hnet_unload() does the same: a plugin that leaves threads
 *    running inside its code after finalize crashes here, as it would in NCCL.
 *
 * Argument adaptation follows NCCL's compatibility layer: v7/v8 get int sizes
 * (sizes above 1 GiB are refused before the call, as NCCL does; v7 also
 * registers with an int size, refused from 2 GiB as NCCL's v7 layer does) and never sees
 * the optional-completion hint; v10+ get profiler parent handles that point at
 * NULL slots (no profiler); test() always takes int sizes. */
#include "net_api.h"
#include "nccl_builtin_loader.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"
#include "nccl/net_v7.h"
#include "nccl/net_v8.h"
#include "nccl/net_v9.h"

_Static_assert(sizeof(hnet_net_attr) == sizeof(nccl_net_attr_v11_t), "net attr layout (v11)");
_Static_assert(sizeof(hnet_net_attr) == sizeof(nccl_net_attr_v12_t), "net attr layout (v12)");

#define SIZE_SENTINEL (-0x7fffa5a5)

/* ---- logger and profiler callback ----------------------------------------- */

static unsigned long log_counts[8];
static char last_warning[512];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_threshold = -1;

static int threshold(void) {
  if (log_threshold < 0) {
    const char *v = getenv("NCCL_DEBUG");
    int t = 2;
    if (v) {
      if (!strcasecmp(v, "VERSION")) t = 1;
      else if (!strcasecmp(v, "WARN")) t = 2;
      else if (!strcasecmp(v, "INFO")) t = 3;
      else if (!strcasecmp(v, "ABORT")) t = 4;
      else if (!strcasecmp(v, "TRACE")) t = 5;
    }
    log_threshold = t;
  }
  return log_threshold;
}

/* HNET_LOG_TIME=1: each printed plugin line carries its wall-clock time
 * ("plugin[PID] @EPOCH.USEC LEVEL ..."), to line log lines up with faults. */
static int log_time(void) {
  static int v = -1;
  if (v < 0) {
    const char *e = getenv("HNET_LOG_TIME");
    v = e && *e && strcmp(e, "0") != 0;
  }
  return v;
}

static const char *level_name(int level) {
  switch (level) {
  case 1: return "VERSION";
  case 2: return "WARN";
  case 3: return "INFO";
  case 4: return "ABORT";
  case 5: return "TRACE";
  default: return "NONE";
  }
}

static void vlog(int level, unsigned long flags, const char *file, int line, const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  size_t n = strlen(msg);
  while (n && msg[n - 1] == '\n') msg[--n] = 0;
  pthread_mutex_lock(&log_lock);
  if (level >= 0 && level < 8) log_counts[level]++;
  if (level == 2) snprintf(last_warning, sizeof last_warning, "%.511s", msg);
  int print = level == 4 || (level > 0 && level <= threshold());
  if (print) {
    const char *base = file ? strrchr(file, '/') : NULL;
    char stamp[40] = "";
    if (log_time()) {
      struct timespec ts;
      clock_gettime(CLOCK_REALTIME, &ts);
      snprintf(stamp, sizeof stamp, "@%lld.%06ld ", (long long)ts.tv_sec, ts.tv_nsec / 1000);
    }
    fprintf(stderr, "plugin[%d] %s%s %s:%d [0x%lx] %s\n", (int)getpid(), stamp, level_name(level),
            base ? base + 1 : file ? file : "?", line, flags, msg);
  }
  pthread_mutex_unlock(&log_lock);
}

void hnet_logger(int level, unsigned long flags, const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, flags, file, line, fmt, ap);
  va_end(ap);
}

/* The exact type NCCL hands to init(). */
static void nccl_logger(nccl_log_level_t level, unsigned long flags, const char *file, int line,
                        const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog((int)level, flags, file, line, fmt, ap);
  va_end(ap);
}

unsigned long hnet_log_count(int level) {
  if (level < 0 || level >= 8) return 0;
  pthread_mutex_lock(&log_lock);
  unsigned long c = log_counts[level];
  pthread_mutex_unlock(&log_lock);
  return c;
}

void hnet_last_warning(char *buf, size_t len) {
  pthread_mutex_lock(&log_lock);
  snprintf(buf, len, "%s", last_warning);
  pthread_mutex_unlock(&log_lock);
}

static unsigned long prof_events;
static char prof_event_token;

static nccl_result_t profiler_cb(void **event_handle, int type, void *parent, int64_t plugin_id,
                                 void *ext_data) {
  (void)parent, (void)plugin_id, (void)ext_data;
  __atomic_fetch_add(&prof_events, 1, __ATOMIC_RELAXED);
  if (event_handle && type == NCCL_PROFILER_NET_EVENT_START) *event_handle = &prof_event_token;
  return NCCL_RESULT_SUCCESS;
}

unsigned long hnet_profiler_events(void) { return __atomic_load_n(&prof_events, __ATOMIC_RELAXED); }

const char *hnet_result_str(int rc) {
  switch (rc) {
  case 0: return "ncclSuccess";
  case 1: return "ncclUnhandledCudaError";
  case 2: return "ncclSystemError";
  case 3: return "ncclInternalError";
  case 4: return "ncclInvalidArgument";
  case 5: return "ncclInvalidUsage";
  case 6: return "ncclRemoteError";
  case 7: return "ncclInProgress";
  case 8: return "ncclTimeout";
  default: return "(unknown ncclResult_t)";
  }
}

/* ---- per-version adapters ---------------------------------------------------- */

#define T7(n) ((const nccl_net_v7_t *)(n)->table)
#define T8(n) ((const nccl_net_v8_t *)(n)->table)
#define T9(n) ((const nccl_net_v9_t *)(n)->table)
#define T10(n) ((const nccl_net_v10_t *)(n)->table)
#define T11(n) ((const nccl_net_v11_t *)(n)->table)
#define T12(n) ((const nccl_net_v12_t *)(n)->table)

/* v10: NCCL's compatibility layer hands connect() the comm config it keeps
 * in the context; there is no traffic class here. */
static nccl_net_comm_config_v10_t config_v10 = {.traffic_class = NCCL_NET_TRAFFIC_CLASS_UNDEF};
/* v11+: the communicator's trafficClass (ncclConfig_t's, which NCCL hands init() in its
 * ncclNetCommConfig): HNET_TRAFFIC_CLASS=N, else undefined, as NCCL passes it by default. */
static int comm_traffic_class(void) {
  const char *v = getenv("HNET_TRAFFIC_CLASS");
  char *end;
  long c = v && *v ? strtol(v, &end, 0) : -1;
  return v && *v && !*end && c >= 0 && c <= 255 ? (int)c : NCCL_NET_TRAFFIC_CLASS_UNDEF;
}
/* v10+: profiler parent handles: NCCL passes pointers to its per-step slots. */
static void *phandle_slots[HNET_MAX_RECVS];

static int a_devices(hnet *n, int *ndev) {
  switch (n->version) {
  case 7: return T7(n)->devices(ndev);
  case 8: return T8(n)->devices(ndev);
  case 9: return T9(n)->devices(ndev);
  case 10: return T10(n)->devices(ndev);
  case 11: return T11(n)->devices(ndev);
  default: return T12(n)->devices(ndev);
  }
}

static void copy_str(char *dst, size_t len, const char *src) { snprintf(dst, len, "%s", src ? src : ""); }

/* v7 has no reg_is_global: NCCL 2.19 registers per communicator. */
#define COPY_V7(out, p)                                            \
  do {                                                             \
    copy_str((out)->name, sizeof (out)->name, (p).name);           \
    copy_str((out)->pci_path, sizeof (out)->pci_path, (p).pci_path); \
    (out)->guid = (p).guid;                                        \
    (out)->ptr_support = (p).ptr_support;                          \
    (out)->speed_mbps = (p).speed;                                 \
    (out)->port = (p).port;                                        \
    (out)->latency = (p).latency;                                  \
    (out)->max_comms = (p).max_comms;                              \
    (out)->max_recvs = (p).max_recvs;                              \
    (out)->net_device_type = (int)(p).net_device_type;             \
  } while (0)
#define COPY_COMMON(out, p)                        \
  do {                                             \
    COPY_V7(out, p);                               \
    (out)->reg_is_global = (p).reg_is_global;      \
  } while (0)
#define COPY_V9(out, p)                          \
  do {                                           \
    COPY_COMMON(out, p);                         \
    (out)->force_flush = (p).force_flush;        \
    (out)->max_p2p_bytes = (p).max_p2p_bytes;    \
    (out)->max_coll_bytes = (p).max_coll_bytes;  \
  } while (0)

static int a_get_properties(hnet *n, int dev, hnet_props *out) {
  int rc;
  memset(out, 0, sizeof *out);
  switch (n->version) {
  case 7: {
    nccl_net_props_v7_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T7(n)->get_properties(dev, &p))) return rc;
    COPY_V7(out, p);
    out->max_p2p_bytes = out->max_coll_bytes = HNET_V8_MAX_BYTES;   /* what NCCL assumes */
    out->max_multi_request_size = 1;
    return 0;
  }
  case 8: {
    nccl_net_props_v8_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T8(n)->get_properties(dev, &p))) return rc;
    COPY_COMMON(out, p);
    out->max_p2p_bytes = out->max_coll_bytes = HNET_V8_MAX_BYTES;   /* what NCCL assumes */
    out->max_multi_request_size = 1;
    return 0;
  }
  case 9: {
    nccl_net_props_v9_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T9(n)->get_properties(dev, &p))) return rc;
    COPY_V9(out, p);
    out->max_multi_request_size = 1;
    return 0;
  }
  case 10: {
    nccl_net_props_v10_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T10(n)->get_properties(dev, &p))) return rc;
    COPY_V9(out, p);
    out->max_multi_request_size = 1;
    return 0;
  }
  case 11: {
    nccl_net_props_v11_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T11(n)->get_properties(dev, &p))) return rc;
    COPY_V9(out, p);
    out->max_multi_request_size = p.max_multi_request_size;
    return 0;
  }
  default: {
    nccl_net_props_v12_t p;
    memset(&p, 0, sizeof p);
    if ((rc = T12(n)->get_properties(dev, &p))) return rc;
    COPY_V9(out, p);
    out->max_multi_request_size = p.max_multi_request_size;
    return 0;
  }
  }
}

static int a_listen(hnet *n, int dev, void *handle, void **lc) {
  switch (n->version) {
  case 7: return T7(n)->listen(dev, handle, lc);
  case 8: return T8(n)->listen(dev, handle, lc);
  case 9: return T9(n)->listen(dev, handle, lc);
  case 10: return T10(n)->listen(dev, handle, lc);
  case 11: return T11(n)->listen(n->ctx, dev, handle, lc);
  default: return T12(n)->listen(n->ctx, dev, handle, lc);
  }
}

static int a_connect(hnet *n, int dev, void *handle, void **sc) {
  nccl_net_device_handle_t *devh = NULL;   /* NULL: no device offload requested */
  switch (n->version) {
  case 7: return T7(n)->connect(dev, handle, sc, &devh);
  case 8: return T8(n)->connect(dev, handle, sc, &devh);
  case 9: return T9(n)->connect(dev, handle, sc, &devh);
  case 10: return T10(n)->connect(dev, &config_v10, handle, sc, &devh);
  case 11: return T11(n)->connect(n->ctx, dev, handle, sc, &devh);
  default: return T12(n)->connect(n->ctx, dev, handle, sc, &devh);
  }
}

static int a_accept(hnet *n, void *lc, void **rc) {
  nccl_net_device_handle_t *devh = NULL;
  switch (n->version) {
  case 7: return T7(n)->accept(lc, rc, &devh);
  case 8: return T8(n)->accept(lc, rc, &devh);
  case 9: return T9(n)->accept(lc, rc, &devh);
  case 10: return T10(n)->accept(lc, rc, &devh);
  case 11: return T11(n)->accept(lc, rc, &devh);
  default: return T12(n)->accept(lc, rc, &devh);
  }
}

static int a_reg_mr(hnet *n, void *comm, void *data, size_t size, int type, void **mh) {
  switch (n->version) {
  case 7:
    if (size >= (size_t)1 << 31) return HNET_INTERNAL_ERROR;   /* NCCL's v7 layer refuses too */
    return T7(n)->reg_mr(comm, data, (int)size, type, mh);
  case 8: return T8(n)->reg_mr(comm, data, size, type, mh);
  case 9: return T9(n)->reg_mr(comm, data, size, type, mh);
  case 10: return T10(n)->reg_mr(comm, data, size, type, mh);
  case 11: return T11(n)->reg_mr(comm, data, size, type, mh);
  default: return T12(n)->reg_mr(comm, data, size, type, mh);
  }
}

static int a_dereg_mr(hnet *n, void *comm, void *mh) {
  switch (n->version) {
  case 7: return T7(n)->dereg_mr(comm, mh);
  case 8: return T8(n)->dereg_mr(comm, mh);
  case 9: return T9(n)->dereg_mr(comm, mh);
  case 10: return T10(n)->dereg_mr(comm, mh);
  case 11: return T11(n)->dereg_mr(comm, mh);
  default: return T12(n)->dereg_mr(comm, mh);
  }
}

static int a_isend(hnet *n, void *sc, void *data, size_t size, int tag, void *mh, void **req) {
  switch (n->version) {
  case 7:
  case 8:
    if (size > (size_t)HNET_V8_MAX_BYTES) return HNET_INTERNAL_ERROR;   /* NCCL refuses too */
    if (n->version == 7) return T7(n)->isend(sc, data, (int)size, tag, mh, req);
    return T8(n)->isend(sc, data, (int)size, tag, mh, req);
  case 9: return T9(n)->isend(sc, data, size, tag, mh, req);
  case 10: return T10(n)->isend(sc, data, size, tag, mh, &phandle_slots[0], req);
  case 11: return T11(n)->isend(sc, data, size, tag, mh, &phandle_slots[0], req);
  default: return T12(n)->isend(sc, data, size, tag, mh, &phandle_slots[0], req);
  }
}

static int a_irecv(hnet *n, void *rc, int count, void **data, size_t *sizes, int *tags, void **mh,
                   void **req) {
  if (count < 1 || count > HNET_MAX_RECVS) return HNET_INTERNAL_ERROR;
  void *ph[HNET_MAX_RECVS];
  for (int i = 0; i < count; i++) ph[i] = &phandle_slots[i];
  switch (n->version) {
  case 7:
  case 8: {
    int isizes[HNET_MAX_RECVS];
    if (*req == HNET_OPTIONAL_RECV_COMPLETION) *req = NULL;   /* as NCCL's v7/v8 layers */
    for (int i = 0; i < count; i++) {
      if (sizes[i] > (size_t)HNET_V8_MAX_BYTES) return HNET_INTERNAL_ERROR;
      isizes[i] = (int)sizes[i];
    }
    if (n->version == 7) return T7(n)->irecv(rc, count, data, isizes, tags, mh, req);
    return T8(n)->irecv(rc, count, data, isizes, tags, mh, req);
  }
  case 9: return T9(n)->irecv(rc, count, data, sizes, tags, mh, req);
  case 10: return T10(n)->irecv(rc, count, data, sizes, tags, mh, ph, req);
  case 11: return T11(n)->irecv(rc, count, data, sizes, tags, mh, ph, req);
  default: return T12(n)->irecv(rc, count, data, sizes, tags, mh, ph, req);
  }
}

static int a_iflush(hnet *n, void *rc, int count, void **data, int *sizes, void **mh, void **req) {
  switch (n->version) {
  case 7: return T7(n)->iflush(rc, count, data, sizes, mh, req);
  case 8: return T8(n)->iflush(rc, count, data, sizes, mh, req);
  case 9: return T9(n)->iflush(rc, count, data, sizes, mh, req);
  case 10: return T10(n)->iflush(rc, count, data, sizes, mh, req);
  case 11: return T11(n)->iflush(rc, count, data, sizes, mh, req);
  default: return T12(n)->iflush(rc, count, data, sizes, mh, req);
  }
}

static int a_test_raw(hnet *n, void *req, int *done, int *sizes) {
  switch (n->version) {
  case 7: return T7(n)->test(req, done, sizes);
  case 8: return T8(n)->test(req, done, sizes);
  case 9: return T9(n)->test(req, done, sizes);
  case 10: return T10(n)->test(req, done, sizes);
  case 11: return T11(n)->test(req, done, sizes);
  default: return T12(n)->test(req, done, sizes);
  }
}

static int a_test(hnet *n, void *req, int *done, size_t *sizes) {
  int isizes[HNET_TEST_SIZES];
  for (int i = 0; i < HNET_TEST_SIZES; i++) isizes[i] = SIZE_SENTINEL;
  int rc = a_test_raw(n, req, done, sizes ? isizes : NULL);
  if (rc == 0 && *done && sizes)
    for (int i = 0; i < HNET_TEST_SIZES && isizes[i] != SIZE_SENTINEL; i++)
      sizes[i] = isizes[i] < 0 ? 0 : (size_t)isizes[i];
  return rc;
}

static int a_close_send(hnet *n, void *c) {
  switch (n->version) {
  case 7: return T7(n)->close_send(c);
  case 8: return T8(n)->close_send(c);
  case 9: return T9(n)->close_send(c);
  case 10: return T10(n)->close_send(c);
  case 11: return T11(n)->close_send(c);
  default: return T12(n)->close_send(c);
  }
}

static int a_close_recv(hnet *n, void *c) {
  switch (n->version) {
  case 7: return T7(n)->close_recv(c);
  case 8: return T8(n)->close_recv(c);
  case 9: return T9(n)->close_recv(c);
  case 10: return T10(n)->close_recv(c);
  case 11: return T11(n)->close_recv(c);
  default: return T12(n)->close_recv(c);
  }
}

static int a_close_listen(hnet *n, void *c) {
  switch (n->version) {
  case 7: return T7(n)->close_listen(c);
  case 8: return T8(n)->close_listen(c);
  case 9: return T9(n)->close_listen(c);
  case 10: return T10(n)->close_listen(c);
  case 11: return T11(n)->close_listen(c);
  default: return T12(n)->close_listen(c);
  }
}

static int a_finalize(hnet *n) {
  if (!n->ctx) return 0;
  int rc = 0;
  if (n->version == 11 && T11(n)->finalize) rc = T11(n)->finalize(n->ctx);
  else if (n->version == 12 && T12(n)->finalize) rc = T12(n)->finalize(n->ctx);
  n->ctx = NULL;
  return rc;
}

static int a_set_net_attr(hnet *n, hnet_net_attr *attr) {
  if (n->version == 11) return T11(n)->set_net_attr(n->ctx, (nccl_net_attr_v11_t *)(void *)attr);
  return T12(n)->set_net_attr(n->ctx, (nccl_net_attr_v12_t *)(void *)attr);
}

static int a_irecv_consumed(hnet *n, void *rc, int count, void *req) {
  switch (n->version) {
  case 7: return T7(n)->irecv_consumed(rc, count, req);
  case 8: return T8(n)->irecv_consumed(rc, count, req);
  case 9: return T9(n)->irecv_consumed(rc, count, req);
  case 10: return T10(n)->irecv_consumed(rc, count, req);
  case 11: return T11(n)->irecv_consumed(rc, count, req);
  default: return T12(n)->irecv_consumed(rc, count, req);
  }
}

/* ---- loading -------------------------------------------------------------- */

/* v7-v10 plugins are initialised once per process and library, as NCCL's
 * compatibility layer does: count the hnets bound to each. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  void *dl;
  int version, refs;
} legacy[16];

static int legacy_ref(void *dl, int version, int delta) {
  int free_slot = -1;
  for (int i = 0; i < 16; i++) {
    if (legacy[i].refs && legacy[i].dl == dl && legacy[i].version == version) {
      int before = legacy[i].refs;
      legacy[i].refs += delta;
      return before;
    }
    if (!legacy[i].refs && free_slot < 0) free_slot = i;
  }
  if (delta > 0 && free_slot >= 0) {
    legacy[free_slot].dl = dl;
    legacy[free_slot].version = version;
    legacy[free_slot].refs = delta;
  }
  return 0;
}

static int lib_shaped(const char *s) {
  size_t l = strlen(s);
  return strncmp(s, "lib", 3) == 0 && l >= 3 && strcmp(s + l - 3, ".so") == 0;
}

static void *open_one(const char *name, char *tried, size_t tlen, char *resolved, size_t rlen) {
  size_t t = strlen(tried);
  void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (dl) {
    snprintf(resolved, rlen, "%s", name);
    return dl;
  }
  const char *e = dlerror();
  snprintf(tried + t, tlen - t, "\n  %s: %s", name, e ? e : "dlopen failed");
  if (strchr(name, '/') || lib_shaped(name)) return NULL;
  char alt[512];
  snprintf(alt, sizeof alt, "libnccl-net-%s.so", name);
  t = strlen(tried);
  dl = dlopen(alt, RTLD_NOW | RTLD_LOCAL);
  if (dl) {
    snprintf(resolved, rlen, "%s", alt);
    return dl;
  }
  e = dlerror();
  snprintf(tried + t, tlen - t, "\n  %s: %s", alt, e ? e : "dlopen failed");
  return NULL;
}

static uint64_t new_comm_id(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 16);
  static uint64_t counter;
  x += __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  return x ^ (x >> 31);
}

/* n->table may be set already (NCCL's built-in transport, found by
 * nccl_builtin_loader.c): then n->version says what it is. */
static int bind_and_init(hnet *n, int version) {
  int first = version ? version : 12, lastv = version ? version : 7;
  for (int v = first; v >= lastv && !n->table; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    const void *t = dlsym(n->dl, sym);
    if (!t) continue;
    n->table = t;
    n->version = v;
    break;
  }
  if (!n->table) {
    if (version)
      fprintf(stderr, "hnet: %s does not export ncclNetPlugin_v%d\n", n->path, version);
    else
      fprintf(stderr, "hnet: %s exports no ncclNetPlugin_v12..v7 table\n", n->path);
    return -1;
  }
  n->name = *(const char *const *)n->table;   /* every table starts with its name */
  int rc = 0;
  switch (n->version) {
  case 7:
  case 8:
  case 9:
  case 10:
    pthread_mutex_lock(&load_lock);
    if (legacy_ref(n->dl, n->version, 1) == 0) {
      if (n->version == 7) rc = T7(n)->init((nccl_logger_t)nccl_logger);
      else if (n->version == 8) rc = T8(n)->init((nccl_logger_t)nccl_logger);
      else if (n->version == 9) rc = T9(n)->init((nccl_logger_t)nccl_logger);
      else rc = T10(n)->init((nccl_logger_t)nccl_logger, profiler_cb);
      if (rc) legacy_ref(n->dl, n->version, -1);
    }
    pthread_mutex_unlock(&load_lock);
    break;
  case 11: {
    nccl_net_comm_config_v11_t cfg = {.traffic_class = comm_traffic_class()};
    n->comm_id = new_comm_id();
    rc = T11(n)->init(&n->ctx, n->comm_id, &cfg, (nccl_logger_t)nccl_logger, profiler_cb);
    break;
  }
  default: {
    nccl_net_comm_config_v12_t cfg = {.traffic_class = comm_traffic_class()};
    n->comm_id = new_comm_id();
    rc = T12(n)->init(&n->ctx, n->comm_id, &cfg, (nccl_logger_t)nccl_logger, profiler_cb);
    break;
  }
  }
  if (rc) {
    fprintf(stderr, "hnet: %s (%s, net v%d): init() returned %s\n", n->path, n->name ? n->name : "?",
            n->version, hnet_result_str(rc));
    n->ctx = NULL;
    return -1;
  }
  return 0;
}

static void fill_entries(hnet *n) {
  n->devices = a_devices;
  n->get_properties = a_get_properties;
  n->listen = a_listen;
  n->connect = a_connect;
  n->accept = a_accept;
  n->reg_mr = a_reg_mr;
  n->dereg_mr = a_dereg_mr;
  n->isend = a_isend;
  n->irecv = a_irecv;
  n->iflush = a_iflush;
  n->test = a_test;
  n->test_raw = a_test_raw;
  n->close_send = a_close_send;
  n->close_recv = a_close_recv;
  n->close_listen = a_close_listen;
  n->finalize = a_finalize;
  n->set_net_attr = NULL;
  if ((n->version == 11 && T11(n)->set_net_attr) || (n->version == 12 && T12(n)->set_net_attr))
    n->set_net_attr = a_set_net_attr;
  int has_consumed = 0;
  switch (n->version) {
  case 7: has_consumed = T7(n)->irecv_consumed != NULL; break;
  case 8: has_consumed = T8(n)->irecv_consumed != NULL; break;
  case 9: has_consumed = T9(n)->irecv_consumed != NULL; break;
  case 10: has_consumed = T10(n)->irecv_consumed != NULL; break;
  case 11: has_consumed = T11(n)->irecv_consumed != NULL; break;
  default: has_consumed = T12(n)->irecv_consumed != NULL; break;
  }
  n->irecv_consumed = has_consumed ? a_irecv_consumed : NULL;
}

/* "nccl-socket[:PATH]", "nccl-ib[:PATH]": one of NCCL's own transports from
 * libnccl.so.2, bound as the ncclNet_v11_t it is and then driven like any
 * plugin. */
static int load_builtin(const char *spec, int version, hnet *out) {
  if (version && version != 11) {
    fprintf(stderr, "hnet: %s is an ncclNet_v11_t; it cannot be bound as v%d\n", spec, version);
    return -1;
  }
  hnet_builtin b;
  if (hnet_builtin_open(spec, &b)) return -1;
  hnet n;
  memset(&n, 0, sizeof n);
  n.dl = b.dl;
  n.base = b.base;
  n.table = b.table;
  n.version = 11;
  snprintf(n.path, sizeof n.path, "%s", b.path);
  if (bind_and_init(&n, 11)) {
    dlclose(b.dl);
    return -1;
  }
  fill_entries(&n);
  *out = n;
  return 0;
}

int hnet_load(const char *name_or_path, int version, hnet *out) {
  memset(out, 0, sizeof *out);
  if (version && (version < 7 || version > 12)) {
    fprintf(stderr, "hnet: net version %d is not one of 7..12\n", version);
    return -1;
  }
  const char *spec = name_or_path && *name_or_path ? name_or_path : "libnccl-net.so";
  if (!strcasecmp(spec, "none")) {
    fprintf(stderr, "hnet: plugin \"none\": external net plugins disabled, nothing to load\n");
    return -1;
  }
  if (hnet_builtin_spec(spec)) return load_builtin(spec, version, out);
  char list[1024], tried[4096] = "";
  snprintf(list, sizeof list, "%s", spec);
  char *save = NULL;
  for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
    char resolved[512];
    void *dl = open_one(name, tried, sizeof tried, resolved, sizeof resolved);
    if (!dl) continue;
    hnet n;
    memset(&n, 0, sizeof n);
    n.dl = dl;
    struct link_map *lm = NULL;
    if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) == 0 && lm) n.base = (uintptr_t)lm->l_addr;
    if (lm && lm->l_name && lm->l_name[0])
      snprintf(n.path, sizeof n.path, "%s", lm->l_name);
    else
      snprintf(n.path, sizeof n.path, "%s", resolved);
    if (bind_and_init(&n, version)) {
      dlclose(dl);
      continue;   /* NCCL moves on to the next plugin of the list */
    }
    fill_entries(&n);
    *out = n;
    return 0;
  }
  if (tried[0]) fprintf(stderr, "hnet: could not load a net plugin from \"%s\":%s\n", spec, tried);
  return -1;
}

void hnet_unload(hnet *n) {
  if (!n->dl) return;
  if (n->version >= 7 && n->version <= 10) {
    pthread_mutex_lock(&load_lock);
    legacy_ref(n->dl, n->version, -1);
    pthread_mutex_unlock(&load_lock);
  } else if (n->ctx) {
    a_finalize(n);   /* the caller forgot: NCCL always finalizes before unloading */
  }
  /* HNET_NO_DLCLOSE=1 keeps the library mapped, so that leak reports of
   * sanitizer builds can name the plugin's functions. */
  const char *keep = getenv("HNET_NO_DLCLOSE");
  if (!keep || !*keep || !strcmp(keep, "0")) dlclose(n->dl);
  memset(n, 0, sizeof *n);
}
